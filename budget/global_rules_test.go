package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layers"
)

// The rules of issue 11, one test each: the jittered contact schedule, one
// write per refusal, the one-window carry, engagement (TestGlobalFlush,
// TestGlobalHealthyPathMakesNoStoreCalls), throttling answered as a refusal,
// and failing closed by default.

// refusal asks g for a retry at now and returns the refusal, failing t on
// a grant or an answer that is not an *ExhaustedError.
func refusal(t *testing.T, g *budget.Global, now time.Time) *budget.ExhaustedError {
	t.Helper()
	rel, err := g.AcquireRetry(context.Background(), now, budget.Transient)
	var ex *budget.ExhaustedError
	if rel != nil || !errors.As(err, &ex) {
		t.Fatalf("AcquireRetry at %v: %v (release %v), want an *ExhaustedError", now.Sub(t0), err, rel != nil)
	}
	return ex
}

// TestGlobalContactScheduleIsJittered: after every store call the next
// contact is drawn at now + D × U(0.5, 1.5) with the configured Rand, and
// the refusal a contact answers names it in RetryAfter. Over many contacts
// the intervals cover that range evenly, and two environments seeded apart
// never contact the store at the same instant.
func TestGlobalContactScheduleIsJittered(t *testing.T) {
	const d = 10 * time.Second
	const n = 300
	s := newRecStore(newMapStore())
	instants := map[time.Time]int{}
	for env := range uint64(2) {
		g := newGlobal(t, s, budget.GlobalConfig{Floor: -1, Window: time.Hour, DepositInterval: d,
			Rand: rand.New(rand.NewPCG(env, 7)).Float64})
		var deciles [10]int
		now := t0.Add(time.Duration(env) * 1234 * time.Millisecond)
		for i := range n {
			before := s.NumCalls()
			ex := refusal(t, g, now)
			if s.NumCalls() != before+1 {
				t.Fatalf("env %d, contact %d: %d store calls, want 1", env, i, s.NumCalls()-before)
			}
			instants[now]++
			iv := ex.RetryAfter
			if iv < d/2 || iv >= 3*d/2 {
				t.Fatalf("env %d, contact %d: next contact in %v, outside [D/2, 3D/2)", env, i, iv)
			}
			deciles[(iv-d/2)*10/d]++
			// Just before the contact is due: refused from memory.
			if ex := refusal(t, g, now.Add(iv-time.Millisecond)); ex.RetryAfter != time.Millisecond || s.NumCalls() != before+1 {
				t.Fatalf("env %d: a millisecond before the contact: RetryAfter %v, %d calls", env, ex.RetryAfter, s.NumCalls()-before)
			}
			now = now.Add(iv)
		}
		for i, c := range deciles {
			if c < n/10/3 || c > n/10*2 {
				t.Errorf("env %d: %d of %d intervals in decile %d of [D/2, 3D/2): %v", env, c, n, i, deciles)
			}
		}
		t.Logf("env %d: intervals per decile of [D/2, 3D/2): %v", env, deciles)
	}
	for at, c := range instants {
		if c > 1 {
			t.Errorf("%d environments contacted the store at %v", c, at.Sub(t0))
		}
	}
}

// TestGlobalOneWritePerRefusal: a refused update is the refusal's only
// write. Its deposit is not banked with a second write but kept for the
// next contact, which carries it; and a lease sized from a view that has
// gone stale is refused in one write, not asked again at a smaller size.
func TestGlobalOneWritePerRefusal(t *testing.T) {
	s := newRecStore(newMapStore())
	a := newGlobal(t, s, budget.GlobalConfig{Floor: -1, Rand: constRand(0.5)})
	record(a, t0, 5)
	refusal(t, a, t0)
	if calls := s.Calls(); len(calls) != 1 || calls[0].Update.Deposit != 5*unit/10 || !errors.Is(calls[0].Err, budget.ErrInsufficient) {
		t.Fatalf("calls %+v, want one refused update", calls)
	}
	if err := a.Flush(context.Background(), t0.Add(2500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if c := s.Calls()[1]; c.Update.Deposit != 5*unit/10 || c.Update.Take != 0 || c.Err != nil {
		t.Fatalf("the next contact %+v, want the kept deposit of 5 requests", c)
	}
	if st := a.Stats(); st.Refused != 1 || st.RefusalWrites != 1 || st.ReportedRequests != 5 || st.Deposits != 1 {
		t.Errorf("stats %+v", st)
	}

	s2 := newRecStore(newMapStore())
	cfg := budget.GlobalConfig{Floor: -1, LeaseSize: 4, Rand: constRand(0.5)}
	x, y := newGlobal(t, s2, cfg), newGlobal(t, s2, cfg)
	record(x, t0, 100) // 10 retries
	for range 3 {      // leases of 1 and 2: 7 retries left, as x last saw
		if _, ok := acquire(t, x, t0); !ok {
			t.Fatal("refused")
		}
	}
	for range 7 { // y drains them: leases of 1, 2 and 4
		if _, ok := acquire(t, y, t0); !ok {
			t.Fatal("refused")
		}
	}
	before := s2.NumCalls()
	refusal(t, x, t0)
	if n := s2.NumCalls() - before; n != 1 {
		t.Fatalf("a stale lease of 4 cost %d writes, want 1", n)
	}
	if c := s2.Calls()[before]; c.Update.Take != 4*unit || !errors.Is(c.Err, budget.ErrInsufficient) {
		t.Fatalf("call %+v, want a refused lease of 4", c)
	}
	if st := x.Stats(); st.RefusalWrites > st.Refused {
		t.Errorf("x: %d writes for %d refusals", st.RefusalWrites, st.Refused)
	}
}

// TestGlobalCarriesOneWindow: requests an engaged environment had not
// reported when a window ended go with its next write if that write is in
// the next window; later they are dropped; and an environment that was not
// engaged in the previous window carries nothing from it.
func TestGlobalCarriesOneWindow(t *testing.T) {
	ctx := context.Background()
	lastDeposit := func(t *testing.T, s *recStore, window time.Time, requests int64) {
		t.Helper()
		c := s.Calls()[len(s.Calls())-1]
		if !c.Key.Window.Equal(window) || c.Update.Deposit != requests*unit/10 {
			t.Fatalf("last call %+v, want a deposit of %d requests into window %v", c, requests, window.Sub(t0))
		}
	}
	t.Run("carried", func(t *testing.T) {
		s := newRecStore(newMapStore())
		g := newGlobal(t, s, budget.GlobalConfig{Floor: 1, Rand: constRand(0.5)})
		acquire(t, g, t0.Add(time.Second)) // engaged in window 0; takes the floor
		record(g, t0.Add(9*time.Second), 7)
		record(g, t0.Add(12*time.Second), 3)
		// The empty shard of window 0 is all this environment knows, but
		// its own 7 + 3 requests fund a retry.
		if _, ok := acquire(t, g, t0.Add(12*time.Second)); !ok {
			t.Fatal("refused a retry funded by its own requests")
		}
		lastDeposit(t, s, t0.Add(testWindow), 10)
		if st := g.Stats(); st.CarriedRequests != 7 || st.ReportedRequests != 10 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("dropped after one window", func(t *testing.T) {
		s := newRecStore(newMapStore())
		g := newGlobal(t, s, budget.GlobalConfig{Floor: 1, Rand: constRand(0.5)})
		acquire(t, g, t0.Add(time.Second))
		record(g, t0.Add(9*time.Second), 7) // never written in window 1
		record(g, t0.Add(21*time.Second), 3)
		if err := g.Flush(ctx, t0.Add(21*time.Second)); err != nil || s.NumCalls() != 1 {
			t.Fatalf("Flush in window 2 without an ask since window 0: %v, %d calls", err, s.NumCalls())
		}
		acquire(t, g, t0.Add(21*time.Second))
		lastDeposit(t, s, t0.Add(2*testWindow), 3)
		if st := g.Stats(); st.CarriedRequests != 0 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("not engaged", func(t *testing.T) {
		s := newRecStore(newMapStore())
		g := newGlobal(t, s, budget.GlobalConfig{Floor: 1, Rand: constRand(0.5)})
		record(g, t0.Add(5*time.Second), 30) // healthy window 0
		record(g, t0.Add(11*time.Second), 2)
		acquire(t, g, t0.Add(11*time.Second))
		lastDeposit(t, s, t0.Add(testWindow), 2)
	})
	t.Run("kept after a refusal", func(t *testing.T) {
		s := newRecStore(newMapStore())
		g := newGlobal(t, s, budget.GlobalConfig{Floor: -1, Rand: constRand(0.5)})
		record(g, t0.Add(9*time.Second), 5)
		refusal(t, g, t0.Add(9*time.Second))                                 // the 5 stay pending
		if err := g.Flush(ctx, t0.Add(11500*time.Millisecond)); err != nil { // the next contact, in window 1
			t.Fatal(err)
		}
		lastDeposit(t, s, t0.Add(testWindow), 5)
		if st := g.Stats(); st.CarriedRequests != 5 {
			t.Errorf("stats %+v", st)
		}
	})
}

// throttlingStore answers every call with a throttle while on, as the
// dynamo store answers ProvisionedThroughputExceededException: nothing is
// applied.
type throttlingStore struct {
	budget.Store
	mu sync.Mutex
	on bool
}

func (s *throttlingStore) set(on bool) { s.mu.Lock(); s.on = on; s.mu.Unlock() }

func (s *throttlingStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	s.mu.Lock()
	on := s.on
	s.mu.Unlock()
	if on {
		return 0, fmt.Errorf("budget %v: ProvisionedThroughputExceededException: %w", k, budget.ErrThrottled)
	}
	return s.Store.Apply(ctx, k, u)
}

// TestGlobalThrottleIsARefusal: a throttled store call applied nothing. It
// is answered as a refusal whatever FailOpen says (abstaining would let
// every local layer retry), reported as a store fault, and followed by no
// write before the next contact, even one the environment's own requests
// would fund; the requests stay pending and go with that contact. A
// throttled Flush keeps its requests too. No fault cooldown starts.
func TestGlobalThrottleIsARefusal(t *testing.T) {
	ctx := context.Background()
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			ts := &throttlingStore{Store: newMapStore()}
			s := newRecStore(ts)
			g := newGlobal(t, s, budget.GlobalConfig{Floor: -1, FailOpen: failOpen, Rand: constRand(0.5)})
			record(g, t0, 20) // 2 retries
			ts.set(true)
			var reported []error
			rel, err := layers.Acquire(ctx, t0, budget.Transient, []budget.Budget{g}, func(_ int, err error) { reported = append(reported, err) })
			var ex *budget.ExhaustedError
			if rel != nil || !errors.As(err, &ex) || !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, budget.ErrUnavailable) {
				t.Fatalf("throttled: %v, want a refusal carrying the throttle", err)
			}
			if ex.RetryAfter != 2500*time.Millisecond || len(reported) != 1 || !errors.Is(reported[0], budget.ErrThrottled) {
				t.Fatalf("RetryAfter %v, reported %v; want the next contact (2.5 s) and one report", ex.RetryAfter, reported)
			}
			ts.set(false)
			if ex := refusal(t, g, t0.Add(time.Second)); ex.RetryAfter != 1500*time.Millisecond || s.NumCalls() != 1 {
				t.Fatalf("before the next contact: RetryAfter %v, %d calls; want no write", ex.RetryAfter, s.NumCalls())
			}
			if _, ok := acquire(t, g, t0.Add(2500*time.Millisecond)); !ok {
				t.Fatal("the next contact did not deposit the kept requests")
			}
			if c := s.Calls()[1]; c.Update.Deposit != 2*unit || c.Update.Take != unit {
				t.Fatalf("the next contact %+v, want the 20 kept requests deposited, one retry taken", c)
			}

			record(g, t0.Add(5*time.Second), 10)
			ts.set(true)
			if err := g.Flush(ctx, t0.Add(5*time.Second)); !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, budget.ErrUnavailable) {
				t.Fatalf("throttled Flush: %v", err)
			}
			ts.set(false)
			if err := g.Flush(ctx, t0.Add(7500*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if c := s.Calls()[3]; c.Update.Deposit != unit || c.Err != nil {
				t.Fatalf("Flush after the throttle %+v, want the 10 kept requests", c)
			}
			if st := g.Stats(); st.Throttled != 2 || st.Faults != 0 || st.LostRequests != 0 || st.ReportedRequests != 30 ||
				st.Refused != 2 || st.RefusalWrites != 1 || st.CachedRefusals != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestGlobalFailsClosedByDefault: when the store fails, the default
// Global refuses (a slow or broken table never lifts the fleet's bound)
// with the fault as the refusal's cause, reported as a store fault, and
// keeps refusing from memory during FaultCooldown; with FailOpen it
// abstains instead.
func TestGlobalFailsClosedByDefault(t *testing.T) {
	ctx := context.Background()
	for _, failOpen := range []bool{false, true} {
		s := newRecStore(newMapStore())
		s.setFault(func(budget.Key, budget.Update) faultMode { return failBefore })
		g := newGlobal(t, s, budget.GlobalConfig{FailOpen: failOpen})
		for i, at := range []time.Duration{0, 400 * time.Millisecond} {
			var reported int
			rel, err := layers.Acquire(ctx, t0.Add(at), budget.Transient, []budget.Budget{g}, func(int, error) { reported++ })
			var ex *budget.ExhaustedError
			switch {
			case reported != 1:
				t.Fatalf("FailOpen %v, ask %d: the fault was reported %d times, want once", failOpen, i, reported)
			case failOpen && err != nil:
				t.Fatalf("FailOpen, ask %d: %v; want the layer to abstain (the composition grants)", i, err)
			case !failOpen && (!errors.As(err, &ex) || ex.RetryAfter != defaultFaultCooldown-at || !errors.Is(err, budget.ErrUnavailable)):
				t.Fatalf("default, ask %d: %v; want a refusal carrying the fault until the cooldown ends", i, err)
			case !failOpen && i == 0 && !errors.Is(err, errInjected):
				t.Fatalf("default: %v does not carry the store's error", err)
			}
			rel.Done(budget.RetryFailed)
		}
		if s.NumCalls() != 1 {
			t.Fatalf("%d store calls, want 1 (the second ask fell in the cooldown)", s.NumCalls())
		}
		if st := g.Stats(); st.Unavailable != 2 || st.Faults != 1 || (st.Refused == 2) == failOpen {
			t.Errorf("FailOpen %v: stats %+v", failOpen, st)
		}
	}
}

// TestGlobalEngagesWithRecentRequestsOnly: the first write of an
// environment that was not engaged deposits only the requests it made in
// the current and the previous period of DepositInterval, not those it made
// earlier in the window while it had nothing to retry (they would fund a
// burst of retries when an outage starts late in a window). Once engaged,
// every request counts.
func TestGlobalEngagesWithRecentRequestsOnly(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Floor: 1, Rand: constRand(0.5)}) // D = 2.5 s: periods [5, 7.5), [7.5, 10) s
	record(g, t0.Add(time.Second), 50)                                        // healthy, long before
	record(g, t0.Add(6*time.Second), 4)                                       // the previous period
	record(g, t0.Add(8*time.Second), 3)                                       // the current period
	if _, ok := acquire(t, g, t0.Add(9*time.Second)); !ok {
		t.Fatal("the floor was refused")
	}
	if c := s.Calls()[0]; c.Update.Deposit != 7*unit/10 {
		t.Fatalf("first write %+v, want a deposit of the 7 recent requests", c.Update)
	}
	if st := g.Stats(); st.SkippedRequests != 50 || st.ReportedRequests != 7 {
		t.Errorf("stats %+v", st)
	}
	// Engaged now: the next window's first write deposits everything
	// unreported, old requests of the window and carried ones included.
	record(g, t0.Add(9500*time.Millisecond), 2)
	record(g, t0.Add(10*time.Second), 20)
	if err := g.Flush(context.Background(), t0.Add(19*time.Second)); err != nil {
		t.Fatal(err)
	}
	if c := s.Calls()[1]; c.Update.Deposit != 22*unit/10 || !c.Key.Window.Equal(t0.Add(testWindow)) {
		t.Fatalf("engaged write %+v, want the 20 requests of window 1 and the 2 carried", c)
	}
	if st := g.Stats(); st.SkippedRequests != 50 || st.CarriedRequests != 2 {
		t.Errorf("stats %+v", st)
	}
}
