package sim

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Send makes attempt n (1 for the first attempt) of one call to the
// partner. It returns the response with its body already read and closed,
// or the transport's error.
type Send func(ctx context.Context, n int) (*http.Response, error)

// Outcome is how a logical call ended.
type Outcome uint8

const (
	// Succeeded: some attempt got a 2xx.
	Succeeded Outcome = iota
	// FailedPartner: the partner's error was final (attempts used up, or
	// not retryable).
	FailedPartner
	// FailedBudget: a retry budget refused the next retry.
	FailedBudget
	// FailedBreaker: a circuit breaker rejected the call or its retry.
	FailedBreaker
	// FailedThrottled: no environment was free and the fleet was at its
	// concurrency cap (Lambda throttles the invocation); nothing was sent.
	FailedThrottled
	// FailedOther: anything else (canceled, transport error, store fault
	// that failed the call).
	FailedOther
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"succeeded", "partner", "budget", "breaker", "throttled", "other"}

// String returns a short name for the outcome.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Caller is the retry logic of one execution environment: everything that
// environment keeps in memory (budgets, breaker cache) lives behind it.
// Call may be called concurrently.
type Caller interface {
	Call(ctx context.Context, send Send) (Outcome, error)
}

// TimeSource is the time the strategies see: the simulation's Clock, or a
// manual clock in tests. It is the retry.Clock interface.
type TimeSource interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// EnvSpec describes a new execution environment to a strategy.
type EnvSpec struct {
	// ID numbers environments from 0 in the order they joined.
	ID int
	// Name is unique per environment in a run ("env-17").
	Name string
	// Clock is the simulation's clock; every layer reads time from it.
	Clock TimeSource
	// Rand returns uniformly distributed numbers in [0, 1), seeded from
	// the run's seed and the environment's ID. It is safe for concurrent
	// use.
	Rand func() float64
	// FlushEachCall makes the environment flush its pending counts to the
	// shared stores after every call, as a Lambda handler does before it
	// returns (-fleet lambda).
	FlushEachCall bool
	// BreakerOpen is called when this environment's breaker is seen open
	// (a transition to open, or a call rejected by it). It is cheap and
	// safe for concurrent use; the fleet keeps the first time.
	BreakerOpen func()
}

// StoreUsage counts the calls a strategy made to its shared stores
// (DynamoDB or the in-memory stand-ins), split into reads and writes.
type StoreUsage struct {
	// Reads and Writes count store requests.
	Reads  int64 `json:"reads"`
	Writes int64 `json:"writes"`
	// Errors counts failed store requests (DynamoDB only).
	Errors int64 `json:"errors,omitempty"`
	// ReadUnits and WriteUnits are DynamoDB on-demand request units, when
	// HasUnits (DynamoDB only; the in-memory stores count calls).
	ReadUnits  float64 `json:"read_units,omitempty"`
	WriteUnits float64 `json:"write_units,omitempty"`
	HasUnits   bool    `json:"-"`
}

// Sub returns u − v.
func (u StoreUsage) Sub(v StoreUsage) StoreUsage {
	return StoreUsage{
		Reads: u.Reads - v.Reads, Writes: u.Writes - v.Writes, Errors: u.Errors - v.Errors,
		ReadUnits: u.ReadUnits - v.ReadUnits, WriteUnits: u.WriteUnits - v.WriteUnits,
		HasUnits: u.HasUnits,
	}
}

// Strategy is one retry strategy under test, built fresh for every run.
type Strategy interface {
	// NewEnv returns the retry logic of a new execution environment.
	NewEnv(spec EnvSpec) (Caller, error)
	// StoreUsage returns the shared stores' counters so far; ok is false
	// when the strategy has no shared store.
	StoreUsage() (u StoreUsage, ok bool)
	// Close flushes and releases what the strategy holds.
	Close(ctx context.Context) error
}

// Deps is what a strategy may share across its environments.
type Deps struct {
	Config Config
	Clock  TimeSource
	// Backend provides the shared stores of the global strategies.
	Backend Backend
	// Name is a per-run, per-strategy name for shared budgets and breakers
	// (it passes the name rule of budget.NewGlobal).
	Name string
}

// Factory builds a Strategy for one run.
type Factory func(ctx context.Context, d Deps) (Strategy, error)

// StrategyInfo names a strategy.
type StrategyInfo struct {
	// Key is the name used on the command line and in JSON.
	Key string
	// Shared is true when the strategy uses the shared Backend.
	Shared bool
	// Breaker is true when the strategy has a circuit breaker.
	Breaker bool
	label   func(c Config) string
	build   Factory
}

// Label is the human-readable name used in tables and charts.
func (s StrategyInfo) Label(c Config) string { return s.label(c) }

// Build builds the strategy for one run.
func (s StrategyInfo) Build(ctx context.Context, d Deps) (Strategy, error) {
	return s.build(ctx, d)
}

// Strategies returns every known strategy, in the order they run and show.
//
// Adding one takes an entry here and its Factory: for a retry.Executor
// with other layers, a herdguardStrategy whose layers func builds them per
// environment (over Deps.Backend's stores when Shared). It then appears in
// -strategies, the tables, -json and the chart, in both engines; a
// strategy with a circuit breaker (Breaker) gets the breaker columns by
// calling EnvSpec.BreakerOpen, one with a global budget the grants-over-
// bound column through GlobalRatioUse, one over metered stores the
// capacity columns through CapacityUse.
func Strategies() []StrategyInfo {
	return []StrategyInfo{
		{Key: "none", build: newNoBudget, label: func(c Config) string {
			return fmt.Sprintf("no budget (%d attempts)", c.Attempts)
		}},
		{Key: "sdk", build: newSDK, label: func(Config) string { return "AWS SDK standard retryer" }},
		{Key: "bucket", build: newLocalBucket, label: func(Config) string { return "local token bucket" }},
		{Key: "ratio", build: newLocalRatio, label: func(c Config) string {
			return "local " + percent(c.Ratio) + " ratio"
		}},
		{Key: "global", Shared: true, build: newGlobal, label: func(c Config) string {
			return "global " + percent(c.Ratio) + " ratio" + withLocal(c)
		}},
		{Key: "global-breaker", Shared: true, Breaker: true, build: newGlobalBreaker, label: func(c Config) string {
			return "global ratio + breaker" + withLocal(c)
		}},
		{Key: "global-adaptive", Shared: true, build: newGlobalAdaptive, label: func(c Config) string {
			return "global ratio + adaptive throttling" + withLocal(c)
		}},
	}
}

func withLocal(c Config) string {
	if c.LocalUnder {
		return " (+ local)"
	}
	return ""
}

func percent(r float64) string {
	return strconv.FormatFloat(r*100, 'f', -1, 64) + "%"
}

// StrategyKeys returns the keys of every known strategy, in run order.
func StrategyKeys() []string {
	all := Strategies()
	keys := make([]string, len(all))
	for i, s := range all {
		keys[i] = s.Key
	}
	return keys
}

// LookupStrategies resolves keys, in the order given; duplicates are an
// error.
func LookupStrategies(keys []string) ([]StrategyInfo, error) {
	var out []StrategyInfo
	seen := map[string]bool{}
	for _, k := range keys {
		k = strings.TrimSpace(k)
		if seen[k] {
			return nil, fmt.Errorf("strategy %q listed twice", k)
		}
		seen[k] = true
		found := false
		for _, s := range Strategies() {
			if s.Key == k {
				out = append(out, s)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown strategy %q (known: %s)", k, strings.Join(StrategyKeys(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no strategy selected (known: %s)", strings.Join(StrategyKeys(), ", "))
	}
	return out, nil
}

// noStore is embedded by strategies without shared stores.
type noStore struct{}

func (noStore) StoreUsage() (StoreUsage, bool)  { return StoreUsage{}, false }
func (noStore) Close(ctx context.Context) error { return nil }

// retryAfterHeader reads a delta-seconds Retry-After header (the only form
// the simulated partner sends); anything else reads as no hint.
func retryAfterHeader(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	var secs int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0
		}
		secs = secs*10 + int64(c-'0')
		if secs > 1<<20 {
			return 0
		}
	}
	return time.Duration(secs) * time.Second
}
