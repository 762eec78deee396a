package fleetsim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

// The fleet-shape grid: environments × calls per environment per
// window × the partner's failure ratio × seeds.
var (
	GridEnvs          = []int{20, 50, 200, 1000}
	GridCalls         = []float64{1, 2, 10, 200}
	GridFailureRatios = []float64{0.05, 0.30, 0.45, 0.70, 1.00}
	GridSeeds         = []uint64{1, 2, 3}
)

// The reduced grid that `go test ./...` runs (the full grid takes minutes
// of CPU, and more under the race detector): a small, a large and the
// largest fleet, the rarest and the Lambda-typical call rate, a partial and
// a total outage, one seed (12 runs). The full grid runs when
// HERDGUARD_GRID=full, without the race detector: CI's step "fleet grid"
// (.ci/run).
var (
	RaceGridEnvs          = []int{20, 200, 1000}
	RaceGridCalls         = []float64{1, 10}
	RaceGridFailureRatios = []float64{0.30, 1.00}
	RaceGridSeeds         = []uint64{1}
)

// The grid's cells at scale: fleets of 10,000 and 100,000 environments,
// the Lambda-typical and the rarest call rate, a partial and a total
// outage, one seed (8 runs, about a minute and a half of CPU each for the
// breaker and the budget). The report (cmd/outagesim report) adds them to
// the grid's tables. The grid tests judge the grid up to 1,000
// environments, where the breaker and the budget keep their promises;
// these cells show how far they hold beyond.
var (
	ScaleGridEnvs          = []int{10_000, 100_000}
	ScaleGridCalls         = []float64{1, 10}
	ScaleGridFailureRatios = []float64{0.30, 1.00}
	ScaleGridSeeds         = []uint64{1}
)

// Cell is one point of the grid.
type Cell struct {
	Envs           int
	CallsPerWindow float64
	FailureRatio   float64
	Seed           uint64
}

// String names the cell: "E=200 c=10 p=0.30 seed=1".
func (c Cell) String() string {
	return fmt.Sprintf("E=%d c=%g p=%.2f seed=%d", c.Envs, c.CallsPerWindow, c.FailureRatio, c.Seed)
}

// FullGridEnv is the environment variable that selects the full grid:
// HERDGUARD_GRID=full.
const FullGridEnv = "HERDGUARD_GRID"

// FullGrid reports whether the full grid was asked for (FullGridEnv is
// "full") and can run (not under the race detector).
func FullGrid() bool { return !RaceEnabled && os.Getenv(FullGridEnv) == "full" }

// GridCells returns the grid's cells in a fixed order (seeds innermost):
// the full grid when FullGrid, otherwise the reduced one.
func GridCells() []Cell {
	if !FullGrid() {
		return Cells(RaceGridEnvs, RaceGridCalls, RaceGridFailureRatios, RaceGridSeeds)
	}
	return Cells(GridEnvs, GridCalls, GridFailureRatios, GridSeeds)
}

// Cells returns the product of the given dimensions, seeds innermost.
func Cells(envs []int, calls, ratios []float64, seeds []uint64) []Cell {
	var cells []Cell
	for _, e := range envs {
		for _, c := range calls {
			for _, p := range ratios {
				for _, s := range seeds {
					cells = append(cells, Cell{Envs: e, CallsPerWindow: c, FailureRatio: p, Seed: s})
				}
			}
		}
	}
	return cells
}

// DefaultFailingWindows is the default of Grid.FailingWindows.
const DefaultFailingWindows = 2

// Grid runs cells of the fleet-shape grid under one strategy. Each cell is
// a fixed fleet of Cell.Envs environments with Poisson arrivals of
// Cell.CallsPerWindow calls per window each, HealthyWindows healthy
// windows, then FailingWindows windows in which the partner fails a random
// Cell.FailureRatio of attempts (from a window boundary, so the first
// failing window follows one with no failure reported), with the capacity
// model on and the library's default windows (10 s).
//
// Environments making up to 10 calls per window (up to 1 call/s) handle
// one invocation at a time, as Lambda does; busier ones (200 per window,
// 20 calls/s: the "few busy environments" shape of the older fleet tests,
// containers rather than Lambda) run any number at once, since one at a
// time they could not keep up with a failing partner.
type Grid struct {
	// Cells to run (GridCells() if nil).
	Cells []Cell
	// Strategy returns the strategy of a run (required); it is called once
	// per cell.
	Strategy func() Strategy
	// HealthyWindows precede the failures (0: none); FailingWindows is
	// how long they last (DefaultFailingWindows if 0).
	HealthyWindows int
	FailingWindows int
	// Parallel is the number of cells run at once (GOMAXPROCS if < 1).
	// Each run is deterministic, so the results do not depend on it.
	Parallel int
}

// Config returns the run of cell c.
func (g Grid) Config(c Cell) Config {
	failing := g.FailingWindows
	if failing <= 0 {
		failing = DefaultFailingWindows
	}
	conc := 1
	if c.CallsPerWindow > 10 {
		conc = -1
	}
	failFrom := time.Duration(g.HealthyWindows) * DefaultWindow
	return Config{
		Seed: c.Seed, Strategy: g.Strategy(),
		Envs: c.Envs, CallsPerWindow: c.CallsPerWindow, Concurrency: conc,
		Partner:  Failing(c.FailureRatio, failFrom, 0),
		Window:   DefaultWindow,
		Duration: failFrom + time.Duration(failing)*DefaultWindow,
	}
}

// CellResult is one cell's run.
type CellResult struct {
	Cell Cell
	*Result
	// FailFrom is when the partner started failing.
	FailFrom time.Duration
}

// Failing returns the windows in which the partner failed.
func (r CellResult) Failing() []Window {
	from := int(r.FailFrom / r.Window)
	to := min(int(r.Duration/r.Window), len(r.Windows))
	if from >= to {
		return nil
	}
	return r.Windows[from:to]
}

// OpenedAfter returns the time from the start of the failures to the
// fleet's first open (Never if it did not open).
func (r CellResult) OpenedAfter() time.Duration {
	if r.Breaker.FleetOpen == Never {
		return Never
	}
	return r.Breaker.FleetOpen - r.FailFrom
}

// OpenBy returns how many environments saw the breaker open by d after the
// start of the failures.
func (r CellResult) OpenBy(d time.Duration) int {
	n := 0
	for _, e := range r.Envs {
		if e.FirstOpen != Never && e.FirstOpen <= r.FailFrom+d {
			n++
		}
	}
	return n
}

// RunCell runs cell c.
func (g Grid) RunCell(c Cell) (CellResult, error) {
	cfg := g.Config(c)
	r, err := Run(cfg)
	if err != nil {
		return CellResult{}, fmt.Errorf("%v: %w", c, err)
	}
	return CellResult{Cell: c, Result: r, FailFrom: cfg.Partner.Phases[0].From}, nil
}

// Run runs every cell, Parallel at a time, and returns the results in the
// cells' order.
func (g Grid) Run() ([]CellResult, error) {
	if g.Strategy == nil {
		return nil, errors.New("fleetsim: Grid.Strategy is nil")
	}
	cells := g.Cells
	if cells == nil {
		cells = GridCells()
	}
	parallel := g.Parallel
	if parallel < 1 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]CellResult, len(cells))
	errs := make([]error, len(cells))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, len(cells)) {
		wg.Go(func() {
			for i := range next {
				out[i], errs[i] = g.RunCell(cells[i])
			}
		})
	}
	for i := range cells {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Group is the results of one cell over its seeds.
type Group []CellResult

// Groups splits results into groups of cells that differ only by seed,
// keeping their order.
func Groups(results []CellResult) []Group {
	var gs []Group
	for _, r := range results {
		k := r.Cell
		if n := len(gs); n > 0 {
			h := gs[n-1][0].Cell
			if h.Envs == k.Envs && h.CallsPerWindow == k.CallsPerWindow && h.FailureRatio == k.FailureRatio {
				gs[n-1] = append(gs[n-1], r)
				continue
			}
		}
		gs = append(gs, Group{r})
	}
	return gs
}

// span is a range of values over seeds, printed "a" or "a–b".
type span struct{ lo, hi float64 }

func newSpan() span { return span{math.Inf(1), math.Inf(-1)} }

func (s *span) add(v float64) {
	if math.IsNaN(v) {
		return
	}
	s.lo, s.hi = math.Min(s.lo, v), math.Max(s.hi, v)
}

func (s span) format(verb string) string {
	switch {
	case s.lo > s.hi:
		return "–"
	case fmt.Sprintf(verb, s.lo) == fmt.Sprintf(verb, s.hi):
		return fmt.Sprintf(verb, s.lo)
	}
	return fmt.Sprintf(verb+"–"+verb, s.lo, s.hi)
}

// median returns the median of vs (NaN values dropped; NaN if none).
func median(vs []float64) float64 {
	vs = slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 1 {
		return vs[n/2]
	} else {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
}

// BreakerGrid is the grid the breaker's tests run: the global ratio and
// the shared breaker with the library's defaults (cmd/outagesim's
// "global-breaker"), one healthy window (for healthy reads per call and a
// first failing window with nothing reported before it), then
// DefaultFailingWindows failing windows.
func BreakerGrid() Grid {
	return Grid{Strategy: func() Strategy { return GlobalBreaker() }, HealthyWindows: 1}
}

// BudgetGrid is the grid the global budget's tests run: the global ratio
// alone with the library's defaults (cmd/outagesim's "global"), failing
// from the start for DefaultFailingWindows windows.
func BudgetGrid() Grid {
	return Grid{Strategy: func() Strategy { return GlobalRatio() }}
}
