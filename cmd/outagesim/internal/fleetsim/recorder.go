package fleetsim

import (
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/retry"
)

// bucketWidth is the resolution of the attempt history the true failure
// ratio is computed from.
const bucketWidth = 10 * time.Millisecond

// recorder collects a run's measurements. It is touched by the scheduler
// and by the running proc only (one at a time), so it needs no lock.
type recorder struct {
	clock   *Clock
	window  time.Duration
	windows []Window
	// attempts and fails per bucketWidth of simulated time.
	attempts []int32
	fails    []int32
	seconds  []Second

	envs []*env

	meters [2]*capacity.Meter // shared.meters
	last   [2]capacity.Stats  // their totals after the last store call

	// The global layer's bound, set by the first ObserveGlobal.
	hasGlobal  bool
	perRequest float64 // Ratio as the layer applies it
	floor      float64

	budgetWrites int64 // running total, for the writes of one AcquireRetry

	transitions []Transition
	fleetOpen   time.Duration

	storeWaitTimeouts int64
	storeFaults       int64
	peakBusy          int

	err error // the first configuration problem found while observing
}

func newRecorder(clock *Clock, window time.Duration, meters [2]*capacity.Meter) *recorder {
	return &recorder{clock: clock, window: window, meters: meters, fleetOpen: Never}
}

// win returns the window simulated time t (since the start) falls in.
func (r *recorder) win(t time.Duration) *Window {
	i := int(t / r.window)
	for len(r.windows) <= i {
		r.windows = append(r.windows, Window{Start: time.Duration(len(r.windows)) * r.window})
	}
	return &r.windows[i]
}

func (r *recorder) now() *Window { return r.win(r.clock.Elapsed()) }

// second returns the second simulated time t falls in.
func (r *recorder) second(t time.Duration) *Second {
	i := int(t / time.Second)
	for len(r.seconds) <= i {
		r.seconds = append(r.seconds, Second{})
	}
	return &r.seconds[i]
}

// attempt records one attempt of e reaching the partner at t.
func (r *recorder) attempt(e *env, t time.Duration, first, failed bool, healAt time.Duration) {
	w, s := r.win(t), r.second(t)
	w.Attempts++
	s.Attempts++
	b := int(t / bucketWidth)
	for len(r.attempts) <= b {
		r.attempts = append(r.attempts, 0)
		r.fails = append(r.fails, 0)
	}
	r.attempts[b]++
	if first {
		w.FirstAttempts++
		s.FirstAttempts++
	}
	if failed {
		w.FailedAttempts++
		s.FailedAttempts++
		r.fails[b]++
	}
	if healAt != Never && t >= healAt && e.res.FirstAttemptAfterHeal == Never {
		e.res.FirstAttemptAfterHeal = t
	}
}

// trueFailureRatio returns the share of attempts that failed in [at −
// window, at) (−1 without attempts), and the number of attempts.
func (r *recorder) trueFailureRatio(at time.Duration) (float64, int64) {
	hi := min(int(at/bucketWidth), len(r.attempts))
	lo := max(int((at-r.window)/bucketWidth), 0)
	var a, f int64
	for i := lo; i < hi; i++ {
		a += int64(r.attempts[i])
		f += int64(r.fails[i])
	}
	if a == 0 {
		return -1, 0
	}
	return float64(f) / float64(a), a
}

// outcome records how a call of e that arrived at arrived ended.
func (r *recorder) outcome(arrived time.Duration, err error) {
	w := r.win(arrived)
	var ge *retry.GiveUpError
	switch {
	case err == nil:
		w.Succeeded++
	case errors.Is(err, breaker.ErrOpen):
		w.FailedBreaker++
		if errors.As(err, &ge) && ge.Attempts == 0 {
			w.BreakerRejected++ // the first attempt: the call never went out
		}
	case errors.Is(err, budget.ErrExhausted):
		w.FailedBudget++
	case errors.As(err, new(*retry.StatusError)):
		w.FailedPartner++
	default:
		w.FailedOther++
	}
}

// storeCall records one store request made at the current time: what the
// capacity model billed for it since the last one.
func (r *recorder) storeCall(kind storeKind) {
	w := r.now()
	m := breakerMeter
	switch kind {
	case budgetWrite:
		w.Store.BudgetWrites++
		r.budgetWrites++
		m = budgetMeter
	case breakerRead:
		w.Store.BreakerReads++
	case breakerWrite:
		w.Store.BreakerWrites++
	}
	if r.meters[m] == nil {
		return
	}
	s, last := r.meters[m].Stats(), &r.last[m]
	w.Store.ReadUnits += s.ReadUnits - last.ReadUnits
	w.Store.WriteUnits += s.WriteUnits - last.WriteUnits
	w.Store.Throttled += s.Throttled() - last.Throttled()
	*last = s
}

// storeError records a store fault a layer reported.
func (r *recorder) storeError(err error) {
	r.storeFaults++
	if errors.Is(err, context.DeadlineExceeded) {
		r.storeWaitTimeouts++
	}
}

// transition records a fleet state change written to the store by e.
func (r *recorder) transition(e *env, s breaker.Snapshot) {
	t := r.clock.Elapsed()
	r.transitions = append(r.transitions, Transition{At: t, To: s.State, Epoch: s.Epoch, Env: e.name()})
	if s.State == breaker.Open && r.fleetOpen == Never {
		r.fleetOpen = t
	}
}

// stateChange records e's breaker moving from → to.
func (r *recorder) stateChange(e *env, to breaker.State) {
	t := r.clock.Elapsed()
	switch to {
	case breaker.Open:
		if e.res.FirstOpen == Never {
			e.res.FirstOpen = t
		}
		e.open = true
	case breaker.HalfOpen:
		e.open = true
	case breaker.Closed:
		if e.open {
			e.res.Closed = t
		}
		e.open = false
	}
}

func (r *recorder) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}
