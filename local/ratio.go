package local

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/ratio"
)

// RatioConfig configures a Ratio. The zero value of each field selects its
// default, the Google SRE book's 10% per client over a sliding 10 s window
// with Envoy's floor of three retries (so neither Ratio nor MinRetries can
// be set to zero; use a tiny Ratio for "floor only").
type RatioConfig struct {
	// Ratio is the largest share of the window's requests that may be
	// retried, in (0, 1]; 0 means 0.1.
	Ratio float64
	// Window is the length of the sliding window over which requests and
	// retries are counted; 0 means 10 s.
	Window time.Duration
	// Slots is the number of equal slots the window is divided into, from
	// 1 to 1000 (0 means 10); Window must be a whole multiple of Slots
	// nanoseconds. The window slides one slot at a time: counts leave it a
	// slot at a time, after between Window-Window/Slots and Window.
	Slots int
	// MinRetries is the number of retries granted in any window however
	// few requests it holds, so that a client with little traffic can still
	// retry (Envoy's min_retry_concurrency plays the same role); 0 means 3.
	MinRetries int
}

// Ratio is the retry budget of the Google SRE book and Envoy: retries may
// make up at most Ratio of the requests seen in a sliding window, and at
// least MinRetries retries are granted per window whatever the traffic. A
// retry.Executor with no Config.Budgets uses one with the default
// configuration.
//
// Exactly: a retry asked for at time t is granted if and only if
// retries + 1 <= max(MinRetries, requests × Ratio), where requests and
// retries are counted over the slots whose start s satisfies
// s > t − Window (slots start at multiples of Window/Slots since the Unix
// epoch), and the granted retry is then counted in t's slot. A retry whose
// Release reports budget.RetryNotUsed is taken out of the count again (if
// its slot is still in the window); a retry that ran counts whether it
// succeeded or failed. A refusal is a *budget.ExhaustedError whose Budget
// is "local-ratio" and whose RetryAfter is the time until the oldest slot
// holding retries leaves the window.
//
// Times are expected to move forward. A time that is older than the
// newest slot seen is counted in its own slot if that slot is still in the
// window; a request older than the window is ignored, and a retry granted
// at such a time is counted in the newest slot.
//
// A Ratio is safe for concurrent use. RecordRequest is lock-free except
// when it opens a new slot, RecordSuccess does nothing, and neither
// allocates; AcquireRetry takes a short lock and allocates only to build a
// refusal's error. See "Local layers (package local)" in
// docs/ARCHITECTURE.md.
type Ratio struct{ r *ratio.Ratio }

var _ budget.Budget = (*Ratio)(nil)

// NewRatio returns an empty Ratio configured by cfg (zero fields take their
// defaults). It returns a *herdguard.ConfigError naming the field if cfg is
// invalid.
func NewRatio(cfg RatioConfig) (*Ratio, error) {
	r, err := ratio.New(ratio.Config(cfg))
	if err != nil {
		return nil, err
	}
	return &Ratio{r}, nil
}

// RecordRequest counts a request at now.
func (r *Ratio) RecordRequest(now time.Time) { r.r.RecordRequest(now) }

// RecordSuccess does nothing: a ratio budget is refilled by requests and
// by time, not by successes.
func (r *Ratio) RecordSuccess(time.Time) {}

// AcquireRetry grants a retry at now if the window's retries stay within
// the budget; otherwise it returns a *budget.ExhaustedError whose
// RetryAfter is the time until the oldest slot holding retries leaves the
// window. The kind does not matter to a Ratio. It never blocks and ignores
// ctx.
func (r *Ratio) AcquireRetry(ctx context.Context, now time.Time, kind budget.Kind) (budget.Release, error) {
	return r.r.AcquireRetry(ctx, now, kind)
}
