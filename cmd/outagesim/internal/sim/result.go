package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Duration is a time.Duration that encodes to JSON as seconds.
type Duration time.Duration

// MarshalJSON writes the duration in seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(d).Seconds(), 'f', -1, 64), nil
}

// Failures breaks calls that failed for good down by what stopped them.
type Failures struct {
	Partner   int64 `json:"partner"`   // the partner's error was final (attempts used up)
	Budget    int64 `json:"budget"`    // a retry budget refused the next retry
	Breaker   int64 `json:"breaker"`   // a breaker rejected the call or its retry
	Throttled int64 `json:"throttled"` // fleet at its concurrency cap (-scale-out)
	Other     int64 `json:"other"`
}

// Total returns the sum of all failures.
func (f Failures) Total() int64 { return f.Partner + f.Budget + f.Breaker + f.Throttled + f.Other }

// Phase is what happened to the calls scheduled in one phase of the run,
// and what the shared stores did meanwhile.
type Phase struct {
	// From and To bound the phase, in simulated time from the start.
	From Duration `json:"from_seconds"`
	To   Duration `json:"to_seconds"`

	Calls     int64    `json:"calls"`
	Succeeded int64    `json:"succeeded"`
	Failed    Failures `json:"failed"`
	// BreakerBlockedFirst counts calls the breaker rejected before any
	// attempt was sent.
	BreakerBlockedFirst int64 `json:"breaker_blocked_first_attempts"`

	// Store counts the shared stores' requests while the phase's calls were
	// being started (for the last phase: until every call ended and every
	// environment flushed). Nil for strategies without shared stores.
	Store *StoreUsage `json:"store,omitempty"`
	// StoreReadsPerCall and StoreWritesPerCall divide them by Calls.
	StoreReadsPerCall  float64 `json:"store_reads_per_call,omitempty"`
	StoreWritesPerCall float64 `json:"store_writes_per_call,omitempty"`
	// ReadUnitsPerMillion and WriteUnitsPerMillion are DynamoDB on-demand
	// request units per million calls (DynamoDB only).
	ReadUnitsPerMillion  float64 `json:"read_units_per_million_calls,omitempty"`
	WriteUnitsPerMillion float64 `json:"write_units_per_million_calls,omitempty"`
}

// Result is what one strategy did to the partner.
type Result struct {
	Strategy string `json:"strategy"`
	Label    string `json:"label"`
	// HasBreaker tells whether the strategy has a circuit breaker.
	HasBreaker bool `json:"has_breaker"`

	// LoadFactor is attempts reaching the partner during the outage
	// divided by the new calls scheduled during the outage.
	LoadFactor float64 `json:"load_factor"`
	// AttemptsInOutage counts arrivals at the partner in the outage's
	// seconds; FirstAttemptsInOutage those that were first attempts.
	AttemptsInOutage      int64 `json:"attempts_in_outage"`
	FirstAttemptsInOutage int64 `json:"first_attempts_in_outage"`
	// FirstAttemptsAfterOpen counts first attempts reaching the partner
	// during the outage from the first whole second at which the breaker
	// was open in every environment: with a breaker, these are its probes.
	FirstAttemptsAfterOpen *int64 `json:"first_attempts_after_open,omitempty"`

	// The three phases: calls scheduled before, during and after the
	// outage.
	Before Phase `json:"before_outage"`
	Outage Phase `json:"outage"`
	After  Phase `json:"after_outage"`
	// FailedForGood counts calls (from every phase) that ended in an error.
	FailedForGood int64 `json:"failed_for_good"`
	// AttemptsSent counts attempts the fleet sent, whole run.
	AttemptsSent int64 `json:"attempts_sent"`

	// Envs is the number of environments at the end (with -scale-out, the
	// most there ever were).
	Envs int `json:"envs"`
	// BreakerOpenedIn counts environments whose breaker was seen open.
	BreakerOpenedIn int `json:"breaker_opened_in"`
	// BreakerActive counts the environments that matter for BreakerOpenAll:
	// those that saw the breaker open, and those that started a call more
	// than the breaker's CacheTTL after it was first seen open anywhere.
	// (An environment reads the shared state at its calls, at most once per
	// CacheTTL; one that sits idle, as many do with -scale-out, does not.)
	BreakerActive int `json:"breaker_active_envs"`
	// BreakerFirstOpen is the time from the start of the outage until some
	// environment saw the breaker open; nil if none did.
	BreakerFirstOpen *Duration `json:"breaker_first_open_after,omitempty"`
	// BreakerOpenAll is the time from the start of the outage until the
	// breaker was open in every active environment; nil unless it was.
	BreakerOpenAll *Duration `json:"breaker_open_all_after,omitempty"`
	// BreakerFirstOpenFailureRatio is the true failure ratio the fleet had
	// seen when the breaker first opened anywhere: attempts the partner
	// rejected ÷ attempts that reached it, over the breaker's window
	// (BreakerWindow) before that moment. Nil if the breaker never opened.
	BreakerFirstOpenFailureRatio *float64 `json:"breaker_first_open_failure_ratio,omitempty"`
	// BreakerFirstOpenFailureRatio1s is the same over the last second.
	BreakerFirstOpenFailureRatio1s *float64 `json:"breaker_first_open_failure_ratio_last_second,omitempty"`
	BreakerWindow                  Duration `json:"breaker_window_seconds,omitempty"`

	// GlobalRatio is what the global budget granted, and its bound, over
	// the budget windows that overlap the outage (strategies with a global
	// budget only).
	GlobalRatio *RatioBound `json:"global_ratio_in_outage,omitempty"`

	// StoreReadsPerCall and StoreWritesPerCall are the shared stores'
	// requests per new call over the whole run (strategies with shared
	// stores only; the phases break them down).
	StoreReadsPerCall  *float64 `json:"store_reads_per_call,omitempty"`
	StoreWritesPerCall *float64 `json:"store_writes_per_call,omitempty"`

	// Capacity is what DynamoDB's capacity model billed and throttled on
	// the shared stores; nil when the stores are not metered.
	Capacity *CapacityUse `json:"capacity,omitempty"`

	// KeepUp tells whether the machine kept up with the scenario: when it
	// did not, the figures above are not those of the scenario asked for.
	KeepUp KeepUp `json:"keep_up"`

	// Seconds are the partner's per-second counters, from second 0 up to
	// the end of Duration plus the seconds that saw retries after it.
	Seconds []Second `json:"seconds"`

	// FlushError is the error of flushing the environments' pending counts
	// to the shared stores at the end, if any.
	FlushError string `json:"flush_error,omitempty"`

	Wall Duration `json:"wall_seconds"`
	// Clock tells how simulated time ran.
	Clock ClockStats `json:"clock"`
	// SimulatedTail is the simulated time after Duration it took the last
	// calls to finish.
	SimulatedTail Duration `json:"simulated_tail_seconds"`
}

func (rn *run) result(info StrategyInfo, hasStore bool) *Result {
	cfg := rn.cfg
	partner, usage := rn.partner, rn.usage
	secs := partner.Seconds()
	res := &Result{Strategy: info.Key, Label: info.Label(cfg), HasBreaker: info.Breaker, AttemptsSent: rn.tally.attempts.Load()}
	res.KeepUp.Lag = partner.Lag()
	res.KeepUp.FirstAttemptsScheduledInOutage = rn.tally.firstSent[phaseOutage].Load()
	sched := cfg.Schedule()
	for i, s := range secs {
		if sched.InOutage(i) {
			res.AttemptsInOutage += s.Arrivals
			res.FirstAttemptsInOutage += s.FirstAttempts
		}
	}
	// Trim trailing seconds past Duration that saw nothing.
	last := cfg.Seconds()
	for i := last; i < len(secs); i++ {
		if secs[i].Arrivals > 0 {
			last = i + 1
		}
	}
	res.Seconds = secs[:last]
	bounds := [numPhases + 1]time.Duration{0, cfg.OutageStart, cfg.OutageStart + cfg.OutageLength, cfg.Duration}
	prev := StoreUsage{}
	for p, ph := range []*Phase{&res.Before, &res.Outage, &res.After} {
		o := &rn.tally.outcomes[p]
		ph.From, ph.To = Duration(bounds[p]), Duration(bounds[p+1])
		ph.Succeeded = o[Succeeded].Load()
		ph.Failed = Failures{
			Partner:   o[FailedPartner].Load(),
			Budget:    o[FailedBudget].Load(),
			Breaker:   o[FailedBreaker].Load(),
			Throttled: o[FailedThrottled].Load(),
			Other:     o[FailedOther].Load(),
		}
		ph.Calls = ph.Succeeded + ph.Failed.Total()
		ph.BreakerBlockedFirst = rn.tally.blockedFirst[p].Load()
		res.FailedForGood += ph.Failed.Total()
		if hasStore {
			u := usage[p].Sub(prev)
			prev = usage[p]
			ph.Store = &u
			ph.StoreReadsPerCall = perCall(float64(u.Reads), ph.Calls)
			ph.StoreWritesPerCall = perCall(float64(u.Writes), ph.Calls)
			if u.HasUnits {
				ph.ReadUnitsPerMillion = 1e6 * perCall(u.ReadUnits, ph.Calls)
				ph.WriteUnitsPerMillion = 1e6 * perCall(u.WriteUnits, ph.Calls)
			}
		}
	}
	if res.Outage.Calls > 0 {
		res.LoadFactor = float64(res.AttemptsInOutage) / float64(res.Outage.Calls)
	}
	if hasStore {
		calls := res.Before.Calls + res.Outage.Calls + res.After.Calls
		r, w := perCall(float64(usage[2].Reads), calls), perCall(float64(usage[2].Writes), calls)
		res.StoreReadsPerCall, res.StoreWritesPerCall = &r, &w
	}
	if c, ok := rn.strategy.(interface{ CapacityUse() *CapacityUse }); ok {
		res.Capacity = c.CapacityUse()
	}
	if g, ok := rn.strategy.(interface{ GlobalRatioUse() *RatioUse }); ok {
		if use := g.GlobalRatioUse(); use != nil {
			b := use.Over(rn.t0.Add(cfg.OutageStart), rn.t0.Add(cfg.OutageStart+cfg.OutageLength))
			res.GlobalRatio = &b
		}
	}

	rn.mu.Lock()
	envs := append([]*env(nil), rn.envs...)
	rn.mu.Unlock()
	res.Envs = len(envs)
	outageStart := rn.t0.Add(cfg.OutageStart).Sub(rn.epoch)
	first := time.Duration(-1)
	for _, e := range envs {
		if v := e.firstOpen.Load(); v > 0 {
			res.BreakerOpenedIn++
			if first < 0 || time.Duration(v-1) < first {
				first = time.Duration(v - 1)
			}
		}
	}
	if first >= 0 {
		d := Duration(first - outageStart)
		res.BreakerFirstOpen = &d
		window := breakerWindow(cfg)
		res.BreakerWindow = Duration(window)
		at := first - rn.t0.Sub(rn.epoch) // since second 0
		slots := partner.Slots()
		if r, ok := failureRatio(slots, at-window, at); ok {
			res.BreakerFirstOpenFailureRatio = &r
		}
		if r, ok := failureRatio(slots, at-time.Second, at); ok {
			res.BreakerFirstOpenFailureRatio1s = &r
		}
		var latest time.Duration
		all := true
		for _, e := range envs {
			v := e.firstOpen.Load()
			switch {
			case v > 0:
				res.BreakerActive++
				latest = max(latest, time.Duration(v-1))
			case time.Duration(e.lastCall.Load()) > first+breakerCacheTTL:
				res.BreakerActive++
				all = false
			}
		}
		if all {
			d := Duration(latest - outageStart)
			res.BreakerOpenAll = &d
			from := int(math.Ceil((latest - rn.t0.Sub(rn.epoch)).Seconds()))
			var n int64
			for i := max(from, 0); i < len(secs); i++ {
				if sched.InOutage(i) {
					n += secs[i].FirstAttempts
				}
			}
			res.FirstAttemptsAfterOpen = &n
		}
	}
	return res
}

// failureRatio returns rejected ÷ arrivals over the slots in [from, to)
// (times since second 0, rounded to whole slots); false without arrivals.
func failureRatio(slots []Slot, from, to time.Duration) (float64, bool) {
	var arrivals, rejected int64
	for i := max(int(from/SlotLength), 0); i < min(int(to/SlotLength), len(slots)); i++ {
		arrivals += slots[i].Arrivals
		rejected += slots[i].Rejected
	}
	if arrivals == 0 {
		return 0, false
	}
	return float64(rejected) / float64(arrivals), true
}

func perCall(n float64, calls int64) float64 {
	if calls == 0 {
		return 0
	}
	return n / float64(calls)
}

// CapacityUse is the shared stores' consumption as DynamoDB bills it.
type CapacityUse struct {
	// PeakItemWriteUnits and PeakItemReadUnits are the most write and
	// read units one item consumed in one (simulated) second, and
	// HottestWriteItem and HottestReadItem those items' keys.
	PeakItemWriteUnits float64 `json:"peak_item_wcu_per_second"`
	HottestWriteItem   string  `json:"hottest_write_item,omitempty"`
	PeakItemReadUnits  float64 `json:"peak_item_rcu_per_second"`
	HottestReadItem    string  `json:"hottest_read_item,omitempty"`
	// Throttled counts store requests refused past the per-item limits;
	// ThrottledWrites and ThrottledReads break it down.
	Throttled       int64 `json:"throttled"`
	ThrottledWrites int64 `json:"throttled_writes"`
	ThrottledReads  int64 `json:"throttled_reads"`
	// WriteUnits and ReadUnits are the units consumed over the run.
	WriteUnits float64 `json:"write_units"`
	ReadUnits  float64 `json:"read_units"`
	// LargestItem is the largest item written, in bytes.
	LargestItem int `json:"largest_item_bytes"`
}

// Report is the whole run, as printed by -json.
type Report struct {
	Config  ReportConfig `json:"config"`
	Results []*Result    `json:"results"`
}

// ReportConfig is the configuration as JSON shows it.
type ReportConfig struct {
	Fleet           string   `json:"fleet"`
	Envs            int      `json:"envs"`
	Rate            int      `json:"rate"`
	Duration        Duration `json:"duration_seconds"`
	ScaleOut        bool     `json:"scale_out"`
	MaxEnvs         int      `json:"max_envs,omitempty"`
	ScaleRate       int      `json:"scale_rate,omitempty"`
	Outage          string   `json:"outage,omitempty"`
	Capacity        int      `json:"capacity"`
	OutageCapacity  int      `json:"outage_capacity"`
	OutageStart     Duration `json:"outage_start_seconds"`
	OutageLength    Duration `json:"outage_length_seconds"`
	CapacitySlot    Duration `json:"capacity_slot_seconds,omitempty"` // -capacity-slot
	RejectStatus    int      `json:"reject_status"`
	RetryAfter      Duration `json:"retry_after_seconds"`
	Latency         Duration `json:"latency_seconds"`
	Slowdown        Duration `json:"slowdown_seconds"`
	Attempts        int      `json:"attempts"`
	Ratio           float64  `json:"ratio"`
	Window          Duration `json:"window_seconds"`
	FailClosed      bool     `json:"fail_closed,omitempty"`       // -fail-closed
	GlobalWithLocal bool     `json:"global_with_local,omitempty"` // -global-with-local
	Seed            uint64   `json:"seed"`
	Partner         string   `json:"partner"`
	Speed           float64  `json:"speed,omitempty"`
	Store           string   `json:"store"`
	PriceRead       float64  `json:"price_read_per_million_units,omitempty"`
	PriceWrite      float64  `json:"price_write_per_million_units,omitempty"`
}

// NewReport wraps results with the configuration that produced them.
func NewReport(c Config, results []*Result) Report {
	store := "memory"
	if c.DynamoEndpoint != "" {
		store = "dynamodb " + c.DynamoEndpoint
	}
	rc := ReportConfig{
		Fleet: c.Fleet, Outage: c.Outage,
		Envs: c.Envs, Rate: c.Rate, Duration: Duration(c.Duration), ScaleOut: c.ScaleOut,
		Capacity: c.Capacity, OutageCapacity: c.OutageCapacity,
		OutageStart: Duration(c.OutageStart), OutageLength: Duration(c.OutageLength), CapacitySlot: Duration(c.CapacitySlot),
		RejectStatus: c.RejectStatus, RetryAfter: Duration(c.RetryAfter), Latency: Duration(c.Latency),
		Slowdown: Duration(c.Slowdown), Attempts: c.Attempts, Ratio: c.Ratio, Window: Duration(c.Window),
		Seed: c.Seed, Partner: c.Partner, Store: store, FailClosed: c.FailClosed, GlobalWithLocal: c.LocalUnder,
	}
	if c.ScaleOut {
		rc.MaxEnvs, rc.ScaleRate = c.MaxEnvs, c.ScaleRate
	}
	if c.DynamoEndpoint != "" {
		rc.PriceRead, rc.PriceWrite = c.PriceRead, c.PriceWrite
	}
	if c.Partner == PartnerHTTP {
		rc.Speed = c.Speed
	}
	return Report{Config: rc, Results: results}
}

// JSON returns the report, indented.
func (r Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("sim: encode report: %w", err)
	}
	return append(b, '\n'), nil
}
