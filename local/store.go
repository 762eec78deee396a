package local

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/memstore"
)

// BudgetStore is an in-memory budget.Store: the allowance of every window
// shard in a map behind a mutex. It serves tests, simulations and fleets
// that live in one process; its answers are those the DynamoDB store gives
// (window starts are kept to the millisecond, as in the DynamoDB key).
// Expired window shards are dropped by the wall clock. The zero value is not
// usable; call NewBudgetStore.
type BudgetStore struct{ s *memstore.BudgetStore }

var _ budget.Store = (*BudgetStore)(nil)

// NewBudgetStore returns an empty in-memory budget.Store.
func NewBudgetStore() *BudgetStore {
	return &BudgetStore{s: memstore.NewBudgetStore(memstore.Options{})}
}

// Apply implements budget.Store: old is the stored allowance or u.Floor,
// and the allowance becomes old + u.Deposit - u.Take unless that is
// negative, in which case nothing changes (a missing item stays missing)
// and Apply returns old with an error satisfying
// errors.Is(err, budget.ErrInsufficient). u.Expires replaces the item's
// expiry time on success.
//
// It fails without touching the store if ctx is done, if k.Name is not a
// valid name (see budget.NewGlobal), if k.Shard or a field of u is negative, or if the
// sum would overflow.
func (s *BudgetStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	return s.s.Apply(ctx, k, u)
}

// Stats returns the store's call counts.
func (s *BudgetStore) Stats() StoreStats {
	return StoreStats{Reads: s.s.Reads(), Writes: s.s.Writes()}
}

// BreakerStore is an in-memory breaker.Store: the shared state of every
// breaker in a map behind a mutex. It serves tests, simulations and fleets
// that live in one process (several Breakers in one process sharing a
// state); its answers are those the DynamoDB store gives. Times are kept to
// the millisecond, as in the DynamoDB items.
//
// Load returns the override and its lapse time as stored, even after the
// time has passed: the store has no clock for that (Load takes no time),
// so the Breaker compares Snapshot.OverrideUntil with its own now. The zero
// value is not usable; call NewBreakerStore.
type BreakerStore struct{ s *memstore.BreakerStore }

var _ breaker.Store = (*BreakerStore)(nil)

// NewBreakerStore returns an empty in-memory breaker.Store.
func NewBreakerStore() *BreakerStore {
	return &BreakerStore{s: memstore.NewBreakerStore(memstore.Options{})}
}

// Load implements breaker.Store. A name never written reads as the zero
// Snapshot.
func (s *BreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	return s.s.Load(ctx, name)
}

// Report implements breaker.Store: r's counts go into slot r.Bucket mod
// breaker.FleetSlots (added to the bucket it holds, replacing an older
// one, dropped if it holds a newer one) unless the stored epoch is not
// r.Epoch, and a non-zero r.WatchUntil is stored. The answer carries no
// override. r.Bucket must be at least 1 and the counts not negative.
func (s *BreakerStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	return s.s.Report(ctx, name, r)
}

// Transition implements breaker.Store: it compares prevEpoch with the
// stored epoch and, if they match, stores next's State, Epoch, OpenUntil and
// Reopens (next's override fields are ignored). next.Epoch must be
// prevEpoch+1, next.State a known State and next.Reopens not negative. The
// answer carries no override.
func (s *BreakerStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	return s.s.Transition(ctx, name, prevEpoch, next)
}

// AcquireProbe implements breaker.Store. It takes the lowest free slot in
// [0, limit). A slot is free if it was never taken, was taken in an epoch
// other than epoch, or its lease lapsed before now (to the millisecond). A
// limit of 0 admits no probe; a negative limit, or a leaseUntil not after
// now, is an error.
func (s *BreakerStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	return s.s.AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
}

// SetOverride implements breaker.Store. NoOverride clears the override and
// its lapse time. The state and epoch are left alone.
func (s *BreakerStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	return s.s.SetOverride(ctx, name, o, until)
}

// Stats returns the store's call counts.
func (s *BreakerStore) Stats() StoreStats {
	return StoreStats{Reads: s.s.Reads(), Writes: s.s.Writes()}
}

// StoreStats are an in-memory store's cumulative call counts, the
// counterpart of dynamo.Stats: Reads counts BreakerStore.Load calls,
// Writes every other call, whatever their outcome.
type StoreStats struct {
	Reads, Writes int64
}
