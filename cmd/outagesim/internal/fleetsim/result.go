package fleetsim

import (
	"math"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// Never marks a time (since the start of the run) that never came.
const Never time.Duration = -1

// Result is what one run measured. Times are simulated time since the start
// of the run; Never means the event did not happen.
type Result struct {
	Seed     uint64
	Window   time.Duration // the length of Windows' windows
	Duration time.Duration // new calls arrived in [0, Duration)
	// End is when the last call ended (calls in flight at Duration run to
	// completion, up to Config.Drain).
	End time.Duration
	// Unfinished counts calls still running (or queued) when the drain
	// ended; they were cut short and are counted in no outcome.
	Unfinished int64

	// Windows are the fleet windows [i×Window, (i+1)×Window) of the run,
	// aligned like the library's (the start of the run is a window
	// boundary); Totals sums them.
	Windows []Window
	Totals  Counts
	// Seconds are the partner's load per simulated second (for charts and
	// load factors over phases that are not whole windows).
	Seconds []Second

	// Envs holds every execution environment, in the order they joined.
	Envs []EnvResult
	// PeakBusy is the most environments busy at once.
	PeakBusy int

	Breaker BreakerResult
	Store   StoreResult

	// StoreWaitTimeouts counts store calls whose real-time wait
	// (StoreTimeout, a context deadline in real time) fired before the
	// in-memory store answered. The store answers at once, so this is 0
	// unless the machine starved a goroutine for that long; a run where it
	// is not 0 is not reproducible.
	StoreWaitTimeouts int64
	// StoreFaults counts store errors the layers reported (OnStoreError of
	// the executor and of the breaker): throttling by the capacity model,
	// items too large, timeouts.
	StoreFaults int64

	// Events is the number of scheduler events processed; Wall the real
	// time the run took (a machine figure, for printing only).
	Events int64
	Wall   time.Duration
}

// Window is one fleet window of a run.
type Window struct {
	Start time.Duration
	Counts
	// Bound is the global ratio's bound for the window, Ratio × Global.
	// Requests + Floor (0 without a global layer); CarryBound adds the
	// requests of the window before that the layer carried into this one,
	// Ratio × (Global.Requests + Global.Carried) + Floor: the documented
	// bound with its slack, which Global.Used() never exceeds.
	Bound      float64
	CarryBound float64
	// Healthy says the partner was healthy throughout the window (no
	// failure probability, no capacity limit) and no attempt failed.
	Healthy bool
}

// Second is what happened in one simulated second: calls that arrived
// (Throttled of them refused by scale-out's cap) and attempts that reached
// the partner.
type Second struct {
	Calls          int64
	Throttled      int64
	Attempts       int64
	FirstAttempts  int64
	FailedAttempts int64
}

// Counts are the counters of one window or of a whole run. Calls and their
// outcomes are counted in the window the call arrived in; attempts, retries
// and store requests in the window they happened in.
type Counts struct {
	// Calls counts logical calls (invocations) that arrived; Throttled
	// those refused because no environment was free and the fleet was at
	// MaxEnvs (Lambda answers 429; nothing is sent).
	Calls     int64
	Throttled int64
	// Outcomes of the calls that ran.
	Succeeded     int64
	FailedPartner int64 // the partner's error was final (attempts used up, not retryable)
	FailedBudget  int64 // a budget refused the retry
	FailedBreaker int64 // the breaker rejected the call or one of its retries
	FailedOther   int64
	// BreakerRejected counts calls whose first attempt the breaker
	// rejected (part of FailedBreaker).
	BreakerRejected int64

	// Attempts that reached the partner: all of them, first attempts, and
	// those that failed.
	Attempts       int64
	FirstAttempts  int64
	FailedAttempts int64

	// RetriesWanted counts failed attempts with attempts left for which the
	// retry loop asked the budgets for a retry; RetriesGranted those every
	// layer granted (with no budget, every one).
	RetriesWanted  int64
	RetriesGranted int64

	Global GlobalCounts
	Store  StoreCounts
}

// GlobalCounts are the global (fleet-wide) budget layer's counters, counted
// at the layer's interface (budget.Budget), so they hold whatever the
// algorithm does inside.
type GlobalCounts struct {
	// Requests counts RecordRequest calls: first attempts the breaker let
	// through, the requests the ratio is over.
	Requests int64
	// Asked counts AcquireRetry calls; Granted those that granted (a grant
	// given back and granted again counts twice), Returned the grants
	// given back unused (RetryNotUsed), Refused the refusals and Abstained
	// the answers "store unavailable" (the layer abstained).
	Asked     int64
	Granted   int64
	Returned  int64
	Refused   int64
	Abstained int64
	// RefusalWrites counts the store writes made by AcquireRetry calls
	// that refused; StoreRefusals those refusals that made at least one
	// (the others were answered from memory), MaxRefusalWrites the most
	// writes one refusal made.
	RefusalWrites    int64
	StoreRefusals    int64
	MaxRefusalWrites int64
	// Carried counts the requests of the window before that a
	// budget.Global layer deposited into this one (its CarriedRequests),
	// the slack of its per-window bound: Used() <= Ratio × (Requests +
	// Carried) + Floor.
	Carried int64
}

// Used returns the retries granted and not given back.
func (g GlobalCounts) Used() int64 { return g.Granted - g.Returned }

// StoreCounts count requests to the shared stores and, with the capacity
// model, what DynamoDB would bill for them.
type StoreCounts struct {
	BudgetWrites  int64 // budget.Store.Apply
	BreakerReads  int64 // breaker.Store.Load
	BreakerWrites int64 // Report, Transition, AcquireProbe, SetOverride
	// ReadUnits and WriteUnits are billed units; Throttled counts requests
	// the capacity model refused (0 without it).
	ReadUnits  float64
	WriteUnits float64
	Throttled  int64
}

// Reads returns the store's read requests.
func (s StoreCounts) Reads() int64 { return s.BreakerReads }

// Writes returns the store's write requests.
func (s StoreCounts) Writes() int64 { return s.BudgetWrites + s.BreakerWrites }

func (c *Counts) add(o *Counts) {
	c.Calls += o.Calls
	c.Throttled += o.Throttled
	c.Succeeded += o.Succeeded
	c.FailedPartner += o.FailedPartner
	c.FailedBudget += o.FailedBudget
	c.FailedBreaker += o.FailedBreaker
	c.FailedOther += o.FailedOther
	c.BreakerRejected += o.BreakerRejected
	c.Attempts += o.Attempts
	c.FirstAttempts += o.FirstAttempts
	c.FailedAttempts += o.FailedAttempts
	c.RetriesWanted += o.RetriesWanted
	c.RetriesGranted += o.RetriesGranted
	g, og := &c.Global, &o.Global
	g.Requests += og.Requests
	g.Asked += og.Asked
	g.Granted += og.Granted
	g.Returned += og.Returned
	g.Refused += og.Refused
	g.Abstained += og.Abstained
	g.RefusalWrites += og.RefusalWrites
	g.StoreRefusals += og.StoreRefusals
	g.MaxRefusalWrites = max(g.MaxRefusalWrites, og.MaxRefusalWrites)
	g.Carried += og.Carried
	s, os := &c.Store, &o.Store
	s.BudgetWrites += os.BudgetWrites
	s.BreakerReads += os.BreakerReads
	s.BreakerWrites += os.BreakerWrites
	s.ReadUnits += os.ReadUnits
	s.WriteUnits += os.WriteUnits
	s.Throttled += os.Throttled
}

// LoadFactor returns attempts ÷ calls that ran (NaN without calls).
func (c Counts) LoadFactor() float64 { return ratio(c.Attempts, c.Calls-c.Throttled) }

// FailureRatio returns the share of attempts that failed (NaN without
// attempts): the true failure ratio the fleet saw.
func (c Counts) FailureRatio() float64 { return ratio(c.FailedAttempts, c.Attempts) }

// EnvResult is one execution environment.
type EnvResult struct {
	ID     int
	Name   string
	Joined time.Duration
	Calls  int64
	// FirstOpen is when its breaker was first seen open (a transition to
	// open it made or read from the store; OnStateChange).
	FirstOpen time.Duration
	// Closed is when its breaker last went to closed after being open or
	// half-open; OpenAtEnd says it was not closed at the end.
	Closed    time.Duration
	OpenAtEnd bool
	// FirstAttemptAfterHeal is when its first attempt at or after the
	// partner healed reached the partner (with an open breaker: its
	// probe, or the first call after the fleet closed).
	FirstAttemptAfterHeal time.Duration
	// GlobalRefusals counts its global budget's refusals, RefusalWrites the
	// store writes they cost.
	GlobalRefusals int64
	RefusalWrites  int64
}

// BreakerResult describes the shared breaker over the run.
type BreakerResult struct {
	// FleetOpen is when the fleet first opened: the first successful
	// Transition to Open in the shared store. TrueFailureRatio is the
	// share of the fleet's attempts that failed over the Window before that
	// moment (TrueAttempts attempts); −1 when it never opened. (Results
	// hold no NaN, so that reflect.DeepEqual compares them.)
	FleetOpen        time.Duration
	TrueFailureRatio float64
	TrueAttempts     int64
	// FirstEnvOpen is when an environment first saw its breaker open (on
	// its local state machine too); EnvsOpened how many ever saw it open.
	FirstEnvOpen time.Duration
	EnvsOpened   int
	// Transitions are the fleet's state changes written to the store.
	Transitions []Transition
	// HealAt is when the partner healed for good (Partner.HealAt).
	// LastClosed is the time from HealAt to the last environment that saw
	// the breaker open going back to closed; StillOpen counts those not
	// closed at the end. Never when the partner never healed or no
	// environment saw the breaker open.
	HealAt     time.Duration
	LastClosed time.Duration
	StillOpen  int
}

// Transition is one fleet state change written to the store.
type Transition struct {
	At    time.Duration
	To    breaker.State
	Epoch uint64
	Env   string // the environment that wrote it
}

// StoreResult is the shared stores' load over the run, from the capacity
// model (zero without it).
type StoreResult struct {
	// Metered says the capacity model billed the stores.
	Metered bool
	// Budget and Breaker are the hottest items of the budget store and of
	// the breaker store.
	Budget, Breaker HotItem
	// LargestItem is the largest item written, in bytes; TooLarge counts
	// writes refused because the item would pass 400 KB.
	LargestItem int
	TooLarge    int64
}

// HotItem is the hottest item of a store: PeakWriteUnits is the most write
// units one item took in one second (WriteItem, in the second starting at
// PeakWriteAt, Never without writes); the same for reads.
type HotItem struct {
	PeakWriteUnits float64
	WriteItem      string
	PeakWriteAt    time.Duration
	PeakReadUnits  float64
	ReadItem       string
	PeakReadAt     time.Duration
}

// Hottest returns the hotter of the two stores' items, by write units.
func (s StoreResult) Hottest() HotItem {
	if s.Breaker.PeakWriteUnits > s.Budget.PeakWriteUnits {
		return s.Breaker
	}
	return s.Budget
}

// OpenWithin returns how many environments saw the breaker open within d
// of the fleet's first open (0 if it never opened).
func (r *Result) OpenWithin(d time.Duration) int {
	if r.Breaker.FleetOpen == Never {
		return 0
	}
	n := 0
	for _, e := range r.Envs {
		if e.FirstOpen != Never && e.FirstOpen <= r.Breaker.FleetOpen+d {
			n++
		}
	}
	return n
}

// WritesPerCall returns store write requests per call that ran.
func (r *Result) WritesPerCall() float64 {
	return ratio(r.Totals.Store.Writes(), r.Totals.Calls-r.Totals.Throttled)
}

// ReadsPerCall returns store read requests per call that ran.
func (r *Result) ReadsPerCall() float64 {
	return ratio(r.Totals.Store.Reads(), r.Totals.Calls-r.Totals.Throttled)
}

// HealthyReadsPerCall returns store reads per call over the windows in
// which no attempt failed and the partner was healthy throughout (NaN if
// there is none).
func (r *Result) HealthyReadsPerCall() float64 {
	var reads, calls int64
	for _, w := range r.Windows {
		if w.Healthy {
			reads += w.Store.Reads()
			calls += w.Calls - w.Throttled
		}
	}
	return ratio(reads, calls)
}

// GrantedShare returns, for window w, the global layer's retries used ÷
// min(retries wanted, bound): how much of what the ratio promises the
// fleet got (NaN when the denominator is 0).
func (w Window) GrantedShare() float64 {
	den := math.Min(float64(w.RetriesWanted), w.Bound)
	if den <= 0 {
		return math.NaN()
	}
	return float64(w.Global.Used()) / den
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
