package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/fleet"
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

// deps are what newFunction takes besides the configuration: where the
// executor comes from (fleet.New over DynamoDB in production, the same
// stack over in-memory stores in tests), the clock and where metrics and
// logs go.
type deps struct {
	// executor builds the partner's executor from its configuration.
	executor func(fleet.Config) (*retry.Executor, error)
	// clock drives the executor and the metrics' timestamps; nil means the
	// system clock.
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

// newFunction builds the function: the executor of package fleet (a local
// ratio with a small floor, the fleet-wide ratio, the shared breaker) with
// the function's metrics and logs on its hooks.
func newFunction(cfg Config, d deps) (*function, error) {
	if d.executor == nil || d.metrics == nil || d.logger == nil || cfg.PartnerURL == nil {
		return nil, errors.New("bikes: newFunction needs an executor, a metrics writer, a logger and a partner URL")
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
	warn := func(msg string, attrs ...slog.Attr) {
		logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
	}

	fc := fleet.Config{
		Ratio:        cfg.Ratio,
		Window:       cfg.Window,
		Floor:        cfg.Floor,
		LocalFloor:   cfg.LocalFloor,
		Shards:       cfg.Shards,
		StoreTimeout: cfg.StoreTimeout,
		Breaker: breaker.Settings{
			FailureRatio: cfg.FailureRatio,
			MinRequests:  cfg.MinRequests,
			Window:       cfg.BreakerWindow,
			OpenDuration: cfg.OpenDuration,
			CacheTTL:     cfg.CacheTTL,
			OnStateChange: func(c breaker.StateChange) {
				warn(msgBreakerStateChanged, slog.String("breaker", c.Name), slog.String("from", c.From.String()),
					slog.String("to", c.To.String()), slog.String("origin", c.Origin.String()),
					slog.Int64("successes", c.Counts.Successes), slog.Int64("failures", c.Counts.Failures))
			},
			OnStoreError: func(op string, err error) {
				warn(msgBreakerStoreUnavailable, slog.String("op", op), slog.String("error", err.Error()))
			},
		},
		Retry: retry.Config{
			MaxAttempts:    cfg.MaxAttempts,
			AttemptTimeout: cfg.AttemptTimeout,
			TransientBase:  cfg.BaseDelay,
			ThrottlingBase: cfg.BaseDelay,
			MaxDelay:       cfg.MaxDelay,
			Idempotent:     true, // a GET
			Classifiers:    []retry.Classifier{classifyBadAnswer},
			Clock:          d.clock,
			Rand:           d.rand,
			OnStoreError: func(layer int, err error) {
				warn(msgBudgetStoreUnavailable, slog.Int("layer", layer), slog.String("error", err.Error()))
			},
			// No Logger: the handler logs every failure it answers, and the
			// hooks above log the rest, with messages of this package.
		},
	}
	if cfg.Floor == 0 {
		fc.Floor = -1 // RETRY_FLOOR=0 is none; fleet.Config's zero is the default
	}
	metrics.Instrument(&fc.Retry, &fc.Breaker)
	exec, err := d.executor(fc)
	if err != nil {
		return nil, fmt.Errorf("bikes: %w", err)
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
// environment variables, over the DynamoDB table (fleet.New checks it and
// opens the connection during initialisation).
func setup(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer) (*function, error) {
	cfg, err := loadConfig(lookup)
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	api, err := dynamo.NewClient(ctx, dynamo.ClientOptions{Endpoint: cfg.DynamoEndpoint, Region: cfg.Region})
	if err != nil {
		return nil, err
	}
	executor := func(fc fleet.Config) (*retry.Executor, error) { return fleet.New(ctx, api, cfg.Table, cfg.Name, fc) }
	return newFunction(cfg, deps{executor: executor, metrics: stdout, logger: logger})
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
