package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
)

// gridCells returns the fleet-shape grid's cells over seeds: the grid of
// internal/fleetsim (the one CI runs with HERDGUARD_GRID=full) and its
// cells at scale (fleetsim.ScaleGridEnvs: the first seed only), or with
// quick a small corner of it.
func gridCells(seeds []uint64, quick bool) []fleetsim.Cell {
	if quick {
		return fleetsim.Cells([]int{20, 200}, []float64{1}, []float64{0.30, 1.00}, seeds[:1])
	}
	cells := fleetsim.Cells(fleetsim.GridEnvs, fleetsim.GridCalls, fleetsim.GridFailureRatios, seeds)
	return append(cells, fleetsim.Cells(fleetsim.ScaleGridEnvs, fleetsim.ScaleGridCalls, fleetsim.ScaleGridFailureRatios, seeds[:1])...)
}

// gridWeight estimates a cell's cost: the calls it makes.
func gridWeight(g fleetsim.Grid, c fleetsim.Cell) float64 {
	cfg := g.Config(c)
	return float64(c.Envs) * c.CallsPerWindow * float64(cfg.Duration/cfg.Window)
}

func cellLead(g fleetsim.Group) []Cell {
	c := g[0].Cell
	return []Cell{Text("%d", c.Envs), Text("%g", c.CallsPerWindow), Text("%.2f", c.FailureRatio)}
}

var cellColumns = []Column{{Key: "envs", Header: "E"}, {Key: "calls_per_window", Header: "c"}, {Key: "failure_ratio", Header: "p"}}

// breakerGridTable is the shared breaker over the grid (global ratio +
// breaker, library defaults), a row per cell, ranges over its seeds.
func breakerGridTable(groups []fleetsim.Group) Table {
	t := Table{File: "grid.md", ID: "grid-breaker", Title: "Shared breaker (global ratio + breaker)",
		Note: "E environments making c calls per 10 s window each, the partner failing a random p of attempts for two windows after one healthy window. " +
			"opened: seeds in which the fleet opened; after: from the start of the failures to the first open; true p: the failure ratio of the fleet's attempts over the window before it; " +
			"open by 2W: environments open within two windows, share of the fleet; reads/call: store reads per call while healthy; breaker WCU/s, RCU/s: the most units one breaker item took in one second; throttled: store requests past DynamoDB's per-item limits.",
		Columns: append(append([]Column(nil), cellColumns...),
			Column{Key: "opened", Header: "opened"},
			Column{Key: "opened_after", Header: "after", Digits: 1, Unit: "s"},
			Column{Key: "true_failure_ratio", Header: "true p", Digits: 2},
			Column{Key: "open_by_2w", Header: "open by 2W", Unit: "%"},
			Column{Key: "healthy_reads_per_call", Header: "healthy reads/call", Digits: 2},
			Column{Key: "breaker_wcu", Header: "breaker WCU/s"},
			Column{Key: "breaker_rcu", Header: "breaker RCU/s"},
			Column{Key: "throttled", Header: "throttled"}),
	}
	for _, g := range groups {
		n := len(g)
		var after, trueP, within, reads, wcu, rcu, thr []float64
		opened := 0
		for _, r := range g {
			if d := r.OpenedAfter(); d != fleetsim.Never {
				opened++
				after = append(after, d.Seconds())
				trueP = append(trueP, r.Breaker.TrueFailureRatio)
			}
			within = append(within, 100*float64(r.OpenBy(2*r.Window))/float64(r.Cell.Envs))
			reads = append(reads, r.HealthyReadsPerCall())
			wcu = append(wcu, r.Store.Breaker.PeakWriteUnits)
			rcu = append(rcu, r.Store.Breaker.PeakReadUnits)
			thr = append(thr, float64(r.Totals.Store.Throttled))
		}
		row := append(cellLead(g), Text("%d/%d", opened, n),
			Span(opened, after...), Span(opened, trueP...), Span(n, within...), Span(n, reads...),
			Span(n, wcu...), Span(n, rcu...), Span(n, thr...))
		t.Rows = append(t.Rows, row)
	}
	return t
}

// budgetGridTable is the global ratio alone over the grid, a row per cell.
func budgetGridTable(groups []fleetsim.Group) Table {
	t := Table{File: "grid.md", ID: "grid-budget", Title: "Global ratio",
		Note: "The same grid, the partner failing from the start for two windows. share: retries the global budget granted (and that were used) ÷ min(retries wanted, its bound Ratio × requests + Floor), per failing window, lowest and median over windows and seeds; " +
			"used ÷ bound: the largest share of the bound granted in a window; abstained: answers \"store unavailable\" (the retry went ahead without the global layer); writes/call: store writes per call while failing; budget WCU/s: the most units one budget item took in one second.",
		Columns: append(append([]Column(nil), cellColumns...),
			Column{Key: "share_min", Header: "share min", Unit: "%"},
			Column{Key: "share_median", Header: "share median", Unit: "%"},
			Column{Key: "used_over_bound_max", Header: "used ÷ bound max", Unit: "%"},
			Column{Key: "abstained", Header: "abstained"},
			Column{Key: "writes_per_call", Header: "writes/call", Digits: 3},
			Column{Key: "budget_wcu", Header: "budget WCU/s"},
			Column{Key: "throttled", Header: "throttled"}),
	}
	for _, g := range groups {
		n := len(g)
		var shares, abst, perCall, wcu, thr []float64
		usedMax := math.NaN()
		for _, r := range g {
			var writes, calls int64
			for _, w := range r.Failing() {
				shares = append(shares, 100*w.GrantedShare())
				if w.Bound > 0 {
					usedMax = nanMax(usedMax, 100*float64(w.Global.Used())/w.Bound)
				}
				writes += w.Store.Writes()
				calls += w.Calls - w.Throttled
			}
			abst = append(abst, float64(r.Totals.Global.Abstained))
			perCall = append(perCall, ratio(writes, calls))
			wcu = append(wcu, r.Store.Budget.PeakWriteUnits)
			thr = append(thr, float64(r.Totals.Store.Throttled))
		}
		all := Span(len(shares), shares...)
		lo, med := Span(1), Span(1)
		if all.Min != nil {
			lo, med = Span(1, *all.Min), Span(1, median(all.Values))
		}
		row := append(cellLead(g), lo, med, Span(1, usedMax),
			Span(n, abst...), Span(n, perCall...), Span(n, wcu...), Span(n, thr...))
		t.Rows = append(t.Rows, row)
	}
	return t
}

func nanMax(a, b float64) float64 {
	if math.IsNaN(a) {
		return b
	}
	return math.Max(a, b)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func median(vs []float64) float64 {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// gridSummary is a line on the grid's size.
func gridSummary(results []fleetsim.CellResult) string {
	var calls, events int64
	for _, r := range results {
		calls += r.Totals.Calls
		events += r.Events
	}
	return fmt.Sprintf("%d runs, %d calls, %d scheduler events", len(results), calls, events)
}
