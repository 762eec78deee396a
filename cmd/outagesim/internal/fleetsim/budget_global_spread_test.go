package fleetsim_test

import (
	"testing"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
)

// TestGlobalSpreadOnAFleet runs a Lambda-shaped fleet with the library's
// defaults (the spread sizing itself) on shared in-memory stores with
// DynamoDB's per-item limits, where one item cannot take the fleet's
// writes: 4,000 environments at one call a second, every attempt failing.
// Throttles teach the environments a spread in the first failing window;
// after it at most 1% of the writes are throttled, at least 90% of
// min(wanted, bound) is granted, and every window keeps the bound.
func TestGlobalSpreadOnAFleet(t *testing.T) {
	if testing.Short() || fleetsim.RaceEnabled {
		t.Skip("simulation of 4,000 environments")
	}
	const envs = 4000
	g := fleetsim.Grid{
		Cells:          fleetsim.Cells([]int{envs}, []float64{10}, []float64{1}, []uint64{1}),
		Strategy:       func() fleetsim.Strategy { return fleetsim.Herdguard{Global: &budget.GlobalConfig{}} },
		HealthyWindows: 1,
		FailingWindows: 4,
	}
	results, err := g.Run()
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	var onsetThrottled int64
	for i, w := range r.Windows {
		u := w.Global.Used()
		if float64(u) > w.CarryBound+1e-9 {
			t.Errorf("window %d: %d granted; bound with carry %.1f", i, u, w.CarryBound)
		}
		t.Logf("window %d: requests %d, wanted %d, granted %d = %.0f%% of min(wanted, bound %.1f); budget writes %d, throttled %d",
			i, w.Global.Requests, w.RetriesWanted, u, 100*w.GrantedShare(), w.Bound, w.Store.BudgetWrites, w.Store.Throttled)
	}
	for i, w := range r.Failing() {
		if i == 0 {
			onsetThrottled = w.Store.Throttled
			continue
		}
		// The environments never throttled stay on shard 0 and learn only
		// from a throttle of their own: a tail of throttles remains.
		if 100*w.Store.Throttled > w.Store.BudgetWrites {
			t.Errorf("failing window %d: %d of %d budget writes throttled, want at most 1%% once the spread is learnt", i+1, w.Store.Throttled, w.Store.BudgetWrites)
		}
		if share := w.GrantedShare(); !(share >= 0.9) {
			t.Errorf("failing window %d: granted %.0f%% of min(wanted, bound), want at least 90%%", i+1, 100*share)
		}
	}
	if onsetThrottled == 0 {
		t.Errorf("no throttle in the first failing window: the fleet does not load one item past its limit, so this test proves nothing")
	}
	t.Logf("first failing window: %d requests throttled", onsetThrottled)
}
