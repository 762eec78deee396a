// Package fleet builds, in one call, the retry.Executor that a fleet of
// processes (AWS Lambda execution environments, containers) uses for one
// partner over one DynamoDB table:
//
//	api, err := dynamo.NewClient(ctx, dynamo.ClientOptions{})
//	exec, err := fleet.New(ctx, api, os.Getenv("TABLE_NAME"), "payments", fleet.Config{})
//	// per invocation: exec.Do(ctx, op), or an http.Client over retry.NewTransport(exec, ...),
//	// then exec.Flush(ctx) before the handler returns.
//
// The Executor asks two budgets before every retry and sends every attempt
// through a shared circuit breaker:
//
//  1. a local ratio (local.Ratio) of each environment: Config.Ratio of its
//     requests over a sliding Config.Window, at least Config.LocalFloor (1)
//     a window. It refuses without a store call, and it keeps the fleet
//     bounded whatever the table does: Lambda multiplies a per-environment
//     floor, so it is small;
//  2. the fleet-wide ratio (budget.Global) over the table: Config.Ratio of
//     the fleet's requests per Window, plus Config.Floor (3) a window for
//     the whole fleet. It makes no store call while the partner is healthy.
//     When the table is slow, throttled or unreachable it refuses (it fails
//     closed): a sick table never lifts the fleet's bound;
//  3. the shared breaker (breaker.Breaker), whose state lives in the table:
//     a hard stop by default, adaptive throttling with Breaker.Adaptive, or
//     none with NoBreaker.
//
// New also checks the table and warms up: it reads the breaker's state
// once, within ctx's deadline (and 1 s), which opens the TLS connection the
// first invocation would otherwise pay for inside its 50 ms store timeouts.
// A missing table, missing permissions or a bad name fail New with an error
// naming the table; a slow or throttled table does not (the breaker starts
// on its local state and reads the table again later).
//
// Build the Executor once per execution environment, at package level or in
// the function's init, and keep it: every layer keeps state between
// invocations. ExampleNewWithStores runs the same stack over in-memory
// stores, as a test of code that uses New would. See "Fleet-wide retry
// ratio" and "Circuit breaker" in docs/ARCHITECTURE.md for how the layers
// work.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/internal/names"
	"github.com/herdguard/herdguard/internal/ratio"
	"github.com/herdguard/herdguard/retry"
)

// Config configures New. The zero value is the library's defaults: 10% of
// the requests as retries over 10 s windows, fleet-wide and per
// environment, a floor of 3 retries a window for the fleet and 1 for each
// environment, the breaker's defaults (a hard stop at 50% failures of at
// least 20 calls in 10 s), 3 attempts a call.
type Config struct {
	// Ratio is the number of retries per request, fleet-wide and in each
	// environment: in (0, 1], 0 means 0.1.
	Ratio float64
	// Window is what Ratio is counted over: fixed windows aligned to the
	// Unix epoch fleet-wide, a sliding window in each environment. A whole
	// number of milliseconds from 100 ms to 24 h; 0 means 10 s.
	Window time.Duration
	// Floor is the number of retries the whole fleet may make in a Window
	// however few requests it made (0 means 3; negative, none).
	Floor int
	// LocalFloor is the number of retries each environment may make in a
	// Window however few requests it made: at least 1, 0 means 1. Keep it
	// small: Lambda adds environments, each with a full floor, exactly when
	// the partner is slow.
	LocalFloor int
	// Shards fixes the number of table items one budget window is spread
	// over; 0 (the default) lets the spread size itself to the fleet's
	// writes. See budget.GlobalConfig.Shards.
	Shards int
	// StoreTimeout bounds every table call of the budget and the breaker
	// (0 means 50 ms).
	StoreTimeout time.Duration

	// Breaker configures the shared breaker: its zero fields take their
	// defaults, Adaptive makes it throttle instead of stop, and its hooks
	// (OnStateChange, OnStoreError) report to the caller. Store must be
	// nil (New sets it); a zero StoreTimeout is Config.StoreTimeout and a
	// nil Rand is Retry.Rand.
	Breaker breaker.Settings
	// NoBreaker leaves the breaker out: the budgets alone.
	NoBreaker bool

	// Retry configures the Executor: MaxAttempts, AttemptTimeout,
	// Idempotent, Classifiers, the hooks, Logger, Clock, Rand. Budgets and
	// Breaker must be nil: New sets them. Rand, if set, is also the
	// budget's (and, unless Breaker.Rand is set, the breaker's).
	Retry retry.Config
}

// Defaults of Config that differ from those of the layers.
const (
	defaultLocalFloor = 1
	// warmUpTimeout bounds the warm-up read when ctx allows longer: a cold
	// connection's TCP and TLS handshakes.
	warmUpTimeout = time.Second
)

// New returns the Executor for the partner called name (1 to 128 bytes of
// letters, digits, '-', '_', '.' and ':'; the budget and the breaker are
// called so in table), over the table of api (the client of
// dynamo.NewClient; see dynamo.API). Bad input is a *herdguard.ConfigError
// naming the fleet.Config field; a table that cannot be read (missing,
// forbidden, misnamed) is an error naming it.
func New(ctx context.Context, api dynamo.API, table, name string, cfg Config) (*retry.Executor, error) {
	if err := check(name, cfg); err != nil {
		return nil, err
	}
	budgets, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		return nil, relabel(err, "dynamo.NewBudgetStore ", "fleet.New ")
	}
	breakers, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{Rand: cfg.Retry.Rand})
	if err != nil {
		return nil, relabel(err, "dynamo.NewBreakerStore ", "fleet.New ")
	}
	// The layers first (no I/O): bad config is a ConfigError, whatever
	// the table.
	exec, err := build(budgets, breakers, name, cfg)
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, breakers, table, name, &cfg); err != nil {
		return nil, err
	}
	return exec, nil
}

// check rejects what the layers would reject under other names.
func check(name string, cfg Config) error {
	switch {
	case names.Check(name) != "":
		return &herdguard.ConfigError{Field: "fleet.New name", Reason: names.Check(name)}
	case cfg.Retry.Budgets != nil:
		return &herdguard.ConfigError{Field: "fleet.Config.Retry.Budgets", Reason: "is set; fleet.New sets the budgets"}
	case cfg.Retry.Breaker != nil:
		return &herdguard.ConfigError{Field: "fleet.Config.Retry.Breaker", Reason: "is set; fleet.New sets the breaker"}
	case cfg.Breaker.Store != nil:
		return &herdguard.ConfigError{Field: "fleet.Config.Breaker.Store", Reason: "is set; fleet.New sets the store"}
	case cfg.LocalFloor < 0:
		return &herdguard.ConfigError{Field: "fleet.Config.LocalFloor", Reason: fmt.Sprintf("is %d; want at least 1 (0 for the default %d)", cfg.LocalFloor, defaultLocalFloor)}
	}
	return nil
}

// warmUp reads the breaker's state once: it opens the connection, and a
// table DynamoDB refuses to serve (an answer of 4xx that is not
// throttling: no such table, access denied, an invalid name) fails New.
// Another fault (a timeout, throttling, a 5xx, a malformed item) is
// reported like any store fault, to Breaker.OnStoreError (or, with
// NoBreaker, Retry.OnStoreError as the fleet-wide layer's, 1), and the
// layers deal with the table when they need it.
func warmUp(ctx context.Context, breakers *dynamo.BreakerStore, table, name string, cfg *Config) error {
	wctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	_, err := breakers.Load(wctx, name)
	if err == nil {
		return nil
	}
	var sc interface{ HTTPStatusCode() int }
	if errors.As(err, &sc) && sc.HTTPStatusCode() >= 400 && sc.HTTPStatusCode() < 500 && !errors.Is(err, budget.ErrThrottled) {
		return fmt.Errorf("herdguard: fleet.New: table %q cannot be read: %w", table, err)
	}
	switch {
	case !cfg.NoBreaker && cfg.Breaker.OnStoreError != nil:
		cfg.Breaker.OnStoreError("load", err)
	case cfg.NoBreaker && cfg.Retry.OnStoreError != nil:
		cfg.Retry.OnStoreError(1, err)
	}
	return nil
}

// build assembles the layers over the stores.
func build(budgets budget.Store, breakers breaker.Store, name string, cfg Config) (*retry.Executor, error) {
	localFloor := cfg.LocalFloor
	if localFloor == 0 {
		localFloor = defaultLocalFloor
	}
	local, err := ratio.New(ratio.Config{Ratio: cfg.Ratio, Window: cfg.Window, MinRetries: localFloor})
	if err != nil {
		return nil, relabel(relabel(err, "local.RatioConfig.MinRetries", "fleet.Config.LocalFloor"), "local.RatioConfig.", "fleet.Config.")
	}
	global, err := budget.NewGlobal(budgets, name, budget.GlobalConfig{
		Ratio:        cfg.Ratio,
		Window:       cfg.Window,
		Floor:        cfg.Floor,
		Shards:       cfg.Shards,
		StoreTimeout: cfg.StoreTimeout,
		Rand:         cfg.Retry.Rand,
	})
	if err != nil {
		return nil, relabel(err, "budget.GlobalConfig.", "fleet.Config.")
	}
	rc := cfg.Retry
	rc.Budgets = []budget.Budget{local, global}
	if !cfg.NoBreaker {
		s := cfg.Breaker
		s.Store = breakers
		if s.StoreTimeout == 0 {
			s.StoreTimeout = cfg.StoreTimeout
		}
		if s.Rand == nil {
			s.Rand = cfg.Retry.Rand
		}
		if rc.Breaker, err = breaker.New(name, s); err != nil {
			return nil, relabel(err, "breaker.Settings.", "fleet.Config.Breaker.")
		}
	}
	exec, err := retry.New(rc)
	if err != nil {
		return nil, relabel(err, "retry.Config.", "fleet.Config.Retry.")
	}
	return exec, nil
}

// NewWithStores returns the Executor New builds, over the given stores
// instead of a DynamoDB table, and without New's warm-up read. It is for
// tests of code that uses New (over local.NewBudgetStore and
// local.NewBreakerStore, every environment of a simulated fleet sharing the
// two) and for other backends of the budget and breaker contracts. Bad
// input is a *herdguard.ConfigError naming the fleet.Config field or the
// argument.
func NewWithStores(budgets budget.Store, breakers breaker.Store, name string, cfg Config) (*retry.Executor, error) {
	if budgets == nil {
		return nil, &herdguard.ConfigError{Field: "fleet.NewWithStores budgets", Reason: "must not be nil"}
	}
	if breakers == nil && !cfg.NoBreaker {
		return nil, &herdguard.ConfigError{Field: "fleet.NewWithStores breakers", Reason: "must not be nil unless Config.NoBreaker is set"}
	}
	if err := check(name, cfg); err != nil {
		return nil, err
	}
	return build(budgets, breakers, name, cfg)
}

// relabel renames the field of a *herdguard.ConfigError from a layer's
// name for it to the caller's.
func relabel(err error, from, to string) error {
	var ce *herdguard.ConfigError
	if errors.As(err, &ce) && strings.HasPrefix(ce.Field, from) {
		return &herdguard.ConfigError{Field: to + strings.TrimPrefix(ce.Field, from), Reason: ce.Reason}
	}
	return err
}
