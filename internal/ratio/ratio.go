// Package ratio is the retry budget of the Google SRE book and Envoy, which
// package local exports as local.Ratio and package retry uses as the
// default budget of an Executor.
package ratio

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/budget"
)

// Defaults of Config: the Google SRE book's 10% per client over a sliding
// window, with Envoy's floor of three retries.
const (
	defaultRatio      = 0.1
	defaultWindow     = 10 * time.Second
	defaultSlots      = 10
	defaultMinRetries = 3
	// maxSlots bounds Config.Slots. AcquireRetry sums over every slot.
	maxSlots = 1000
)

// Layer is the Budget field of the *budget.ExhaustedError a Ratio returns
// when it refuses a retry.
const Layer = "local-ratio"

// Config is local.RatioConfig (the same fields, converted).
type Config struct {
	Ratio      float64
	Window     time.Duration
	Slots      int
	MinRetries int
}

func (c Config) withDefaults() Config {
	if c.Ratio == 0 {
		c.Ratio = defaultRatio
	}
	if c.Window == 0 {
		c.Window = defaultWindow
	}
	if c.Slots == 0 {
		c.Slots = defaultSlots
	}
	if c.MinRetries == 0 {
		c.MinRetries = defaultMinRetries
	}
	return c
}

func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &herdguard.ConfigError{Field: "local.RatioConfig." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case math.IsNaN(c.Ratio) || c.Ratio < 0 || c.Ratio > 1:
		return bad("Ratio", "is %v; want a ratio in (0, 1] (0 for the default %v)", c.Ratio, defaultRatio)
	case c.Window < 0:
		return bad("Window", "is %v; want a positive duration (0 for the default %v)", c.Window, defaultWindow)
	case c.Slots < 0 || c.Slots > maxSlots:
		return bad("Slots", "is %d; want 1 to %d (0 for the default %d)", c.Slots, maxSlots, defaultSlots)
	case c.Window%time.Duration(c.Slots) != 0:
		return bad("Window", "(%v) is not a whole multiple of Slots (%d) nanoseconds; choose a Window that splits into %d equal slots", c.Window, c.Slots, c.Slots)
	case c.MinRetries < 0:
		return bad("MinRetries", "is %d; want at least 0 (0 for the default %d)", c.MinRetries, defaultMinRetries)
	}
	return nil
}

// Ratio is the retry budget of the Google SRE book and Envoy: retries may
// make up at most Ratio of the requests seen in a sliding window, and at
// least MinRetries retries are granted per window whatever the traffic.
//
// Exactly: a retry asked for at time t is granted if and only if
// retries + 1 <= max(MinRetries, requests × Ratio), where requests and
// retries are counted over the slots whose start s satisfies
// s > t − Window (slots start at multiples of Window/Slots since the Unix
// epoch), and the granted retry is then counted in t's slot. A retry whose
// Release reports budget.RetryNotUsed is taken out of the count again (if
// its slot is still in the window); a retry that ran counts whether it
// succeeded or failed. This is the article's RatioRetryBudget, with time
// passed in explicitly.
//
// Times are expected to move forward. A time that is older than the
// newest slot seen is counted in its own slot if that slot is still in the
// window; a request older than the window is ignored, and a retry granted
// at such a time is counted in the newest slot.
//
// A Ratio is safe for concurrent use. RecordRequest takes no lock unless
// it opens a new slot (one atomic load and one atomic add, no division),
// RecordSuccess does nothing, and neither allocates; AcquireRetry takes a
// short lock and does not allocate except to build the error of a refusal.
// Every request of a slot is counted in one atomic counter, which is fine
// up to millions of calls a second per budget.
type Ratio struct {
	// Immutable after construction.
	ratio      float64
	minRetries int64
	slotNanos  int64 // length of a slot
	n          int64 // number of slots in the window
	mask       int64 // len(ring)-1; len(ring) is a power of two >= n

	// head is the index of the newest slot (Unix nanoseconds divided by
	// slotNanos, rounded down). It starts far in the past, with every
	// count zero, which is the same as no slot at all. It is written only
	// with mu held and read without it by RecordRequest.
	head atomic.Int64

	// mu guards ring[*].retries and the advance of head. Invariants:
	//   - ring[j&mask] holds the counts of slot j for every j in
	//     (head-n, head]; only those slots are counted (positions of
	//     older slots may hold stale counts, never summed).
	//   - advancing head from h to h' zeroes the positions of the slots
	//     (h, h'] before head is published, so an atomic add by a
	//     goroutine that has seen head == h' lands in h' 's fresh counts.
	//     (A goroutine that loads head and then stalls for a whole window
	//     before adding may count one request into a newer slot; that is
	//     harmless.)
	//   - ring[*].requests is written with atomics, with or without mu;
	//     ring[*].retries only with mu held.
	mu   sync.Mutex
	ring []ratioSlot

	// grants recycles the state of granted retries, so that a grant's
	// Release, which must know the slot to un-count a retry that was not
	// used, does not allocate.
	grants sync.Pool
}

type ratioSlot struct {
	requests atomic.Int64
	retries  int64 // guarded by Ratio.mu
}

var _ budget.Budget = (*Ratio)(nil)

// New returns an empty Ratio configured by cfg (zero fields take their
// defaults). It returns a *herdguard.ConfigError naming the field if cfg is
// invalid.
func New(cfg Config) (*Ratio, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	size := 1
	for size < cfg.Slots {
		size *= 2
	}
	r := &Ratio{
		ratio:      cfg.Ratio,
		minRetries: int64(cfg.MinRetries),
		slotNanos:  int64(cfg.Window) / int64(cfg.Slots),
		n:          int64(cfg.Slots),
		mask:       int64(size - 1),
		ring:       make([]ratioSlot, size),
	}
	// The earliest slot whose start, and the start of the window behind
	// it, fit in an int64: no arithmetic on head can overflow.
	r.head.Store(math.MinInt64/r.slotNanos + r.n + 1)
	r.grants.New = func() any {
		g := &ratioGrant{r: r}
		g.release = g.done
		return g
	}
	return r, nil
}

// index returns the slot that t falls in.
func (r *Ratio) index(t time.Time) int64 {
	ns := t.UnixNano()
	i := ns / r.slotNanos
	if ns < 0 && i*r.slotNanos != ns {
		i-- // round down, not towards zero
	}
	return i
}

// inWindow reports whether slot i is counted when the newest slot is head.
func (r *Ratio) inWindow(i, head int64) bool {
	return i <= head && i > head-r.n
}

// advance makes i the newest slot if it is newer than head. r.mu must be
// held. It returns the head after the advance.
func (r *Ratio) advance(i int64) int64 {
	h := r.head.Load()
	if i <= h {
		return h
	}
	if i >= h+int64(len(r.ring)) { // h+len cannot overflow; i-h could
		for p := range r.ring {
			r.ring[p].requests.Store(0)
			r.ring[p].retries = 0
		}
	} else {
		for j := h + 1; j <= i; j++ {
			s := &r.ring[j&r.mask]
			s.requests.Store(0)
			s.retries = 0
		}
	}
	r.head.Store(i)
	return i
}

// RecordRequest counts a request at now.
func (r *Ratio) RecordRequest(now time.Time) {
	ns := now.UnixNano()
	h := r.head.Load()
	// Fast path: now falls in the newest slot (the usual case). The
	// subtraction cannot wrap into [0, slotNanos): see New.
	if d := ns - h*r.slotNanos; d >= 0 && d < r.slotNanos {
		r.ring[h&r.mask].requests.Add(1)
		return
	}
	i := r.index(now)
	if i < h {
		if r.inWindow(i, h) {
			r.ring[i&r.mask].requests.Add(1) // an older slot still in the window
		}
		return // else older than the window: it would not count anyway
	}
	r.mu.Lock()
	h = r.advance(i)
	if r.inWindow(i, h) {
		r.ring[i&r.mask].requests.Add(1)
	}
	r.mu.Unlock()
}

// RecordSuccess does nothing: a ratio budget is refilled by requests and
// by time, not by successes.
func (r *Ratio) RecordSuccess(time.Time) {}

// AcquireRetry grants a retry at now if the window's retries stay within
// the budget; otherwise it returns a *budget.ExhaustedError whose
// RetryAfter is the time until the oldest slot holding retries leaves the
// window. The kind does not matter to a Ratio. It never blocks and ignores
// ctx.
func (r *Ratio) AcquireRetry(_ context.Context, now time.Time, _ budget.Kind) (budget.Release, error) {
	i := r.index(now)
	r.mu.Lock()
	h := r.advance(i)
	if !r.inWindow(i, h) {
		i = h
	}
	var requests, retries int64
	for j := h - r.n + 1; j <= h; j++ {
		s := &r.ring[j&r.mask]
		requests += s.requests.Load()
		retries += s.retries
	}
	allowed := math.Max(float64(r.minRetries), float64(requests)*r.ratio)
	if float64(retries+1) > allowed {
		after := r.retryAfter(h, now)
		r.mu.Unlock()
		return nil, &budget.ExhaustedError{Budget: Layer, RetryAfter: after}
	}
	r.ring[i&r.mask].retries++
	g := r.grants.Get().(*ratioGrant)
	g.slot = i
	g.live.Store(true)
	r.mu.Unlock()
	return g.release, nil
}

// retryAfter returns the time from now until the oldest slot that holds
// retries leaves the window, or zero if no slot holds any. r.mu must be
// held.
func (r *Ratio) retryAfter(head int64, now time.Time) time.Duration {
	for j := head - r.n + 1; j <= head; j++ {
		if r.ring[j&r.mask].retries > 0 {
			// Slot j leaves the window once t-Window >= j's start.
			leave := (j + r.n) * r.slotNanos
			if d := leave - now.UnixNano(); d > 0 {
				return time.Duration(d)
			}
			return 0
		}
	}
	return 0
}

// Counts returns the requests and retries counted in the window as it
// stands at now (advancing it if now is newer than every time seen), for
// tests.
func (r *Ratio) Counts(now time.Time) (requests, retries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.advance(r.index(now))
	for j := h - r.n + 1; j <= h; j++ {
		s := &r.ring[j&r.mask]
		requests += int(s.requests.Load())
		retries += int(s.retries)
	}
	return requests, retries
}

// ratioGrant is one granted retry: the slot it was counted in.
type ratioGrant struct {
	r       *Ratio
	slot    int64
	live    atomic.Bool    // true from the grant until its Release is called
	release budget.Release // g.done, built once per ratioGrant
}

// done un-counts the retry if it was not used, then recycles g. A second
// call of the same Release is ignored as long as g has not been handed out
// again; the contract is to call it exactly once.
func (g *ratioGrant) done(o budget.Outcome) {
	if !g.live.CompareAndSwap(true, false) {
		return
	}
	r := g.r
	if o == budget.RetryNotUsed {
		r.mu.Lock()
		if r.inWindow(g.slot, r.head.Load()) {
			if s := &r.ring[g.slot&r.mask]; s.retries > 0 {
				s.retries--
			}
		}
		r.mu.Unlock()
	}
	r.grants.Put(g)
}
