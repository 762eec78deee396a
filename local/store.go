package local

import (
	"context"
	"sync/atomic"
	"time"
)

// Operation names passed to StoreOptions.Fault.
const (
	OpApply        = "apply"         // BudgetStore.Apply
	OpLoad         = "load"          // BreakerStore.Load
	OpReport       = "report"        // BreakerStore.Report
	OpTransition   = "transition"    // BreakerStore.Transition
	OpAcquireProbe = "acquire-probe" // BreakerStore.AcquireProbe
	OpSetOverride  = "set-override"  // BreakerStore.SetOverride
)

// sweepEvery is how often, by StoreOptions.Now, a store looks for expired
// items to drop.
const sweepEvery = time.Minute

// StoreOptions are the optional settings of BudgetStore and BreakerStore.
// The zero value is ready to use.
type StoreOptions struct {
	// Fault, if not nil, runs at the start of every operation, after the
	// call has been counted and ctx checked, before the store's state is
	// touched, and outside the store's lock. op is one of the Op*
	// constants. A non-nil error becomes the operation's error (a
	// BreakerStore wraps it so that errors.Is(err, breaker.ErrStore)
	// holds) and leaves the state unchanged. Fault may block to inject
	// latency; it should then honour ctx, and the store checks ctx again
	// when it returns, as a network client whose deadline passed would.
	// Fault must be safe for concurrent use.
	Fault func(ctx context.Context, op string) error

	// Now is the clock by which items past their expiry time (Update.
	// Expires, the expires argument of Report) are dropped to free memory;
	// nil means time.Now. An item is dropped at the earliest when it has
	// expired, as DynamoDB's TTL does, so dropping never changes an answer
	// the contract fixes.
	Now func() time.Time
}

// counters counts a store's calls the way DynamoDB would bill them.
type counters struct {
	reads  atomic.Int64
	writes atomic.Int64
}

// Reads returns the number of read calls made so far (BreakerStore.Load),
// whatever their outcome.
func (c *counters) Reads() int64 { return c.reads.Load() }

// Writes returns the number of write calls made so far (every other
// operation), whatever their outcome.
func (c *counters) Writes() int64 { return c.writes.Load() }

// begin runs the checks every operation starts with: ctx, then the fault
// hook, then ctx again. It returns the error to fail the call with.
func (o *StoreOptions) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.Fault == nil {
		return nil
	}
	if err := o.Fault(ctx, op); err != nil {
		return err
	}
	return ctx.Err()
}

func (o *StoreOptions) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// sweeper decides when a store sweeps expired items. Guarded by the
// store's mutex.
type sweeper struct {
	next time.Time
}

// due reports whether a sweep should run at now, and if so schedules the
// next one.
func (s *sweeper) due(now time.Time) bool {
	if now.Before(s.next) {
		return false
	}
	s.next = now.Add(sweepEvery)
	return true
}

// expired reports whether an item that expires at exp (never if zero) has
// expired at now, to the millisecond.
func expired(exp, now time.Time) bool {
	return !exp.IsZero() && exp.UnixMilli() < now.UnixMilli()
}

// toMilli returns t truncated to the millisecond (the zero time stays
// zero), without location or monotonic reading. The stores keep times to
// the millisecond, as the DynamoDB store does, so that both give the same
// answers.
func toMilli(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli())
}
