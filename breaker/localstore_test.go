package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/memstore"
)

// The shared-mode scenarios again, against the in-memory Store behind
// package local's (the one the simulator and the examples use), whose
// answers are those of the DynamoDB store.

func TestLocalStoreFleetTripsAndRecovers(t *testing.T) {
	store := memstore.NewBreakerStore(memstore.Options{})
	a := newEnv(t, store, "a", nil)
	b := newEnv(t, store, "b", nil)

	// a's first failure starts the fleet's watch; b, failing too, reads it
	// and samples its calls; a's 29 sampled failures of the next bucket
	// (an environment that learnt of the watch by failing samples from
	// there), the first reported at once and the rest a second later, trip
	// the fleet.
	calls(t, a.Breaker, t0.Add(-2*time.Second), breaker.Failure, 1)
	calls(t, a.Breaker, t0.Add(-time.Second), breaker.Failure, 29)
	calls(t, b.Breaker, t0.Add(-time.Second), breaker.Failure, 1)
	wantState(t, a.Breaker, t0.Add(-time.Second), breaker.Closed) // one sample reported, under MinRequests
	flushAt(t, a.Breaker, t0)
	wantState(t, a.Breaker, t0, breaker.Open)

	snap, err := store.Load(ctx, "partner")
	if err != nil || snap.State != breaker.Open || snap.Epoch != 1 || !snap.OpenUntil.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("stored %+v, %v: want open at epoch 1 until t0+30s", snap, err)
	}
	// a fresh environment sees it at once, b (watching) within CacheTTL.
	c := newEnv(t, store, "c", nil)
	_, err = c.Allow(ctx, t0.Add(500*time.Millisecond))
	if oe := mustOpenError(t, err); oe.RetryAfter != 29500*time.Millisecond {
		t.Fatalf("fresh environment: %+v", oe)
	}
	_, err = b.Allow(ctx, t0)
	mustOpenError(t, err)

	// Exactly one probe among many concurrent callers in three environments.
	at := t0.Add(30 * time.Second)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		probes []func()
	)
	for _, e := range []env{a, b, c} {
		for range 4 {
			wg.Go(func() {
				p, err := e.Allow(ctx, at)
				if err != nil {
					mustOpenError(t, err)
					return
				}
				mu.Lock()
				probes = append(probes, func() { e.Done(ctx, at.Add(time.Millisecond), p, breaker.Success) })
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if len(probes) != 1 {
		t.Fatalf("%d probes fleet-wide, want 1", len(probes))
	}
	probes[0]() // it succeeds: the fleet closes
	snap, _ = store.Load(ctx, "partner")
	if snap.State != breaker.Closed || snap.Epoch != 3 {
		t.Fatalf("stored %+v, want closed at epoch 3", snap)
	}
	for i, e := range []env{a, b, c} {
		if !call(t, e.Breaker, at.Add(time.Second+2*time.Millisecond), breaker.Success) {
			t.Fatalf("environment %d still rejects CacheTTL after the close", i)
		}
	}
}

func TestLocalStoreLostProbeLeaseLapses(t *testing.T) {
	store := memstore.NewBreakerStore(memstore.Options{})
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.ProbeLease = 3 * time.Second })
	b := newEnv(t, store, "b", func(s *breaker.Settings) { s.ProbeLease = 3 * time.Second })
	calls(t, b.Breaker, t0, breaker.Success, 1)
	calls(t, a.Breaker, t0.Add(-time.Second), breaker.Failure, 1) // the alarm
	calls(t, a.Breaker, t0, breaker.Failure, 20)                  // sampled from this bucket on
	flushAt(t, a.Breaker, t0.Add(time.Second))                    // a alone trips
	at := t0.Add(31 * time.Second)
	if p, err := a.Allow(ctx, at); err != nil || !p.Probe() {
		t.Fatalf("a: %v, want a probe", err) // then a's environment is lost
	}
	// The epoch's probes are leased during its first 2 × CacheTTL, for
	// ProbeLease: once every lease has lapsed, the next environment moves
	// the fleet to a new half-open epoch and probes.
	rearm := at.Add(2*defaultCacheTTL + 3*time.Second)
	for _, d := range []time.Duration{time.Second, 3*time.Second + time.Millisecond, rearm.Sub(at) - time.Millisecond} {
		_, err := b.Allow(ctx, at.Add(d))
		mustOpenError(t, err)
	}
	p, err := b.Allow(ctx, rearm)
	if err != nil || !p.Probe() {
		t.Fatalf("b after the leases lapsed: %v, want a probe", err)
	}
	if snap, _ := store.Load(ctx, "partner"); snap.State != breaker.HalfOpen || snap.Epoch != 3 {
		t.Fatalf("stored %+v, want a new half-open epoch (3)", snap)
	}
	b.Done(ctx, rearm.Add(time.Millisecond), p, breaker.Failure)
	snap, _ := store.Load(ctx, "partner")
	if snap.State != breaker.Open || snap.Reopens != 1 || !snap.OpenUntil.Equal(rearm.Add(time.Millisecond+time.Minute)) {
		t.Fatalf("stored %+v, want re-opened for 60s", snap)
	}
}

func TestLocalStoreHealthyPathCost(t *testing.T) {
	store := memstore.NewBreakerStore(memstore.Options{})
	a := newEnv(t, store, "a", nil)
	for i := range 10000 {
		if !call(t, a.Breaker, t0.Add(time.Duration(i)*time.Millisecond), breaker.Success) {
			t.Fatal("rejected")
		}
	}
	if r, w := store.Reads(), store.Writes(); r > 10 || w != 0 {
		t.Fatalf("10000 healthy calls over 10s cost %d reads and %d writes; want ≤ 10 and 0", r, w)
	}
}

func TestLocalStoreFaultsFallBackToLocal(t *testing.T) {
	var down atomic.Bool
	store := memstore.NewBreakerStore(memstore.Options{Fault: func(ctx context.Context, op string) error {
		if down.Load() {
			return errors.New("throttled")
		}
		return nil
	}})
	a := newEnv(t, store, "a", nil)
	calls(t, a.Breaker, t0, breaker.Success, 1)
	down.Store(true)
	calls(t, a.Breaker, t0, breaker.Failure, 18) // the first report fails: local from now on
	op, err := a.errs.last(t)
	if op != "report" || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("OnStoreError(%q, %v)", op, err)
	}
	wantState(t, a.Breaker, t0, breaker.Closed)
	calls(t, a.Breaker, t0, breaker.Failure, 1) // 20 calls, 19 failed: this environment trips on its own
	wantState(t, a.Breaker, t0, breaker.Open)
	down.Store(false)
	// The fleet is closed, but this environment opened on its own: it
	// stays open until its own probe succeeds.
	reads, writes := store.Reads(), store.Writes()
	_, err = a.Allow(ctx, t0.Add(time.Second))
	if oe := mustOpenError(t, err); oe.State != breaker.Open {
		t.Fatalf("after the store recovered: %+v, want still open", oe)
	}
	if store.Reads() != reads+1 {
		t.Fatalf("reads = %d, want %d: the fleet state is read again", store.Reads(), reads+1)
	}
	at := t0.Add(30 * time.Second)
	p, err := a.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("Allow at +30s: %v, want this environment's own probe", err)
	}
	a.Done(ctx, at, p, breaker.Success)
	if !call(t, a.Breaker, at, breaker.Success) {
		t.Fatal("rejected after its own probe succeeded")
	}
	if store.Writes() != writes {
		t.Fatalf("%d writes: the local probe and close were written to the fleet state", store.Writes()-writes)
	}
	if snap, err := store.Load(ctx, "partner"); err != nil || snap.State != breaker.Closed || snap.Epoch != 0 {
		t.Fatalf("stored %+v, %v: want the fleet state untouched", snap, err)
	}
}

func TestLocalStoreLatencyIsCutByStoreTimeout(t *testing.T) {
	store := memstore.NewBreakerStore(memstore.Options{Fault: func(ctx context.Context, op string) error {
		<-ctx.Done() // a store that hangs until the caller gives up
		return ctx.Err()
	}})
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.StoreTimeout = 10 * time.Millisecond })
	if !call(t, a.Breaker, t0, breaker.Success) {
		t.Fatal("rejected")
	}
	op, err := a.errs.last(t)
	if op != "load" || !errors.Is(err, breaker.ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("OnStoreError(%q, %v)", op, err)
	}
}

func TestLocalStoreOperatorOverride(t *testing.T) {
	store := memstore.NewBreakerStore(memstore.Options{})
	a := newEnv(t, store, "a", nil)
	if err := store.SetOverride(ctx, "partner", breaker.ForcedOpen, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Allow(ctx, t0)
	if oe := mustOpenError(t, err); !oe.Forced || oe.RetryAfter != 5*time.Second {
		t.Fatalf("%+v", oe)
	}
	if !call(t, a.Breaker, t0.Add(5*time.Second), breaker.Success) {
		t.Fatal("the override did not lapse")
	}
}
