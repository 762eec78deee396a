package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// storeErrors collects OnStoreError calls.
type storeErrors struct {
	mu   sync.Mutex
	ops  []string
	errs []error
}

func (s *storeErrors) hook(op string, err error) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

func (s *storeErrors) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ops)
}

func (s *storeErrors) last(t *testing.T) (string, error) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ops) == 0 {
		t.Fatal("no store error reported")
	}
	return s.ops[len(s.ops)-1], s.errs[len(s.errs)-1]
}

type env struct {
	*breaker.Breaker
	rec  *recorder
	errs *storeErrors
}

// newEnv returns one execution environment's breaker on store. Store calls
// get a generous real-time timeout so that the tests do not depend on the
// machine's speed; the timeout tests set their own. Open durations have no
// jitter, and Rand always returns 0, so an environment makes its half-open
// move exactly when the open duration ends (no extra delay: see
// TestSharedHalfOpenIsNotInLockstep for the spread).
func newEnv(t testing.TB, store breaker.Store, id string, mod func(*breaker.Settings)) env {
	t.Helper()
	e := env{rec: &recorder{}, errs: &storeErrors{}}
	s := breaker.Settings{
		Store:         store,
		Jitter:        -1,
		Rand:          func() float64 { return 0 },
		StoreTimeout:  10 * time.Second,
		OnStateChange: e.rec.hook,
		OnStoreError:  e.errs.hook,
	}
	if mod != nil {
		mod(&s)
	}
	e.Breaker = newBreaker(t, s)
	return e
}

// flushAt is a Lambda handler's Flush at the end of an invocation at `at`:
// it reports what is due then.
func flushAt(t testing.TB, b *breaker.Breaker, at time.Time) {
	t.Helper()
	if err := b.Flush(ctx, at); err != nil {
		t.Fatalf("Flush at %v: %v", at, err)
	}
}

// watching makes e start the fleet's watch (or learn it) with a failure a
// second before at: an environment samples its calls from the start of
// the bucket after the one it learnt of the watch in, so e samples from
// at on (buckets are 1 s by default, at is whole seconds in these tests).
func watching(t testing.TB, e env, at time.Time) {
	t.Helper()
	calls(t, e.Breaker, at.Add(-time.Second), breaker.Failure, 1)
}

// tripFleet opens the breaker in store at `at` and returns two
// environments: a, which read the fleet state (quiet, closed) two seconds
// before, and b, which tripped it. b's first failure starts the fleet's
// watch; its 20 failures a second before `at` are sampled (Rand is 0:
// every call) and reported with its failure at `at`, once ReportInterval
// has passed: 21 sampled failures (at least MinRequests), each counting
// for initialSampling (4) calls, trip the fleet at `at`.
func tripFleet(t *testing.T, store breaker.Store, at time.Time, mod func(*breaker.Settings)) (env, env) {
	t.Helper()
	a := newEnv(t, store, "a", mod)
	b := newEnv(t, store, "b", mod)
	before := at.Add(-defaultReportInterval)
	calls(t, a.Breaker, before.Add(-time.Second), breaker.Success, 1)
	watching(t, b, before)
	calls(t, b.Breaker, before, breaker.Failure, 20)
	calls(t, b.Breaker, at, breaker.Failure, 1)
	snap, err := store.Load(ctx, "partner")
	if err != nil || snap.State != breaker.Open {
		t.Fatalf("fleet did not trip: %+v, %v", snap, err)
	}
	return a, b
}

func TestSharedExactlyOneProbeFleetWide(t *testing.T) {
	store := newFakeStore()
	tripFleet(t, store, t0, nil)
	at := t0.Add(30 * time.Second)

	envs := make([]env, 10)
	for i := range envs {
		envs[i] = newEnv(t, store, fmt.Sprintf("e%d", i), nil)
	}
	var (
		wg     sync.WaitGroup
		probes atomic.Int64
		probe  atomic.Pointer[breaker.Permit]
		owner  atomic.Int64
	)
	for i, e := range envs {
		wg.Go(func() {
			for range 5 { // several calls per environment
				p, err := e.Allow(ctx, at)
				if err != nil {
					if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen {
						t.Errorf("rejection %+v, want half-open", oe)
					}
					continue
				}
				if !p.Probe() {
					t.Errorf("env %d admitted a non-probe call while half-open", i)
				}
				probes.Add(1)
				probe.Store(&p)
				owner.Store(int64(i))
			}
		})
	}
	wg.Wait()
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes fleet-wide, want exactly 1", n)
	}
	if st := store.state("partner"); st.State != breaker.HalfOpen || st.Epoch != 2 {
		t.Fatalf("stored state = %+v, want half-open at epoch 2", st)
	}
	// Denied environments do not ask again within CacheTTL: at most one
	// Transition and one AcquireProbe per environment.
	if tr, ac := store.transitions.Load(), store.acquires.Load(); tr > 1+1+10 || ac > 10 {
		t.Fatalf("transitions %d, acquires %d: environments hammer the store", tr, ac)
	}

	// The probe succeeds: the fleet closes, and every environment learns
	// it within CacheTTL.
	winner := envs[owner.Load()]
	winner.Done(ctx, at.Add(10*time.Millisecond), *probe.Load(), breaker.Success)
	if st := store.state("partner"); st.State != breaker.Closed || st.Epoch != 3 || st.Reopens != 0 {
		t.Fatalf("stored state after the probe = %+v, want closed at epoch 3", st)
	}
	wantState(t, winner.Breaker, at, breaker.Closed)
	for i, e := range envs {
		if !call(t, e.Breaker, at.Add(time.Second+10*time.Millisecond), breaker.Success) {
			t.Fatalf("env %d still rejects CacheTTL after the close", i)
		}
	}
}

func TestSharedLostProbeIsReplacedWhenItsLeaseLapses(t *testing.T) {
	store := newFakeStore()
	a, b := tripFleet(t, store, t0, nil)
	at := t0.Add(30 * time.Second)
	p, err := a.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("a: %v, want a probe", err)
	}
	// a's environment is frozen with the probe in flight; b keeps calling.
	// It did not arm the epoch: it asks for no probe slot. Once every
	// lease the epoch can have given (during its first 2 × CacheTTL, for
	// ProbeLease) has lapsed, b moves the fleet to a new half-open epoch
	// and probes.
	acq := store.acquires.Load()
	rearm := at.Add(2*defaultCacheTTL + defaultProbeLease)
	for _, d := range []time.Duration{0, 5 * time.Second, 9 * time.Second, 10*time.Second + time.Millisecond, rearm.Sub(at) - time.Millisecond} {
		_, err := b.Allow(ctx, at.Add(d))
		if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen {
			t.Fatalf("b at +%v: %+v, want half-open", d, oe)
		}
	}
	if store.acquires.Load() != acq {
		t.Fatal("an environment that did not arm the half-open epoch asked for a probe slot")
	}
	q, err := b.Allow(ctx, rearm)
	if err != nil || !q.Probe() {
		t.Fatalf("b after the leases lapsed: %v, want a probe", err)
	}
	if st := store.state("partner"); st.State != breaker.HalfOpen || st.Epoch != 3 {
		t.Fatalf("stored state = %+v, want a new half-open epoch (3)", st)
	}
	b.Done(ctx, rearm.Add(time.Millisecond), q, breaker.Success)
	if st := store.state("partner"); st.State != breaker.Closed {
		t.Fatalf("stored state = %+v, want closed", st)
	}
	// a thaws: its probe result belongs to an epoch long gone.
	trBefore := store.transitions.Load()
	a.Done(ctx, rearm.Add(time.Second), p, breaker.Failure)
	if st := store.state("partner"); st.State != breaker.Closed {
		t.Fatalf("a stale probe failure re-opened the fleet: %+v", st)
	}
	if store.transitions.Load() > trBefore+1 {
		t.Fatal("a stale probe made more than one (conflicting) transition")
	}
}

func TestSharedFailedProbeReopensWithGrowth(t *testing.T) {
	store := newFakeStore()
	a, b := tripFleet(t, store, t0, nil)
	at := t0.Add(30 * time.Second)
	p, err := a.Allow(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	a.Done(ctx, at, p, breaker.Failure)
	st := store.state("partner")
	if st.State != breaker.Open || st.Reopens != 1 || !st.OpenUntil.Equal(at.Add(time.Minute)) || st.Epoch != 3 {
		t.Fatalf("stored state = %+v, want re-opened for 60s at epoch 3", st)
	}
	_, err = b.Allow(ctx, at.Add(time.Second))
	if oe := mustOpenError(t, err); oe.RetryAfter != 59*time.Second {
		t.Fatalf("b: %+v, want RetryAfter 59s", oe)
	}
	// Next probe fails again: 120 s.
	at = at.Add(time.Minute)
	p, err = b.Allow(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	b.Done(ctx, at, p, breaker.Failure)
	if st := store.state("partner"); st.Reopens != 2 || !st.OpenUntil.Equal(at.Add(2*time.Minute)) {
		t.Fatalf("stored state = %+v, want re-opened for 120s", st)
	}
}

// TestSharedTransitionConflictAdoptsTheWinner: two environments watch the
// same failing partner; b trips the fleet first. a, still caching epoch 0,
// reports its sampled failures: the report is decided on epoch 0, so the
// store refuses it (its counts belong to the epoch before the trip) and a
// adopts b's state instead of writing one of its own.
func TestSharedTransitionConflictAdoptsTheWinner(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinRequests = 5 })
	b := newEnv(t, store, "b", func(s *breaker.Settings) { s.MinRequests = 5 })
	calls(t, a.Breaker, t0.Add(-time.Second), breaker.Failure, 1) // the alarm: the fleet watches
	calls(t, b.Breaker, t0.Add(-time.Second), breaker.Failure, 1) // b reads the state (watching) first: sampled, reported
	calls(t, b.Breaker, t0, breaker.Failure, 10)                  // b reports its first sample, 9 wait
	calls(t, a.Breaker, t0, breaker.Failure, 5)                   // a reports its first (3 samples in all), 4 wait
	flushAt(t, b.Breaker, t0.Add(time.Second))                    // b's 9 samples: it trips the fleet
	if st := store.state("partner"); st.Epoch != 1 || st.State != breaker.Open {
		t.Fatalf("stored %+v, want b's trip at epoch 1", st)
	}
	transitions := store.transitions.Load()
	flushAt(t, a.Breaker, t0.Add(time.Second)) // a's report, decided on epoch 0
	if got := store.conflicts.Load(); got != 1 {
		t.Fatalf("conflicts = %d, want 1 (a's report)", got)
	}
	if store.transitions.Load() != transitions {
		t.Fatal("a wrote a transition")
	}
	if st := store.state("partner"); st.Epoch != 1 || !st.OpenUntil.Equal(t0.Add(31*time.Second)) {
		t.Fatalf("stored state = %+v, want b's open state untouched", st)
	}
	wantState(t, a.Breaker, t0.Add(time.Second), breaker.Open)
	if got := a.rec.last(t); got.to != breaker.Open || got.origin != breaker.OriginFollowed {
		t.Fatalf("a's OnStateChange = %+v, want followed", got)
	}
	if got := b.rec.last(t); got.to != breaker.Open || got.origin != breaker.OriginWrote {
		t.Fatalf("b's OnStateChange = %+v, want wrote", got)
	}
}

func TestSharedNewEpochDropsOlderPermits(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	b := newEnv(t, store, "b", nil)
	old, err := a.Allow(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	calls(t, b.Breaker, t0, breaker.Failure, 1)                   // the first failure starts the watch
	calls(t, b.Breaker, t0.Add(time.Second), breaker.Failure, 20) // sampled from the next bucket on: the first reported at once
	flushAt(t, b.Breaker, t0.Add(2*time.Second))                  // the rest reported: b alone trips the fleet
	if st := store.state("partner"); st.State != breaker.Open {
		t.Fatalf("fleet = %+v", st)
	}
	_, err = a.Allow(ctx, t0.Add(15*time.Second)) // reload (quiet: 15 × CacheTTL): epoch 1, a new generation
	mustOpenError(t, err)
	reports := store.reports.Load()
	a.Done(ctx, t0.Add(15*time.Second), old, breaker.Failure)
	if c := a.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("a counted a call from the previous epoch: %+v", c)
	}
	if store.reports.Load() != reports {
		t.Fatal("a reported a call from the previous epoch")
	}
}

func TestSharedHealthyPathCost(t *testing.T) {
	store := newFakeStore()
	envs := []env{newEnv(t, store, "a", nil), newEnv(t, store, "b", nil)}
	const callsPerEnv = 10000 // one per millisecond for 10 s
	for i := range callsPerEnv {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		for _, e := range envs {
			if !call(t, e.Breaker, now, breaker.Success) {
				t.Fatal("rejected on the healthy path")
			}
		}
	}
	// 10 s at CacheTTL 1 s: at most 10 loads per environment, and no writes.
	if got := store.loads.Load(); got > 2*10 {
		t.Fatalf("loads = %d for 2 environments over 10s, want ≤ 20", got)
	}
	if got := store.writes(); got != 0 {
		t.Fatalf("writes = %d, want 0", got)
	}
	if err := envs[0].Flush(ctx, t0.Add(10*time.Second)); err != nil || store.writes() != 0 {
		t.Fatalf("Flush with nothing pending: %v, writes %d", err, store.writes())
	}
}

func TestSharedStaleCacheIsRefreshedByOneCaller(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	calls(t, a.Breaker, t0, breaker.Success, 1)

	entered, release := make(chan struct{}), make(chan struct{})
	hook := func() {
		entered <- struct{}{}
		<-release
	}
	store.loadHook.Store(&hook)
	stale := t0.Add(16 * time.Second) // past the quiet fleet's CacheTTL (15 × 1 s)
	done := make(chan error, 1)
	go func() { // the refresher: its Load hangs until released
		_, err := a.Allow(ctx, stale)
		done <- err
	}()
	<-entered
	// Meanwhile other callers use the stale state without waiting.
	for range 100 {
		if !call(t, a.Breaker, stale, breaker.Success) {
			t.Fatal("a caller was rejected during the refresh")
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := store.loads.Load(); got != 2 {
		t.Fatalf("loads = %d, want 2 (the first call, and one refresh)", got)
	}
}

func TestSharedStoreFaultFallsBackToLocal(t *testing.T) {
	store := newFakeStore()
	throttled := errors.New("ProvisionedThroughputExceededException")
	store.failWith(func(op string) error { return fmt.Errorf("%w: %s: %w", breaker.ErrStore, op, throttled) })
	a := newEnv(t, store, "a", nil)

	calls(t, a.Breaker, t0, breaker.Failure, 19)
	op, err := a.errs.last(t)
	if op != "load" || !errors.Is(err, breaker.ErrStore) || !errors.Is(err, throttled) {
		t.Fatalf("OnStoreError(%q, %v)", op, err)
	}
	wantState(t, a.Breaker, t0, breaker.Closed)
	calls(t, a.Breaker, t0, breaker.Failure, 1) // this environment's own 20 failures trip it locally
	wantState(t, a.Breaker, t0, breaker.Open)
	if store.writes() != 0 {
		t.Fatalf("writes while degraded = %d, want 0", store.writes())
	}
	if got := store.loads.Load(); got != 1 {
		t.Fatalf("loads = %d, want 1: a failed store is retried once per CacheTTL", got)
	}
	_, err = a.Allow(ctx, t0.Add(500*time.Millisecond))
	mustOpenError(t, err)
	if got := store.loads.Load(); got != 1 {
		t.Fatalf("loads = %d, want 1 before CacheTTL", got)
	}

	// The store answers again and the fleet is closed, but this
	// environment opened on its own: it stays open until its own probe
	// succeeds, and never closes on the fleet's word alone.
	store.heal()
	_, err = a.Allow(ctx, t0.Add(time.Second))
	if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 29*time.Second {
		t.Fatalf("after the store recovered: %+v, want still open with RetryAfter 29s", oe)
	}
	if got := store.loads.Load(); got != 2 {
		t.Fatalf("loads = %d, want 2: the store is read again after CacheTTL", got)
	}
	at := t0.Add(30 * time.Second)
	p, err := a.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at +30s: %v, want this environment's own probe", err)
	}
	a.Done(ctx, at, p, breaker.Success)
	wantState(t, a.Breaker, at, breaker.Closed)
	if !call(t, a.Breaker, at, breaker.Success) {
		t.Fatal("rejected after its probe succeeded")
	}
	if store.writes() != 0 {
		t.Fatalf("writes = %d, want 0: a local probe is not a fleet probe", store.writes())
	}
	if got := a.rec.all(); len(got) != 3 || got[1].to != breaker.HalfOpen || got[2].to != breaker.Closed {
		t.Fatalf("OnStateChange calls %+v, want closed→open→half-open→closed", got)
	}
}

func TestSharedReportFaultTripsLocally(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinRequests = 5 })
	calls(t, a.Breaker, t0, breaker.Success, 1) // the load succeeds
	store.failWith(func(op string) error {
		if op == "report" {
			return breaker.ErrStore
		}
		return nil
	})
	calls(t, a.Breaker, t0, breaker.Failure, 4) // the first failure's report fails: local from now on
	if op, _ := a.errs.last(t); op != "report" {
		t.Fatalf("op = %q", op)
	}
	wantState(t, a.Breaker, t0, breaker.Open) // 4 of 5 failed, locally
	if st := store.state("partner"); st.State != breaker.Closed {
		t.Fatalf("the fleet state was touched: %+v", st)
	}
}

func TestSharedTransitionFaultAppliesLocally(t *testing.T) {
	store := newFakeStore()
	a, _ := tripFleet(t, store, t0, nil)
	at := t0.Add(30 * time.Second)
	p, err := a.Allow(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	store.failWith(func(op string) error {
		if op == "transition" {
			return errors.New("connection reset")
		}
		return nil
	})
	a.Done(ctx, at, p, breaker.Success)
	op, err := a.errs.last(t)
	if op != "transition" || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("OnStoreError(%q, %v): want a transition fault wrapped in ErrStore", op, err)
	}
	wantState(t, a.Breaker, at, breaker.Closed) // closed locally
	if st := store.state("partner"); st.State != breaker.HalfOpen {
		t.Fatalf("stored state = %+v, want still half-open", st)
	}
}

func TestSharedStoreCallIsCutByTimeout(t *testing.T) {
	t.Run("StoreTimeout", func(t *testing.T) {
		store := newFakeStore()
		store.block.Store(true)
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.StoreTimeout = 20 * time.Millisecond })
		if !call(t, a.Breaker, t0, breaker.Success) { // the load times out; the local machine admits
			t.Fatal("rejected")
		}
		op, err := a.errs.last(t)
		if op != "load" || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, breaker.ErrStore) {
			t.Fatalf("OnStoreError(%q, %v)", op, err)
		}
	})
	// In a synctest bubble, so that the caller's 20 ms deadline ends while
	// the load waits for the store, as the case means, and never before
	// Allow has started it on a slow machine.
	t.Run("caller deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := newFakeStore()
			store.block.Store(true)
			a := newEnv(t, store, "a", func(s *breaker.Settings) { s.StoreTimeout = time.Hour })
			cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, err := a.Allow(cctx, t0); err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited != 20*time.Millisecond {
				t.Errorf("Allow waited %v for the blocked store; want the caller's 20ms", waited)
			}
			if a.errs.count() != 0 {
				t.Fatal("the caller's own deadline was reported as a store fault")
			}
		})
	})
	t.Run("store ignoring its context", func(t *testing.T) {
		store := newFakeStore()
		store.block.Store(true)
		store.ignoreCtx.Store(true)
		defer close(store.release)
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.StoreTimeout = 20 * time.Millisecond })
		if !call(t, a.Breaker, t0, breaker.Success) {
			t.Fatal("rejected")
		}
		if _, err := a.errs.last(t); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSharedMalformedOrPanickingStore(t *testing.T) {
	store := newFakeStore()
	store.malformed.Store(true)
	a := newEnv(t, store, "a", nil)
	calls(t, a.Breaker, t0, breaker.Success, 1)
	if op, err := a.errs.last(t); op != "load" || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("OnStoreError(%q, %v)", op, err)
	}

	store = newFakeStore()
	store.panics.Store(true)
	b := newEnv(t, store, "b", func(s *breaker.Settings) { s.MinRequests = 2 })
	calls(t, b.Breaker, t0, breaker.Failure, 2) // trips locally; no panic escapes
	if _, err := b.errs.last(t); !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("err = %v", err)
	}
	wantState(t, b.Breaker, t0, breaker.Open)
	if err := b.Flush(ctx, t0.Add(time.Minute)); err != nil {
		t.Fatalf("Flush while degraded: %v, want nil (nothing is reported)", err)
	}
}

func TestSharedOverrides(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	if err := store.SetOverride(ctx, "partner", breaker.ForcedOpen, t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Allow(ctx, t0)
	if oe := mustOpenError(t, err); !oe.Forced || oe.RetryAfter != 10*time.Second {
		t.Fatalf("fleet force-open: %+v", oe)
	}
	wantState(t, a.Breaker, t0, breaker.Open)
	if !call(t, a.Breaker, t0.Add(10*time.Second), breaker.Success) { // the override lapsed
		t.Fatal("still rejected after OverrideUntil")
	}

	// Local overrides beat the fleet's.
	if err := store.SetOverride(ctx, "partner", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatal(err)
	}
	a.Override(breaker.ForcedClosed)
	if !call(t, a.Breaker, t0.Add(20*time.Second), breaker.Success) {
		t.Fatal("a local ForcedClosed did not beat the fleet's force-open")
	}
	a.Reset()
	_, err = a.Allow(ctx, t0.Add(20*time.Second))
	if oe := mustOpenError(t, err); !oe.Forced || oe.RetryAfter != 0 {
		t.Fatalf("after Reset the fleet's force-open applies: %+v", oe)
	}

	// Force-closed fleet: calls pass even though the fleet is open;
	// failures are counted locally but neither reported nor tripping.
	if err := store.SetOverride(ctx, "partner", breaker.NoOverride, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, _ = tripFleet(t, store, t0.Add(40*time.Second), nil)
	if err := store.SetOverride(ctx, "partner", breaker.ForcedClosed, time.Time{}); err != nil {
		t.Fatal(err)
	}
	writes := store.writes()
	at := t0.Add(42 * time.Second)
	calls(t, a.Breaker, at, breaker.Failure, 50)
	if c := a.Counts(); c.Failures != 50 {
		t.Fatalf("counts = %+v", c)
	}
	if store.writes() != writes {
		t.Fatal("a force-closed breaker wrote to the store")
	}
	// Disabled fleet: nothing is counted.
	if err := store.SetOverride(ctx, "partner", breaker.Disabled, time.Time{}); err != nil {
		t.Fatal(err)
	}
	at = at.Add(time.Second)
	calls(t, a.Breaker, at, breaker.Failure, 50)
	if c := a.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("disabled: counts = %+v", c)
	}
	// The operator clears the override: the fleet is open.
	if err := store.SetOverride(ctx, "partner", breaker.NoOverride, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Allow(ctx, at.Add(time.Second))
	if oe := mustOpenError(t, err); oe.Forced || oe.State != breaker.Open {
		t.Fatalf("override cleared: %+v, want the fleet's open state", oe)
	}
}

func TestSharedLocalOverrideMakesNoStoreCalls(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	a.Override(breaker.ForcedOpen)
	for i := range 100 {
		_, err := a.Allow(ctx, t0.Add(time.Duration(i)*time.Second))
		mustOpenError(t, err)
	}
	if n := store.loads.Load() + store.writes(); n != 0 {
		t.Fatalf("store calls under a local override = %d", n)
	}
}

func TestFlushWithoutStore(t *testing.T) {
	b := newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Failure, 5)
	if err := b.Flush(ctx, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
}

func TestSharedFlushTrips(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	calls(t, a.Breaker, t0, breaker.Failure, 1) // the alarm
	// Sampled from the next bucket on (a learnt of the watch by failing):
	// the first reported at once, the rest held for ReportInterval.
	calls(t, a.Breaker, t0.Add(time.Second), breaker.Failure, 20)
	if st := store.state("partner"); st.State != breaker.Closed {
		t.Fatalf("tripped before Flush: %+v", st)
	}
	if err := a.Flush(ctx, t0.Add(time.Second)); err != nil { // at once: not due
		t.Fatal(err)
	}
	if st, n := store.state("partner"), store.reports.Load(); st.State != breaker.Closed || n != 2 {
		t.Fatalf("a Flush at the instant of the last report wrote: %d reports, %+v", n, st)
	}
	flushAt(t, a.Breaker, t0.Add(2*time.Second))
	if st := store.state("partner"); st.State != breaker.Open {
		t.Fatalf("Flush did not trip the fleet: %+v", st)
	}
	wantState(t, a.Breaker, t0.Add(2*time.Second), breaker.Open)
}

func TestSharedConcurrentFleet(t *testing.T) {
	// Several environments, each with several goroutines, share one store
	// through an outage and a recovery; run with -race. The fleet's clock
	// advances in 10 ms steps; within a step all calls run concurrently.
	store := newFakeStore()
	const (
		envs, workers = 6, 3
		steps         = 3000 // 30 s: the open duration has grown to 8 s by the end of the outage
		step          = 10 * time.Millisecond
		outageStart   = 3 * time.Second
		outageEnd     = 13 * time.Second
	)
	fleet := make([]env, envs)
	for i := range fleet {
		fleet[i] = newEnv(t, store, fmt.Sprintf("e%d", i), func(s *breaker.Settings) {
			s.OpenDuration = 2 * time.Second
			s.MinRequests = 10
		})
	}
	var (
		firstOpen     time.Duration // when the fleet first opened
		leaked        atomic.Int64  // ordinary calls admitted in the outage once every environment must know
		probes        atomic.Int64  // probes admitted in the outage
		admittedAfter atomic.Int64  // ordinary calls admitted in the last second
	)
	for n := range steps {
		elapsed := time.Duration(n) * step
		now := t0.Add(elapsed)
		down := elapsed >= outageStart && elapsed < outageEnd
		known := firstOpen > 0 && elapsed >= firstOpen+defaultCacheTTL+step
		var wg sync.WaitGroup
		for _, e := range fleet {
			for range workers {
				wg.Go(func() {
					p, err := e.Allow(ctx, now)
					if err != nil {
						if !errors.Is(err, breaker.ErrOpen) {
							t.Errorf("Allow: %v", err)
						}
						return
					}
					o := breaker.Success
					switch {
					case down && p.Probe():
						probes.Add(1)
					case down && known:
						leaked.Add(1)
					case elapsed >= time.Duration(steps)*step-time.Second:
						admittedAfter.Add(1)
					}
					if down {
						o = breaker.Failure
					}
					e.Done(ctx, now.Add(step/2), p, o)
				})
			}
		}
		wg.Wait()
		if firstOpen == 0 && store.state("partner").State != breaker.Closed {
			firstOpen = elapsed
		}
	}
	st := store.state("partner")
	if firstOpen == 0 || firstOpen > outageStart+6*time.Second {
		t.Fatalf("the fleet opened at %v, want within the outage", firstOpen)
	}
	if n := leaked.Load(); n != 0 {
		t.Fatalf("%d ordinary calls reached the partner after every environment knew the fleet was open", n)
	}
	// One probe per half-open epoch at most: transitions alternate
	// open → half-open → open during the outage.
	if p, e := probes.Load(), st.Epoch; p == 0 || uint64(p) > e/2+1 {
		t.Fatalf("%d probes in the outage for %d epochs", p, e)
	}
	if st.State != breaker.Closed || admittedAfter.Load() != envs*workers*100 {
		t.Fatalf("stored state = %+v, %d calls admitted in the last second: want closed everywhere", st, admittedAfter.Load())
	}
	t.Logf("opened at %v; %d probes; store: %d loads, %d reports, %d transitions (%d conflicts), %d probe requests (%d denied); final %+v",
		firstOpen, probes.Load(), store.loads.Load(), store.reports.Load(),
		store.transitions.Load(), store.conflicts.Load(), store.acquires.Load(), store.denials.Load(), st)
}

func TestSharedCanceledCallerMakesNoStoreWrite(t *testing.T) {
	store := newFakeStore()
	a, _ := tripFleet(t, store, t0, nil)
	_, _ = a.Allow(ctx, t0.Add(29*time.Second)) // fresh cache: open, 1 s to go
	writes := store.writes()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := a.Allow(cctx, t0.Add(30*time.Second)) // a probe would need the store
	if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen {
		t.Fatalf("%+v, want a half-open rejection", oe)
	}
	if store.writes() != writes || a.errs.count() != 0 {
		t.Fatalf("a canceled caller wrote to the store (%d writes) or reported a fault", store.writes()-writes)
	}
	// The next caller with a live context gets the probe.
	if p, err := a.Allow(ctx, t0.Add(30*time.Second)); err != nil || !p.Probe() {
		t.Fatalf("%v, want a probe", err)
	}
}

func TestSharedFleetOverrideIsAnnounced(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	calls(t, a.Breaker, t0, breaker.Success, 3)
	if err := store.SetOverride(ctx, "partner", breaker.ForcedOpen, t0.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A quiet fleet's state is read every 15 × CacheTTL.
	if !call(t, a.Breaker, t0.Add(14*time.Second), breaker.Success) {
		t.Fatal("the override was seen before the cached state expired")
	}
	_, err := a.Allow(ctx, t0.Add(15*time.Second))
	mustOpenError(t, err)
	if got := a.rec.last(t); got.from != breaker.Closed || got.to != breaker.Open || got.before.ConsecutiveSuccesses != 4 || got.origin != breaker.OriginFollowed {
		t.Fatalf("OnStateChange = %+v, want closed→open after 4 successes in a row, followed", got)
	}
	if !call(t, a.Breaker, t0.Add(20*time.Second), breaker.Success) {
		t.Fatal("rejected after the override lapsed")
	}
	if got := a.rec.last(t); got.from != breaker.Open || got.to != breaker.Closed {
		t.Fatalf("OnStateChange = %+v, want open→closed when the override lapsed", got)
	}
}

func TestSharedOwnProbeInFlightHint(t *testing.T) {
	store := newFakeStore()
	a, _ := tripFleet(t, store, t0, nil)
	at := t0.Add(30 * time.Second)
	if p, err := a.Allow(ctx, at); err != nil || !p.Probe() {
		t.Fatalf("%v, want a probe", err)
	}
	acquires := store.acquires.Load()
	_, err := a.Allow(ctx, at)
	if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen || oe.RetryAfter != defaultCacheTTL {
		t.Fatalf("%+v, want half-open with RetryAfter CacheTTL", oe)
	}
	if store.acquires.Load() != acquires {
		t.Fatal("asked the store for a second probe while this environment holds the only one")
	}
}

func TestSharedResetReloads(t *testing.T) {
	store := newFakeStore()
	a, _ := tripFleet(t, store, t0, nil)
	a.Override(breaker.ForcedClosed)
	loads := store.loads.Load()
	a.Reset()
	_, err := a.Allow(ctx, t0.Add(100*time.Millisecond))
	mustOpenError(t, err)
	if store.loads.Load() != loads+1 {
		t.Fatalf("loads = %d, want one more after Reset", store.loads.Load())
	}
}
