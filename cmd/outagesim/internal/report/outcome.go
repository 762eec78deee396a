package report

import (
	"context"
	"math"
	"time"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/sim"
)

// unitsBackend is the in-memory backend with the capacity model's request
// units in each phase's store usage, so that every phase has its units per
// million calls (outagesim itself gives them with DynamoDB only).
type unitsBackend struct{ sim.MemoryBackend }

func (b unitsBackend) Stores(ctx context.Context, now func() time.Time) (sim.Stores, error) {
	s, err := b.MemoryBackend.Stores(ctx, now)
	if err != nil || s.Capacity == nil {
		return s, err
	}
	usage, capacity := s.Usage, s.Capacity
	s.Usage = func() sim.StoreUsage {
		u, c := usage(), capacity()
		u.ReadUnits, u.WriteUnits, u.HasUnits = c.ReadUnits, c.WriteUnits, true
		return u
	}
	return s, nil
}

// scenarioRuns are one scenario's results: runs[seed][strategy].
type scenarioRuns struct {
	Scenario
	seeds   []uint64
	configs []sim.Config
	runs    [][]*sim.Result
}

// column picks a value from one strategy's result (NaN: none).
type column struct {
	Column
	value func(r *sim.Result) float64
	// never is printed when a breaker strategy has no value in any seed.
	never string
}

func durSeconds(d *sim.Duration) float64 {
	if d == nil {
		return math.NaN()
	}
	return time.Duration(*d).Seconds()
}

func orNaN(p *float64, scale float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p * scale
}

func capacityOf(r *sim.Result, f func(c *sim.CapacityUse) float64) float64 {
	if r.Capacity == nil {
		return math.NaN()
	}
	return f(r.Capacity)
}

var outcomeColumns = []column{
	{Column: Column{Key: "load_factor", Header: "load in outage", Digits: 2, Unit: "x"}, value: func(r *sim.Result) float64 { return r.LoadFactor }},
	{Column: Column{Key: "failed_for_good", Header: "failed for good"}, value: func(r *sim.Result) float64 { return float64(r.FailedForGood) }},
	{Column: Column{Key: "throttled", Header: "of them throttled"}, value: func(r *sim.Result) float64 {
		return float64(r.Before.Failed.Throttled + r.Outage.Failed.Throttled + r.After.Failed.Throttled)
	}},
	{Column: Column{Key: "envs", Header: "environments at the end"}, value: func(r *sim.Result) float64 { return float64(r.Envs) }},
	{Column: Column{Key: "granted_over_bound", Header: "retries ÷ bound in outage", Digits: 2}, value: func(r *sim.Result) float64 {
		if r.GlobalRatio == nil {
			return math.NaN()
		}
		return r.GlobalRatio.GrantedOverBound
	}},
	{Column: Column{Key: "breaker_first_open_after", Header: "breaker opened after", Digits: 1, Unit: "s"}, never: "never",
		value: func(r *sim.Result) float64 { return durSeconds(r.BreakerFirstOpen) }},
	{Column: Column{Key: "breaker_first_open_failure_ratio", Header: "true failure ratio then", Unit: "%"},
		value: func(r *sim.Result) float64 { return orNaN(r.BreakerFirstOpenFailureRatio, 100) }},
	{Column: Column{Key: "breaker_open_all_after", Header: "open everywhere after", Digits: 1, Unit: "s"}, never: "never",
		value: func(r *sim.Result) float64 { return durSeconds(r.BreakerOpenAll) }},
	{Column: Column{Key: "store_reads_per_call", Header: "store reads/call", Digits: 3}, value: func(r *sim.Result) float64 { return orNaN(r.StoreReadsPerCall, 1) }},
	{Column: Column{Key: "store_writes_per_call", Header: "store writes/call", Digits: 3}, value: func(r *sim.Result) float64 { return orNaN(r.StoreWritesPerCall, 1) }},
	{Column: Column{Key: "peak_item_wcu", Header: "hottest item WCU/s"}, value: func(r *sim.Result) float64 {
		return capacityOf(r, func(c *sim.CapacityUse) float64 { return c.PeakItemWriteUnits })
	}},
	{Column: Column{Key: "peak_item_rcu", Header: "hottest item RCU/s"}, value: func(r *sim.Result) float64 {
		return capacityOf(r, func(c *sim.CapacityUse) float64 { return c.PeakItemReadUnits })
	}},
	{Column: Column{Key: "throttled_store_requests", Header: "throttled store requests"}, value: func(r *sim.Result) float64 {
		return capacityOf(r, func(c *sim.CapacityUse) float64 { return float64(c.Throttled) })
	}},
}

// phaseUnits returns read and write units per million calls over phases.
func phaseUnits(phases ...*sim.Phase) (read, write float64) {
	var calls int64
	var r, w float64
	for _, p := range phases {
		if p.Store == nil || !p.Store.HasUnits {
			return math.NaN(), math.NaN()
		}
		calls += p.Calls
		r += p.Store.ReadUnits
		w += p.Store.WriteUnits
	}
	if calls == 0 {
		return math.NaN(), math.NaN()
	}
	return 1e6 * r / float64(calls), 1e6 * w / float64(calls)
}

func costColumns(priceRead, priceWrite float64) []column {
	units := func(read bool, pick func(r *sim.Result) []*sim.Phase) func(r *sim.Result) float64 {
		return func(r *sim.Result) float64 {
			rd, wr := phaseUnits(pick(r)...)
			if read {
				return rd
			}
			return wr
		}
	}
	before := func(r *sim.Result) []*sim.Phase { return []*sim.Phase{&r.Before} }
	outage := func(r *sim.Result) []*sim.Phase { return []*sim.Phase{&r.Outage} }
	run := func(r *sim.Result) []*sim.Phase { return []*sim.Phase{&r.Before, &r.Outage, &r.After} }
	return []column{
		{Column: Column{Key: "healthy_read_units_per_million", Header: "healthy RRU / M calls"}, value: units(true, before)},
		{Column: Column{Key: "healthy_write_units_per_million", Header: "healthy WRU / M calls"}, value: units(false, before)},
		{Column: Column{Key: "outage_read_units_per_million", Header: "outage RRU / M calls"}, value: units(true, outage)},
		{Column: Column{Key: "outage_write_units_per_million", Header: "outage WRU / M calls"}, value: units(false, outage)},
		{Column: Column{Key: "run_read_units_per_million", Header: "whole run RRU / M calls"}, value: units(true, run)},
		{Column: Column{Key: "run_write_units_per_million", Header: "whole run WRU / M calls"}, value: units(false, run)},
		{Column: Column{Key: "run_usd_per_million", Header: "whole run $ / M calls", Digits: 3}, value: func(r *sim.Result) float64 {
			rd, wr := phaseUnits(run(r)...)
			return (rd*priceRead + wr*priceWrite) / 1e6
		}},
	}
}

// strategyRows returns a row per strategy of s: its label, then each
// column's range over the seeds. keep selects the strategies.
func strategyRows(s *scenarioRuns, cols []column, lead func(r *sim.Result) []Cell, keep func(r *sim.Result) bool) [][]Cell {
	var rows [][]Cell
	for j, first := range s.runs[0] {
		if !keep(first) {
			continue
		}
		row := lead(first)
		for _, c := range cols {
			vs := make([]float64, len(s.runs))
			for i := range s.runs {
				vs[i] = c.value(s.runs[i][j])
			}
			cell := Span(len(vs), vs...)
			if cell.Min == nil && c.never != "" && first.HasBreaker {
				cell.Text = c.never
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	return rows
}

func headers(lead []Column, cols []column) []Column {
	out := append([]Column(nil), lead...)
	for _, c := range cols {
		out = append(out, c.Column)
	}
	return out
}

// outcomeTable is scenario s's table: a row per strategy.
func outcomeTable(s *scenarioRuns) Table {
	return Table{
		File: s.Table, ID: s.Name,
		Columns: headers([]Column{{Key: "strategy", Header: "strategy"}}, outcomeColumns),
		Rows: strategyRows(s, outcomeColumns, func(r *sim.Result) []Cell { return []Cell{Text("%s", r.Label)} },
			func(*sim.Result) bool { return true }),
	}
}

// costTable has a row per scenario and strategy with shared stores.
func costTable(all []*scenarioRuns) Table {
	var cols []column
	t := Table{File: "cost.md", ID: "cost", Title: "DynamoDB request units per million calls"}
	for _, s := range all {
		c := s.configs[0]
		cols = costColumns(c.PriceRead, c.PriceWrite)
		t.Rows = append(t.Rows, strategyRows(s, cols,
			func(r *sim.Result) []Cell { return []Cell{Text("%s", s.Name), Text("%s", r.Label)} },
			func(r *sim.Result) bool { return r.Before.Store != nil })...)
	}
	if cols == nil {
		cols = costColumns(sim.DefaultPriceRead, sim.DefaultPriceWrite)
	}
	t.Columns = headers([]Column{{Key: "scenario", Header: "scenario"}, {Key: "strategy", Header: "strategy"}}, cols)
	return t
}
