package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layout"
)

// BreakerStore is an in-memory breaker.Store: the shared state of every
// breaker in a map behind a mutex. Its answers are those the DynamoDB
// store gives. Times are kept to the millisecond, as in the DynamoDB items.
//
// Load returns the override and its lapse time as stored, even after the
// time has passed: the store has no clock for that (Load takes no time),
// so the Breaker compares Snapshot.OverrideUntil with its own now.
//
// Reads and Writes count calls (Load is a read, every other operation a
// write). The zero value is not usable; call NewBreakerStore.
type BreakerStore struct {
	counters
	opts Options // immutable

	// mu guards breakers and sweep. Invariants: an entry's epoch only
	// grows, by one per Transition; an entry is never removed; a fleet
	// window's envs holds each reporter once, and envBytes is the sum of
	// their lengths.
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
	overrideSet   bool                   // the override item exists
	windows       map[int64]*fleetWindow // by window start, Unix milliseconds
	probes        []probeSlot            // slot i at index i; grows on demand
}

type fleetWindow struct {
	successes int64
	failures  int64
	envs      map[string]struct{}
	envBytes  int
	expires   time.Time
}

type probeSlot struct {
	taken      bool
	epoch      uint64
	leaseUntil time.Time
}

var _ breaker.Store = (*BreakerStore)(nil)

// NewBreakerStore returns an empty in-memory breaker.Store with the hooks
// of o.
func NewBreakerStore(o Options) *BreakerStore {
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
	}
}

// Load implements breaker.Store. A name never written reads as the zero
// Snapshot. It is billed as one BatchGetItem of the state and override
// items; if either item's read is throttled, Load fails.
func (s *BreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	s.reads.Add(1)
	if err := s.begin(ctx, OpLoad, name); err != nil {
		return breaker.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.breakers[name]
	if s.opts.Meter != nil {
		now := s.opts.now()
		// DynamoDB reads the two items independently: a throttled one
		// comes back unprocessed and the other is read (and billed).
		errState := s.opts.read(layout.StateKey(name), now, e.stateSize(name))
		errOverride := s.opts.read(layout.OverrideKey(name), now, e.overrideSize(name))
		if err := errors.Join(errState, errOverride); err != nil {
			return breaker.Snapshot{}, storeError(OpLoad, name, err)
		}
	}
	return e.snapshot(), nil
}

// Report implements breaker.Store. env must not be empty and the counts
// must not be negative. With a Meter, a Report that would make the window
// item larger than capacity.MaxItemBytes fails (DynamoDB's
// ValidationException), as does a throttled one; neither is applied.
func (s *BreakerStore) Report(ctx context.Context, name string, window time.Time, env string, successes, failures int64, expires time.Time) (breaker.Tally, error) {
	s.writes.Add(1)
	switch {
	case env == "":
		return breaker.Tally{}, invalid(OpReport, name, "env is empty")
	case successes < 0:
		return breaker.Tally{}, invalid(OpReport, name, "successes is %d; it must not be negative", successes)
	case failures < 0:
		return breaker.Tally{}, invalid(OpReport, name, "failures is %d; it must not be negative", failures)
	}
	if err := s.begin(ctx, OpReport, name); err != nil {
		return breaker.Tally{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.now()
	s.sweepLocked(now)
	e := s.entryLocked(name, true)
	key := window.UnixMilli()
	w := e.windows[key]
	next := fleetWindow{expires: toMilli(expires)}
	known := false
	if w != nil {
		next.successes, next.failures, next.envBytes = w.successes, w.failures, w.envBytes
		_, known = w.envs[env]
	}
	next.successes += successes
	next.failures += failures
	if !known {
		next.envBytes += len(env)
	}
	if s.opts.Meter != nil {
		pk := layout.WindowKey(name, key)
		before := 0
		if w != nil {
			before = windowItemSize(pk, w.successes, w.failures, w.envBytes, w.expires)
		}
		after := windowItemSize(pk, next.successes, next.failures, next.envBytes, next.expires)
		if err := s.opts.write(pk, now, before, after); err != nil {
			return breaker.Tally{}, storeError(OpReport, name, err)
		}
	}
	if w == nil {
		if e.windows == nil {
			e.windows = make(map[int64]*fleetWindow)
		}
		w = &fleetWindow{envs: make(map[string]struct{})}
		e.windows[key] = w
	}
	next.envs = w.envs
	next.envs[env] = struct{}{}
	*w = next
	return breaker.Tally{Successes: w.successes, Failures: w.failures, Reporters: len(w.envs)}, nil
}

// Transition implements breaker.Store: it compares prevEpoch with the
// stored epoch and, if they match, stores next's State, Epoch, OpenUntil and
// Reopens (next's override fields are ignored). next.Epoch must be
// prevEpoch+1, next.State a known State and next.Reopens not negative.
//
// It is billed as one conditional write of the state item and one read of
// the override item, as the DynamoDB store makes them. A throttled write
// applies nothing; a throttled read after a write that went through fails
// Transition although the new state is stored (as with DynamoDB, an error
// leaves it unknown whether the transition happened).
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
	metered, now := s.opts.Meter != nil, time.Time{}
	if metered {
		now = s.opts.now()
		before := e.stateSize(name)
		after := before // a refusal is billed on the item as it stands
		if cur == prevEpoch {
			after = stateItemSize(layout.StateKey(name), next.State, next.Epoch, next.Reopens, toMilli(next.OpenUntil))
		}
		if err := s.opts.write(layout.StateKey(name), now, before, after); err != nil {
			return breaker.Snapshot{}, storeError(OpTransition, name, err)
		}
	}
	var conflict error
	if cur != prevEpoch {
		conflict = fmt.Errorf("local: breaker store %s %q: %w: stored epoch is %d, not %d", OpTransition, name, breaker.ErrConflict, cur, prevEpoch)
	} else {
		if e == nil {
			e = s.entryLocked(name, true)
		}
		e.state = next.State
		e.epoch = next.Epoch
		e.openUntil = toMilli(next.OpenUntil)
		e.reopens = next.Reopens
	}
	if metered {
		if err := s.opts.read(layout.OverrideKey(name), now, e.overrideSize(name)); err != nil {
			return breaker.Snapshot{}, storeError(OpTransition, name, err)
		}
	}
	return e.snapshot(), conflict
}

// AcquireProbe implements breaker.Store. It takes the lowest free slot in
// [0, limit). A slot is free if it was never taken, was taken in an epoch
// other than epoch, or its lease lapsed before now (to the millisecond). A
// limit of 0 admits no probe; a negative limit, or a leaseUntil not after
// now, is an error. It is billed as one conditional write per slot tried,
// from slot 0 up to the one taken (all limit slots when it is denied); a
// throttled write ends it with an error.
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
	var clock time.Time // the Meter's time: the store's clock, not the caller's now
	if s.opts.Meter != nil {
		clock = s.opts.now()
	}
	for i := range limit {
		if i == len(e.probes) {
			e.probes = append(e.probes, probeSlot{})
		}
		p := &e.probes[i]
		held := p.taken && p.epoch == epoch && p.leaseUntil.UnixMilli() >= nowMilli
		lease := probeSlot{taken: true, epoch: epoch, leaseUntil: toMilli(leaseUntil)}
		if s.opts.Meter != nil {
			pk := layout.ProbeKey(name, i)
			before := probeItemSize(pk, *p)
			after := before
			if !held {
				after = probeItemSize(pk, lease)
			}
			if err := s.opts.write(pk, clock, before, after); err != nil {
				return 0, storeError(OpAcquireProbe, name, err)
			}
		}
		if held {
			continue
		}
		*p = lease
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
	until = toMilli(until)
	if o == breaker.NoOverride {
		until = time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(name, true)
	if s.opts.Meter != nil {
		pk := layout.OverrideKey(name)
		if err := s.opts.write(pk, s.opts.now(), e.overrideSize(name), overrideItemSize(pk, true, o, until)); err != nil {
			return storeError(OpSetOverride, name, err)
		}
	}
	e.override = o
	e.overrideUntil = until
	e.overrideSet = true
	return nil
}

// stateSize is the size of e's state item (0: none); e may be nil.
func (e *breakerEntry) stateSize(name string) int {
	if e == nil {
		return 0
	}
	return stateItemSize(layout.StateKey(name), e.state, e.epoch, e.reopens, e.openUntil)
}

// overrideSize is the size of e's override item (0: none); e may be nil.
func (e *breakerEntry) overrideSize(name string) int {
	if e == nil {
		return 0
	}
	return overrideItemSize(layout.OverrideKey(name), e.overrideSet, e.override, e.overrideUntil)
}

// sweepLocked drops expired fleet windows, at most once per sweepEvery.
// s.mu must be held.
func (s *BreakerStore) sweepLocked(now time.Time) {
	if !s.sweep.due(now) {
		return
	}
	for _, e := range s.breakers {
		for k, w := range e.windows {
			if expired(w.expires, now) {
				delete(e.windows, k)
			}
		}
	}
}
