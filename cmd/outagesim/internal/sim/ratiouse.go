package sim

import (
	"context"
	"sync"
	"time"

	"github.com/herdguard/herdguard/budget"
)

// RatioUse counts, per window of the global budget (aligned to the Unix
// epoch, as budget.Global's are), the requests its environments recorded
// and the retries it granted them and they used, so that a run can compare
// the grants with the budget's bound, Ratio × requests + Floor per window.
type RatioUse struct {
	window time.Duration
	ratio  float64 // as budget.Global applies it: whole millionths
	floor  int     // fleet-wide, per window

	mu      sync.Mutex
	windows map[int64]*windowUse
}

type windowUse struct{ requests, granted int64 }

// newRatioUse counts for a global budget configured with cfg, defaults
// filled in.
func newRatioUse(cfg budget.GlobalConfig) *RatioUse {
	ratio := float64(int64(cfg.Ratio*float64(budget.AllowancePerRetry))) / float64(budget.AllowancePerRetry)
	return &RatioUse{window: cfg.Window, ratio: ratio, floor: cfg.Floor, windows: map[int64]*windowUse{}}
}

func (u *RatioUse) index(now time.Time) int64 { return now.UnixMilli() / u.window.Milliseconds() }

func (u *RatioUse) add(w, requests, granted int64) {
	u.mu.Lock()
	wu := u.windows[w]
	if wu == nil {
		wu = &windowUse{}
		u.windows[w] = wu
	}
	wu.requests += requests
	wu.granted += granted
	u.mu.Unlock()
}

// RatioBound is the global budget's use over some windows.
type RatioBound struct {
	// Windows counts the budget windows summed.
	Windows int `json:"windows"`
	// Requests counts the requests the fleet recorded in them, Granted the
	// retries the global budget granted in them and that were used (not
	// handed back unused).
	Requests int64 `json:"requests"`
	Granted  int64 `json:"granted"`
	// Bound is Ratio × Requests + Floor × Windows: what the budget may
	// grant at most.
	Bound float64 `json:"bound"`
	// GrantedOverBound is Granted ÷ Bound.
	GrantedOverBound float64 `json:"granted_over_bound"`
}

// Over sums the windows that overlap [from, to).
func (u *RatioUse) Over(from, to time.Time) RatioBound {
	var b RatioBound
	u.mu.Lock()
	defer u.mu.Unlock()
	for w := u.index(from); w <= u.index(to.Add(-time.Nanosecond)); w++ {
		b.Windows++
		if wu := u.windows[w]; wu != nil {
			b.Requests += wu.requests
			b.Granted += wu.granted
		}
	}
	b.Bound = u.ratio*float64(b.Requests) + float64(u.floor*b.Windows)
	if b.Bound > 0 {
		b.GrantedOverBound = float64(b.Granted) / b.Bound
	}
	return b
}

// countedGlobal is a budget.Global whose requests and grants are counted
// in a RatioUse. It still has the Global's Flush.
type countedGlobal struct {
	*budget.Global
	use *RatioUse
}

func (b countedGlobal) RecordRequest(now time.Time) {
	b.use.add(b.use.index(now), 1, 0)
	b.Global.RecordRequest(now)
}

func (b countedGlobal) AcquireRetry(ctx context.Context, now time.Time, kind budget.Kind) (budget.Release, error) {
	rel, err := b.Global.AcquireRetry(ctx, now, kind)
	if err != nil {
		return rel, err
	}
	w := b.use.index(now)
	b.use.add(w, 0, 1)
	return func(o budget.Outcome) {
		if o == budget.RetryNotUsed {
			b.use.add(w, 0, -1)
		}
		rel.Done(o)
	}, nil
}
