package sim

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"
)

// Config is one simulation: the fleet, the partner, the retry settings
// every strategy shares and the strategies to run.
type Config struct {
	// Fleet.
	Fleet     string        // FleetBusy or FleetLambda: how calls find an environment (see OneAtATime)
	Envs      int           // execution environments at the start (E)
	Rate      int           // new calls per simulated second, fleet-wide (R)
	Duration  time.Duration // simulated time during which new calls start
	ScaleOut  bool          // one call at a time per environment, new ones join when all are busy
	MaxEnvs   int           // cap on environments with ScaleOut; beyond it calls are throttled
	ScaleRate int           // with ScaleOut, environments that may join per simulated second, bursts of 10 s worth (0 = unlimited)

	// Partner.
	Outage         string        // the outage preset that set OutageCapacity (OutageMajor, OutagePartial), or "" when set by hand
	Capacity       int           // calls served per simulated second, normally
	OutageCapacity int           // calls served per simulated second during the outage
	OutageStart    time.Duration // whole seconds from the start
	OutageLength   time.Duration // whole seconds
	CapacitySlot   time.Duration // capacity enforced per slot of this length, a whole fraction of a second (0 = per second)
	RejectStatus   int           // 503 or 429
	RetryAfter     time.Duration // hint sent with rejections; 0 = none
	Latency        time.Duration // partner service time (simulated)
	Slowdown       time.Duration // extra latency per unit of overload (0 = off)

	// Retry loop, shared by all strategies.
	Attempts       int           // attempts per call, the first included
	TransientBase  time.Duration // full-jitter base after a transient failure
	ThrottlingBase time.Duration // full-jitter base after throttling
	MaxDelay       time.Duration // cap on one backoff

	// Budgets.
	BucketCapacity int           // token bucket (local and SDK)
	TransientCost  int           // token bucket cost of a retry after a transient failure
	ThrottlingCost int           // token bucket cost of a retry after throttling
	Ratio          float64       // retry ratio, local and global
	Window         time.Duration // ratio window, local and global
	MinRetries     int           // local ratio floor per window and environment
	GlobalFloor    int           // global ratio floor per window, fleet-wide (0 = library default, -1 = none)
	GlobalShards   int           // store items one global window is spread over (0 = library default)
	LeaseSize      int           // most retries one global store write withdraws (0 = library default)
	FailClosed     bool          // the global budget refuses retries when its store fails (default: abstains)
	LocalUnder     bool          // the global strategies also get a local ratio budget, asked first
	StoreTimeout   time.Duration // real-time bound on each store call of the global layers (0 = library default)

	// Breaker (global ratio + breaker); zero values take the library defaults.
	BreakerFailureRatio float64
	BreakerMinRequests  int
	BreakerOpen         time.Duration

	// Run.
	Partner    string // PartnerHTTP or PartnerInproc: how the fleet reaches the partner, and whose clock runs
	Seed       uint64
	Speed      float64 // simulated seconds per real second
	Strategies []string

	// DynamoDB (empty endpoint: in-memory shared stores).
	DynamoEndpoint string
	DynamoTable    string // empty: a fresh table per run
	DynamoRegion   string
	// On-demand prices in USD per million request units, for the cost
	// section of the table (DynamoDB only).
	PriceRead  float64
	PriceWrite float64
}

// Fleet shapes (-fleet).
const (
	// FleetBusy is a few busy environments: each call goes to an
	// environment picked at random, which runs any number of calls at once
	// (with -scale-out: one at a time, the most recently used idle one
	// first, a new one joining when none is idle).
	FleetBusy = "busy"
	// FleetLambda is many environments making about one call per second
	// each, as a Lambda fleet does: an environment handles one call at a
	// time; a call goes to an idle environment picked at random, so each
	// of E environments makes about R/E calls per second at random
	// intervals; when none is idle the call is throttled (Lambda at its concurrency limit) or,
	// with -scale-out, a new environment joins; every environment flushes
	// its pending counts after each call, as a Lambda handler does before
	// it returns.
	FleetLambda = "lambda"
)

// Engines (-partner): where the partner lives and what time runs on.
const (
	// PartnerHTTP is a real net/http partner on loopback and simulated
	// time running -speed times faster than real time: real I/O, real
	// goroutine scheduling, and the keep-up checks (KeepUp).
	PartnerHTTP = "http"
	// PartnerInproc calls the same partner in process on a discrete-event
	// scheduler (internal/fleetsim): virtual time, no real waiting, the
	// same seed giving the same run (except the AWS SDK's jitter), so
	// fleets of 10,000 environments fit on a 2-core machine. The library
	// code under test is the same.
	PartnerInproc = "inproc"
)

// Outage presets (-outage): the partner's capacity during the outage as a
// fraction of its normal capacity.
const (
	// OutageMajor keeps a fifth of the capacity (300 of 1,500/s against
	// 1,000 new calls/s): about 73% of the attempts a 10% budget lets
	// through fail, and the shared breaker (50%) opens.
	OutageMajor = "major"
	// OutagePartial keeps half of it (750/s): 25% of first attempts fail,
	// about 30% of the attempts a 10% budget lets through, well under the
	// breaker's 50%, which should stay closed.
	OutagePartial = "partial"
)

// OutageCapacityFor returns the outage capacity of preset for a normal
// capacity.
func OutageCapacityFor(preset string, capacity int) (int, bool) {
	switch preset {
	case OutageMajor:
		return capacity / 5, true
	case OutagePartial:
		return capacity / 2, true
	}
	return 0, false
}

// The -fleet lambda preset: 1,000 environments, one call per second each.
const (
	LambdaEnvs    = 1000
	LambdaRate    = 1000
	LambdaMaxEnvs = 10_000
	// LambdaScaleRate is Lambda's scaling limit: 1,000 environments per 10
	// seconds per function.
	LambdaScaleRate = 100
)

// Default values.
const (
	DefaultEnvs     = 50
	DefaultRate     = 1000
	DefaultDuration = 60 * time.Second
	DefaultMaxEnvs  = 1000
	DefaultCapacity = 1500
	// DefaultOutageCapacity makes the default outage a major one: a fifth
	// of the normal capacity, so that even the retries a 10% budget lets
	// through leave most calls failing and the shared breaker, which trips
	// at 50% failures, opens. 600 (-outage-capacity 600) is a partial
	// outage: the fleet sees about 45% failures and the breaker rightly
	// stays closed.
	DefaultOutageCapacity = 300
	DefaultOutageStart    = 20 * time.Second
	DefaultOutageLength   = 20 * time.Second
	DefaultRetryAfter     = time.Second
	DefaultLatency        = 20 * time.Millisecond
	DefaultAttempts       = 3
	DefaultTransientBase  = 50 * time.Millisecond
	DefaultThrottlingBase = time.Second
	DefaultMaxDelay       = 20 * time.Second
	DefaultBucketCapacity = 500
	DefaultTransientCost  = 14
	DefaultThrottlingCost = 5
	DefaultRatio          = 0.1
	DefaultWindow         = 10 * time.Second
	DefaultMinRetries     = 3
	DefaultSeed           = 42
	// DefaultSpeed runs simulated time 10 times faster than real time:
	// the default 60 simulated seconds take 6 s of wall time per strategy.
	DefaultSpeed = 10
	// DefaultDynamoSpeed is the default speed with -dynamodb-endpoint:
	// real time, because DynamoDB calls are real I/O with real timeouts
	// and DynamoDB Local serialises the writes to one item (a few hundred
	// per second).
	DefaultDynamoSpeed = 1
	// DefaultPriceRead and DefaultPriceWrite are DynamoDB on-demand prices
	// in us-east-1 (USD per million read / write request units, as of the
	// November 2024 price cut); check the current ones for your region.
	DefaultPriceRead    = 0.125
	DefaultPriceWrite   = 0.625
	DefaultDynamoRegion = "us-east-1"
)

// DefaultConfig returns the defaults: 50 environments, 1,000 new calls/s for
// 60 s, a partner serving 1,500 calls/s that drops to 300/s (a major outage)
// from second 20 to second 39, 3 attempts, a 10% ratio over 10 s, every
// strategy.
func DefaultConfig() Config {
	return Config{
		Fleet:          FleetBusy,
		Outage:         OutageMajor,
		Partner:        PartnerHTTP,
		Envs:           DefaultEnvs,
		Rate:           DefaultRate,
		Duration:       DefaultDuration,
		MaxEnvs:        DefaultMaxEnvs,
		Capacity:       DefaultCapacity,
		OutageCapacity: DefaultOutageCapacity,
		OutageStart:    DefaultOutageStart,
		OutageLength:   DefaultOutageLength,
		RejectStatus:   http.StatusServiceUnavailable,
		RetryAfter:     DefaultRetryAfter,
		Latency:        DefaultLatency,
		Attempts:       DefaultAttempts,
		TransientBase:  DefaultTransientBase,
		ThrottlingBase: DefaultThrottlingBase,
		MaxDelay:       DefaultMaxDelay,
		BucketCapacity: DefaultBucketCapacity,
		TransientCost:  DefaultTransientCost,
		ThrottlingCost: DefaultThrottlingCost,
		Ratio:          DefaultRatio,
		Window:         DefaultWindow,
		MinRetries:     DefaultMinRetries,
		Seed:           DefaultSeed,
		Speed:          DefaultSpeed,
		Strategies:     StrategyKeys(),
		DynamoRegion:   DefaultDynamoRegion,
		PriceRead:      DefaultPriceRead,
		PriceWrite:     DefaultPriceWrite,
	}
}

// LambdaConfig returns the defaults with the -fleet lambda preset.
func LambdaConfig() Config {
	c := DefaultConfig()
	c.Fleet = FleetLambda
	c.Envs, c.Rate, c.MaxEnvs, c.ScaleRate = LambdaEnvs, LambdaRate, LambdaMaxEnvs, LambdaScaleRate
	c.Partner = PartnerInproc
	return c
}

// OneAtATime tells whether an environment handles one call at a time
// (-fleet lambda, or -scale-out).
func (c Config) OneAtATime() bool { return c.ScaleOut || c.Fleet == FleetLambda }

// Schedule returns the partner's capacity schedule.
func (c Config) Schedule() Schedule {
	return Schedule{Normal: c.Capacity, Outage: c.OutageCapacity, OutageStart: c.OutageStart, OutageLength: c.OutageLength, Slot: c.CapacitySlot}
}

// Seconds returns the number of whole simulated seconds new calls start in.
func (c Config) Seconds() int { return int(c.Duration / time.Second) }

// TotalCalls returns the number of new calls a run starts.
func (c Config) TotalCalls() int64 { return int64(c.Rate) * int64(c.Seconds()) }

// Validate reports every bad field, each named by its flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s: "+format, append([]any{flag}, args...)...))
	}
	wholeSeconds := func(flag string, d time.Duration, allowZero bool) {
		switch {
		case d < 0 || (!allowZero && d == 0):
			bad(flag, "%v must be positive", d)
		case d%time.Second != 0:
			bad(flag, "%v must be a whole number of seconds", d)
		}
	}
	if c.Fleet != FleetBusy && c.Fleet != FleetLambda {
		bad("fleet", "%q must be %s or %s", c.Fleet, FleetBusy, FleetLambda)
	}
	if c.Outage != "" {
		if want, ok := OutageCapacityFor(c.Outage, c.Capacity); !ok {
			bad("outage", "%q must be %s or %s", c.Outage, OutageMajor, OutagePartial)
		} else if c.OutageCapacity != want {
			bad("outage", "%s sets -outage-capacity %d (of -capacity %d), not %d: set one or the other", c.Outage, want, c.Capacity, c.OutageCapacity)
		}
	}
	switch c.Partner {
	case PartnerHTTP:
	case PartnerInproc:
		if c.DynamoEndpoint != "" {
			bad("partner", "%s needs the in-memory stores: DynamoDB calls are real I/O, which virtual time cannot wait for (use -partner %s with -dynamodb-endpoint)", PartnerInproc, PartnerHTTP)
		}
	default:
		bad("partner", "%q must be %s or %s", c.Partner, PartnerHTTP, PartnerInproc)
	}
	if c.ScaleRate < 0 {
		bad("scale-rate", "%d is negative", c.ScaleRate)
	}
	if c.Envs < 1 || c.Envs > 100_000 {
		bad("envs", "%d must be between 1 and 100000", c.Envs)
	}
	if c.Rate < 1 || c.Rate > 1_000_000 {
		bad("rate", "%d must be between 1 and 1000000", c.Rate)
	}
	wholeSeconds("duration", c.Duration, false)
	if c.Duration > 24*time.Hour {
		bad("duration", "%v is longer than 24h", c.Duration)
	}
	if c.ScaleOut && c.MaxEnvs < c.Envs {
		bad("max-envs", "%d is below -envs %d", c.MaxEnvs, c.Envs)
	}
	if c.MaxEnvs < 0 || c.MaxEnvs > 100_000 {
		bad("max-envs", "%d must be between 0 and 100000", c.MaxEnvs)
	}
	if c.Capacity < 0 {
		bad("capacity", "%d is negative", c.Capacity)
	}
	if c.OutageCapacity < 0 {
		bad("outage-capacity", "%d is negative", c.OutageCapacity)
	}
	if sl := c.CapacitySlot; sl < 0 || sl > time.Second || (sl > 0 && (sl < time.Millisecond || time.Second%sl != 0)) {
		bad("capacity-slot", "%v must be 0 (per second) or a whole fraction of a second, at least 1ms", sl)
	}
	wholeSeconds("outage-start", c.OutageStart, true)
	wholeSeconds("outage-length", c.OutageLength, false)
	if c.OutageStart >= 0 && c.OutageLength > 0 && c.OutageStart+c.OutageLength > c.Duration {
		bad("outage-length", "the outage (%v from %v) ends after -duration %v", c.OutageLength, c.OutageStart, c.Duration)
	}
	if c.RejectStatus != http.StatusServiceUnavailable && c.RejectStatus != http.StatusTooManyRequests {
		bad("reject-status", "%d must be 503 or 429", c.RejectStatus)
	}
	if c.RetryAfter < 0 || c.RetryAfter > time.Hour {
		bad("retry-after", "%v must be between 0 and 1h", c.RetryAfter)
	}
	if c.Latency < 0 || c.Latency > time.Minute {
		bad("latency", "%v must be between 0 and 1m", c.Latency)
	}
	if c.Slowdown < 0 || c.Slowdown > time.Minute {
		bad("slowdown", "%v must be between 0 and 1m", c.Slowdown)
	}
	if c.Attempts < 1 || c.Attempts > 100 {
		bad("attempts", "%d must be between 1 and 100", c.Attempts)
	}
	if c.TransientBase <= 0 {
		bad("transient-base", "%v must be positive", c.TransientBase)
	}
	if c.ThrottlingBase <= 0 {
		bad("throttling-base", "%v must be positive", c.ThrottlingBase)
	}
	if c.MaxDelay < c.TransientBase || c.MaxDelay < c.ThrottlingBase {
		bad("max-delay", "%v is below -transient-base %v or -throttling-base %v", c.MaxDelay, c.TransientBase, c.ThrottlingBase)
	}
	if c.TransientCost < 1 {
		bad("transient-cost", "%d must be at least 1", c.TransientCost)
	}
	if c.ThrottlingCost < 1 {
		bad("throttling-cost", "%d must be at least 1", c.ThrottlingCost)
	}
	if c.BucketCapacity < max(c.TransientCost, c.ThrottlingCost) {
		bad("bucket-capacity", "%d is below a retry's cost (transient %d, throttling %d)", c.BucketCapacity, c.TransientCost, c.ThrottlingCost)
	}
	if math.IsNaN(c.Ratio) || c.Ratio <= 0 || c.Ratio > 1 {
		bad("ratio", "%v must be in (0, 1]", c.Ratio)
	}
	if c.Window < time.Second || c.Window%time.Millisecond != 0 {
		bad("window", "%v must be at least 1s and a whole number of milliseconds", c.Window)
	}
	if c.MinRetries < 1 {
		bad("min-retries", "%d must be at least 1", c.MinRetries)
	}
	if c.GlobalFloor < -1 {
		bad("global-floor", "%d must be -1 (no floor), 0 (library default) or positive", c.GlobalFloor)
	}
	if c.GlobalShards < 0 {
		bad("global-shards", "%d is negative", c.GlobalShards)
	}
	if c.StoreTimeout < 0 || c.StoreTimeout > time.Minute {
		bad("store-timeout", "%v must be between 0 and 1m", c.StoreTimeout)
	}
	if c.LeaseSize < 0 {
		bad("lease-size", "%d is negative", c.LeaseSize)
	}
	if math.IsNaN(c.BreakerFailureRatio) || c.BreakerFailureRatio < 0 || c.BreakerFailureRatio > 1 {
		bad("breaker-failure-ratio", "%v must be in [0, 1] (0 = library default)", c.BreakerFailureRatio)
	}
	if c.BreakerMinRequests < 0 {
		bad("breaker-min-requests", "%d is negative", c.BreakerMinRequests)
	}
	if c.BreakerOpen < 0 {
		bad("breaker-open", "%v is negative", c.BreakerOpen)
	}
	if math.IsNaN(c.Speed) || c.Speed <= 0 || c.Speed > 1000 {
		bad("speed", "%v must be in (0, 1000]", c.Speed)
	}
	if _, err := LookupStrategies(c.Strategies); err != nil {
		bad("strategies", "%v", err)
	}
	if c.DynamoEndpoint != "" {
		u, err := url.Parse(c.DynamoEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("dynamodb-endpoint", "%q is not an http(s) URL", c.DynamoEndpoint)
		}
		if c.DynamoRegion == "" {
			bad("dynamodb-region", "is empty")
		}
	}
	if math.IsNaN(c.PriceRead) || c.PriceRead < 0 {
		bad("price-read", "%v must not be negative", c.PriceRead)
	}
	if math.IsNaN(c.PriceWrite) || c.PriceWrite < 0 {
		bad("price-write", "%v must not be negative", c.PriceWrite)
	}
	if c.DynamoTable != "" && !validTableName(c.DynamoTable) {
		bad("dynamodb-table", "%q must be 3 to 255 characters of a-z, A-Z, 0-9, '_', '-' and '.'", c.DynamoTable)
	}
	return errors.Join(errs...)
}

func validTableName(s string) bool {
	if len(s) < 3 || len(s) > 255 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}
