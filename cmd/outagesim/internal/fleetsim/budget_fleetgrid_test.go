package fleetsim_test

import (
	"testing"
	"time"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
)

// TestFleetGridBudget runs the global ratio alone over the fleet-shape grid
// (issue 9: environments × calls per environment per window × failure
// ratio × seeds, simulated time, in-memory stores with DynamoDB's capacity
// model) and prints one row per cell with -v:
//
//	go test -count=1 -run 'TestFleetGridBudget$' -v ./cmd/outagesim/internal/fleetsim/
//
// Under the race detector it runs the reduced grid (fleetsim.GridCells).
// It asserts the Global's bound in every window of every cell: retries
// granted and not given back ≤ Ratio × (requests + requests carried from
// the window before) + Floor (in memory there is no other slack: the
// documented one comes from the DynamoDB client's retries), and that no
// refusal cost more than one write. The acceptance of issue 11 on the
// Lambda-shaped cells is TestGlobalLambdaGrid.
func TestFleetGridBudget(t *testing.T) {
	start := time.Now()
	results, err := fleetsim.BudgetGrid().Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("global ratio over the fleet-shape grid (library defaults, no local layer):\n%s%s",
		fleetsim.BudgetTable(fleetsim.Groups(results)), fleetsim.GridFooter(results, time.Since(start)))
	for _, r := range results {
		for _, w := range r.Windows {
			if used := w.Global.Used(); float64(used) > w.CarryBound+1e-9 {
				t.Errorf("%v, window at %v: %d retries granted and not given back; bound Ratio × (%d requests + %d carried) + Floor = %.1f",
					r.Cell, w.Start, used, w.Global.Requests, w.Global.Carried, w.CarryBound)
			}
		}
		for _, e := range r.Envs {
			if e.RefusalWrites > e.GlobalRefusals {
				t.Errorf("%v, %s: %d writes for %d refusals", r.Cell, e.Name, e.RefusalWrites, e.GlobalRefusals)
			}
		}
	}
}
