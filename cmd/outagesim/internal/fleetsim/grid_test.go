package fleetsim

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The grid's results do not depend on how many cells run at once, and a
// cell reproduces exactly.
func TestGridDeterministic(t *testing.T) {
	cells := Cells([]int{20, 200}, []float64{2, 10}, []float64{0.3, 1}, []uint64{1})
	g := BreakerGrid()
	g.Cells = cells
	g.Parallel = 1
	one, err := g.Run()
	if err != nil {
		t.Fatal(err)
	}
	g.Parallel = 3
	three, err := g.Run()
	if err != nil {
		t.Fatal(err)
	}
	for i := range cells {
		if !reflect.DeepEqual(comparable(one[i].Result), comparable(three[i].Result)) {
			t.Errorf("%v: results differ between runs", cells[i])
		}
	}
}

func TestGridLayout(t *testing.T) {
	g := BreakerGrid()
	c := Cell{Envs: 20, CallsPerWindow: 200, FailureRatio: 0.3, Seed: 2}
	cfg := g.Config(c)
	if cfg.Envs != 20 || cfg.CallsPerWindow != 200 || cfg.Concurrency != -1 || cfg.Seed != 2 || cfg.NoCapacityModel {
		t.Fatalf("config %+v for %v", cfg, c)
	}
	if cfg.Duration != 3*DefaultWindow || cfg.Partner.HealAt() != Never || cfg.Partner.phaseAt(DefaultWindow).FailureRatio != 0.3 ||
		!cfg.Partner.healthyDuring(0, DefaultWindow) {
		t.Fatalf("want one healthy window, then two at p = 0.3: %+v", cfg)
	}
	if lambda := g.Config(Cell{Envs: 20, CallsPerWindow: 10}); lambda.Concurrency != 1 {
		t.Fatalf("1 call/s per environment runs %d at once; want 1 (Lambda)", lambda.Concurrency)
	}
	r, err := g.RunCell(c)
	if err != nil {
		t.Fatal(err)
	}
	if f := r.Failing(); len(f) != 2 || f[0].Start != DefaultWindow || f[0].Healthy || !r.Windows[0].Healthy {
		t.Fatalf("failing windows %+v", f)
	}
	table := BreakerTable(Groups([]CellResult{r}))
	if !strings.Contains(table, "| 20 | 200 | 0.30 |") {
		t.Fatalf("table has no row for the cell:\n%s", table)
	}
}

// The capacity model bills the shared stores: a total outage writes, and
// a fleet failing at once makes a hot item.
func TestCapacityModel(t *testing.T) {
	cfg := Config{Seed: 1, Strategy: GlobalBreaker(), Envs: 200, CallsPerWindow: 10,
		Partner: Failing(1, 10*time.Second, 0), Duration: 30 * time.Second}
	r := run(t, cfg)
	s := r.Store
	if !s.Metered || r.Totals.Store.WriteUnits < float64(r.Totals.Store.Writes()) || r.Totals.Store.ReadUnits <= 0 ||
		s.Budget.PeakWriteUnits <= 0 || ItemKind(s.Budget.WriteItem) != "budget" ||
		s.Breaker.PeakReadUnits <= 0 || s.Breaker.ReadItem == "" || s.Budget.PeakReadAt != Never || s.LargestItem <= 0 {
		t.Fatalf("store %+v, totals %+v", s, r.Totals.Store)
	}
	if r.Windows[0].Store.Writes() != 0 {
		t.Fatalf("healthy window wrote %d times", r.Windows[0].Store.Writes())
	}
	cfg.NoCapacityModel = true
	off := run(t, cfg)
	if off.Store.Metered || off.Totals.Store.WriteUnits != 0 {
		t.Fatalf("capacity model off: store %+v, totals %+v", off.Store, off.Totals.Store)
	}
}

func TestItemKind(t *testing.T) {
	for key, want := range map[string]string{
		"b#partner#0#1767225600000": "budget",
		"c#partner":                 "state",
		"c#partner#override":        "override",
		"c#partner#p#3":             "probe",
		"":                          "",
	} {
		if got := ItemKind(key); got != want {
			t.Errorf("ItemKind(%q) = %q; want %q", key, got, want)
		}
	}
}
