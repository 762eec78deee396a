package budget_test

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layers"
)

const unit = budget.AllowancePerRetry

func newGlobal(t testing.TB, s budget.Store, cfg budget.GlobalConfig) *budget.Global {
	t.Helper()
	g, err := budget.NewGlobal(s, "partner", cfg)
	if err != nil {
		t.Fatalf("NewGlobal: %v", err)
	}
	return g
}

// record makes n requests at now.
func record(g *budget.Global, now time.Time, n int) {
	for range n {
		g.RecordRequest(now)
	}
}

// acquire asks for one retry and reports whether it was granted, failing t
// on an answer that is neither a grant nor a refusal.
func acquire(t *testing.T, g *budget.Global, now time.Time) (budget.Release, bool) {
	t.Helper()
	rel, err := g.AcquireRetry(context.Background(), now, budget.Transient)
	switch {
	case err == nil:
		return rel, true
	case errors.Is(err, budget.ErrExhausted):
		if rel != nil {
			t.Fatalf("AcquireRetry returned a Release with %v", err)
		}
		return nil, false
	default:
		t.Fatalf("AcquireRetry: unexpected error %v", err)
		return nil, false
	}
}

func TestNewGlobalValidation(t *testing.T) {
	s := newMapStore()
	bad := []struct {
		cfg   budget.GlobalConfig
		field string
	}{
		{budget.GlobalConfig{Ratio: -0.1}, "Ratio"},
		{budget.GlobalConfig{Ratio: 1.5}, "Ratio"},
		{budget.GlobalConfig{Ratio: math.NaN()}, "Ratio"},
		{budget.GlobalConfig{Ratio: 1e-9}, "Ratio"},
		{budget.GlobalConfig{Window: time.Millisecond}, "Window"},
		{budget.GlobalConfig{Window: -time.Second}, "Window"},
		{budget.GlobalConfig{Window: time.Second + time.Microsecond}, "Window"},
		{budget.GlobalConfig{Window: 25 * time.Hour}, "Window"},
		{budget.GlobalConfig{Floor: maxGlobalFloor + 1}, "Floor"},
		{budget.GlobalConfig{Shards: -1}, "Shards"},
		{budget.GlobalConfig{Shards: maxGlobalShards + 1}, "Shards"},
		{budget.GlobalConfig{LeaseSize: -2}, "LeaseSize"},
		{budget.GlobalConfig{LeaseSize: maxLeaseSize + 1}, "LeaseSize"},
		{budget.GlobalConfig{StoreTimeout: -time.Millisecond}, "StoreTimeout"},
		{budget.GlobalConfig{DepositInterval: -time.Second}, "DepositInterval"},
		{budget.GlobalConfig{DepositInterval: 11 * time.Second}, "DepositInterval"},
		{budget.GlobalConfig{Window: time.Second, DepositInterval: 2 * time.Second}, "DepositInterval"},
	}
	for _, tc := range bad {
		_, err := budget.NewGlobal(s, "partner", tc.cfg)
		if err == nil || !strings.Contains(err.Error(), "GlobalConfig."+tc.field) {
			t.Errorf("NewGlobal(%+v) = %v, want an error naming GlobalConfig.%s", tc.cfg, err, tc.field)
		}
	}
	if _, err := budget.NewGlobal(nil, "partner", budget.GlobalConfig{}); err == nil || !strings.Contains(err.Error(), "store") {
		t.Errorf("NewGlobal(nil store) = %v, want an error naming the store", err)
	}
	for _, name := range []string{"", "a#b", strings.Repeat("x", 129), "\xff"} {
		if _, err := budget.NewGlobal(s, name, budget.GlobalConfig{}); err == nil {
			t.Errorf("NewGlobal(name %q) succeeded", name)
		}
	}

	g := newGlobal(t, s, budget.GlobalConfig{})
	c := g.Config()
	if c.Ratio != defaultGlobalRatio || c.Window != defaultGlobalWindow || c.Floor != defaultGlobalFloor ||
		c.Shards != defaultGlobalShards || c.LeaseSize != defaultLeaseSize ||
		c.StoreTimeout != defaultStoreTimeout || c.FaultCooldown != defaultFaultCooldown ||
		c.DepositInterval != defaultGlobalWindow/defaultDepositIntervals ||
		c.FailOpen || c.Rand == nil {
		t.Errorf("defaults: %+v", c)
	}
	if c := newGlobal(t, s, budget.GlobalConfig{Floor: -1}).Config(); c.Floor != 0 {
		t.Errorf("Floor -1 became %d, want 0", c.Floor)
	}
	if c := newGlobal(t, s, budget.GlobalConfig{Window: time.Second}).Config(); c.DepositInterval != 250*time.Millisecond {
		t.Errorf("DepositInterval for a 1 s window: %v, want 250ms", c.DepositInterval)
	}
}

func TestGlobalWindowsAlignToTheEpoch(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Window: 7 * time.Second})
	for _, now := range []time.Time{
		t0.Add(3 * time.Second),
		time.Unix(0, 0),
		time.Unix(-1, 0), // before 1970: the window is [-7 s, 0)
		time.Unix(13, 999e6),
	} {
		want := time.UnixMilli(int64(math.Floor(float64(now.UnixMilli())/7000)) * 7000)
		if got := g.WindowStart(now); !got.Equal(want) {
			t.Errorf("WindowOf(%v) = %v, want %v", now, got, want)
		}
		if _, ok := acquire(t, g, now); !ok {
			t.Fatalf("no floor retry at %v", now)
		}
		c := s.Calls()[len(s.Calls())-1]
		if !c.Key.Window.Equal(want) || c.Key.Name != "partner" {
			t.Errorf("key %v, want window %v", c.Key, want)
		}
		if want := want.Add(7*time.Second + time.Minute); !c.Update.Expires.Equal(want) {
			t.Errorf("Expires %v, want %v (window end + 1 minute)", c.Update.Expires, want)
		}
	}
}

func TestGlobalHealthyPathMakesNoStoreCalls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newStore func() budget.Store) {
		s := newRecStore(newStore())
		g := newGlobal(t, s, budget.GlobalConfig{})
		for i := range 10_000 {
			now := t0.Add(time.Duration(i) * 3 * time.Millisecond) // spans three windows
			g.RecordRequest(now)
			g.RecordSuccess(now)
			if i%100 == 0 {
				if err := g.Flush(context.Background(), now); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := g.Flush(context.Background(), t0.Add(30*time.Second)); err != nil {
			t.Fatal(err)
		}
		if n := s.NumCalls(); n != 0 {
			t.Fatalf("%d store calls on the healthy path, want 0", n)
		}
		if st := g.Stats(); st.StoreCalls != 0 {
			t.Fatalf("Stats().StoreCalls = %d", st.StoreCalls)
		}
	})
}

// TestGlobalRatioAndFloor: 50 requests at Ratio 0.1 earn 5 retries, and the
// floor adds 3. Every grant is one store call that deposits what is
// pending and takes one retry; the answer to the last one shows the shard
// empty, so the refusals after it cost no call.
func TestGlobalRatioAndFloor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newStore func() budget.Store) {
		s := newRecStore(newStore())
		g := newGlobal(t, s, budget.GlobalConfig{})
		now := t0.Add(2 * time.Second)
		record(g, now, 50)
		granted := 0
		for range 10 {
			if _, ok := acquire(t, g, now); ok {
				granted++
			}
		}
		if granted != 8 {
			t.Fatalf("granted %d, want 8 (50 × 0.1 + floor 3)", granted)
		}
		calls := s.Calls()
		if len(calls) != 8 {
			t.Fatalf("%d store calls, want 8 (8 leases; the last answer showed the shard empty)", len(calls))
		}
		first := calls[0].Update
		if first.Deposit != 50*unit/10 || first.Take != unit || first.Floor != 3*unit {
			t.Errorf("first update %+v, want deposit 5 retries, take 1, floor 3", first)
		}
		for i, c := range calls[1:] {
			if c.Update.Deposit != 0 {
				t.Errorf("call %d deposited %d again", i+1, c.Update.Deposit)
			}
		}
		if calls[7].Err != nil || calls[7].Result != 0 {
			t.Errorf("last call: %d, %v; want the shard left empty", calls[7].Result, calls[7].Err)
		}
		st := g.Stats()
		if st.Granted != 8 || st.Refused != 2 || st.CachedRefusals != 2 || st.RefusalWrites != 0 || st.Leases != 8 ||
			st.LeasedRetries != 8 || st.ReportedRequests != 50 || st.StoreCalls != 8 || st.Faults != 0 || st.Deposits != 0 {
			t.Errorf("stats %+v", st)
		}
		s.checkItems(t)
	})
}

// TestGlobalRefusalsWaitForTheNextContact: once the store's answer shows
// the shard cannot fund a retry, refusals cost no store call until the
// environment's next contact, D × U(0.5, 1.5) after its last call (here
// Rand is 0.5: exactly D = 2.5 s). Each contact is one write, and every
// refusal's RetryAfter is the time to the next contact.
func TestGlobalRefusalsWaitForTheNextContact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newStore func() budget.Store) {
		s := newRecStore(newStore())
		g := newGlobal(t, s, budget.GlobalConfig{Floor: 1, Rand: constRand(0.5)})
		d := g.Config().DepositInterval
		if d != 2500*time.Millisecond {
			t.Fatalf("DepositInterval %v, want Window/4", d)
		}
		if _, ok := acquire(t, g, t0); !ok {
			t.Fatal("floor retry refused")
		}
		next := t0.Add(d)
		var contacts []time.Duration
		for i := range 100 {
			now := t0.Add(time.Duration(i) * 99 * time.Millisecond)
			before := s.NumCalls()
			_, err := g.AcquireRetry(context.Background(), now, budget.Throttling)
			var ex *budget.ExhaustedError
			if !errors.As(err, &ex) {
				t.Fatalf("ask %d: %v, want *ExhaustedError", i, err)
			}
			if n := s.NumCalls() - before; n > 0 {
				if n > 1 || now.Before(next) {
					t.Fatalf("ask %d at %v: %d store calls; the contact was due at %v", i, now.Sub(t0), n, next.Sub(t0))
				}
				contacts = append(contacts, now.Sub(t0))
				next = now.Add(d)
			}
			if want := next.Sub(now); ex.RetryAfter != want {
				t.Fatalf("ask %d: RetryAfter %v, want %v (the next contact)", i, ex.RetryAfter, want)
			}
			if ex.Budget != "global:partner" {
				t.Fatalf("Budget %q", ex.Budget)
			}
		}
		if want := []time.Duration{2574 * time.Millisecond, 5148 * time.Millisecond, 7722 * time.Millisecond}; !slices.Equal(contacts, want) {
			t.Fatalf("contacts at %v, want %v", contacts, want)
		}
		if st := g.Stats(); st.Refused != 100 || st.CachedRefusals != 97 || st.RefusalWrites != 3 || st.Deposits != 3 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestGlobalWindowEdgeKeepsTheView: an environment that last saw an empty
// shard does not write at the first instant of the next window, where the
// whole fleet would: it waits for its own next contact, which finds the new
// window's floor; the ask after it takes the floor.
func TestGlobalWindowEdgeKeepsTheView(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Floor: 1, Rand: constRand(0.5)})
	if _, ok := acquire(t, g, t0.Add(9*time.Second)); !ok {
		t.Fatal("floor retry refused")
	}
	_, err := g.AcquireRetry(context.Background(), t0.Add(10*time.Second), budget.Transient)
	var ex *budget.ExhaustedError
	if !errors.As(err, &ex) || ex.RetryAfter != 1500*time.Millisecond || s.NumCalls() != 1 {
		t.Fatalf("first ask of the new window: %v, %d calls; want a refusal from memory until the contact 1.5 s later", err, s.NumCalls())
	}
	_, err = g.AcquireRetry(context.Background(), t0.Add(11500*time.Millisecond), budget.Transient)
	if !errors.As(err, &ex) || ex.RetryAfter != 0 || s.NumCalls() != 2 {
		t.Fatalf("the contact: %v, %d calls; want one write and a refusal with no hint (it saw the floor)", err, s.NumCalls())
	}
	if c := s.Calls()[1]; c.Update.Take != 0 || c.Result != unit || !c.Key.Window.Equal(t0.Add(testWindow)) {
		t.Fatalf("contact %+v, want a deposit-only write finding the floor of the new window", c)
	}
	if _, ok := acquire(t, g, t0.Add(11600*time.Millisecond)); !ok || s.NumCalls() != 3 {
		t.Fatalf("the floor the contact saw was not taken (%d calls)", s.NumCalls())
	}
}

// TestGlobalFractionsPool: fractions of a retry earned in different
// environments add up in the store. A refused update applies nothing: its
// deposit stays pending and goes with the environment's next contact, so a
// refusal costs one write.
func TestGlobalFractionsPool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newStore func() budget.Store) {
		s := newRecStore(newStore())
		cfg := budget.GlobalConfig{Floor: -1, Rand: constRand(0.5)}
		a, b := newGlobal(t, s, cfg), newGlobal(t, s, cfg)
		ctx := context.Background()
		record(a, t0, 9) // 0.9 retry
		if _, ok := acquire(t, a, t0); ok {
			t.Fatal("0.9 retry granted a retry")
		}
		if calls := s.Calls(); len(calls) != 1 || !errors.Is(calls[0].Err, budget.ErrInsufficient) {
			t.Fatalf("calls %+v, want one refused update", calls)
		}
		if err := a.Flush(ctx, t0.Add(time.Second)); err != nil || s.NumCalls() != 1 {
			t.Fatalf("Flush before the next contact: %v, %d calls", err, s.NumCalls())
		}
		if err := a.Flush(ctx, t0.Add(2500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if calls := s.Calls(); len(calls) != 2 || calls[1].Update.Deposit != 9*unit/10 || calls[1].Update.Take != 0 || calls[1].Err != nil {
			t.Fatalf("calls %+v, want the refusal and then the contact's deposit of 0.9 retry", calls)
		}
		record(b, t0.Add(3*time.Second), 1) // 0.1 retry: with a's 0.9, one retry
		if _, ok := acquire(t, b, t0.Add(3*time.Second)); !ok {
			t.Fatal("pooled fractions did not fund a retry")
		}
		if st := a.Stats(); st.ReportedRequests != 9 || st.Refused != 1 || st.RefusalWrites != 1 || st.Deposits != 1 {
			t.Errorf("a: %+v", st)
		}
		s.checkItems(t)
	})
}

// TestGlobalOwnRequestsFundARetry: an environment whose last answer showed
// an empty shard writes before its next contact only when its own
// unreported requests (here those its refused update kept, and new ones)
// fund a retry: an update that deposits at least what it takes cannot be
// refused.
func TestGlobalOwnRequestsFundARetry(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Ratio: 0.3, Floor: -1})
	record(g, t0, 1) // 0.3
	if _, ok := acquire(t, g, t0); ok {
		t.Fatal("granted with 0.3 retry")
	}
	for i := range 2 {
		g.RecordRequest(t0)
		if _, ok := acquire(t, g, t0); ok {
			t.Fatalf("granted after %d more requests", i+1)
		}
	}
	if s.NumCalls() != 1 {
		t.Fatalf("an environment with less than a retry pending called the store again")
	}
	g.RecordRequest(t0) // 4 × 0.3 = 1.2 unreported
	if _, ok := acquire(t, g, t0); !ok {
		t.Fatal("a retry the environment earned itself was refused")
	}
	last := s.Calls()[len(s.Calls())-1]
	if s.NumCalls() != 2 || last.Update.Deposit != 4*300_000 || last.Update.Take != unit {
		t.Fatalf("%d calls, last update %+v; want a second call depositing 1.2 retries, taking 1", s.NumCalls(), last.Update)
	}
	// 0.2 retry is left in the store: not enough for another.
	if _, ok := acquire(t, g, t0); ok || s.NumCalls() != 2 {
		t.Fatalf("granted from 0.2 retry, or asked the store (%d calls)", s.NumCalls())
	}
	s.checkItems(t)
}

func TestGlobalRetryNotUsedReturnsToTheLease(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Floor: 2, Rand: constRand(0.5)})
	rel, ok := acquire(t, g, t0)
	if !ok {
		t.Fatal("refused")
	}
	rel(budget.RetryNotUsed)
	rel(budget.RetryNotUsed) // a second call is ignored
	calls := s.NumCalls()
	rel2, ok := acquire(t, g, t0.Add(time.Second))
	if !ok || s.NumCalls() != calls {
		t.Fatalf("returned grant not served from the lease (ok %v, calls %d→%d)", ok, calls, s.NumCalls())
	}
	rel2.Done(budget.RetrySucceeded) // used: not returned
	rel3, ok := acquire(t, g, t0.Add(2*time.Second))
	if !ok || s.NumCalls() != calls+1 {
		t.Fatal("second floor retry not taken from the store")
	}
	rel3(budget.RetryFailed)
	if _, ok := acquire(t, g, t0.Add(3*time.Second)); ok {
		t.Fatal("granted a third retry from a floor of 2")
	}
	if st := g.Stats(); st.Granted != 3 || st.Returned != 1 || st.Granted-st.Returned > st.LeasedRetries {
		t.Errorf("stats %+v", st)
	}

	// A grant returned after its window ended does not serve the next one.
	// (The first ask of window 1 is the contact that finds its floor.)
	if _, ok := acquire(t, g, t0.Add(10*time.Second)); ok {
		t.Fatal("the contact after an empty shard granted")
	}
	rel4, ok := acquire(t, g, t0.Add(10100*time.Millisecond))
	if !ok {
		t.Fatal("refused the floor of window 1")
	}
	if _, ok := acquire(t, g, t0.Add(20*time.Second)); !ok {
		t.Fatal("refused in window 2")
	}
	rel4(budget.RetryNotUsed)
	before := s.NumCalls()
	if _, ok := acquire(t, g, t0.Add(21*time.Second)); !ok || s.NumCalls() != before+1 {
		t.Fatal("a grant of an ended window was handed out again")
	}
	s.checkItems(t)
}

// TestGlobalLeaseDoublesUpToLeaseSize: leases double within a window up to
// LeaseSize, and never take more than the store's last answer showed, so
// the last one is cut to what is left instead of being refused.
func TestGlobalLeaseDoublesUpToLeaseSize(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{LeaseSize: 4, Floor: -1})
	record(g, t0, 200) // 20 retries
	for range 20 {
		if _, ok := acquire(t, g, t0); !ok {
			t.Fatal("refused with 20 retries earned")
		}
	}
	var takes []int64
	for _, c := range s.Calls() {
		takes = append(takes, c.Update.Take/unit)
		if c.Err != nil {
			t.Fatalf("call %+v failed", c)
		}
	}
	if want := []int64{1, 2, 4, 4, 4, 4, 1}; !slices.Equal(takes, want) {
		t.Fatalf("takes %v, want %v", takes, want)
	}
	if _, ok := acquire(t, g, t0); ok || s.NumCalls() != 7 {
		t.Fatal("granted a 21st retry, or asked the store for it")
	}
	// A new window starts again at one.
	record(g, t0.Add(10*time.Second), 10)
	acquire(t, g, t0.Add(10*time.Second))
	if c := s.Calls()[len(s.Calls())-1]; c.Update.Take != unit {
		t.Fatalf("first lease of a window took %d", c.Update.Take)
	}
	if st := g.Stats(); st.Granted-st.Returned > st.LeasedRetries {
		t.Errorf("stats %+v", st)
	}
	s.checkItems(t)
}

func TestGlobalShardsSplitTheFloorAndSpreadWrites(t *testing.T) {
	s := newRecStore(newMapStore())
	r := rand.New(rand.NewPCG(1, 2))
	g := newGlobal(t, s, budget.GlobalConfig{Shards: 4, Floor: 6, Rand: r.Float64})
	// Each retry is funded by the deposit that comes with it, so every
	// shard can grant and the writes spread as Rand picks.
	for range 400 {
		record(g, t0, 10)
		if _, ok := acquire(t, g, t0); !ok {
			t.Fatal("a self-funded retry was refused")
		}
	}
	perShard := make([]int, 4)
	for _, c := range s.Calls() {
		perShard[c.Key.Shard]++
		if want := 6 * unit / 4; c.Update.Floor != want {
			t.Fatalf("shard %d floor %d, want %d", c.Key.Shard, c.Update.Floor, want)
		}
	}
	for i, n := range perShard {
		if n < 60 {
			t.Errorf("shard %d took %d of %d writes: %v", i, n, s.NumCalls(), perShard)
		}
	}
	s.checkItems(t)

	// Uneven split: 5 retries over 3 shards. Rand picks the shard before
	// each call and draws the next contact after it.
	s2 := newRecStore(newMapStore())
	seq := []float64{0, 0.5, 0.5, 0.5, 0.99, 0.5}
	i := 0
	g2 := newGlobal(t, s2, budget.GlobalConfig{Shards: 3, Floor: 5, Rand: func() float64 { i++; return seq[(i-1)%len(seq)] }})
	var sum int64
	for range 3 {
		record(g2, t0, 10)
		acquire(t, g2, t0)
	}
	for j, c := range s2.Calls() {
		if c.Key.Shard != j {
			t.Errorf("call %d on shard %d", j, c.Key.Shard)
		}
		sum += c.Update.Floor
	}
	if sum != 5*unit {
		t.Errorf("floor shares sum to %d, want %d", sum, 5*unit)
	}
}

func TestGlobalSurvivesABadRand(t *testing.T) {
	for _, v := range []float64{math.NaN(), -1, 1, 2, math.Inf(1), math.Inf(-1), 0.999999999} {
		s := newRecStore(newMapStore())
		g := newGlobal(t, s, budget.GlobalConfig{Shards: 3, Floor: 3, Rand: func() float64 { return v }})
		acquire(t, g, t0)
		if sh := s.Calls()[0].Key.Shard; sh < 0 || sh > 2 {
			t.Errorf("Rand %v: shard %d", v, sh)
		}
	}
}

// TestGlobalDropsCountsOfEarlierWindows: requests fund retries only in
// their own window.
func TestGlobalDropsCountsOfEarlierWindows(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Floor: -1})
	w := 10 * time.Second

	record(g, t0, 30)          // window 0
	record(g, t0.Add(w), 20)   // window 1
	record(g, t0.Add(2*w), 10) // window 2 replaces window 0's slot
	if _, ok := acquire(t, g, t0.Add(2*w)); !ok {
		t.Fatal("refused")
	}
	if d := s.Calls()[0].Update.Deposit; d != 10*unit/10 {
		t.Fatalf("window 2 deposited %d, want only its own 10 requests", d)
	}
	// The previous window's count is still there for a caller whose clock
	// is behind, and goes into that window's item.
	if _, ok := acquire(t, g, t0.Add(w+time.Second)); !ok {
		t.Fatal("refused a late caller with 20 requests in its window")
	}
	c := s.Calls()[1]
	if c.Update.Deposit != 20*unit/10 || !c.Key.Window.Equal(t0.Add(w)) {
		t.Fatalf("late call %+v", c)
	}
	// Window 0's count is gone for good.
	if _, ok := acquire(t, g, t0.Add(time.Second)); ok {
		t.Fatal("window 0 still funded a retry")
	}
	// A request recorded for a window two behind the newest is dropped,
	// not added to the newer count.
	record(g, t0.Add(3*w), 5)
	record(g, t0.Add(w), 100)
	acquire(t, g, t0.Add(3*w))
	if d := s.Calls()[len(s.Calls())-1].Update.Deposit; d != 5*unit/10 {
		t.Fatalf("window 3 deposited %d, want 0.5 retry", d)
	}
}

// TestGlobalFlush: Flush writes only for an engaged environment (it asked
// for a retry in this window or the previous one), only when its next
// contact is due and requests are unreported, and then one deposit-only
// write.
func TestGlobalFlush(t *testing.T) {
	s := newRecStore(newMapStore())
	clock := t0
	g := newGlobal(t, s, budget.GlobalConfig{Rand: constRand(0.5), FaultCooldown: 4 * time.Second})
	ctx := context.Background()
	flush := func(at time.Duration, wantCalls int) error {
		t.Helper()
		clock = t0.Add(at)
		err := g.Flush(ctx, clock)
		if s.NumCalls() != wantCalls {
			t.Fatalf("Flush at %v: %d store calls, want %d", at, s.NumCalls(), wantCalls)
		}
		return err
	}

	record(g, t0, 100)
	if err := flush(0, 0); err != nil {
		t.Fatalf("Flush of a healthy environment: %v", err)
	}
	acquire(t, g, t0) // engages; deposits the 100, takes 1; next contact at 2.5 s
	record(g, t0, 5)
	if err := flush(0, 1); err != nil {
		t.Fatalf("Flush before the contact is due: %v", err)
	}
	record(g, t0.Add(2500*time.Millisecond), 5)
	if err := flush(2500*time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	if u := s.Calls()[1].Update; u.Deposit != unit || u.Take != 0 {
		t.Fatalf("Flush update %+v, want a deposit of the 10 requests (1 retry), no take", u)
	}
	if err := flush(5*time.Second, 2); err != nil {
		t.Fatalf("Flush with nothing unreported: %v", err)
	}

	// A Flush whose context is already done makes no call and is not a
	// store fault: it returns ctx's error, starts no cooldown, and the
	// requests stay for the next contact (the failing Flush below sends
	// them).
	record(g, t0.Add(5*time.Second), 10)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.Flush(done, t0.Add(5*time.Second)); !errors.Is(err, context.Canceled) || errors.Is(err, budget.ErrUnavailable) || s.NumCalls() != 2 {
		t.Fatalf("Flush with a done ctx: %v (%d store calls), want context.Canceled and no call", err, s.NumCalls())
	}

	// A failed Flush loses the requests it sent and starts the cooldown,
	// which skips the next due contact (the requests stay pending).
	s.setFault(func(budget.Key, budget.Update) faultMode { return failBefore })
	err := flush(5*time.Second, 3)
	if !errors.Is(err, budget.ErrUnavailable) {
		t.Fatalf("Flush with a failing store: %v", err)
	}
	s.setFault(nil)
	record(g, t0.Add(7500*time.Millisecond), 10)
	if err := flush(7500*time.Millisecond, 3); !errors.Is(err, budget.ErrUnavailable) {
		t.Fatalf("Flush during the cooldown: %v", err)
	}
	if err := flush(9*time.Second, 4); err != nil {
		t.Fatal(err)
	}
	if u := s.Calls()[3].Update; u.Deposit != unit {
		t.Fatalf("after the cooldown Flush sent %d, want the 10 requests kept during it (1 retry)", u.Deposit)
	}
	if st := g.Stats(); st.LostRequests != 10 || st.ReportedRequests != 120 || st.Faults != 1 || st.Deposits != 2 {
		t.Errorf("stats %+v", st)
	}
	// Window 1: still engaged (it asked in window 0).
	record(g, t0.Add(11*time.Second), 50)
	if err := flush(11500*time.Millisecond, 5); err != nil {
		t.Fatal(err)
	}
	// Window 2: no longer engaged; nothing is written.
	record(g, t0.Add(20*time.Second), 50)
	if err := flush(25*time.Second, 5); err != nil {
		t.Fatalf("Flush two windows after the last ask: %v", err)
	}
}

// hangingStore blocks until ctx ends, like a table that does not answer,
// and records the deadline it was given. The Global calls it in a
// goroutine of its own (internal/storecall) and may return before it
// does: its fields are read through calls().
type hangingStore struct {
	mu        sync.Mutex
	entered   time.Time
	deadline  time.Time
	hasDL     bool
	callCount int
}

func (h *hangingStore) Apply(ctx context.Context, _ budget.Key, _ budget.Update) (int64, error) {
	h.mu.Lock()
	h.callCount++
	h.entered = time.Now()
	h.deadline, h.hasDL = ctx.Deadline()
	h.mu.Unlock()
	<-ctx.Done()
	return 0, ctx.Err()
}

// calls returns what the store recorded: its call count, when it was last
// entered, and the deadline it was given then.
func (h *hangingStore) calls() (n int, entered, deadline time.Time, hasDL bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.callCount, h.entered, h.deadline, h.hasDL
}

// TestGlobalCutsAHangingStore runs in a synctest bubble: the store's
// goroutine has entered the store before the 5 ms StoreTimeout fires, and
// the timeout fires at exactly 5 ms, whatever the machine's load.
func TestGlobalCutsAHangingStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 5 * time.Millisecond
		for _, failClosed := range []bool{false, true} {
			h := &hangingStore{}
			g := newGlobal(t, h, budget.GlobalConfig{StoreTimeout: timeout, FailOpen: !failClosed})
			record(g, t0, 10)
			rel, err := g.AcquireRetry(context.Background(), t0, budget.Transient)
			if rel != nil {
				t.Fatal("Release with an error")
			}
			if _, entered, deadline, hasDL := h.calls(); !hasDL || deadline.Sub(entered) > timeout {
				t.Fatalf("store got deadline %v (ok %v) at %v; want within %v", deadline, hasDL, entered, timeout)
			}
			if !errors.Is(err, budget.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("failClosed %v: %v, want an ErrUnavailable error for the deadline", failClosed, err)
			}
			if got := errors.Is(err, budget.ErrExhausted); got != failClosed {
				t.Fatalf("failClosed %v: errors.Is(err, ErrExhausted) = %v (%v)", failClosed, got, err)
			}
			// Through the composition: fail open abstains, fail closed refuses.
			var reported int
			rel, err = layers.Acquire(context.Background(), t0.Add(500*time.Millisecond), budget.Transient,
				[]budget.Budget{g}, func(int, error) { reported++ })
			if failClosed {
				var ex *budget.ExhaustedError
				if !errors.As(err, &ex) || ex.RetryAfter <= 0 || reported != 1 || !errors.Is(err, budget.ErrUnavailable) {
					t.Fatalf("fail closed via AcquireAll: %v, reported %d", err, reported)
				}
			} else if err != nil || rel != nil || reported != 1 {
				t.Fatalf("fail open via AcquireAll: rel %v err %v reported %d", rel != nil, err, reported)
			}
			// That second ask was inside the cooldown: no store call.
			if n, _, _, _ := h.calls(); n != 1 {
				t.Fatalf("%d calls to a failing store within the cooldown", n)
			}
			if st := g.Stats(); st.Faults != 1 || st.LostRequests != 10 || st.Unavailable != 2 {
				t.Errorf("stats %+v", st)
			}
		}

		// A caller deadline shorter than StoreTimeout wins, and the caller's
		// own deadline is not a store fault (whatever FailOpen says): a
		// refusal whose Cause is the deadline, no ErrUnavailable, no
		// cooldown; the requests sent are lost as after any fault.
		for _, failOpen := range []bool{false, true} {
			h := &hangingStore{}
			g := newGlobal(t, h, budget.GlobalConfig{StoreTimeout: time.Hour, FailOpen: failOpen})
			for range 10 {
				g.RecordRequest(t0)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			dl, _ := ctx.Deadline()
			_, err := g.AcquireRetry(ctx, t0, budget.Transient)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, budget.ErrExhausted) || errors.Is(err, budget.ErrUnavailable) {
				t.Fatalf("FailOpen %v: deadline during the call: %v, want a refusal for the deadline, not ErrUnavailable", failOpen, err)
			}
			if _, _, deadline, _ := h.calls(); !deadline.Equal(dl) {
				t.Fatalf("store deadline %v, want the caller's %v", deadline, dl)
			}
			// A done context makes no call at all.
			if _, err := g.AcquireRetry(ctx, t0, budget.Transient); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, budget.ErrUnavailable) {
				t.Fatalf("FailOpen %v: done ctx: %v", failOpen, err)
			} else if n, _, _, _ := h.calls(); n != 1 {
				t.Fatalf("FailOpen %v: done ctx: %d calls", failOpen, n)
			}
			if st := g.Stats(); st.Unavailable != 0 || st.Refused != 2 || st.LostRequests != 10 {
				t.Errorf("FailOpen %v: stats %+v, want 2 refusals, none unavailable, 10 requests lost", failOpen, st)
			}
		}
	})
}

func TestGlobalFaultCooldown(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{FaultCooldown: 2 * time.Second})
	s.setFault(func(budget.Key, budget.Update) faultMode { return failBefore })
	if _, err := g.AcquireRetry(context.Background(), t0, budget.Transient); !errors.Is(err, budget.ErrUnavailable) {
		t.Fatal(err)
	}
	s.setFault(nil)
	if _, err := g.AcquireRetry(context.Background(), t0.Add(1999*time.Millisecond), budget.Transient); !errors.Is(err, budget.ErrUnavailable) || s.NumCalls() != 1 {
		t.Fatalf("during the cooldown: %v, %d calls", err, s.NumCalls())
	}
	if _, ok := acquire(t, g, t0.Add(2*time.Second)); !ok || s.NumCalls() != 2 {
		t.Fatal("the store was not asked again after the cooldown")
	}

	// A negative cooldown asks the store every time.
	s2 := newRecStore(newMapStore())
	s2.setFault(func(budget.Key, budget.Update) faultMode { return failBefore })
	g2 := newGlobal(t, s2, budget.GlobalConfig{FaultCooldown: -1})
	for range 3 {
		g2.AcquireRetry(context.Background(), t0, budget.Transient)
	}
	if s2.NumCalls() != 3 {
		t.Fatalf("%d calls with no cooldown", s2.NumCalls())
	}
}

// TestGlobalTimeoutsAreNotDoubleCounted: a deposit whose answer was lost
// is never sent again, whether or not the store applied it.
func TestGlobalTimeoutsAreNotDoubleCounted(t *testing.T) {
	for _, mode := range []faultMode{failBefore, failAfterApply} {
		s := newRecStore(newMapStore())
		g := newGlobal(t, s, budget.GlobalConfig{Floor: -1, FaultCooldown: -1})
		record(g, t0, 30)
		s.setFault(func(budget.Key, budget.Update) faultMode { return mode })
		if _, err := g.AcquireRetry(context.Background(), t0, budget.Transient); !errors.Is(err, budget.ErrUnavailable) {
			t.Fatal(err)
		}
		s.setFault(nil)
		record(g, t0, 10)
		if _, ok := acquire(t, g, t0); !ok && mode == failAfterApply {
			t.Fatal("refused although 3 + 1 retries were deposited")
		}
		calls := s.Calls()
		if d := calls[1].Update.Deposit; d != unit {
			t.Fatalf("mode %d: second call deposited %d, want only the 10 new requests (1 retry)", mode, d)
		}
		tot := s.windowTotals()[t0.UnixMilli()]
		if tot.deposited > 40*unit/10 {
			t.Fatalf("mode %d: %d deposited for 40 requests", mode, tot.deposited)
		}
		if st := g.Stats(); st.LostRequests != 30 {
			t.Errorf("mode %d: stats %+v", mode, st)
		}
		s.checkItems(t)
	}
}

// garbageStore answers every call with the same fixed result.
type garbageStore struct {
	allowance int64
	err       error
	calls     int
}

func (s *garbageStore) Apply(context.Context, budget.Key, budget.Update) (int64, error) {
	s.calls++
	return s.allowance, s.err
}

type oddError struct{}

func (oddError) Error() string { return "" }

func TestGlobalNeverPanicsOnGarbage(t *testing.T) {
	insufficient := errors.Join(budget.ErrInsufficient, io.ErrUnexpectedEOF)
	cases := []struct {
		name      string
		allowance int64
		err       error
		grant     bool
	}{
		{"plain error", 0, errors.New("boom"), false},
		{"odd error", 7, oddError{}, false},
		{"canceled", 0, context.Canceled, false},
		{"negative success", -5, nil, true},
		{"huge success", math.MaxInt64, nil, true},
		{"refusal with huge allowance", math.MaxInt64, insufficient, false},
		{"refusal with min allowance", math.MinInt64, insufficient, false},
		{"refusal with negative allowance", -1, insufficient, false},
		{"refusal claiming enough", 3 * unit, insufficient, false},
	}
	for _, tc := range cases {
		for _, lease := range []int{1, 8} {
			for _, failClosed := range []bool{false, true} {
				s := &garbageStore{allowance: tc.allowance, err: tc.err}
				g := newGlobal(t, s, budget.GlobalConfig{LeaseSize: lease, FailOpen: !failClosed, Shards: 2})
				for i := range 20 {
					now := t0.Add(time.Duration(i) * 700 * time.Millisecond)
					record(g, now, 25)
					rel, err := g.AcquireRetry(context.Background(), now, budget.Transient)
					if (err == nil) != (rel != nil) {
						t.Fatalf("%s: rel %v with err %v", tc.name, rel != nil, err)
					}
					if err != nil && !errors.Is(err, budget.ErrExhausted) && !errors.Is(err, budget.ErrUnavailable) {
						t.Fatalf("%s: untyped error %v", tc.name, err)
					}
					if err == nil && !tc.grant {
						t.Fatalf("%s: granted a retry the store did not give", tc.name)
					}
					_ = err != nil && err.Error() != ""
					rel.Done(budget.Outcome(i % 5))
					_ = g.Flush(context.Background(), now)
				}
				if st := g.Stats(); st.Granted-st.Returned > st.LeasedRetries {
					t.Fatalf("%s: stats %+v", tc.name, st)
				}
			}
		}
	}
}

// TestGlobalFailOpenAbstainsInALayeredBudget: with the store down, a
// Global with FailOpen abstains and the local layer decides; by default it
// refuses.
func TestGlobalFailOpenAbstainsInALayeredBudget(t *testing.T) {
	s := newRecStore(newMapStore())
	s.setFault(func(budget.Key, budget.Update) faultMode { return failBefore })
	open := newGlobal(t, s, budget.GlobalConfig{FailOpen: true})
	if rel, err := layers.Acquire(context.Background(), t0, budget.Transient, []budget.Budget{open}, nil); err != nil {
		t.Fatalf("only layer abstained: %v", err)
	} else {
		rel.Done(budget.RetryFailed)
	}
	if _, err := layers.Acquire(context.Background(), t0, budget.Transient, []budget.Budget{open, refuseAll{}}, nil); !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("local layer refused, got %v", err)
	}
	closed := newGlobal(t, s, budget.GlobalConfig{})
	if _, err := layers.Acquire(context.Background(), t0, budget.Transient, []budget.Budget{closed}, nil); !errors.Is(err, budget.ErrExhausted) || !errors.Is(err, budget.ErrUnavailable) {
		t.Fatalf("fail closed (the default): %v, want a refusal carrying the fault", err)
	}
}

type refuseAll struct{}

func (refuseAll) RecordRequest(time.Time) {}
func (refuseAll) RecordSuccess(time.Time) {}
func (refuseAll) AcquireRetry(context.Context, time.Time, budget.Kind) (budget.Release, error) {
	return nil, &budget.ExhaustedError{Budget: "local"}
}

// TestGlobalLeaseTokensExpireWithTheirWindow: retries left in a lease at
// the end of its window are not handed out in the next one, where they
// were not withdrawn.
func TestGlobalLeaseTokensExpireWithTheirWindow(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{LeaseSize: 4, Floor: -1})
	record(g, t0, 100) // 10 retries
	for range 4 {      // leases of 1, 2 and 4: 3 retries left in the lease
		if _, ok := acquire(t, g, t0); !ok {
			t.Fatal("refused")
		}
	}
	if st := g.Stats(); st.LeasedRetries-st.Granted != 3 {
		t.Fatalf("stats %+v, want 3 retries left in the lease", st)
	}
	if _, ok := acquire(t, g, t0.Add(testWindow)); ok {
		t.Fatal("a lease of the previous window granted a retry")
	}
	if c := s.Calls()[len(s.Calls())-1]; !c.Key.Window.Equal(t0.Add(testWindow)) {
		t.Fatalf("the new window's ask went to %v", c.Key)
	}
}

// TestGlobalDropsHeldCountsOfEarlierWindows: requests kept in memory after
// a refusal in one window do not fund retries two windows later.
func TestGlobalDropsHeldCountsOfEarlierWindows(t *testing.T) {
	s := newRecStore(newMapStore())
	g := newGlobal(t, s, budget.GlobalConfig{Floor: -1})
	acquire(t, g, t0) // refused: exhausted in window 0
	record(g, t0, 3)  // 0.3 retry, held by the cached refusal below
	if _, ok := acquire(t, g, t0); ok {
		t.Fatal("granted")
	}
	record(g, t0.Add(2*testWindow), 10)
	if _, ok := acquire(t, g, t0.Add(2*testWindow)); !ok {
		t.Fatal("refused")
	}
	if d := s.Calls()[len(s.Calls())-1].Update.Deposit; d != unit {
		t.Fatalf("window 2 deposited %d, want only its own 10 requests (%d)", d, unit)
	}
}

// constRand returns a Rand that always returns v.
func constRand(v float64) func() float64 { return func() float64 { return v } }
