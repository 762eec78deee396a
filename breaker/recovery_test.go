package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/local"
)

// Regression tests for a shared breaker when its Store misbehaves in ways
// a fault does not cover: the stored state goes back (the item was lost),
// an environment comes back from degraded mode open, and a report is
// applied but answered with an error.

// swapStore is a breaker.Store over package local's store whose inner store
// can be replaced (DynamoDB Local restarted empty, or an operator deleting
// the state item), whose Reports can be made to fail before or after they
// are applied, and which records the counts really applied to each fleet
// window.
type swapStore struct {
	mu    sync.Mutex
	inner *local.BreakerStore
	// applied fleet counts by bucket number.
	appliedSucc, appliedFail map[int64]int64

	loads, reports, transitions, acquires atomic.Int64
	// loseReports is the number of Reports still to apply and then answer
	// with ErrStore; failReports the number still to fail without applying;
	// throttleReports the number still to refuse as throttled (ErrStore and
	// ErrThrottled, nothing applied).
	loseReports, failReports, throttleReports atomic.Int64
	// down makes every call fail before reaching the inner store.
	down atomic.Bool
}

func newSwapStore() *swapStore {
	return &swapStore{inner: local.NewBreakerStore(), appliedSucc: map[int64]int64{}, appliedFail: map[int64]int64{}}
}

var errSwapInjected = errors.New("injected fault")

func (s *swapStore) store() *local.BreakerStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner
}

// swap replaces the inner store by a fresh, empty one and returns it.
func (s *swapStore) swap() *local.BreakerStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inner = local.NewBreakerStore()
	return s.inner
}

func (s *swapStore) gate(op string) error {
	if s.down.Load() {
		return fmt.Errorf("%w: %s: %w", breaker.ErrStore, op, errSwapInjected)
	}
	return nil
}

// appliedTotal returns the counts Reports really applied, over every
// bucket.
func (s *swapStore) appliedTotal() (successes, failures int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.appliedSucc {
		successes += n
	}
	for _, n := range s.appliedFail {
		failures += n
	}
	return successes, failures
}

func (s *swapStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	s.loads.Add(1)
	if err := s.gate("load"); err != nil {
		return breaker.Snapshot{}, err
	}
	return s.store().Load(ctx, name)
}

func (s *swapStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	s.reports.Add(1)
	if err := s.gate("report"); err != nil {
		return breaker.Snapshot{}, err
	}
	if s.failReports.Load() > 0 {
		s.failReports.Add(-1)
		return breaker.Snapshot{}, fmt.Errorf("%w: report: %w", breaker.ErrStore, errSwapInjected)
	}
	if s.throttleReports.Load() > 0 {
		s.throttleReports.Add(-1)
		return breaker.Snapshot{}, fmt.Errorf("%w: report: %w: %w", breaker.ErrStore, breaker.ErrThrottled, errSwapInjected)
	}
	snap, err := s.store().Report(ctx, name, r)
	if err == nil {
		s.mu.Lock()
		s.appliedSucc[r.Bucket] += r.Successes
		s.appliedFail[r.Bucket] += r.Failures
		s.mu.Unlock()
	}
	if s.loseReports.Load() > 0 {
		s.loseReports.Add(-1)
		return breaker.Snapshot{}, fmt.Errorf("%w: report timed out after it was applied: %w", breaker.ErrStore, errSwapInjected)
	}
	return snap, err
}

func (s *swapStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	s.transitions.Add(1)
	if err := s.gate("transition"); err != nil {
		return breaker.Snapshot{}, err
	}
	return s.store().Transition(ctx, name, prevEpoch, next)
}

func (s *swapStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	s.acquires.Add(1)
	if err := s.gate("acquire-probe"); err != nil {
		return 0, err
	}
	return s.store().AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
}

func (s *swapStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	return s.store().SetOverride(ctx, name, o, until)
}

var _ breaker.Store = (*swapStore)(nil)

// stored returns the state in the current inner store.
func (s *swapStore) stored(t *testing.T) breaker.Snapshot {
	t.Helper()
	snap, err := s.store().Load(ctx, "partner")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// cycleFleet takes a lone environment through open (epoch 1), half-open
// (epoch 2) and closed (epoch 3) again, and returns the time of the close.
func cycleFleet(t *testing.T, store *swapStore, e env) time.Time {
	t.Helper()
	// The alarm a bucket before: an environment that learnt of the watch
	// by failing samples from the next bucket on.
	if !call(t, e.Breaker, t0.Add(-time.Second), breaker.Failure) {
		t.Fatal("the first failure was rejected")
	}
	for i := range 5 {
		if !call(t, e.Breaker, t0.Add(time.Duration(i)*2*time.Millisecond), breaker.Failure) {
			break // the fleet tripped
		}
	}
	if st := store.stored(t); st.State != breaker.Open || st.Epoch != 1 {
		t.Fatalf("stored %+v, want open at epoch 1", st)
	}
	at := t0.Add(2 * time.Second)
	p, err := e.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at +2s: %v, want a probe", err)
	}
	e.Done(ctx, at, p, breaker.Success)
	if st := store.stored(t); st.State != breaker.Closed || st.Epoch != 3 {
		t.Fatalf("stored %+v, want closed at epoch 3", st)
	}
	wantState(t, e.Breaker, at, breaker.Closed)
	return at
}

func resetSettings(s *breaker.Settings) {
	s.MinRequests = 2
	s.OpenDuration = time.Second
	s.ReportInterval = time.Millisecond
}

// TestSharedStateLostIsFollowed: the state item is lost (the store went
// back to epoch 0) while an environment holds epoch 3. Its trip conflicts
// with the older epoch; the conflict answer is the stored item as it
// stands, so the environment follows it and trips the fleet again, instead
// of reloading and conflicting forever.
func TestSharedStateLostIsFollowed(t *testing.T) {
	store := newSwapStore()
	a := newEnv(t, store, "a", resetSettings)
	at := cycleFleet(t, store, a)

	store.swap() // DynamoDB Local restarted empty, or c#partner deleted
	tr, loads := store.transitions.Load(), store.loads.Load()
	// Failures in three buckets: a, which learnt of the fleet's watch by
	// failing, samples from the next bucket on; its first report there
	// conflicts with the lost epoch and it follows the store; its next
	// failure starts a new watch, whose samples begin with the bucket
	// after.
	var tripped time.Time
buckets:
	for b := range 3 {
		for i := range 5 {
			now := at.Add(time.Duration(b)*time.Second + 10*time.Millisecond + time.Duration(i)*2*time.Millisecond)
			if !call(t, a.Breaker, now, breaker.Failure) {
				tripped = now // the fleet tripped
				break buckets
			}
		}
	}
	st := store.stored(t)
	if st.State != breaker.Open || st.Epoch != 1 || tripped.IsZero() {
		t.Fatalf("stored %+v after the failures, want open at epoch 1 (the environment must follow the lost state)", st)
	}
	wantState(t, a.Breaker, tripped, breaker.Open)
	if n, l := store.transitions.Load()-tr, store.loads.Load()-loads; n > 2 || l > 1 {
		t.Fatalf("%d transitions and %d loads to trip after the reset, want at most 2 (one conflict, one trip) and 1", n, l)
	}
	if a.errs.count() != 0 {
		op, err := a.errs.last(t)
		t.Fatalf("a conflict was reported as a store fault: %s: %v", op, err)
	}
}

// TestSharedLowerEpochReadTwiceIsAdopted: a Load that shows a lower epoch
// than the one held may be an eventually consistent read and is ignored
// once; the same on the next Load is the store's state, and is adopted.
func TestSharedLowerEpochReadTwiceIsAdopted(t *testing.T) {
	store := newSwapStore()
	a := newEnv(t, store, "a", resetSettings)
	at := cycleFleet(t, store, a)

	// The store is lost and another environment trips the new one: epoch
	// 1, open, below the epoch 3 that a holds.
	fresh := store.swap()
	until := at.Add(time.Minute)
	if _, err := fresh.Transition(ctx, "partner", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: until}); err != nil {
		t.Fatal(err)
	}
	loads := store.loads.Load()
	// The first Load with the lower epoch (CacheTTL after the close) is
	// not trusted: a keeps its state.
	if !call(t, a.Breaker, at.Add(time.Second), breaker.Success) {
		t.Fatal("a single read of a lower epoch was adopted at once")
	}
	if store.loads.Load() != loads+1 {
		t.Fatalf("loads = %d, want %d", store.loads.Load(), loads+1)
	}
	// The second one is.
	_, err := a.Allow(ctx, at.Add(2*time.Second))
	if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 58*time.Second {
		t.Fatalf("after a second read of the lower epoch: %+v, want the stored open state (RetryAfter 58s)", oe)
	}
	// From then on the environment follows the store as usual: the probe
	// moves it from epoch 1.
	p, err := a.Allow(ctx, until)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at OpenUntil: %v, want a probe", err)
	}
	a.Done(ctx, until, p, breaker.Success)
	if st := store.stored(t); st.State != breaker.Closed || st.Epoch != 3 {
		t.Fatalf("stored %+v, want closed at epoch 3", st)
	}
}

// TestSharedLowerEpochReadOnceIsIgnored: one lower read between two reads
// of the epoch held changes nothing.
func TestSharedLowerEpochReadOnceIsIgnored(t *testing.T) {
	store := newFakeStore()
	_, a := tripFleet(t, store, t0, nil) // a tripped it: epoch 1, open until t0+30s
	store.mu.Lock()
	held := store.states["partner"]
	store.states["partner"] = breaker.Snapshot{} // a stale replica answers once
	store.mu.Unlock()
	_, err := a.Allow(ctx, t0.Add(time.Second))
	if oe := mustOpenError(t, err); oe.State != breaker.Open {
		t.Fatalf("%+v, want still open", oe)
	}
	store.mu.Lock()
	store.states["partner"] = held
	store.mu.Unlock()
	_, err = a.Allow(ctx, t0.Add(2*time.Second))
	mustOpenError(t, err)
	store.mu.Lock()
	store.states["partner"] = breaker.Snapshot{}
	store.mu.Unlock()
	_, err = a.Allow(ctx, t0.Add(3*time.Second)) // not two lower reads in a row
	if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 27*time.Second {
		t.Fatalf("%+v, want still open with RetryAfter 27s", oe)
	}
}

// TestSharedStateLostWhileOpen: the state item is deleted while the fleet
// is open. The environments follow the store back to epoch 0, but one that
// is open does not close on that: it stays open until its own probe
// succeeds, and then trips the fleet again from epoch 0 when needed.
func TestSharedStateLostWhileOpen(t *testing.T) {
	store := newFakeStore()
	_, b := tripFleet(t, store, t0, nil) // b tripped it: epoch 1, open until t0+30s
	store.mu.Lock()
	delete(store.states, "partner") // an operator's "repair"
	store.mu.Unlock()
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} { // the second lower read is followed
		_, err := b.Allow(ctx, t0.Add(d))
		if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 30*time.Second-d {
			t.Fatalf("at +%v: %+v, want still open with RetryAfter %v", d, oe, 30*time.Second-d)
		}
	}
	tr, acq := store.transitions.Load(), store.acquires.Load()
	at := t0.Add(30 * time.Second)
	p, err := b.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at +30s: %v, want its own probe", err)
	}
	b.Done(ctx, at, p, breaker.Success)
	wantState(t, b.Breaker, at, breaker.Closed)
	if store.transitions.Load() != tr || store.acquires.Load() != acq {
		t.Fatal("the local probe wrote to the fleet state")
	}
	// Back in the fleet at epoch 0: a new trip is decided on it and
	// succeeds at once (no conflict with the epoch it knew before).
	c := newEnv(t, store, "c", nil)
	at = at.Add(time.Second)
	conflicts := store.conflicts.Load()
	calls(t, c.Breaker, at.Add(-time.Second), breaker.Failure, 1) // the alarm
	calls(t, c.Breaker, at, breaker.Failure, 20)                  // sampled from the next bucket on
	flushAt(t, c.Breaker, at.Add(time.Second))
	if st := store.state("partner"); st.State != breaker.Open || st.Epoch != 1 {
		t.Fatalf("stored %+v, want open at epoch 1", st)
	}
	if store.conflicts.Load() != conflicts {
		t.Fatal("the trip after the reset conflicted")
	}
	// b, closed on a quiet state, learns it at its next failure.
	call(t, b.Breaker, at.Add(2*time.Second), breaker.Failure)
	wantState(t, b.Breaker, at.Add(2*time.Second), breaker.Open)
}

// TestSharedDegradedOpenStaysOpenUntilItsProbe: an environment that
// tripped on its local state machine while the store was away stays open
// when the store comes back and says the fleet is closed; it probes on its
// own when its open duration ends, and only a successful probe closes it.
// The fleet state is never written by it alone.
func TestSharedDegradedOpenStaysOpenUntilItsProbe(t *testing.T) {
	store := newSwapStore()
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinRequests = 5 })
	calls(t, a.Breaker, t0, breaker.Success, 1) // the load succeeds: fleet closed, epoch 0
	store.down.Store(true)
	calls(t, a.Breaker, t0, breaker.Failure, 4) // 4 of 5 failed: tripped locally
	wantState(t, a.Breaker, t0, breaker.Open)
	if op, err := a.errs.last(t); op != "report" || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("OnStoreError(%q, %v)", op, err)
	}

	store.down.Store(false)
	loads := store.loads.Load()
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 29 * time.Second} {
		_, err := a.Allow(ctx, t0.Add(d))
		if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 30*time.Second-d {
			t.Fatalf("at +%v with the store back: %+v, want open with RetryAfter %v", d, oe, 30*time.Second-d)
		}
	}
	if store.loads.Load() != loads+3 {
		t.Fatalf("loads = %d, want %d: the fleet state is still read every CacheTTL", store.loads.Load(), loads+3)
	}

	// Its own probe, made locally: no fleet transition, no probe slot.
	at := t0.Add(30 * time.Second)
	tr, acq := store.transitions.Load(), store.acquires.Load()
	p, err := a.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at +30s: %v, want a (local) probe", err)
	}
	a.Done(ctx, at, p, breaker.Failure) // still failing: re-opened, 60 s
	_, err = a.Allow(ctx, at.Add(time.Second))
	if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 59*time.Second {
		t.Fatalf("after the failed probe: %+v, want re-opened locally with RetryAfter 59s", oe)
	}
	at = at.Add(time.Minute)
	p, err = a.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at +90s: %v, want a (local) probe", err)
	}
	a.Done(ctx, at, p, breaker.Success)
	wantState(t, a.Breaker, at, breaker.Closed)
	if store.transitions.Load() != tr || store.acquires.Load() != acq {
		t.Fatalf("the environment wrote the fleet state (%d transitions, %d probe slots)", store.transitions.Load()-tr, store.acquires.Load()-acq)
	}
	if st := store.stored(t); st.State != breaker.Closed || st.Epoch != 0 {
		t.Fatalf("stored %+v, want the fleet untouched", st)
	}
	if n := a.errs.count(); n != 1 {
		t.Fatalf("%d store faults reported, want 1", n)
	}
	for _, tr := range a.rec.all() {
		if tr.from != breaker.Closed && tr.to == breaker.Closed && tr.before.Successes == 0 {
			t.Fatalf("closed without a successful probe: %+v in %+v", tr, a.rec.all())
		}
	}

	// Back in the fleet: a failure starts the fleet's watch, the calls
	// of the next bucket are sampled and trip the fleet.
	calls(t, a.Breaker, at, breaker.Failure, 1) // the alarm
	at = at.Add(time.Second)
	calls(t, a.Breaker, at, breaker.Failure, 5) // MinRequests (5) samples
	flushAt(t, a.Breaker, at.Add(time.Second))
	if st := store.stored(t); st.State != breaker.Open || st.Epoch != 1 {
		t.Fatalf("stored %+v, want the fleet tripped by the sampled failures", st)
	}
}

// TestSharedDegradedOpenFollowsTheFleetWhenItOpens: an environment held
// open on its local state machine follows the fleet state as soon as the
// fleet opens, or an operator overrides it.
func TestSharedDegradedOpenFollowsTheFleetWhenItOpens(t *testing.T) {
	t.Run("fleet opens", func(t *testing.T) {
		store := newSwapStore()
		settings := func(s *breaker.Settings) { s.MinRequests = 5; s.OpenDuration = 10 * time.Second }
		a := newEnv(t, store, "a", settings)
		calls(t, a.Breaker, t0, breaker.Success, 1)
		store.down.Store(true)
		calls(t, a.Breaker, t0, breaker.Failure, 4) // open locally until t0+10s
		store.down.Store(false)
		_, err := a.Allow(ctx, t0.Add(time.Second)) // held open
		mustOpenError(t, err)

		// Another environment trips the fleet at t0+3s: open until t0+13s.
		b := newEnv(t, store, "b", settings)
		at := t0.Add(2 * time.Second)
		calls(t, b.Breaker, at.Add(-time.Second), breaker.Failure, 1) // the alarm
		calls(t, b.Breaker, at, breaker.Failure, 5)                   // MinRequests (5) samples, from the next bucket on
		flushAt(t, b.Breaker, at.Add(time.Second))
		if st := store.stored(t); st.State != breaker.Open || st.Epoch != 1 {
			t.Fatalf("stored %+v, want the fleet open", st)
		}
		_, err = a.Allow(ctx, t0.Add(3*time.Second))
		if oe := mustOpenError(t, err); oe.RetryAfter != 10*time.Second {
			t.Fatalf("%+v, want the fleet's open state (RetryAfter 10s)", oe)
		}
		// At t0+10s its own open duration would have ended: the fleet's
		// decides now, and it has not.
		_, err = a.Allow(ctx, t0.Add(10*time.Second))
		if oe := mustOpenError(t, err); oe.State != breaker.Open || oe.RetryAfter != 3*time.Second {
			t.Fatalf("%+v, want open with RetryAfter 3s", oe)
		}
		// The fleet's probe.
		p, err := a.Allow(ctx, t0.Add(13*time.Second))
		if err != nil || !p.Probe() {
			t.Fatalf("%v, want the fleet probe", err)
		}
		a.Done(ctx, t0.Add(13*time.Second), p, breaker.Success)
		if st := store.stored(t); st.State != breaker.Closed || st.Epoch != 3 {
			t.Fatalf("stored %+v, want closed at epoch 3", st)
		}
	})
	t.Run("operator override", func(t *testing.T) {
		store := newSwapStore()
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinRequests = 5 })
		calls(t, a.Breaker, t0, breaker.Success, 1)
		store.down.Store(true)
		calls(t, a.Breaker, t0, breaker.Failure, 4)
		store.down.Store(false)
		if err := store.SetOverride(ctx, "partner", breaker.ForcedClosed, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if !call(t, a.Breaker, t0.Add(time.Second), breaker.Success) {
			t.Fatal("the operator's force-closed did not take over")
		}
		if err := store.SetOverride(ctx, "partner", breaker.NoOverride, time.Time{}); err != nil {
			t.Fatal(err)
		}
		// The override is gone: the fleet state (closed) decides.
		if !call(t, a.Breaker, t0.Add(2*time.Second), breaker.Success) {
			t.Fatal("rejected after the operator cleared the override")
		}
		wantState(t, a.Breaker, t0.Add(2*time.Second), breaker.Closed)
	})
}

// TestSharedLostReportAnswerIsNotCountedTwice: sampled counts leave this
// environment when their Report is decided, whatever its fate: a Report
// applied but answered with an error is not sent again when the
// environment rejoins the fleet, and one that failed before it was
// applied is lost, never sent twice.
func TestSharedLostReportAnswerIsNotCountedTwice(t *testing.T) {
	settings := func(s *breaker.Settings) {
		s.MinRequests = 1000
		s.CacheTTL = 100 * time.Millisecond
		s.ReportInterval = time.Millisecond
	}
	// watching: a failure starts the fleet's watch (the alarm, a report
	// with no counts), so that what follows is sampled.
	watching := func(t *testing.T, a env) {
		t.Helper()
		calls(t, a.Breaker, t0.Add(-time.Second), breaker.Failure, 1)
		wantState(t, a.Breaker, t0, breaker.Closed)
	}
	for _, c := range []struct {
		name            string
		lose, fail      int64
		wantSucc, wantF int64
	}{
		// The first sampled call (a success) is reported at once and meets
		// the fault; the two calls after it, made on the local state
		// machine, are not sampled; back in the fleet, 5 successes and a
		// failure are.
		{"applied, answer lost", 1, 0, 6, 1},
		{"not applied: lost, not double-counted", 0, 1, 5, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newSwapStore()
			a := newEnv(t, store, "a", settings)
			watching(t, a)
			store.loseReports.Store(c.lose)
			store.failReports.Store(c.fail)
			calls(t, a.Breaker, t0, breaker.Success, 3)
			calls(t, a.Breaker, t0, breaker.Failure, 1)
			if op, _ := a.errs.last(t); op != "report" {
				t.Fatalf("op = %q, want report", op)
			}
			at := t0.Add(200 * time.Millisecond) // the store is read again: back in the fleet
			calls(t, a.Breaker, at, breaker.Success, 5)
			calls(t, a.Breaker, at.Add(time.Millisecond), breaker.Failure, 1)
			if err := a.Flush(ctx, at.Add(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			// Every call was sampled (Rand is 0) and counts for
			// initialSampling calls while no bucket is complete.
			succ, fail := store.appliedTotal()
			if succ != c.wantSucc*4 || fail != c.wantF*4 {
				t.Fatalf("fleet counts hold %d successes, %d failures; want %d and %d (×4)", succ, fail, c.wantSucc, c.wantF)
			}
		})
	}
}

// TestSharedThrottledReportKeepsItsCounts: a Report the store refused as
// throttled applied nothing, so its counts go with the next report, the
// environment stays on the fleet (the calls after it are sampled, as
// they are not on the local state machine a fault leads to), tries the
// store again a CacheTTL later, and samples fewer calls from then on.
func TestSharedThrottledReportKeepsItsCounts(t *testing.T) {
	store := newSwapStore()
	a := newEnv(t, store, "a", func(s *breaker.Settings) {
		s.MinRequests = 1000
		s.CacheTTL = 100 * time.Millisecond
		s.ReportInterval = time.Millisecond
	})
	calls(t, a.Breaker, t0.Add(-time.Second), breaker.Failure, 1) // the alarm: the fleet watches
	wantState(t, a.Breaker, t0, breaker.Closed)
	store.throttleReports.Store(1)
	calls(t, a.Breaker, t0, breaker.Success, 3)
	calls(t, a.Breaker, t0, breaker.Failure, 1)
	if op, err := a.errs.last(t); op != "report" || !errors.Is(err, breaker.ErrThrottled) {
		t.Fatalf("OnStoreError got %q, %v; want the throttled report", op, err)
	}
	// The store is tried again a CacheTTL later, not sooner.
	if err := a.Flush(ctx, t0.Add(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n := store.reports.Load(); n != 2 { // the alarm, the throttled report
		t.Fatalf("%d Reports before a CacheTTL had passed since the throttled one, want 2", n)
	}
	if err := a.Flush(ctx, t0.Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// Every call was sampled (Rand is 0): the first, refused, at weight
	// initialSampling (4), the three after it at 4 × thinGrowth (8).
	if succ, fail := store.appliedTotal(); succ != 4+2*32 || fail != 32 {
		t.Fatalf("fleet counts hold %d successes, %d failures; want %d and %d", succ, fail, 4+2*32, 32)
	}
}
