package breaker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// fakeStore is an in-memory breaker.Store for the tests of this package,
// with call counters and fault injection. It follows the Store contract
// the way package local's store does.
type fakeStore struct {
	mu        sync.Mutex
	states    map[string]breaker.Snapshot // state fields only
	overrides map[string]fakeOverride
	probes    map[string][]fakeProbe

	loads, reports, transitions, acquires, setOverrides atomic.Int64
	conflicts, denials                                  atomic.Int64

	// fail, if set, is asked before every call; a non-nil error is returned
	// instead of doing the call.
	fail atomic.Pointer[func(op string) error]
	// block, if set, makes every call wait for ctx to end (honoring ctx) or,
	// with ignoreCtx, until release is closed.
	block     atomic.Bool
	ignoreCtx atomic.Bool
	release   chan struct{}
	// malformed makes Load return a snapshot with an invalid state.
	malformed atomic.Bool
	// panics makes every call panic.
	panics atomic.Bool
	// loadHook, if set, runs at the start of Load (after counting).
	loadHook atomic.Pointer[func()]
}

type fakeOverride struct {
	o     breaker.Override
	until time.Time
}

type fakeProbe struct {
	taken      bool
	epoch      uint64
	leaseUntil time.Time
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		states:    map[string]breaker.Snapshot{},
		overrides: map[string]fakeOverride{},
		probes:    map[string][]fakeProbe{},
		release:   make(chan struct{}),
	}
}

func (f *fakeStore) writes() int64 {
	return f.reports.Load() + f.transitions.Load() + f.acquires.Load() + f.setOverrides.Load()
}

func (f *fakeStore) failWith(fn func(op string) error) { f.fail.Store(&fn) }
func (f *fakeStore) heal()                             { f.fail.Store(nil) }

func (f *fakeStore) gate(ctx context.Context, op string) error {
	if f.panics.Load() {
		panic("fake store: " + op)
	}
	if fn := f.fail.Load(); fn != nil {
		if err := (*fn)(op); err != nil {
			return err
		}
	}
	if f.block.Load() {
		if f.ignoreCtx.Load() {
			<-f.release
			return nil
		}
		<-ctx.Done()
		return fmt.Errorf("%w: %s: %w", breaker.ErrStore, op, ctx.Err())
	}
	return nil
}

func (f *fakeStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	f.loads.Add(1)
	if h := f.loadHook.Load(); h != nil {
		(*h)()
	}
	if err := f.gate(ctx, "load"); err != nil {
		return breaker.Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.states[name]
	ov := f.overrides[name]
	s.Override, s.OverrideUntil = ov.o, ov.until
	if f.malformed.Load() {
		s.State = breaker.State(42)
	}
	return s, nil
}

func (f *fakeStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	f.reports.Add(1)
	if err := f.gate(ctx, "report"); err != nil {
		return breaker.Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.states[name]
	if cur.Epoch != r.Epoch {
		f.conflicts.Add(1)
		return cur, fmt.Errorf("fake store: epoch is %d, not %d: %w", cur.Epoch, r.Epoch, breaker.ErrConflict)
	}
	b := &cur.Buckets[r.Bucket%breaker.FleetSlots]
	switch {
	case b.Num == r.Bucket:
		b.Requests += r.Requests
		b.Successes += r.Successes
		b.Failures += r.Failures
		b.Samples += r.Samples
	case b.Num < r.Bucket:
		*b = breaker.Bucket{Num: r.Bucket, Requests: r.Requests, Successes: r.Successes, Failures: r.Failures, Samples: r.Samples}
	}
	if !r.WatchUntil.IsZero() {
		cur.WatchUntil = r.WatchUntil
	}
	f.states[name] = cur
	return cur, nil
}

func (f *fakeStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	f.transitions.Add(1)
	if err := f.gate(ctx, "transition"); err != nil {
		return breaker.Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.states[name]
	ov := f.overrides[name]
	if cur.Epoch != prevEpoch || next.Epoch != prevEpoch+1 {
		f.conflicts.Add(1)
		cur.Override, cur.OverrideUntil = ov.o, ov.until
		return cur, fmt.Errorf("fake store: epoch is %d, not %d: %w", cur.Epoch, prevEpoch, breaker.ErrConflict)
	}
	next.Override, next.OverrideUntil = breaker.NoOverride, time.Time{}
	next.WatchUntil, next.Buckets = cur.WatchUntil, [breaker.FleetSlots]breaker.Bucket{}
	f.states[name] = next
	next.Override, next.OverrideUntil = ov.o, ov.until
	return next, nil
}

func (f *fakeStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	f.acquires.Add(1)
	if err := f.gate(ctx, "acquire-probe"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	slots := f.probes[name]
	for len(slots) < limit {
		slots = append(slots, fakeProbe{})
	}
	f.probes[name] = slots
	for i := range limit {
		p := slots[i]
		if !p.taken || p.epoch != epoch || p.leaseUntil.Before(now) {
			slots[i] = fakeProbe{taken: true, epoch: epoch, leaseUntil: leaseUntil}
			return i, nil
		}
	}
	f.denials.Add(1)
	return 0, breaker.ErrProbeDenied
}

func (f *fakeStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	f.setOverrides.Add(1)
	if err := f.gate(ctx, "set-override"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.overrides[name] = fakeOverride{o: o, until: until}
	return nil
}

// state returns the stored state of a breaker.
func (f *fakeStore) state(name string) breaker.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states[name]
}

var _ breaker.Store = (*fakeStore)(nil)
