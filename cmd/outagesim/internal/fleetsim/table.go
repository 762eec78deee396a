package fleetsim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/herdguard/herdguard/internal/layout"
)

// BreakerTable prints the breaker's grid results as a Markdown table, one
// row per cell, ranges over its seeds:
//   - opened: seeds in which the fleet opened;
//   - after: time from the start of the failures to the fleet's first open;
//   - true p: the failure ratio of the fleet's attempts over the Window
//     before that open (healthy attempts before the failures included);
//   - open by 2W: environments that saw it open within 2 windows of the
//     start of the failures, as a share of the fleet;
//   - healthy reads/call: store reads per call in the healthy window;
//   - breaker WCU/s, RCU/s: the peak units one breaker item took in one
//     second, and the kind of item that took the most write units
//     (ItemKind); the budget's items are in BudgetTable;
//   - throttled: store requests the capacity model throttled.
func BreakerTable(groups []Group) string {
	var b strings.Builder
	b.WriteString("| E | c | p | opened | after | true p | open by 2W | healthy reads/call | breaker WCU/s | item | breaker RCU/s | throttled |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, g := range groups {
		opened := 0
		after, trueP, within, reads := newSpan(), newSpan(), newSpan(), newSpan()
		wcu, rcu, thr := newSpan(), newSpan(), newSpan()
		hot := hotItems(g)
		for _, r := range g {
			if d := r.OpenedAfter(); d != Never {
				opened++
				after.add(d.Seconds())
				trueP.add(r.Breaker.TrueFailureRatio)
			}
			within.add(100 * float64(r.OpenBy(2*r.Window)) / float64(r.Cell.Envs))
			reads.add(r.HealthyReadsPerCall())
			wcu.add(r.Store.Breaker.PeakWriteUnits)
			rcu.add(r.Store.Breaker.PeakReadUnits)
			thr.add(float64(r.Totals.Store.Throttled))
		}
		c := g[0].Cell
		fmt.Fprintf(&b, "| %d | %g | %.2f | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			c.Envs, c.CallsPerWindow, c.FailureRatio, opened, len(g),
			suffix(after.format("%.1f"), "s"), trueP.format("%.2f"), suffix(within.format("%.0f"), "%"),
			reads.format("%.2f"), wcu.format("%.0f"), hot, rcu.format("%.0f"), thr.format("%.0f"))
	}
	return b.String()
}

// BudgetTable prints the global budget's grid results as a Markdown table,
// one row per cell, over its seeds and failing windows:
//   - share min / median: retries the global layer granted (and that were
//     not given back) ÷ min(retries wanted, Ratio × requests + Floor), per
//     window;
//   - used ÷ bound: the largest share of the bound the global layer
//     granted in a window;
//   - all ÷ bound: the same for every retry that went ahead, those made
//     while the global layer abstained included;
//   - abstained: answers "store unavailable" (throttled), after which the
//     retry goes ahead without the global layer (fail open);
//   - writes/refusal: store writes per refusal that reached the store
//     (refusals answered from memory cost none), and the most one refusal
//     made;
//   - writes/call: store writes per call while failing;
//   - budget WCU/s: the peak write units one budget item took in one
//     second;
//   - throttled: store requests the capacity model throttled.
func BudgetTable(groups []Group) string {
	var b strings.Builder
	b.WriteString("| E | c | p | share min | share median | used ÷ bound max | all ÷ bound max | abstained | writes/refusal | writes/call | budget WCU/s | throttled |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range groups {
		var shares []float64
		usedMax, allMax := math.NaN(), math.NaN()
		var maxRefusal int64
		abst, perRefusal, perCall, wcu, thr := newSpan(), newSpan(), newSpan(), newSpan(), newSpan()
		for _, r := range g {
			var writes, calls int64
			for _, w := range r.Failing() {
				shares = append(shares, w.GrantedShare())
				if w.Bound > 0 {
					usedMax = nanMax(usedMax, float64(w.Global.Used())/w.Bound)
					allMax = nanMax(allMax, float64(w.RetriesGranted)/w.Bound)
				}
				writes += w.Store.Writes()
				calls += w.Calls - w.Throttled
			}
			abst.add(float64(r.Totals.Global.Abstained))
			perRefusal.add(ratio(r.Totals.Global.RefusalWrites, r.Totals.Global.StoreRefusals))
			maxRefusal = max(maxRefusal, r.Totals.Global.MaxRefusalWrites)
			perCall.add(ratio(writes, calls))
			wcu.add(r.Store.Budget.PeakWriteUnits)
			thr.add(float64(r.Totals.Store.Throttled))
		}
		lo := math.NaN()
		for _, s := range shares {
			lo = nanMin(lo, s)
		}
		c := g[0].Cell
		fmt.Fprintf(&b, "| %d | %g | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			c.Envs, c.CallsPerWindow, c.FailureRatio, pct(lo), pct(median(shares)), pct(usedMax), pct(allMax),
			abst.format("%.0f"), refusalWrites(perRefusal, maxRefusal), perCall.format("%.3f"), wcu.format("%.0f"), thr.format("%.0f"))
	}
	return b.String()
}

// hotItems returns the kinds of the breaker items that took the most write
// units in g's runs, "/"-separated when they differ.
func hotItems(g Group) string {
	var kinds []string
	for _, r := range g {
		if k := ItemKind(r.Store.Breaker.WriteItem); k != "" && !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return "–"
	}
	return strings.Join(kinds, "/")
}

// ItemKind names the kind of a store item from its key
// (internal/layout): "budget", "state", "override" or "probe"; "" for an
// empty key.
func ItemKind(key string) string {
	switch {
	case key == "":
		return ""
	case strings.HasPrefix(key, layout.BudgetPrefix):
		return "budget"
	case strings.HasSuffix(key, layout.OverrideSuffix):
		return "override"
	case strings.Contains(key, layout.ProbeInfix):
		return "probe"
	}
	return "state"
}

// GridFooter describes a grid run for the printed tables.
func GridFooter(results []CellResult, wall time.Duration) string {
	var calls, events, timeouts int64
	for _, r := range results {
		calls += r.Totals.Calls
		events += r.Events
		timeouts += r.StoreWaitTimeouts
	}
	return fmt.Sprintf("%d runs, %d calls, %d events, %d store waits timed out (real time), %.1f s of wall time",
		len(results), calls, events, timeouts, wall.Seconds())
}

// refusalWrites prints writes per store refusal and the most one made:
// "1.98 (max 2)".
func refusalWrites(per span, most int64) string {
	if per.lo > per.hi {
		return "–"
	}
	return fmt.Sprintf("%s (max %d)", per.format("%.2f"), most)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func suffix(s, unit string) string {
	if s == "–" {
		return s
	}
	return s + unit
}

func nanMin(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Min(a, b)
}

func nanMax(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Max(a, b)
}
