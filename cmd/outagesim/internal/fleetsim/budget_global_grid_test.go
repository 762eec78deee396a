package fleetsim_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
	"github.com/herdguard/herdguard/internal/capacity"
)

// TestGlobalLambdaGrid is issue 11's acceptance on the fleet-shape grid
// (internal/fleetsim: the real Executor and Global in virtual time, shared
// in-memory stores with DynamoDB's capacity model):
//
//	go test -count=1 -run 'TestGlobalLambdaGrid$' -v ./cmd/outagesim/internal/fleetsim/
//
// Cells: E in {50, 200, 1,000} environments, each invoked about once per
// second (c = 10 calls per window, Poisson, one invocation at a time, Flush
// after each, as Lambda), with 30% and 100% of attempts failing, seeds
// 1-3; the global ratio alone with the library's defaults and Shards from
// the sizing rule (ceil(environments / 500)); one healthy window, then
// five failing ones. It asserts, per cell:
//
//   - no budget write while the fleet is healthy;
//   - in every failing window after the first: retries granted (and not
//     given back) >= 90% of min(retries wanted, Ratio × requests + Floor);
//   - in every window: granted <= Ratio × (requests + carried) + Floor,
//     the documented bound with its slack; over the run,
//     granted <= Ratio × requests + Floor × windows;
//   - the hottest budget item under 1,000 write units in every second,
//     nothing throttled;
//   - at most one write per refusal in every environment.
//
// With -v it prints every window of every cell, the first failing window
// (ramp-up, not asserted) included. Under the race detector it runs seed
// 1 and E <= 200 only.
func TestGlobalLambdaGrid(t *testing.T) {
	envs, seeds := []int{50, 200, 1000}, []uint64{1, 2, 3}
	if fleetsim.RaceEnabled {
		envs, seeds = envs[:2], seeds[:1]
	}
	const (
		healthy = 1
		failing = 5
	)
	var summary strings.Builder
	fmt.Fprintf(&summary, "| E | shards | p | seed | granted ÷ min(wanted, bound), failing windows 2-%d (first) | over Ratio × requests + Floor, max (failing windows) | budget WCU/s peak | writes/refusal | writes/call (failing) |\n|---:|---:|---:|---:|---|---:|---:|---:|---:|\n", failing)
	for _, e := range envs {
		shards := (e + 499) / 500
		g := fleetsim.Grid{
			Cells:          fleetsim.Cells([]int{e}, []float64{10}, []float64{0.3, 1}, seeds),
			Strategy:       func() fleetsim.Strategy { return fleetsim.Herdguard{Global: &budget.GlobalConfig{Shards: shards}} },
			HealthyWindows: healthy,
			FailingWindows: failing,
		}
		results, err := g.Run()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			checkLambdaCell(t, r, shards, &summary)
		}
	}
	t.Logf("issue 11 acceptance, global ratio alone (defaults, Shards = ceil(E/500)), c = 10 calls per window:\n%s", summary.String())
}

func checkLambdaCell(t *testing.T, r fleetsim.CellResult, shards int, summary *strings.Builder) {
	t.Helper()
	ratio, floor := globalDefaults.Ratio, globalDefaults.Floor
	if w := r.Windows[0]; !w.Healthy || w.Store.BudgetWrites != 0 {
		t.Errorf("%v: healthy window: healthy %v, %d budget writes", r.Cell, w.Healthy, w.Store.BudgetWrites)
	}
	var shares []string
	worst, over := math.Inf(1), 0.0
	var used, requests int64
	for i, w := range r.Windows {
		u := w.Global.Used()
		used += u
		requests += w.Global.Requests
		if float64(u) > w.CarryBound+1e-9 {
			t.Errorf("%v, window at %v: %d granted; bound Ratio × (%d requests + %d carried) + Floor = %.1f",
				r.Cell, w.Start, u, w.Global.Requests, w.Global.Carried, w.CarryBound)
		}
		t.Logf("%v, window %d (at %v): requests %d, wanted %d, granted %d = %.0f%% of min(wanted, bound %.1f); carried %d (bound with carry %.1f); budget writes %d",
			r.Cell, i, w.Start, w.Global.Requests, w.RetriesWanted, u, 100*w.GrantedShare(), w.Bound, w.Global.Carried, w.CarryBound, w.Store.BudgetWrites)
	}
	if runBound := ratio*float64(requests) + float64(floor*len(r.Windows)); float64(used) > runBound {
		t.Errorf("%v: %d granted over the run; bound Ratio × requests + Floor × windows = %.1f", r.Cell, used, runBound)
	}
	var failingWrites, failingCalls int64
	for i, w := range r.Failing() {
		failingWrites += w.Store.BudgetWrites
		failingCalls += w.Calls
		share := w.GrantedShare()
		shares = append(shares, fmt.Sprintf("%.0f%%", 100*share))
		over = max(over, float64(w.Global.Used())/w.Bound-1)
		if i == 0 {
			continue // the fleet ramps up: reported, not asserted
		}
		worst = min(worst, share)
		if !(share >= 0.9) {
			t.Errorf("%v, failing window %d: granted %d of min(wanted %d, bound %.1f): %.0f%%, want at least 90%%",
				r.Cell, i+1, w.Global.Used(), w.RetriesWanted, w.Bound, 100*share)
		}
	}
	hot := r.Store.Budget
	if hot.PeakWriteUnits >= capacity.ItemWriteUnitsPerSecond || r.Totals.Store.Throttled != 0 {
		t.Errorf("%v: hottest budget item %s took %.0f write units in one second; %d requests throttled",
			r.Cell, hot.WriteItem, hot.PeakWriteUnits, r.Totals.Store.Throttled)
	}
	var refusals, refusalWrites int64
	for _, e := range r.Envs {
		refusals += e.GlobalRefusals
		refusalWrites += e.RefusalWrites
		if e.RefusalWrites > e.GlobalRefusals {
			t.Errorf("%v, %s: %d writes for %d refusals", r.Cell, e.Name, e.RefusalWrites, e.GlobalRefusals)
		}
	}
	fmt.Fprintf(summary, "| %d | %d | %.2f | %d | %s (%s) | %.1f%% | %.0f | %.2f | %.3f |\n",
		r.Cell.Envs, shards, r.Cell.FailureRatio, r.Cell.Seed, strings.Join(shares[1:], ", "), shares[0], 100*over,
		hot.PeakWriteUnits, float64(refusalWrites)/float64(max(refusals, 1)), float64(failingWrites)/float64(max(failingCalls, 1)))
}
