package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// Log messages that operators (and the fleet test) search for.
const (
	msgBudgetStoreUnavailable  = "retry budget store unavailable; the layer abstained"
	msgBreakerStoreUnavailable = "breaker store failed; using local state"
	msgBreakerStateChanged     = "breaker state changed"
)

// The CloudWatch namespace and dimensions of the function's metrics (package
// emf names the metrics). template.yaml's alarms name exactly these.
const (
	metricNamespace = "Herdguard"
	dimFunction     = "FunctionName"
	dimPartner      = "Partner"
)

// warmUpTimeout bounds the DynamoDB call made during initialisation to open
// the connection (see setup).
const warmUpTimeout = time.Second

// deps are what newFunction takes besides the configuration: the stores
// (DynamoDB in production, in-memory in tests), the clock and where metrics
// and logs go.
type deps struct {
	budgetStore  budget.Store
	breakerStore breaker.Store
	// clock drives the executor, the global budget and the metrics'
	// timestamps; nil means the system clock.
	clock retry.Clock
	// rand is the jitter source of the executor and the breaker; nil means
	// math/rand/v2.
	rand func() float64
	// metrics receives the Embedded Metric Format lines (stdout in Lambda).
	metrics io.Writer
	// logger is where the function logs; newFunction adds the request id of
	// the invocation to each record.
	logger *slog.Logger
}

// newRecorder returns the function's metrics recorder: the namespace and
// dimensions template.yaml's alarms watch.
func newRecorder(w io.Writer, cfg Config, now func() time.Time) (*emf.Recorder, error) {
	return emf.New(w, emf.Options{
		Namespace:  metricNamespace,
		Dimensions: map[string]string{dimFunction: cfg.FunctionName, dimPartner: cfg.Name},
		Now:        now,
	})
}

// newFunction builds the executor: a local ratio budget with a small floor,
// then the fleet-wide budget, behind the shared breaker.
func newFunction(cfg Config, d deps) (*function, error) {
	switch {
	case d.budgetStore == nil:
		return nil, errors.New("bikes: budget store is nil")
	case d.breakerStore == nil:
		return nil, errors.New("bikes: breaker store is nil")
	case d.metrics == nil:
		return nil, errors.New("bikes: metrics writer is nil")
	case d.logger == nil:
		return nil, errors.New("bikes: logger is nil")
	case cfg.PartnerURL == nil:
		return nil, errors.New("bikes: partner URL is nil")
	}
	now := time.Now
	if d.clock != nil {
		now = d.clock.Now
	}
	metrics, err := newRecorder(d.metrics, cfg, now)
	if err != nil {
		return nil, fmt.Errorf("bikes: metrics: %w", err)
	}
	inflight := &invocations{}
	logger := slog.New(withRequestID(d.logger.Handler(), inflight))

	localBudget, err := local.NewRatio(local.RatioConfig{
		Ratio:      cfg.Ratio,
		Window:     cfg.Window,
		MinRetries: cfg.LocalFloor,
	})
	if err != nil {
		return nil, fmt.Errorf("bikes: local budget: %w", err)
	}
	floor := cfg.Floor
	if floor == 0 {
		floor = -1 // GlobalConfig: negative means no floor, zero the default
	}
	global, err := budget.NewGlobal(d.budgetStore, cfg.Name, budget.GlobalConfig{
		Ratio:        cfg.Ratio,
		Window:       cfg.Window,
		Floor:        floor,
		Shards:       cfg.Shards,
		StoreTimeout: cfg.StoreTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("bikes: global budget: %w", err)
	}
	br, err := breaker.New(cfg.Name, breaker.Settings{
		FailureRatio: cfg.FailureRatio,
		MinRequests:  cfg.MinRequests,
		Window:       cfg.BreakerWindow,
		OpenDuration: cfg.OpenDuration,
		Rand:         d.rand,
		Store:        d.breakerStore,
		CacheTTL:     cfg.CacheTTL,
		StoreTimeout: cfg.StoreTimeout,
		OnStateChange: func(c breaker.StateChange) {
			// One event per fleet transition is "written" (the environment
			// that made it); the others followed it.
			metrics.StateChange(c)
			logger.LogAttrs(context.Background(), slog.LevelWarn, msgBreakerStateChanged,
				slog.String("breaker", c.Name), slog.String("from", c.From.String()), slog.String("to", c.To.String()),
				slog.String("origin", c.Origin.String()),
				slog.Int64("successes", c.Counts.Successes), slog.Int64("failures", c.Counts.Failures))
		},
		OnStoreError: func(op string, err error) {
			metrics.BreakerStoreError(op, err)
			logger.LogAttrs(context.Background(), slog.LevelWarn, msgBreakerStoreUnavailable,
				slog.String("op", op), slog.String("error", err.Error()))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("bikes: breaker: %w", err)
	}
	exec, err := retry.New(retry.Config{
		MaxAttempts:    cfg.MaxAttempts,
		TransientBase:  cfg.BaseDelay,
		ThrottlingBase: cfg.BaseDelay,
		MaxDelay:       cfg.MaxDelay,
		AttemptTimeout: cfg.AttemptTimeout,
		Idempotent:     true, // a GET
		Budgets:        []budget.Budget{localBudget, global},
		Breaker:        br,
		Classifiers:    []retry.Classifier{classifyBadAnswer},
		Clock:          d.clock,
		Rand:           d.rand,
		OnRetry:        metrics.Retry,
		OnGiveUp:       metrics.GiveUp,
		// Each abstention lets the local budget decide alone: at most one
		// retry the fleet-wide ratio did not approve.
		OnStoreError: func(layer int, err error) {
			metrics.StoreError(layer, err)
			logger.LogAttrs(context.Background(), slog.LevelWarn, msgBudgetStoreUnavailable,
				slog.Int("layer", layer), slog.String("error", err.Error()))
		},
		// No Logger: the handler logs every failure it answers, and the
		// hooks above log the rest, with messages of this package.
	})
	if err != nil {
		return nil, fmt.Errorf("bikes: executor: %w", err)
	}
	return &function{
		exec:         exec,
		metrics:      metrics,
		client:       newHTTPClient(),
		partner:      cfg.PartnerURL,
		flushTimeout: cfg.FlushTimeout,
		now:          now,
		log:          logger,
		inflight:     inflight,
	}, nil
}

// setup builds the function of this execution environment from the
// environment variables: configuration, DynamoDB client and stores.
//
// It also reads the breaker's state once, with a generous timeout, and
// throws the answer away: the read opens the connection to DynamoDB (TCP
// and TLS) during initialisation, so that the first invocation's store
// calls fit in their 50 ms. It costs one read per cold start.
func setup(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer) (*function, error) {
	cfg, err := loadConfig(lookup)
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	client, err := dynamo.NewClient(ctx, dynamo.ClientOptions{Endpoint: cfg.DynamoEndpoint, Region: cfg.Region})
	if err != nil {
		return nil, err
	}
	budgetStore, err := dynamo.NewBudgetStore(client, cfg.Table, dynamo.StoreOptions{})
	if err != nil {
		return nil, err
	}
	breakerStore, err := dynamo.NewBreakerStore(client, cfg.Table, dynamo.StoreOptions{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	if _, err := breakerStore.Load(wctx, cfg.Name); err != nil {
		// Not fatal: the breaker falls back to its local state while the
		// table is unreachable, and retries the table later.
		logger.LogAttrs(ctx, slog.LevelWarn, "warm-up read of the breaker state failed",
			slog.String("table", cfg.Table), slog.String("error", err.Error()))
	}
	cancel()
	return newFunction(cfg, deps{
		budgetStore:  budgetStore,
		breakerStore: breakerStore,
		metrics:      stdout,
		logger:       logger,
	})
}

func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
