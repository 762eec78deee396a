package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
)

// Regression tests for what a shared breaker costs the Store, and the
// fleet, when many environments act at once: Flush and ReportInterval,
// the move to half-open, Store faults while the fleet is open, a far
// OpenUntil, and trips from the noise of a fresh fleet window.

// --- The move to half-open --------------------------------------------------

// lockstepFleet is n environments on one store whose fleet state is open
// until openUntil, each calling every 100 ms (staggered by 20 ms steps).
type lockstepFleet struct {
	t         *testing.T
	store     *fakeStore
	envs      []env
	openUntil time.Time
	probeTime time.Duration // how long a probe takes; 0: its result never comes (lost)

	pending []pendingProbe
	probes  map[uint64]int // probes admitted per fleet epoch (as stored when admitted)
	admits  int            // ordinary calls admitted
	// admitted are the times probes were admitted, and maxLive the most
	// probes ever admitted within ProbeLease of each other (whose leases
	// all ran at once), fleet-wide.
	admitted []time.Time
	maxLive  int
}

type pendingProbe struct {
	e   env
	p   breaker.Permit
	due time.Time
}

const lockstepStep = 20 * time.Millisecond

func newLockstepFleet(t *testing.T, store *fakeStore, n int, mod func(*breaker.Settings)) *lockstepFleet {
	f := &lockstepFleet{t: t, store: store, openUntil: t0.Add(30 * time.Second), probeTime: 50 * time.Millisecond, probes: map[uint64]int{}}
	if _, err := store.Transition(ctx, "partner", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: f.openUntil}); err != nil {
		t.Fatal(err)
	}
	store.transitions.Store(0)
	for i := range n {
		r := rand.New(rand.NewPCG(uint64(i), 99))
		f.envs = append(f.envs, newEnv(t, store, fmt.Sprintf("e%d", i), func(s *breaker.Settings) {
			s.Rand = r.Float64
			if mod != nil {
				mod(s)
			}
		}))
	}
	return f
}

// run drives the fleet over [from, to).
func (f *lockstepFleet) run(from, to time.Time) {
	f.t.Helper()
	for k := 0; ; k++ {
		now := from.Add(time.Duration(k) * lockstepStep)
		if !now.Before(to) {
			return
		}
		kept := f.pending[:0]
		for _, pp := range f.pending {
			if f.probeTime > 0 && !now.Before(pp.due) {
				pp.e.Done(ctx, now, pp.p, breaker.Success)
				continue
			}
			kept = append(kept, pp)
		}
		f.pending = kept
		for i, e := range f.envs {
			if (k+i)%5 != 0 {
				continue
			}
			p, err := e.Allow(ctx, now)
			if err != nil {
				if !errors.Is(err, breaker.ErrOpen) {
					f.t.Fatalf("Allow: %v", err)
				}
				continue
			}
			if p.Probe() {
				f.probes[f.store.state("partner").Epoch]++
				f.pending = append(f.pending, pendingProbe{e, p, now.Add(f.probeTime)})
				f.admitted = append(f.admitted, now)
				live := 0
				for _, a := range f.admitted {
					if now.Sub(a) < defaultProbeLease {
						live++
					}
				}
				f.maxLive = max(f.maxLive, live)
				continue
			}
			f.admits++
			e.Done(ctx, now, p, breaker.Success)
		}
	}
}

type storeCounts struct{ loads, transitions, acquires, conflicts int64 }

func (f *lockstepFleet) counts() storeCounts {
	return storeCounts{f.store.loads.Load(), f.store.transitions.Load(), f.store.acquires.Load(), f.store.conflicts.Load()}
}

func (c storeCounts) minus(d storeCounts) storeCounts {
	return storeCounts{c.loads - d.loads, c.transitions - d.transitions, c.acquires - d.acquires, c.conflicts - d.conflicts}
}

// TestSharedHalfOpenIsNotInLockstep: 200 environments know the same
// OpenUntil. Each waits its own delay (under CacheTTL) past it and reads
// the state again before writing, so one environment moves the fleet to
// half-open and takes the probe, and the others learn it from a Load: at
// the open→half-open instant the fleet makes one Transition and one
// AcquireProbe, not one of each per environment.
func TestSharedHalfOpenIsNotInLockstep(t *testing.T) {
	const n = 200
	for _, probes := range []int{1, 2} {
		t.Run(fmt.Sprintf("probes=%d", probes), func(t *testing.T) {
			store := newFakeStore()
			f := newLockstepFleet(t, store, n, func(s *breaker.Settings) { s.HalfOpenProbes = probes })
			f.run(f.openUntil.Add(-2*time.Second), f.openUntil)
			if f.admits != 0 || len(f.probes) != 0 {
				t.Fatalf("admitted %d calls and %v probes while open", f.admits, f.probes)
			}
			before := f.counts()
			f.run(f.openUntil, f.openUntil.Add(defaultCacheTTL))
			d := f.counts().minus(before)
			t.Logf("first CacheTTL past OpenUntil, %d environments: %d loads, %d transitions (%d conflicts), %d probe requests; probes per epoch %v",
				n, d.loads, d.transitions, d.conflicts, d.acquires, f.probes)
			// One Transition to half-open, one AcquireProbe, and the
			// probe's result (a success: one Transition to closed).
			if d.transitions > 2 || d.conflicts != 0 || d.acquires > 1 {
				t.Fatalf("%d transitions (%d conflicts) and %d probe requests in the CacheTTL after OpenUntil, want at most 2 (half-open, then closed) and 1",
					d.transitions, d.conflicts, d.acquires)
			}
			// Every environment reads the state at most twice per CacheTTL
			// (its regular reload, and the read before its own move).
			if d.loads > 2*n {
				t.Fatalf("%d loads by %d environments in one CacheTTL", d.loads, n)
			}
			st := store.state("partner")
			if st.State != breaker.Closed || st.Epoch != 3 {
				t.Fatalf("stored %+v, want closed at epoch 3 (open → half-open → closed)", st)
			}
			for e, k := range f.probes {
				if k > 1 { // one probe succeeded at once: no second one went
					t.Fatalf("epoch %d: %d probes", e, k)
				}
			}
			// The close reaches every environment within CacheTTL.
			f.admits = 0
			f.run(f.openUntil.Add(2*defaultCacheTTL), f.openUntil.Add(2*defaultCacheTTL+100*time.Millisecond))
			if f.admits != n {
				t.Fatalf("%d of %d environments admit calls 2×CacheTTL after OpenUntil", f.admits, n)
			}
		})
	}
}

// TestSharedLostProbeIsRearmedByOne: the probe's environment is lost (its
// Done never comes). Once every lease the epoch can have given has lapsed
// (2 × CacheTTL + ProbeLease after it began), one environment moves the
// fleet to a new half-open epoch (whose probe slots are all free) and
// probes; the others learn it from a Load. Each round costs the fleet one
// Transition and at most HalfOpenProbes AcquireProbes, and never more than
// HalfOpenProbes probes hold a live lease at once.
func TestSharedLostProbeIsRearmedByOne(t *testing.T) {
	const n = 100
	for _, probes := range []int{1, 2} {
		t.Run(fmt.Sprintf("probes=%d", probes), func(t *testing.T) {
			store := newFakeStore()
			f := newLockstepFleet(t, store, n, func(s *breaker.Settings) { s.HalfOpenProbes = probes })
			f.probeTime = 0 // lost
			f.run(f.openUntil.Add(-2*time.Second), f.openUntil)
			before := f.counts()
			const rounds = 3
			period := 2*defaultCacheTTL + defaultProbeLease // plus each round's spread, under CacheTTL
			f.run(f.openUntil, f.openUntil.Add(rounds*period+period/2))
			d := f.counts().minus(before)
			st := store.state("partner")
			t.Logf("%d environments, %d lost probes' rounds: %d loads, %d transitions (%d conflicts), %d probe requests; probes per epoch %v, at most %d live at once; stored %+v",
				n, rounds, d.loads, d.transitions, d.conflicts, d.acquires, f.probes, f.maxLive, st)
			if st.State != breaker.HalfOpen || st.Epoch != 1+1+rounds {
				t.Fatalf("stored %+v, want half-open at epoch %d (one epoch per round)", st, 1+1+rounds)
			}
			if f.maxLive > probes {
				t.Fatalf("%d probes with live leases at once, HalfOpenProbes is %d", f.maxLive, probes)
			}
			if d.transitions != 1+rounds || d.conflicts != 0 {
				t.Fatalf("%d transitions (%d conflicts), want %d: one per half-open epoch", d.transitions, d.conflicts, 1+rounds)
			}
			// The environment that armed an epoch takes its probes: at most
			// HalfOpenProbes requests, granted, per epoch.
			if d.acquires > int64(probes*(1+rounds)) {
				t.Fatalf("%d probe requests for %d epochs, want at most %d per epoch", d.acquires, 1+rounds, probes)
			}
			for e, k := range f.probes {
				if k > probes {
					t.Fatalf("epoch %d: %d probes, HalfOpenProbes is %d", e, k, probes)
				}
			}
			if len(f.probes) != 1+rounds || f.admits != 0 {
				t.Fatalf("probes per epoch %v, %d ordinary calls admitted: want probes in each of the %d epochs, nothing else", f.probes, f.admits, 1+rounds)
			}
		})
	}
}

// TestSharedFleetWakingTogetherDoesNotWriteTogether: environments that
// had no calls when the open duration ended (frozen Lambda environments)
// and come back at the same instant still spread their moves over
// CacheTTL.
func TestSharedFleetWakingTogetherDoesNotWriteTogether(t *testing.T) {
	const n = 100
	store := newFakeStore()
	f := newLockstepFleet(t, store, n, nil)
	f.run(f.openUntil.Add(-2*time.Second), f.openUntil.Add(-time.Second)) // every environment reads it open
	before := f.counts()
	wake := f.openUntil.Add(time.Minute)
	f.run(wake, wake.Add(defaultCacheTTL))
	d := f.counts().minus(before)
	t.Logf("%d environments waking together: %d loads, %d transitions (%d conflicts), %d probe requests", n, d.loads, d.transitions, d.conflicts, d.acquires)
	if d.transitions > 2 || d.acquires > 1 {
		t.Fatalf("%d transitions and %d probe requests in the CacheTTL after waking, want at most 2 and 1", d.transitions, d.acquires)
	}
}

// --- Store faults while the fleet is open ------------------------------

// TestSharedThrottledHalfOpenAdmitsNoLocalProbes: the Store throttles the
// Open→HalfOpen transition (or AcquireProbe) while the fleet is known to be
// open. An environment that meets the fault keeps rejecting and reports
// it; it does not fall back to a local state machine that would admit a
// probe of its own, one per environment. Once the Store heals, at most
// HalfOpenProbes probes go fleet-wide.
func TestSharedThrottledHalfOpenAdmitsNoLocalProbes(t *testing.T) {
	const n = 30
	for _, op := range []string{"transition", "acquire-probe"} {
		t.Run(op, func(t *testing.T) {
			store := newFakeStore()
			f := newLockstepFleet(t, store, n, nil)
			var throttled atomic.Bool
			throttled.Store(true)
			throttle := errors.New("ProvisionedThroughputExceededException")
			store.failWith(func(o string) error {
				if o == op && throttled.Load() {
					return fmt.Errorf("%w: %s: %w", breaker.ErrStore, o, throttle)
				}
				return nil
			})
			f.probeTime = 0 // hold every probe: count them all
			f.run(f.openUntil.Add(-2*time.Second), f.openUntil.Add(5*time.Second))
			total := 0
			for _, k := range f.probes {
				total += k
			}
			if total != 0 || f.admits != 0 {
				t.Fatalf("with %s throttled: %d probes (per epoch %v) and %d calls admitted, want none", op, total, f.probes, f.admits)
			}
			faults := 0
			for i, e := range f.envs {
				k := e.errs.count()
				faults += k
				if k > 6 { // 5 s at most once per CacheTTL, backing off
					t.Fatalf("env %d reported %d faults in 5 s", i, k)
				}
				for _, err := range e.errs.errs {
					if !errors.Is(err, throttle) || !errors.Is(err, breaker.ErrStore) {
						t.Fatalf("env %d: OnStoreError(%v)", i, err)
					}
				}
				if e.State(f.openUntil.Add(5*time.Second)) == breaker.Closed {
					t.Fatalf("env %d closed", i)
				}
			}
			if faults == 0 {
				t.Fatal("no fault reported")
			}
			t.Logf("%s throttled for 5 s: %d faults reported by %d environments, %d transitions, %d probe requests",
				op, faults, n, store.transitions.Load(), store.acquires.Load())

			throttled.Store(false)
			f.run(f.openUntil.Add(5*time.Second), f.openUntil.Add(20*time.Second))
			for e, k := range f.probes {
				if k > defaultHalfOpenProbes {
					t.Fatalf("after healing: epoch %d had %d probes", e, k)
				}
			}
			if len(f.probes) == 0 {
				t.Fatal("no probe after the store healed")
			}
		})
	}
}

// armLostStore applies a Transition into half-open and then answers it
// with a fault, once.
type armLostStore struct {
	*fakeStore
	lose atomic.Int64
}

func (s *armLostStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	snap, err := s.fakeStore.Transition(ctx, name, prevEpoch, next)
	if err == nil && next.State == breaker.HalfOpen && s.lose.Add(-1) >= 0 {
		return breaker.Snapshot{}, fmt.Errorf("%w: transition: answer lost", breaker.ErrStore)
	}
	return snap, err
}

// TestSharedArmAnsweredWithAFaultIsRecognised: the move to half-open was
// applied but answered with a fault. The environment rejects, and when it
// reads the state again and finds the epoch it wrote (same start), it knows
// it armed it and takes the probe, rather than leaving the epoch without
// one until ProbeLease.
func TestSharedArmAnsweredWithAFaultIsRecognised(t *testing.T) {
	inner := newFakeStore()
	store := &armLostStore{fakeStore: inner}
	store.lose.Store(1)
	until := t0.Add(30 * time.Second)
	if _, err := inner.Transition(ctx, "partner", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: until}); err != nil {
		t.Fatal(err)
	}
	a := newEnv(t, store, "a", nil)
	b := newEnv(t, store, "b", nil)
	for _, e := range []env{a, b} {
		_, err := e.Allow(ctx, until.Add(-time.Second))
		mustOpenError(t, err)
	}
	_, err := a.Allow(ctx, until)
	mustOpenError(t, err)
	if op, err := a.errs.last(t); op != "transition" || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("OnStoreError(%q, %v)", op, err)
	}
	if st := inner.state("partner"); st.State != breaker.HalfOpen || st.Epoch != 2 {
		t.Fatalf("stored %+v, want half-open at epoch 2", st)
	}
	// b reads the half-open epoch: not its own, it does not ask for a slot.
	acq := inner.acquires.Load()
	_, err = b.Allow(ctx, until.Add(500*time.Millisecond))
	if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen {
		t.Fatalf("b: %+v", oe)
	}
	if inner.acquires.Load() != acq {
		t.Fatal("an environment that did not arm the epoch asked for a probe slot")
	}
	// a tries again CacheTTL after the fault, reading the state first.
	_, err = a.Allow(ctx, until.Add(500*time.Millisecond))
	mustOpenError(t, err)
	p, err := a.Allow(ctx, until.Add(time.Second))
	if err != nil || !p.Probe() {
		t.Fatalf("a CacheTTL later: %v, want the probe of the epoch it armed", err)
	}
	if st := inner.state("partner"); st.Epoch != 2 {
		t.Fatalf("stored %+v: a wrote another epoch instead of using its own", st)
	}
	a.Done(ctx, until.Add(time.Second), p, breaker.Success)
	if st := inner.state("partner"); st.State != breaker.Closed || st.Epoch != 3 {
		t.Fatalf("stored %+v, want closed at epoch 3", st)
	}
}

// --- A far OpenUntil -------------------------------------------------------

// TestSharedFarOpenUntilIsClamped: an OpenUntil in the year 9999 (a bug, a
// clock far ahead, a hand-edited item) keeps no environment open longer
// than MaxOpenDuration; an OpenUntil within MaxOpenDuration × (1 + Jitter)
// is followed as it is.
func TestSharedFarOpenUntilIsClamped(t *testing.T) {
	jitter := func(s *breaker.Settings) { s.Jitter = 0.2 }
	t.Run("year 9999", func(t *testing.T) {
		store := newFakeStore()
		far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
		if _, err := store.Transition(ctx, "partner", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: far}); err != nil {
			t.Fatal(err)
		}
		a := newEnv(t, store, "a", jitter)
		for _, d := range []time.Duration{0, time.Second, 2 * time.Minute} { // reading it again does not push it back
			_, err := a.Allow(ctx, t0.Add(d))
			if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != defaultMaxOpenDuration-d {
				t.Fatalf("at +%v: %+v, want open with RetryAfter %v", d, oe, defaultMaxOpenDuration-d)
			}
		}
		at := t0.Add(defaultMaxOpenDuration)
		p, err := a.Allow(ctx, at)
		if err != nil || !p.Probe() {
			t.Fatalf("at MaxOpenDuration: %v, want a probe", err)
		}
		a.Done(ctx, at, p, breaker.Success)
		if st := store.state("partner"); st.State != breaker.Closed {
			t.Fatalf("stored %+v, want closed", st)
		}
	})
	t.Run("within bounds", func(t *testing.T) {
		store := newFakeStore()
		until := t0.Add(defaultMaxOpenDuration * 6 / 5) // the longest a jittered open period at the cap lasts
		if _, err := store.Transition(ctx, "partner", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: until}); err != nil {
			t.Fatal(err)
		}
		a := newEnv(t, store, "a", jitter)
		_, err := a.Allow(ctx, t0)
		if oe := mustOpenError(t, err); oe.RetryAfter != 6*time.Minute {
			t.Fatalf("%+v, want RetryAfter 6m", oe)
		}
	})
}

func TestMaxHalfOpenProbesIsTheStoreSlotCount(t *testing.T) {
	// package dynamo keeps 64 probe slots per breaker (one item each).
	if _, err := breaker.New("p", breaker.Settings{HalfOpenProbes: 64}); err != nil {
		t.Fatalf("HalfOpenProbes 64: %v", err)
	}
	var se *herdguard.ConfigError
	if _, err := breaker.New("p", breaker.Settings{HalfOpenProbes: 65}); !errors.As(err, &se) || se.Field != "breaker.Settings.HalfOpenProbes" {
		t.Fatalf("HalfOpenProbes 65: %v, want a ConfigError naming breaker.Settings.HalfOpenProbes", err)
	}
}
