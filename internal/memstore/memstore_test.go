package memstore_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/breaker/breakertest"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/budget/budgettest"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/memstore"
)

func TestBudgetStoreConformance(t *testing.T) {
	budgettest.Run(t, func(*testing.T) budget.Store { return memstore.NewBudgetStore(memstore.Options{}) })
}

func TestBreakerStoreConformance(t *testing.T) {
	breakertest.Run(t, func(*testing.T) breaker.Store { return memstore.NewBreakerStore(memstore.Options{}) })
}

// The breaker suite again through two Clients of one store, every call to
// the next: the state is shared, each Client's guesses of a Report's slot
// are its own, and no answer changes.
func TestBreakerStoreClientsConformance(t *testing.T) {
	breakertest.Run(t, func(*testing.T) breaker.Store {
		s := memstore.NewBreakerStore(memstore.Options{Meter: capacity.NewMeter(capacity.Config{})})
		return &alternating{stores: [2]breaker.Store{s, s.Client()}}
	})
}

// alternating sends each call to the next of its stores.
type alternating struct {
	stores [2]breaker.Store
	n      atomic.Uint32
}

func (a *alternating) next() breaker.Store { return a.stores[a.n.Add(1)%2] }

func (a *alternating) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	return a.next().Load(ctx, name)
}

func (a *alternating) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	return a.next().Report(ctx, name, r)
}

func (a *alternating) Transition(ctx context.Context, name string, prev uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	return a.next().Transition(ctx, name, prev, next)
}

func (a *alternating) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	return a.next().AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
}

func (a *alternating) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	return a.next().SetOverride(ctx, name, o, until)
}

// The suites again, with a Fault hook that lets every call through and a
// Meter that bills without throttling: neither path may change any answer.
func TestStoresConformanceWithPassingHookAndMeter(t *testing.T) {
	var mu sync.Mutex
	ops := map[string]int{}
	meter := capacity.NewMeter(capacity.Config{})
	o := memstore.Options{Fault: func(ctx context.Context, op string) error {
		mu.Lock()
		ops[op]++
		mu.Unlock()
		return nil
	}, Meter: meter}
	t.Run("Budget", func(t *testing.T) {
		budgettest.Run(t, func(*testing.T) budget.Store { return memstore.NewBudgetStore(o) })
	})
	t.Run("Breaker", func(t *testing.T) {
		breakertest.Run(t, func(*testing.T) breaker.Store { return memstore.NewBreakerStore(o) })
	})
	for _, op := range []string{memstore.OpApply, memstore.OpLoad, memstore.OpReport, memstore.OpTransition, memstore.OpAcquireProbe, memstore.OpSetOverride} {
		if ops[op] == 0 {
			t.Errorf("the Fault hook never saw %q", op)
		}
	}
	if st := meter.Stats(); st.Writes == 0 || st.Reads == 0 || st.Throttled() != 0 {
		t.Errorf("meter %+v: want reads and writes billed, none throttled", st)
	}
}

var errInjected = errors.New("injected fault")

var t0 = time.UnixMilli(1_700_000_000_000)

func key(name string) budget.Key { return budget.Key{Name: name, Shard: 0, Window: t0} }

func upd(floor, deposit, take int64) budget.Update {
	return budget.Update{Floor: floor, Deposit: deposit, Take: take, Expires: t0.Add(time.Minute)}
}

func TestBudgetStoreFaultLeavesStateAlone(t *testing.T) {
	var fail bool
	s := memstore.NewBudgetStore(memstore.Options{Fault: func(ctx context.Context, op string) error {
		if op != memstore.OpApply {
			t.Errorf("Fault called with op %q, want %q", op, memstore.OpApply)
		}
		if fail {
			return errInjected
		}
		return nil
	}})
	ctx := context.Background()
	if got, err := s.Apply(ctx, key("p"), upd(10, 0, 0)); err != nil || got != 10 {
		t.Fatalf("Apply = %d, %v; want 10, <nil>", got, err)
	}
	fail = true
	_, err := s.Apply(ctx, key("p"), upd(10, 0, 4))
	if !errors.Is(err, errInjected) || errors.Is(err, budget.ErrInsufficient) {
		t.Fatalf("Apply under a fault: %v; want the injected error", err)
	}
	fail = false
	if got, err := s.Apply(ctx, key("p"), upd(10, 0, 0)); err != nil || got != 10 {
		t.Fatalf("after the fault: Apply = %d, %v; want 10, <nil> (unchanged)", got, err)
	}
	if s.Reads() != 0 || s.Writes() != 3 {
		t.Fatalf("Reads, Writes = %d, %d; want 0, 3 (faulted calls count)", s.Reads(), s.Writes())
	}
}

// A Fault hook that stands for latency past the caller's deadline: the
// store checks ctx again when the hook returns.
func TestStoresDeadlinePassedDuringInjectedLatency(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	o := memstore.Options{Fault: func(ctx context.Context, op string) error {
		cancel(context.DeadlineExceeded) // the "network" took too long
		return nil
	}}
	bs := memstore.NewBudgetStore(o)
	if _, err := bs.Apply(ctx, key("p"), upd(10, 0, 0)); !errors.Is(err, context.Canceled) {
		t.Fatalf("BudgetStore.Apply: %v; want the context's error", err)
	}
	if got, err := bs.Apply(context.Background(), key("p"), upd(7, 0, 0)); err != nil || got != 7 {
		t.Fatalf("the timed-out Apply was applied: now %d, %v; want 7, <nil>", got, err)
	}
	cs := memstore.NewBreakerStore(o)
	_, err := cs.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
	if !errors.Is(err, breaker.ErrStore) || !errors.Is(err, context.Canceled) {
		t.Fatalf("BreakerStore.Transition: %v; want ErrStore wrapping the context's error", err)
	}
	if snap, err := cs.Load(context.Background(), "p"); err != nil || snap.Epoch != 0 {
		t.Fatalf("the timed-out Transition was applied: %+v, %v", snap, err)
	}
}

func TestBreakerStoreFaultsAreStoreErrors(t *testing.T) {
	var failing sync.Map
	s := memstore.NewBreakerStore(memstore.Options{Fault: func(ctx context.Context, op string) error {
		if _, ok := failing.Load(op); ok {
			return errInjected
		}
		return nil
	}})
	ctx := context.Background()
	calls := map[string]func() error{
		memstore.OpLoad: func() error { _, err := s.Load(ctx, "p"); return err },
		memstore.OpReport: func() error {
			_, err := s.Report(ctx, "p", breaker.Report{Bucket: 1, Requests: 1, Failures: 1, Samples: 1})
			return err
		},
		memstore.OpTransition: func() error {
			_, err := s.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
			return err
		},
		memstore.OpAcquireProbe: func() error { _, err := s.AcquireProbe(ctx, "p", 1, 1, t0, t0.Add(time.Second)); return err },
		memstore.OpSetOverride:  func() error { return s.SetOverride(ctx, "p", breaker.ForcedOpen, time.Time{}) },
	}
	for op, call := range calls {
		failing.Store(op, true)
		err := call()
		failing.Delete(op)
		if !errors.Is(err, breaker.ErrStore) || !errors.Is(err, errInjected) {
			t.Errorf("%s under a fault: %v; want ErrStore wrapping the injected error", op, err)
		}
	}
	// Nothing was written.
	if snap, err := s.Load(ctx, "p"); err != nil || snap != (breaker.Snapshot{}) {
		t.Fatalf("after faulted writes: %+v, %v; want the zero Snapshot", snap, err)
	}
	var want breaker.Snapshot
	want.Buckets[1] = breaker.Bucket{Num: 1}
	if snap, err := s.Report(ctx, "p", breaker.Report{Bucket: 1}); err != nil || snap != want {
		t.Fatalf("after a faulted Report: %+v, %v; want an empty bucket 1 only", snap, err)
	}
	if s.Reads() != 2 || s.Writes() != 5 {
		t.Fatalf("Reads, Writes = %d, %d; want 2, 5", s.Reads(), s.Writes())
	}
	// An injected error that already is a store error is not wrapped twice.
	s2 := memstore.NewBreakerStore(memstore.Options{Fault: func(context.Context, string) error { return breaker.ErrStore }})
	_, err := s2.Load(ctx, "p")
	if !errors.Is(err, breaker.ErrStore) || strings.Count(err.Error(), breaker.ErrStore.Error()) != 1 {
		t.Fatalf("Load: %v", err)
	}
}

func TestBudgetStoreRejectsBadUpdates(t *testing.T) {
	s := memstore.NewBudgetStore(memstore.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		k     budget.Key
		u     budget.Update
		field string
	}{
		{budget.Key{Name: "p", Shard: -1, Window: t0}, upd(0, 0, 0), "Key.Shard"},
		{key("p"), upd(-1, 0, 0), "Update.Floor"},
		{key("p"), upd(0, -1, 0), "Update.Deposit"},
		{key("p"), upd(0, 0, -1), "Update.Take"},
		{key("p#1"), upd(0, 0, 0), "p#1"},
	} {
		_, err := s.Apply(ctx, c.k, c.u)
		if err == nil || errors.Is(err, budget.ErrInsufficient) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Apply(%s, %+v) = %v; want an error naming %s", c.k, c.u, err, c.field)
		}
	}
	if _, err := s.Apply(ctx, key("p"), upd(math.MaxInt64-1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, key("p"), upd(0, 2, 0)); err == nil || !strings.Contains(err.Error(), "overflows") {
		t.Fatalf("an overflowing deposit: %v; want an error", err)
	}
	if got, err := s.Apply(ctx, key("p"), upd(0, 1, 0)); err != nil || got != math.MaxInt64 {
		t.Fatalf("Apply up to MaxInt64 = %d, %v", got, err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len() = %d, want 1: rejected updates must not create items", s.Len())
	}
}

// A window is one item whatever the location or monotonic reading of the
// time.Time naming it, and it is named to the millisecond, as in DynamoDB.
func TestBudgetStoreKeysByInstantToTheMillisecond(t *testing.T) {
	s := memstore.NewBudgetStore(memstore.Options{})
	ctx := context.Background()
	w := time.Now() // carries a monotonic reading
	for _, win := range []time.Time{w, w.UTC(), w.In(time.FixedZone("X", 3600)), w.Round(0), time.UnixMilli(w.UnixMilli())} {
		if _, err := s.Apply(ctx, budget.Key{Name: "p", Window: win}, budget.Update{Deposit: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 1 {
		t.Fatalf("Len() = %d, want 1", s.Len())
	}
}

func TestStoresDropExpiredItems(t *testing.T) {
	now := t0
	clock := func() time.Time { return now }
	ctx := context.Background()

	bs := memstore.NewBudgetStore(memstore.Options{Now: clock})
	for i, exp := range []time.Time{t0.Add(time.Minute), t0.Add(time.Hour), {}} {
		k := budget.Key{Name: "p", Shard: i, Window: t0}
		if _, err := bs.Apply(ctx, k, budget.Update{Floor: 5, Expires: exp}); err != nil {
			t.Fatal(err)
		}
	}
	now = t0.Add(30 * time.Minute)
	if _, err := bs.Apply(ctx, budget.Key{Name: "q", Window: t0}, budget.Update{}); err != nil {
		t.Fatal(err)
	}
	if bs.Len() != 3 {
		t.Fatalf("Len() = %d after the first expiry: want 3 (p/0 dropped, q added)", bs.Len())
	}
	// An expired shard that is written again starts from its floor.
	if got, err := bs.Apply(ctx, budget.Key{Name: "p", Shard: 0, Window: t0}, budget.Update{Floor: 9}); err != nil || got != 9 {
		t.Fatalf("Apply to an expired item = %d, %v; want the floor 9", got, err)
	}

}

func TestBreakerStoreRejectsBadArguments(t *testing.T) {
	s := memstore.NewBreakerStore(memstore.Options{})
	ctx := context.Background()
	_, errBucket := s.Report(ctx, "p", breaker.Report{Bucket: 0, Requests: 1})
	_, errLastBucket := s.Report(ctx, "p", breaker.Report{Bucket: 253402300800000, Requests: 1})
	_, errNegative := s.Report(ctx, "p", breaker.Report{Bucket: 1, Failures: -1})
	_, errHuge := s.Report(ctx, "p", breaker.Report{Bucket: 1, Samples: 1<<53 + 1})
	_, errEpoch := s.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 2})
	_, errWrap := s.Transition(ctx, "p", math.MaxUint64, breaker.Snapshot{State: breaker.Open, Epoch: 0})
	_, errState := s.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.State(7), Epoch: 1})
	_, errReopens := s.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, Reopens: -1})
	_, errLimit := s.AcquireProbe(ctx, "p", 1, -1, t0, t0.Add(time.Second))
	_, errLease := s.AcquireProbe(ctx, "p", 1, 1, t0, t0)
	errOverride := s.SetOverride(ctx, "p", breaker.Override(9), time.Time{})
	for what, err := range map[string]error{
		"bucket is 0": errBucket, "bucket is 253402300800000": errLastBucket, "-1 failures": errNegative, "9007199254740993 samples": errHuge,
		"next.Epoch is 2": errEpoch, "next.Epoch is 0": errWrap, "next.State": errState, "next.Reopens": errReopens,
		"limit is -1": errLimit, "leaseUntil": errLease, "override is": errOverride,
	} {
		if !errors.Is(err, breaker.ErrStore) || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: got %v; want an ErrStore naming it", what, err)
		}
	}
	if _, err := s.AcquireProbe(ctx, "p", 1, 0, t0, t0.Add(time.Second)); !errors.Is(err, breaker.ErrProbeDenied) {
		t.Errorf("AcquireProbe with limit 0: %v; want ErrProbeDenied", err)
	}
	if snap, err := s.Load(ctx, "p"); err != nil || snap != (breaker.Snapshot{}) {
		t.Fatalf("after rejected calls: %+v, %v; want the zero Snapshot", snap, err)
	}
}

// A bucket's counts never pass MaxInt64: the dynamo store would find such
// an item malformed, so the in-memory one refuses the Report that would
// make it.
func TestBreakerStoreReportOverflow(t *testing.T) {
	s := memstore.NewBreakerStore(memstore.Options{})
	ctx := context.Background()
	const huge = 1 << 53
	var err error
	n := 0
	for ; n < 1100; n++ {
		if _, err = s.Report(ctx, "p", breaker.Report{Bucket: 1, Requests: huge}); err != nil {
			break
		}
	}
	if n != 1023 || !errors.Is(err, breaker.ErrStore) || !strings.Contains(err.Error(), "would pass") {
		t.Fatalf("%d Reports of 2^53 requests, then %v; want 1,023, then a store error", n, err)
	}
	if snap, err := s.Load(ctx, "p"); err != nil || snap.Buckets[1].Requests != 1023*huge {
		t.Fatalf("after the refused Report: %+v, %v; want it not applied", snap.Buckets[1], err)
	}
}

func TestBreakerStoreKeepsMilliseconds(t *testing.T) {
	s := memstore.NewBreakerStore(memstore.Options{})
	ctx := context.Background()
	until := t0.Add(1500*time.Millisecond + 999*time.Microsecond)
	got, err := s.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: until})
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(1500 * time.Millisecond); !got.OpenUntil.Equal(want) {
		t.Fatalf("OpenUntil = %v, want %v (to the millisecond)", got.OpenUntil, want)
	}
	// A probe lease ending within the millisecond of now still holds.
	if _, err := s.AcquireProbe(ctx, "p", 1, 1, t0, t0.Add(time.Millisecond+time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireProbe(ctx, "p", 1, 1, t0.Add(time.Millisecond+500*time.Microsecond), t0.Add(time.Second)); !errors.Is(err, breaker.ErrProbeDenied) {
		t.Fatalf("AcquireProbe within the lease's millisecond: %v; want ErrProbeDenied", err)
	}
	if _, err := s.AcquireProbe(ctx, "p", 1, 1, t0.Add(2*time.Millisecond), t0.Add(time.Second)); err != nil {
		t.Fatalf("AcquireProbe after the lease: %v", err)
	}
}
