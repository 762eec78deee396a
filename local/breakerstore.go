package local

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
)

// BreakerStore is an in-memory breaker.Store: the shared state of every
// breaker in a map behind a mutex. It serves tests, simulations and fleets
// that live in one process (several Breakers in one process sharing a
// state); its answers are those the DynamoDB store gives. Times are kept to
// the millisecond, as in the DynamoDB items.
//
// Load returns the override and its lapse time as stored, even after the
// time has passed: the store has no clock for that (Load takes no time),
// so the Breaker compares Snapshot.OverrideUntil with its own now.
//
// Reads and Writes count calls (Load is a read, every other operation a
// write), for simulations that report store traffic. The zero value is not
// usable; call NewBreakerStore or NewBreakerStoreWithOptions.
type BreakerStore struct {
	counters
	opts StoreOptions // immutable

	// mu guards breakers and sweep. Invariants: an entry's epoch only
	// grows, by one per Transition; an entry is created by the first
	// successful write to its name and never removed; a fleet window's
	// envs holds each reporter once.
	mu       sync.Mutex
	breakers map[string]*breakerEntry
	sweep    sweeper
}

type breakerEntry struct {
	state         breaker.State
	epoch         uint64
	openUntil     time.Time
	reopens       int
	override      breaker.Override
	overrideUntil time.Time
	watchUntil    time.Time
	buckets       [breaker.FleetSlots]breaker.Bucket
	probes        []probeSlot // slot i at index i; grows on demand
}

type probeSlot struct {
	taken      bool
	epoch      uint64
	leaseUntil time.Time
}

var _ breaker.Store = (*BreakerStore)(nil)

// NewBreakerStore returns an empty in-memory breaker.Store.
func NewBreakerStore() *BreakerStore {
	return NewBreakerStoreWithOptions(StoreOptions{})
}

// NewBreakerStoreWithOptions returns an empty in-memory breaker.Store with
// test hooks and a clock for expiry.
func NewBreakerStoreWithOptions(o StoreOptions) *BreakerStore {
	return &BreakerStore{opts: o, breakers: make(map[string]*breakerEntry)}
}

// storeError wraps err so that errors.Is(err, breaker.ErrStore) holds.
func storeError(op, name string, err error) error {
	if errors.Is(err, breaker.ErrStore) {
		return fmt.Errorf("local: breaker store %s %q: %w", op, name, err)
	}
	return fmt.Errorf("local: breaker store %s %q: %w: %w", op, name, breaker.ErrStore, err)
}

// invalid returns an argument error satisfying errors.Is(err, breaker.ErrStore).
func invalid(op, name, format string, args ...any) error {
	return storeError(op, name, fmt.Errorf(format, args...))
}

// begin validates name and runs the common checks of every operation.
func (s *BreakerStore) begin(ctx context.Context, op, name string) error {
	if err := budget.ValidateName(name); err != nil {
		return storeError(op, name, err)
	}
	if err := s.opts.begin(ctx, op); err != nil {
		return storeError(op, name, err)
	}
	return nil
}

// entryLocked returns the entry for name, creating it if create is true
// (otherwise it may return nil). s.mu must be held.
func (s *BreakerStore) entryLocked(name string, create bool) *breakerEntry {
	e := s.breakers[name]
	if e == nil && create {
		e = &breakerEntry{}
		s.breakers[name] = e
	}
	return e
}

func (e *breakerEntry) snapshot() breaker.Snapshot {
	if e == nil {
		return breaker.Snapshot{}
	}
	return breaker.Snapshot{
		State:         e.state,
		Epoch:         e.epoch,
		OpenUntil:     e.openUntil,
		Reopens:       e.reopens,
		Override:      e.override,
		OverrideUntil: e.overrideUntil,
		WatchUntil:    e.watchUntil,
		Buckets:       e.buckets,
	}
}

// Load implements breaker.Store. A name never written reads as the zero
// Snapshot.
func (s *BreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	s.reads.Add(1)
	if err := s.begin(ctx, OpLoad, name); err != nil {
		return breaker.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.breakers[name].snapshot(), nil
}

// Report implements breaker.Store. The answer carries no override (as
// the contract allows), like the DynamoDB store's.
func (s *BreakerStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	s.writes.Add(1)
	switch {
	case r.Bucket < 1:
		return breaker.Snapshot{}, invalid(OpReport, name, "bucket is %d; it must be at least 1", r.Bucket)
	case r.Requests < 0 || r.Successes < 0 || r.Failures < 0 || r.Samples < 0:
		return breaker.Snapshot{}, invalid(OpReport, name, "counts %d/%d/%d/%d must not be negative", r.Requests, r.Successes, r.Failures, r.Samples)
	}
	if err := s.begin(ctx, OpReport, name); err != nil {
		return breaker.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(name, false)
	var cur uint64
	if e != nil {
		cur = e.epoch
	}
	if cur != r.Epoch {
		return e.reportAnswer(), fmt.Errorf("local: breaker store %s %q: %w: stored epoch is %d, not %d", OpReport, name, breaker.ErrConflict, cur, r.Epoch)
	}
	if e == nil {
		e = s.entryLocked(name, true)
	}
	b := &e.buckets[r.Bucket%breaker.FleetSlots]
	switch {
	case r.Requests == 0 && r.Successes == 0 && r.Failures == 0 && r.Samples == 0:
		// Only the watch.
	case b.Num == r.Bucket:
		b.Requests += r.Requests
		b.Successes += r.Successes
		b.Failures += r.Failures
		b.Samples += r.Samples
	case b.Num < r.Bucket:
		*b = breaker.Bucket{Num: r.Bucket, Requests: r.Requests, Successes: r.Successes, Failures: r.Failures, Samples: r.Samples}
	}
	if !r.WatchUntil.IsZero() {
		e.watchUntil = toMilli(r.WatchUntil)
	}
	return e.reportAnswer(), nil
}

// reportAnswer is the snapshot Report answers: the state without the
// override.
func (e *breakerEntry) reportAnswer() breaker.Snapshot {
	snap := e.snapshot()
	snap.Override, snap.OverrideUntil = breaker.NoOverride, time.Time{}
	return snap
}

// Transition implements breaker.Store: it compares prevEpoch with the
// stored epoch and, if they match, stores next's State, Epoch, OpenUntil and
// Reopens (next's override fields are ignored). next.Epoch must be
// prevEpoch+1, next.State a known State and next.Reopens not negative.
func (s *BreakerStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	s.writes.Add(1)
	switch {
	case next.Epoch != prevEpoch+1 || next.Epoch == 0:
		return breaker.Snapshot{}, invalid(OpTransition, name, "next.Epoch is %d; it must be prevEpoch+1 = %d", next.Epoch, prevEpoch+1)
	case next.State < breaker.Closed || next.State > breaker.HalfOpen:
		return breaker.Snapshot{}, invalid(OpTransition, name, "next.State is %v; it must be closed, open or half-open", next.State)
	case next.Reopens < 0:
		return breaker.Snapshot{}, invalid(OpTransition, name, "next.Reopens is %d; it must not be negative", next.Reopens)
	}
	if err := s.begin(ctx, OpTransition, name); err != nil {
		return breaker.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(name, false)
	var cur uint64
	if e != nil {
		cur = e.epoch
	}
	if cur != prevEpoch {
		return e.snapshot(), fmt.Errorf("local: breaker store %s %q: %w: stored epoch is %d, not %d", OpTransition, name, breaker.ErrConflict, cur, prevEpoch)
	}
	if e == nil {
		e = s.entryLocked(name, true)
	}
	e.state = next.State
	e.epoch = next.Epoch
	e.openUntil = toMilli(next.OpenUntil)
	e.reopens = next.Reopens
	e.buckets = [breaker.FleetSlots]breaker.Bucket{}
	return e.snapshot(), nil
}

// AcquireProbe implements breaker.Store. It takes the lowest free slot in
// [0, limit). A slot is free if it was never taken, was taken in an epoch
// other than epoch, or its lease lapsed before now (to the millisecond). A
// limit of 0 admits no probe; a negative limit, or a leaseUntil not after
// now, is an error.
func (s *BreakerStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	s.writes.Add(1)
	switch {
	case limit < 0:
		return 0, invalid(OpAcquireProbe, name, "limit is %d; it must not be negative", limit)
	case !leaseUntil.After(now):
		return 0, invalid(OpAcquireProbe, name, "leaseUntil %v is not after now %v", leaseUntil, now)
	}
	if err := s.begin(ctx, OpAcquireProbe, name); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(name, true)
	nowMilli := now.UnixMilli()
	for i := range limit {
		if i == len(e.probes) {
			e.probes = append(e.probes, probeSlot{})
		}
		p := &e.probes[i]
		if p.taken && p.epoch == epoch && p.leaseUntil.UnixMilli() >= nowMilli {
			continue
		}
		*p = probeSlot{taken: true, epoch: epoch, leaseUntil: toMilli(leaseUntil)}
		return i, nil
	}
	return 0, fmt.Errorf("local: breaker store %s %q: %w (limit %d, epoch %d)", OpAcquireProbe, name, breaker.ErrProbeDenied, limit, epoch)
}

// SetOverride implements breaker.Store. NoOverride clears the override and
// its lapse time. The state and epoch are left alone.
func (s *BreakerStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	s.writes.Add(1)
	if o < breaker.NoOverride || o > breaker.Disabled {
		return invalid(OpSetOverride, name, "override is %v; it must be none, force-open, force-closed or disabled", o)
	}
	if err := s.begin(ctx, OpSetOverride, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(name, true)
	e.override = o
	e.overrideUntil = toMilli(until)
	if o == breaker.NoOverride {
		e.overrideUntil = time.Time{}
	}
	return nil
}
