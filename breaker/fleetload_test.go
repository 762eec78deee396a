package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// Regression tests for what a shared breaker costs the Store, and the
// fleet, when many environments act at once: Flush and ReportInterval,
// the move to half-open, Store faults while the fleet is open, a far
// OpenUntil, and trips from the noise of a fresh fleet window.

// --- Flush and ReportInterval ---------------------------------------------

// TestSharedFlushHonoursReportInterval: a Lambda handler calls Flush at
// the end of every invocation. An environment that sees a failure in each
// of ten invocations within one second makes one Report, not ten.
func TestSharedFlushHonoursReportInterval(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinReporters = 5 })
	for i := range 10 { // one invocation every 100 ms: a failure, then Flush
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		calls(t, a.Breaker, at, breaker.Failure, 1)
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := store.reports.Load(); got != 1 {
		t.Fatalf("%d reports in 10 invocations within one second, want 1 (ReportInterval is 1s)", got)
	}
	// The next invocation a second after the first report reports the
	// nine failures that waited.
	calls(t, a.Breaker, t0.Add(time.Second), breaker.Success, 1)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w := store.windows[fmt.Sprintf("partner#w#%d", t0.UnixMilli())]
	if got := store.reports.Load(); got != 2 || w == nil || w.failures != 10 || w.successes != 1 {
		t.Fatalf("%d reports, window %+v: want 2 reports adding up to 10 failures and 1 success", got, w)
	}
}

// TestSharedFlushSendsWhatIsDue: Flush sends the remainder of a fleet
// window that has ended whatever ReportInterval says, and the current
// window's counts once the last Report is ReportInterval old, even when no
// counted call came since (nothing else would send them before the
// environment is frozen).
func TestSharedFlushSendsWhatIsDue(t *testing.T) {
	t.Run("ended window", func(t *testing.T) {
		store := newFakeStore()
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinReporters = 5 })
		calls(t, a.Breaker, t0.Add(9500*time.Millisecond), breaker.Failure, 1) // reported at once
		calls(t, a.Breaker, t0.Add(9800*time.Millisecond), breaker.Failure, 2) // waits
		// The next invocation, in the next window, has only a call whose
		// outcome does not count; 600 ms after the last report.
		at := t0.Add(10100 * time.Millisecond)
		p, err := a.Allow(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		a.Done(ctx, at, p, breaker.Excluded)
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		w := store.windows[fmt.Sprintf("partner#w#%d", t0.UnixMilli())]
		if got := store.reports.Load(); got != 2 || w == nil || w.failures != 3 {
			t.Fatalf("%d reports, first window %+v: want its remainder sent by Flush (2 reports, 3 failures)", got, w)
		}
	})
	t.Run("due", func(t *testing.T) {
		store := newFakeStore()
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinReporters = 5 })
		calls(t, a.Breaker, t0, breaker.Failure, 1)                           // reported at once
		calls(t, a.Breaker, t0.Add(500*time.Millisecond), breaker.Failure, 1) // waits
		flushAt(t, a.Breaker, t0.Add(900*time.Millisecond))                   // not due
		if got := store.reports.Load(); got != 1 {
			t.Fatalf("reports = %d before ReportInterval passed, want 1", got)
		}
		flushAt(t, a.Breaker, t0.Add(1200*time.Millisecond)) // due
		w := store.windows[fmt.Sprintf("partner#w#%d", t0.UnixMilli())]
		if got := store.reports.Load(); got != 2 || w == nil || w.failures != 2 {
			t.Fatalf("%d reports, window %+v: want 2 reports, 2 failures", got, w)
		}
	})
}

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
					if now.Sub(a) < breaker.DefaultProbeLease {
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
			f.run(f.openUntil, f.openUntil.Add(breaker.DefaultCacheTTL))
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
			f.run(f.openUntil.Add(2*breaker.DefaultCacheTTL), f.openUntil.Add(2*breaker.DefaultCacheTTL+100*time.Millisecond))
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
			period := 2*breaker.DefaultCacheTTL + breaker.DefaultProbeLease // plus each round's spread, under CacheTTL
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
	f.run(wake, wake.Add(breaker.DefaultCacheTTL))
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
				if k > breaker.DefaultHalfOpenProbes {
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
			if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != breaker.DefaultMaxOpenDuration-d {
				t.Fatalf("at +%v: %+v, want open with RetryAfter %v", d, oe, breaker.DefaultMaxOpenDuration-d)
			}
		}
		at := t0.Add(breaker.DefaultMaxOpenDuration)
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
		until := t0.Add(breaker.DefaultMaxOpenDuration * 6 / 5) // the longest a jittered open period at the cap lasts
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

// --- Trips from the noise of a fresh fleet window --------------------------

// TestSharedEarlyWindowSpikeDoesNotTrip: the fleet failed 44% of 500 calls
// in the previous window. 2 s into a fresh window its first 21 calls,
// reported by two environments, hold 13 failures (62%): with fixed windows
// that tripped the fleet. The sliding estimate weighs the previous window
// in at 80%: 44% + a little, no trip.
func TestSharedEarlyWindowSpikeDoesNotTrip(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	b := newEnv(t, store, "b", nil)
	prev := t0.Add(-5 * time.Second) // the previous fleet window
	calls(t, b.Breaker, prev, breaker.Success, 140)
	calls(t, b.Breaker, prev, breaker.Failure, 110)
	calls(t, a.Breaker, prev, breaker.Success, 140)
	calls(t, a.Breaker, prev, breaker.Failure, 110)
	flushAt(t, b.Breaker, prev.Add(time.Second))
	flushAt(t, a.Breaker, prev.Add(time.Second)) // a saw the window's totals: 220 failures of 500
	w := store.windows[fmt.Sprintf("partner#w#%d", prev.Truncate(10*time.Second).UnixMilli())]
	if w == nil || w.failures != 220 || w.successes != 280 {
		t.Fatalf("previous window %+v", w)
	}

	at := t0.Add(time.Second)
	calls(t, a.Breaker, at, breaker.Success, 8)
	calls(t, a.Breaker, at, breaker.Failure, 12) // the first is reported: 8 + 1
	calls(t, b.Breaker, at, breaker.Failure, 1)  // a second reporter
	flushAt(t, a.Breaker, at.Add(time.Second))   // a's other 11: 13 failures of 21, two reporters
	w = store.windows[fmt.Sprintf("partner#w#%d", t0.UnixMilli())]
	if w == nil || w.failures != 13 || w.successes != 8 || len(w.envs) != 2 {
		t.Fatalf("current window %+v, want 13 failures and 8 successes from 2 reporters", w)
	}
	if st := store.state("partner"); st.State != breaker.Closed {
		t.Fatalf("stored %+v: 13 failures of 21 early in a window tripped a fleet that fails 44%% of its calls", st)
	}

	// Late in the window, the same window's counts decide: a real outage
	// still trips it.
	late := t0.Add(8 * time.Second)
	calls(t, a.Breaker, late, breaker.Failure, 400)
	flushAt(t, a.Breaker, late.Add(time.Second))
	if st := store.state("partner"); st.State != breaker.Open {
		t.Fatalf("stored %+v: 413 failures of 421 in the window did not trip it", st)
	}
}

// warmStore is a fakeStore whose Report answers for fleet windows that
// start before `until` name a single reporter: those windows' counts are
// real, but cannot trip the fleet (MinReporters is 2).
type warmStore struct {
	*fakeStore
	until time.Time
}

func (s *warmStore) Report(ctx context.Context, name string, window time.Time, env string, successes, failures int64, expires time.Time) (breaker.Tally, error) {
	t, err := s.fakeStore.Report(ctx, name, window, env, successes, failures, expires)
	if window.Before(s.until) {
		t.Reporters = min(t.Reporters, 1)
	}
	return t, err
}

// runSteadyStream runs envs environments, each making a call every 50 ms
// that fails with probability p, over windows fleet windows from t0 (a
// window boundary), and returns when the fleet first tripped (0: never).
// The first window is the brownout's start: no environment has a
// previous window's totals, so (as with fixed windows) its estimate is
// that window's alone, and early in it, when only the environments that
// already failed have reported, it is far above p: at 45% the first 20 to
// 31 calls reported hold 58% to 70% failures, and the fleet trips 50 to
// 100 ms in (see the package documentation). That window cannot trip the
// fleet here (warmStore): the test is about every window after it.
func runSteadyStream(t *testing.T, p float64, envs, windows int, seed uint64) time.Duration {
	t.Helper()
	store := &warmStore{fakeStore: newFakeStore(), until: t0.Add(breaker.DefaultWindow)}
	fleet := make([]env, envs)
	rngs := make([]*rand.Rand, envs)
	for i := range fleet {
		fleet[i] = newEnv(t, store, fmt.Sprintf("e%d", i), nil)
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	const step = 50 * time.Millisecond
	steps := windows * int(breaker.DefaultWindow/step)
	for k := range steps {
		now := t0.Add(time.Duration(k) * step)
		for i, e := range fleet {
			at := now.Add(time.Duration(i) * step / time.Duration(envs)) // staggered within the step
			pm, err := e.Allow(ctx, at)
			if err != nil {
				if !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("Allow: %v", err)
				}
				return at.Sub(t0)
			}
			o := breaker.Success
			if rngs[i].Float64() < p {
				o = breaker.Failure
			}
			e.Done(ctx, at, pm, o)
		}
		if st := store.state("partner"); st.State != breaker.Closed {
			return now.Sub(t0)
		}
	}
	return 0
}

// TestSharedSteadyStreamTripsOnlyAboveTheRatio: twenty environments, each
// failing a steady 45% of its calls (20 calls/s each), report into the
// fleet windows for 20 windows: the fleet never trips, in particular not
// early in a window, when the few calls reported come from the
// environments that failed first. At 55% it trips, early in the first
// window it can.
func TestSharedSteadyStreamTripsOnlyAboveTheRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("80,000 calls")
	}
	for seed := range uint64(3) {
		if at := runSteadyStream(t, 0.45, 20, 20, seed); at != 0 {
			t.Fatalf("seed %d: a fleet failing 45%% of its calls tripped %v into the run (%v into a fleet window)", seed, at, at%breaker.DefaultWindow)
		}
	}
	at := runSteadyStream(t, 0.55, 20, 5, 1)
	if at < breaker.DefaultWindow || at > breaker.DefaultWindow+2*time.Second {
		t.Fatalf("a fleet failing 55%% of its calls tripped %v into the run, want early in the second window", at)
	}
	t.Logf("55%%: tripped %v into the run", at)
}

func TestMaxHalfOpenProbesIsTheStoreSlotCount(t *testing.T) {
	// package dynamo keeps 64 probe slots per breaker (dynamo.MaxProbeSlots).
	if _, err := breaker.New("p", breaker.Settings{HalfOpenProbes: 64}); err != nil {
		t.Fatalf("HalfOpenProbes 64: %v", err)
	}
	var se *breaker.SettingsError
	if _, err := breaker.New("p", breaker.Settings{HalfOpenProbes: 65}); !errors.As(err, &se) || se.Field != "HalfOpenProbes" {
		t.Fatalf("HalfOpenProbes 65: %v, want a SettingsError naming HalfOpenProbes", err)
	}
}
