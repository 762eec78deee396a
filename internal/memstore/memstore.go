// Package memstore holds herdguard's in-memory stores, budget.Store and
// breaker.Store in a map behind a mutex, with the hooks that tests and the
// simulators need. Package local wraps them, without the hooks, as its
// public local.BudgetStore and local.BreakerStore.
//
// The stores give the answers the DynamoDB stores give (both pass
// budget/budgettest and breaker/breakertest), to the millisecond. Options
// adds what DynamoDB has and memory does not:
//
//   - Fault runs before every operation and can fail it or delay it (a
//     network fault, a timeout);
//   - Now is the clock by which expired items are dropped, and by which the
//     Meter counts seconds;
//   - Meter, if set, bills every operation as DynamoDB bills the same
//     operation on the items package dynamo writes (internal/layout: same
//     keys, same attribute names, same values), and, with
//     capacity.Config.Throttle, refuses what DynamoDB would throttle.
//
// # Billing
//
// Each operation is billed as the DynamoDB requests the dynamo store makes
// for it, item by item (see capacity for the rules):
//
//   - BudgetStore.Apply: one conditional UpdateItem of the window shard item
//     "b#<name>#<shard>#<window>" (pk, allowance, expires); a refusal is billed
//     on the item as it stands (a missing item: one write unit).
//   - BreakerStore.Load: one eventually consistent BatchGetItem of the state
//     item "c#<name>" and the override item "c#<name>#override", each item
//     rounded up separately (two small items: 2 × 0.5 read units).
//   - BreakerStore.Report: one conditional UpdateItem of the state item
//     "c#<name>" (pk, state, epoch, reopens once a Transition wrote it,
//     open_until and watch_until when set, and b<i>, r<i>, s<i>, f<i>, n<i>
//     for each slot i that holds a bucket), or two when the form the
//     Client guessed from its last answers was refused because the slot
//     held another bucket (the refusal billed on the item as it stands);
//     a conflict, or a late report without a watch, is one refused write.
//     ReturnValues ALL_NEW does not change the price. The item stays under
//     1 KB, so each write is one unit.
//   - BreakerStore.Transition: one conditional UpdateItem of the state item
//     (which empties its slots).
//   - BreakerStore.AcquireProbe: one conditional UpdateItem per slot item
//     "c#<name>#p#<slot>" tried (pk, epoch, lease_until, expires). This store
//     tries slots from 0 up (dynamo starts at a random slot), so it makes as
//     many writes as the lowest free slot + 1, or limit when all are held.
//   - BreakerStore.SetOverride: one UpdateItem of the override item (pk,
//     override, and until and expires for an override that lapses).
//
// A throttled request (capacity.ErrThrottled) applies nothing and fails the
// operation with an error satisfying errors.Is(err, budget.ErrThrottled) and
// errors.Is(err, capacity.ErrThrottled), and for the breaker store also
// errors.Is(err, breaker.ErrStore), as the dynamo stores answer DynamoDB's
// ProvisionedThroughputExceededException. A write that would make an item larger than
// capacity.MaxItemBytes fails with capacity.ErrItemTooLarge (DynamoDB's
// ValidationException) and applies nothing.
//
// Where memory and DynamoDB still differ: items are dropped when they have
// expired (Now), while DynamoDB's TTL deletes them days later, so a write to
// an expired item is billed as a write to a missing one (the stores never
// write to an expired window in normal use); the counts Reads and Writes
// count method calls, whereas the Meter counts DynamoDB requests; and a
// Report never needs more than two writes, since no other write can come
// between them (the dynamo store's third write, when another environment
// started the bucket between its first two, never happens here).
package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/capacity"
)

// Operation names passed to Options.Fault.
const (
	OpApply        = "apply"         // BudgetStore.Apply
	OpLoad         = "load"          // BreakerStore.Load
	OpReport       = "report"        // BreakerStore.Report
	OpTransition   = "transition"    // BreakerStore.Transition
	OpAcquireProbe = "acquire-probe" // BreakerStore.AcquireProbe
	OpSetOverride  = "set-override"  // BreakerStore.SetOverride
)

// sweepEvery is how often, by Options.Now, a store looks for expired items
// to drop.
const sweepEvery = time.Minute

// Options are the hooks of BudgetStore and BreakerStore. The zero value is
// a plain store: no faults, the wall clock, no billing.
type Options struct {
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

	// Now is the clock by which budget items past their expiry time
	// (Update.Expires) are dropped to free memory, and by which Meter
	// counts its seconds; nil means time.Now. An item is dropped at the
	// earliest when it has expired, as DynamoDB's TTL does, so dropping
	// never changes an answer the contract fixes.
	Now func() time.Time

	// Meter, if not nil, bills every request the operation stands for (see
	// the package documentation) at Now, and with capacity.Config.Throttle
	// refuses what DynamoDB would throttle. One Meter may serve several
	// stores (a budget store and a breaker store sharing one table).
	Meter *capacity.Meter
}

// counters counts a store's method calls.
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
func (o *Options) begin(ctx context.Context, op string) error {
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

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// write bills at now a write of the item key that is before bytes and
// would be after bytes (before again for a refused conditional write). A
// non-nil error means the write was refused and must not be applied.
// Callers compute sizes only when o.Meter is set.
func (o *Options) write(key string, now time.Time, before, after int) error {
	return meterError(o.Meter.Write(key, now, before, after))
}

// read bills at now an eventually consistent read of the item key of size
// bytes (0: missing). Callers compute sizes only when o.Meter is set.
func (o *Options) read(key string, now time.Time, size int) error {
	return meterError(o.Meter.Read(key, now, size, false))
}

// meterError makes a throttle from the Meter also satisfy
// errors.Is(err, budget.ErrThrottled), as the dynamo stores' throttles do.
func meterError(err error) error {
	if errors.Is(err, capacity.ErrThrottled) {
		return fmt.Errorf("%w: %w: %w", budget.ErrThrottled, breaker.ErrThrottled, err)
	}
	return err
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
