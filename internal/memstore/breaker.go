package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/names"
	"github.com/herdguard/herdguard/internal/readspread"
	"github.com/herdguard/herdguard/internal/slothint"
)

// BreakerStore is an in-memory breaker.Store: the shared state of every
// breaker in a map behind a mutex. Its answers are those the DynamoDB
// store gives. Times are kept to the millisecond, as in the DynamoDB items.
//
// Load returns the override and its lapse time as stored, even after the
// time has passed: the store has no clock for that (Load takes no time),
// so the Breaker compares Snapshot.OverrideUntil with its own now.
// Report's answer carries no override, as the contract says.
//
// Reads and Writes count calls (Load is a read, every other operation a
// write). With a Meter, Report is billed as the one or two conditional
// writes the dynamo store would make, guessing its first form as dynamo
// does; a fleet whose environments each have a dynamo store of their own
// is billed right only if each has its own Client here. The zero value is
// not usable; call NewBreakerStore.
type BreakerStore struct {
	counters
	opts Options // immutable
	// hints is what the dynamo store would have seen of each breaker's
	// slots, for billing Reports; Client gives each environment its own.
	hints *slothint.Hints

	// mu guards breakers, shared by every Client. Invariants: an
	// entry's epoch only grows, by one per Transition; an entry is never
	// removed; a slot's bucket only grows within an epoch, and every
	// slot is empty right after a Transition.
	mu       *sync.Mutex
	breakers map[string]*breakerEntry
	// replicas are the read replicas by key, shared by every Client, and
	// clients the number of Clients made (for their first replicas);
	// both under mu.
	replicas map[string]*replicaCopy
	clients  *int
	// spreads decides, per breaker, which items this Client's Loads read
	// (see internal/readspread); only a Meter's throttles start a spread.
	spreads *readspread.Spreads
}

// replicaCopy is a read replica: the state and override items as they
// were at copiedAt.
type replicaCopy struct {
	snap     breaker.Snapshot
	copiedAt time.Time
	size     int
}

type breakerEntry struct {
	stateSet      bool // the state item exists (written by a Report or a Transition)
	state         breaker.State
	epoch         uint64
	openUntil     time.Time
	reopens       int
	reopensSet    bool // the item has a reopens attribute (a Transition wrote it)
	watchUntil    time.Time
	buckets       [breaker.FleetSlots]breaker.Bucket
	override      breaker.Override
	overrideUntil time.Time
	overrideSet   bool        // the override item exists
	probes        []probeSlot // slot i at index i; grows on demand
}

type probeSlot struct {
	taken      bool
	epoch      uint64
	leaseUntil time.Time
}

var _ breaker.Store = (*BreakerStore)(nil)

// Bounds on a Report, those of the dynamo store (its maxAmount, 2^53, and
// the bounds its decoder puts on a slot), so that both refuse the same
// input.
const (
	maxAmount = 1 << 53         // a count one Report may add
	maxBucket = 253402300799999 // the Unix millisecond of 9999-12-31T23:59:59.999Z
	maxCount  = math.MaxInt64   // a bucket's count
)

// NewBreakerStore returns an empty in-memory breaker.Store with the hooks
// of o.
func NewBreakerStore(o Options) *BreakerStore {
	return &BreakerStore{opts: o, hints: new(slothint.Hints), mu: new(sync.Mutex), breakers: make(map[string]*breakerEntry),
		replicas: make(map[string]*replicaCopy), clients: new(int), spreads: new(readspread.Spreads)}
}

// Client returns a breaker.Store on the same breakers as s, as another
// environment's dynamo store on the same table would be: its own guesses
// of what Report's slot holds (which decide how many writes a Report is
// billed) and its own Reads and Writes counts; the hooks of s. Give each
// environment of a simulated fleet its own Client.
func (s *BreakerStore) Client() *BreakerStore {
	s.mu.Lock()
	*s.clients++
	n := *s.clients
	s.mu.Unlock()
	return &BreakerStore{opts: s.opts, hints: new(slothint.Hints), mu: s.mu, breakers: s.breakers,
		replicas: s.replicas, clients: s.clients, spreads: &readspread.Spreads{Offset: n * 7919 % readspread.MaxReplicas}}
}

// storeError wraps err so that errors.Is(err, breaker.ErrStore) holds.
func storeError(op, name string, err error) error {
	if errors.Is(err, breaker.ErrStore) {
		return fmt.Errorf("herdguard: local: breaker store %s %q: %w", op, name, err)
	}
	return fmt.Errorf("herdguard: local: breaker store %s %q: %w: %w", op, name, breaker.ErrStore, err)
}

// invalid returns an argument error satisfying errors.Is(err, breaker.ErrStore).
func invalid(op, name, format string, args ...any) error {
	return storeError(op, name, fmt.Errorf(format, args...))
}

// begin validates name and runs the common checks of every operation.
func (s *BreakerStore) begin(ctx context.Context, op, name string) error {
	if err := names.Validate(name); err != nil {
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

// stateSnapshot is the state item as a Report answers it: no override.
func (e *breakerEntry) stateSnapshot() breaker.Snapshot {
	snap := e.snapshot()
	snap.Override, snap.OverrideUntil = breaker.NoOverride, time.Time{}
	return snap
}

// Load implements breaker.Store. A name never written reads as the zero
// Snapshot. It is billed as one BatchGetItem of the state and override
// items; if either item's read is throttled, Load fails.
//
// As the dynamo store's, a Client whose read was throttled reads the read
// replicas "c#<name>#r#<i>" for a while (internal/readspread): one
// BatchGetItem of the replica, plus, when it is missing or stale, the
// items' and one conditional UpdateItem writing the replica.
func (s *BreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	s.reads.Add(1)
	if err := s.begin(ctx, OpLoad, name); err != nil {
		return breaker.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.breakers[name]
	if s.opts.Meter == nil {
		snap := e.snapshot()
		s.hints.For(name).Learn(&snap.Buckets)
		return snap, nil
	}
	now := s.opts.now()
	sp := s.spreads.For(name)
	i := sp.Pick(now)
	var rk string
	var rc *replicaCopy
	if i >= 0 {
		rk = layout.ReplicaKey(name, i)
		rc = s.replicas[rk]
		if err := s.opts.read(rk, now, rc.sizeOrZero()); err != nil {
			if errors.Is(err, budget.ErrThrottled) {
				sp.Throttled(now)
			}
			return breaker.Snapshot{}, storeError(OpLoad, name, err)
		}
		if rc != nil && sp.Fresh(rc.snap.Epoch, rc.copiedAt, now) {
			sp.Saw(rc.snap.Epoch)
			snap := rc.snap
			s.hints.For(name).Learn(&snap.Buckets)
			return snap, nil
		}
	}
	// DynamoDB reads the two items independently: a throttled one
	// comes back unprocessed and the other is read (and billed).
	errState := s.opts.read(layout.StateKey(name), now, e.stateSize(name))
	errOverride := s.opts.read(layout.OverrideKey(name), now, e.overrideSize(name))
	if err := errors.Join(errState, errOverride); err != nil {
		if errors.Is(err, budget.ErrThrottled) {
			sp.Throttled(now)
		}
		return breaker.Snapshot{}, storeError(OpLoad, name, err)
	}
	snap := e.snapshot()
	s.hints.For(name).Learn(&snap.Buckets)
	sp.Read(snap.Epoch)
	if i >= 0 && ctx.Err() == nil {
		// The conditional write of the copy: refused (and billed on the
		// replica as it stands) when the copy there may stay.
		size := replicaItemSize(rk, name, e, now)
		if rc != nil && !readspread.Replaces(rc.copiedAt, now) {
			_ = s.opts.write(rk, now, rc.size, rc.size)
		} else if err := s.opts.write(rk, now, rc.sizeOrZero(), size); errors.Is(err, budget.ErrThrottled) {
			sp.Throttled(now)
		} else if err == nil {
			s.replicas[rk] = &replicaCopy{snap: snap, copiedAt: now, size: size}
		}
	}
	return snap, nil
}

// sizeOrZero is the replica's size, 0 for none.
func (rc *replicaCopy) sizeOrZero() int {
	if rc == nil {
		return 0
	}
	return rc.size
}

// Report implements breaker.Store. r.Bucket must be in [1, maxBucket]
// and the counts in [0, maxAmount], as the dynamo store requires; a sum
// past maxCount is refused, as the dynamo store would find the item
// malformed.
//
// With a Meter it is billed as the dynamo store's conditional writes of
// the state item: the form guessed first from this Client's last answers
// (see internal/slothint), refused (and billed on the item as it stands)
// when the slot holds another bucket, then the right one; a late report
// without a watch stops at the refusal. A throttled write fails the
// Report with nothing applied.
func (s *BreakerStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	s.writes.Add(1)
	switch {
	case r.Bucket < 1 || r.Bucket > maxBucket:
		return breaker.Snapshot{}, invalid(OpReport, name, "bucket is %d; it must be in [1, %d]", r.Bucket, int64(maxBucket))
	case min(r.Requests, r.Successes, r.Failures, r.Samples) < 0 || max(r.Requests, r.Successes, r.Failures, r.Samples) > maxAmount:
		return breaker.Snapshot{}, invalid(OpReport, name, "counts %d requests, %d successes, %d failures, %d samples must be in [0, %d]",
			r.Requests, r.Successes, r.Failures, r.Samples, int64(maxAmount))
	}
	if err := s.begin(ctx, OpReport, name); err != nil {
		return breaker.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(name, false)
	cur := e.snapshot()
	h := s.hints.For(name)
	guess, newBucket := h.Predict(r)
	right := slothint.FormFor(cur.Buckets[r.Bucket%breaker.FleetSlots].Num, r.Bucket)
	apply := cur.Epoch == r.Epoch && (right != slothint.Late || !r.WatchUntil.IsZero())
	next, ok := e.reported(r, right)
	if apply && !ok {
		return breaker.Snapshot{}, invalid(OpReport, name, "bucket %d's counts would pass %d", r.Bucket, int64(maxCount))
	}
	if s.opts.Meter != nil {
		// Under the lock the item cannot move between the two writes: the
		// second, if any, is in the right form.
		now, pk, before := s.opts.now(), layout.StateKey(name), e.stateSize(name)
		if guess != right || cur.Epoch != r.Epoch {
			if err := s.opts.write(pk, now, before, before); err != nil {
				return breaker.Snapshot{}, storeError(OpReport, name, err)
			}
		}
		if apply {
			if err := s.opts.write(pk, now, before, next.stateSize(name)); err != nil {
				return breaker.Snapshot{}, storeError(OpReport, name, err)
			}
		}
	}
	if cur.Epoch != r.Epoch {
		h.Learn(&cur.Buckets)
		return e.stateSnapshot(), fmt.Errorf("herdguard: local: breaker store %s %q: %w: stored epoch is %d, not %d", OpReport, name, breaker.ErrConflict, cur.Epoch, r.Epoch)
	}
	if newBucket {
		h.NoteStart(right)
	}
	if apply {
		if e == nil {
			e = s.entryLocked(name, true)
		}
		*e = *next
	}
	snap := e.stateSnapshot()
	h.Learn(&snap.Buckets)
	return snap, nil
}

// reported returns e (nil: no state item yet) after a Report of r in the
// form f, which must be the right one, in the current epoch: the slot
// added to or replaced, the watch set, and the state item created if
// there was none. e is not changed. ok is false if a count would pass
// maxCount.
func (e *breakerEntry) reported(r breaker.Report, f slothint.Form) (next *breakerEntry, ok bool) {
	next = new(breakerEntry)
	if e != nil {
		*next = *e
	}
	next.stateSet = true
	b := &next.buckets[r.Bucket%breaker.FleetSlots]
	switch f {
	case slothint.Add:
		ok = true
		for _, c := range []struct {
			sum *int64
			add int64
		}{{&b.Requests, r.Requests}, {&b.Successes, r.Successes}, {&b.Failures, r.Failures}, {&b.Samples, r.Samples}} {
			ok = ok && *c.sum <= maxCount-c.add
			*c.sum += c.add
		}
	case slothint.Reset:
		*b, ok = breaker.Bucket{Num: r.Bucket, Requests: r.Requests, Successes: r.Successes, Failures: r.Failures, Samples: r.Samples}, true
	default:
		ok = true
	}
	if !r.WatchUntil.IsZero() {
		next.watchUntil = toMilli(r.WatchUntil)
	}
	return next, ok
}

// Transition implements breaker.Store: it compares prevEpoch with the
// stored epoch and, if they match, stores next's State, Epoch, OpenUntil and
// Reopens (next's override fields are ignored). next.Epoch must be
// prevEpoch+1, next.State a known State and next.Reopens not negative. The
// answer carries no override.
//
// It is billed as one conditional write of the state item, as the DynamoDB
// store makes it. A throttled write applies nothing.
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
			after = e.transitioned(next).stateSize(name)
		}
		if err := s.opts.write(layout.StateKey(name), now, before, after); err != nil {
			return breaker.Snapshot{}, storeError(OpTransition, name, err)
		}
	}
	var conflict error
	if cur != prevEpoch {
		conflict = fmt.Errorf("herdguard: local: breaker store %s %q: %w: stored epoch is %d, not %d", OpTransition, name, breaker.ErrConflict, cur, prevEpoch)
	} else {
		t := e.transitioned(next)
		if e == nil {
			e = s.entryLocked(name, true)
		}
		*e = *t
	}
	snap := e.stateSnapshot()
	s.hints.For(name).Learn(&snap.Buckets)
	return snap, conflict
}

// transitioned returns e (nil: no state item yet) after a Transition to
// next: the state written, every slot emptied, the watch and the
// override kept. e is not changed.
func (e *breakerEntry) transitioned(next breaker.Snapshot) *breakerEntry {
	t := new(breakerEntry)
	if e != nil {
		*t = *e
	}
	t.stateSet, t.reopensSet = true, true
	t.state, t.epoch, t.openUntil, t.reopens = next.State, next.Epoch, toMilli(next.OpenUntil), next.Reopens
	t.buckets = [breaker.FleetSlots]breaker.Bucket{}
	return t
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
	return 0, fmt.Errorf("herdguard: local: breaker store %s %q: %w (limit %d, epoch %d)", OpAcquireProbe, name, breaker.ErrProbeDenied, limit, epoch)
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
	if e == nil || !e.stateSet {
		return 0
	}
	return stateItemSize(layout.StateKey(name), e)
}

// overrideSize is the size of e's override item (0: none); e may be nil.
func (e *breakerEntry) overrideSize(name string) int {
	if e == nil {
		return 0
	}
	return overrideItemSize(layout.OverrideKey(name), e.overrideSet, e.override, e.overrideUntil)
}
