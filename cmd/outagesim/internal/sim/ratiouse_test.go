package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/memstore"
)

// The counter sees what the global budget was asked and granted, by window,
// and the bound is Ratio × requests + Floor per window.
func TestRatioUseCountsGlobal(t *testing.T) {
	cfg := budget.GlobalConfig{Window: 10 * time.Second, Floor: 2, Ratio: 0.1}
	use := newRatioUse(cfg)
	store := memstore.NewBudgetStore(memstore.Options{Now: func() time.Time { return testStart }})
	g, err := budget.NewGlobal(store, "t", cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := countedGlobal{g, use}
	if _, ok := budget.Budget(b).(interface {
		Flush(context.Context, time.Time) error
	}); !ok {
		t.Fatal("the counted global budget no longer has the Global's Flush, which retry.Executor.Flush calls")
	}
	ctx := context.Background()
	w0, w1 := testStart, testStart.Add(10*time.Second) // testStart is a whole minute
	for range 30 {
		b.RecordRequest(w0)
	}
	// 30 requests earn 3 retries, plus the floor of 2: 5 grants, then refusals.
	var granted []budget.Release
	for range 7 {
		if rel, err := b.AcquireRetry(ctx, w0, budget.Transient); err == nil {
			granted = append(granted, rel)
		}
	}
	if len(granted) != 5 {
		t.Fatalf("%d grants, want 5 (3 earned + floor 2)", len(granted))
	}
	granted[0].Done(budget.RetryNotUsed) // given back: not counted as granted
	granted[1].Done(budget.RetrySucceeded)
	b.RecordRequest(w1)

	got := use.Over(w0, w1.Add(time.Second)) // overlaps both windows
	want := RatioBound{Windows: 2, Requests: 31, Granted: 4, Bound: 0.1*31 + 2*2}
	want.GrantedOverBound = 4 / want.Bound
	if got.Windows != want.Windows || got.Requests != want.Requests || got.Granted != want.Granted ||
		math.Abs(got.Bound-want.Bound) > 1e-9 || math.Abs(got.GrantedOverBound-want.GrantedOverBound) > 1e-9 {
		t.Errorf("Over = %+v, want %+v", got, want)
	}
	if only := use.Over(w1, w1.Add(10*time.Second)); only.Windows != 1 || only.Requests != 1 || only.Granted != 0 {
		t.Errorf("second window alone: %+v", only)
	}
}

// Zero settings take budget.Global's defaults (10 s, 0.1, floor 3); a
// negative floor is none; the ratio counts in whole millionths.
func TestRatioUseDefaults(t *testing.T) {
	use := func(cfg budget.GlobalConfig) *RatioUse {
		g, err := budget.NewGlobal(memstore.NewBudgetStore(memstore.Options{}), "t", cfg)
		if err != nil {
			t.Fatal(err)
		}
		return newRatioUse(g.Config())
	}
	if u := use(budget.GlobalConfig{}); u.window != 10*time.Second || u.ratio != 0.1 || u.floor != 3 {
		t.Errorf("defaults: window %v, ratio %v, floor %d", u.window, u.ratio, u.floor)
	}
	if u := use(budget.GlobalConfig{Floor: -1, Ratio: 0.1234567891}); u.floor != 0 || u.ratio != 0.123456 {
		t.Errorf("floor -1, ratio 0.1234567891: floor %d, ratio %v; want 0 and whole millionths", u.floor, u.ratio)
	}
}

func TestFailureRatio(t *testing.T) {
	slots := make([]Slot, 30) // 3 s
	for i := range slots {
		slots[i] = Slot{Arrivals: 10}
		if i >= 20 {
			slots[i].Rejected = 5
		}
	}
	for _, tc := range []struct {
		from, to time.Duration
		want     float64
		ok       bool
	}{
		{2 * time.Second, 3 * time.Second, 0.5, true},
		{time.Second, 3 * time.Second, 0.25, true},
		{-10 * time.Second, 3 * time.Second, 1.0 / 6, true}, // clipped to the start
		{2 * time.Second, time.Hour, 0.5, true},             // clipped to the end
		{time.Hour, 2 * time.Hour, 0, false},
	} {
		got, ok := failureRatio(slots, tc.from, tc.to)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("failureRatio(%v, %v) = %v, %v; want %v, %v", tc.from, tc.to, got, ok, tc.want, tc.ok)
		}
	}
}

func TestScaleBucket(t *testing.T) {
	b := scaleBucket{rate: 10, burst: 100, tokens: 100}
	n := 0
	for b.take(testStart) {
		n++
	}
	if n != 100 {
		t.Errorf("burst: %d environments at once, want 100", n)
	}
	if b.take(testStart.Add(50 * time.Millisecond)) {
		t.Error("half an environment's worth of time: one joined")
	}
	if !b.take(testStart.Add(150 * time.Millisecond)) {
		t.Error("1.5 environments' worth of time: none joined")
	}
	var unlimited scaleBucket
	for range 1000 {
		if !unlimited.take(testStart) {
			t.Fatal("rate 0 refused")
		}
	}
}

func TestEnvPool(t *testing.T) {
	var p envPool
	a, b, c := &env{id: 1}, &env{id: 2}, &env{id: 3}
	p.push(a)
	p.push(b)
	p.push(c)
	if e := p.last(); e != c {
		t.Errorf("last = %d, want 3", e.id)
	}
	if e := p.take(0); e != a || p.len() != 1 || p.items[0] != b {
		t.Errorf("take(0) = %d, pool %v", e.id, p.items)
	}
}
