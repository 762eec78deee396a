// Package herdlambda runs an AWS Lambda handler behind herdguard: the
// fleet's Executor (package fleet: local and fleet-wide retry budgets, the
// shared breaker, over one DynamoDB table) is built once per execution
// environment, and every invocation ends with the counts and metrics
// flushed before the deadline:
//
//	func main() { herdlambda.Start(herdlambda.Config{}, setup) }
//
//	// setup runs once per execution environment.
//	func setup(ctx context.Context, f *herdlambda.Fleet) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
//		t, err := retry.NewTransport(f.Executor, nil, retry.TransportOptions{})
//		... // an http.Client over t, an AWS SDK client with awsretry.New(f.Executor, ...)
//		return handler, err
//	}
//
// Each invocation, the handler Start runs (Wrap's):
//
//   - gives the handler a context whose deadline is the invocation's less
//     Reserve and FlushTimeout, so that a partner call ends in time for the
//     flush;
//   - then flushes the Executor (Executor.Flush: the fleet-wide budget's
//     and the breaker's counts), within FlushTimeout and never later than
//     the deadline less Reserve, however slow the table, and writes the
//     invocation's metrics, one Embedded Metric Format line on stdout
//     (package emf; dimensions FunctionName and Partner);
//   - answers a refusal (an error for which errors.Is finds
//     budget.ErrExhausted or breaker.ErrOpen, or the partner's own 429 or
//     503 with a Retry-After, a *retry.StatusError) with 503 Service
//     Unavailable, a Retry-After header in whole seconds and a JSON body
//     {"message", "reason", "retryAfterSeconds"} (reason budget-exhausted,
//     breaker-open or partner-busy), when the handler's response is that of
//     API Gateway (events.APIGatewayProxyResponse,
//     events.APIGatewayV2HTTPResponse), a function URL
//     (events.LambdaFunctionURLResponse) or an Application Load Balancer
//     (events.ALBTargetGroupResponse), as values; for other events it returns a
//     *RefusedError, which Lambda reports with errorType "RefusedError".
//     Other errors are returned as the handler returned them.
//
// Fleet.Logger adds to every record the invocation's request id
// ("requestId", as in Lambda's JSON logs) and whether it is the
// environment's first invocation ("coldStart"), also for records made
// without the invocation's context (the Executor's hooks).
//
// # Configuration
//
// Config's fields set in code win; a zero field takes its environment
// variable, read once at initialisation; a bad value fails the
// initialisation (Start reports it to Lambda as Runtime.InvalidConfiguration)
// with an error naming the variable:
//
//	HERDGUARD_NAME                   Config.Name: the partner (required)
//	HERDGUARD_TABLE                  Config.Table: the DynamoDB table (required)
//	HERDGUARD_DYNAMODB_ENDPOINT      Config.DynamoDBEndpoint
//	HERDGUARD_MAX_ATTEMPTS           Fleet.Retry.MaxAttempts
//	HERDGUARD_ATTEMPT_TIMEOUT        Fleet.Retry.AttemptTimeout
//	HERDGUARD_BASE_DELAY             Fleet.Retry.TransientBase and ThrottlingBase
//	HERDGUARD_MAX_DELAY              Fleet.Retry.MaxDelay
//	HERDGUARD_RATIO                  Fleet.Ratio
//	HERDGUARD_WINDOW                 Fleet.Window
//	HERDGUARD_FLOOR                  Fleet.Floor (0: none)
//	HERDGUARD_LOCAL_FLOOR            Fleet.LocalFloor
//	HERDGUARD_SHARDS                 Fleet.Shards
//	HERDGUARD_STORE_TIMEOUT          Fleet.StoreTimeout
//	HERDGUARD_BREAKER_FAILURE_RATIO  Fleet.Breaker.FailureRatio
//	HERDGUARD_BREAKER_MIN_REQUESTS   Fleet.Breaker.MinRequests
//	HERDGUARD_BREAKER_WINDOW         Fleet.Breaker.Window
//	HERDGUARD_BREAKER_OPEN_DURATION  Fleet.Breaker.OpenDuration
//	HERDGUARD_BREAKER_CACHE_TTL      Fleet.Breaker.CacheTTL
//	HERDGUARD_FLUSH_TIMEOUT          Config.FlushTimeout (100ms)
//	HERDGUARD_RESERVE                Config.Reserve (50ms)
//	HERDGUARD_METRICS_NAMESPACE      Config.Namespace (Herdguard)
//	HERDGUARD_LOG_LEVEL              debug, info, warn or error (info)
//
// Durations are Go durations ("800ms", "10s"). The function's timeout must
// cover the worst case: MaxAttempts × AttemptTimeout, the waits in between,
// two store calls a retry, FlushTimeout and Reserve.
package herdlambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/fleet"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// Log messages of the Fleet's hooks and of Wrap, which operators search for.
const (
	MsgBudgetStoreUnavailable  = "retry budget store unavailable; the layer abstained"
	MsgBreakerStoreUnavailable = "breaker store failed; using local state"
	MsgBreakerStateChanged     = "breaker state changed"
	MsgRefused                 = "partner unavailable"
)

// Reasons of a refusal (RefusedError.Reason and the 503's JSON body).
const (
	ReasonBudgetExhausted = "budget-exhausted"
	ReasonBreakerOpen     = "breaker-open"
	ReasonPartnerBusy     = "partner-busy"
)

// fallbackRetryAfter is the Retry-After of a refusal that carries no hint.
const fallbackRetryAfter = 5 * time.Second

// Fleet is what an execution environment keeps between invocations: the
// partner's Executor, its metrics and the logger. New builds it; it is safe
// for concurrent use.
type Fleet struct {
	// Executor is the partner's: give it to retry.NewTransport, retry.Do or
	// awsretry.New.
	Executor *retry.Executor
	// Logger adds the request id and the cold-start flag to every record.
	Logger *slog.Logger

	metrics  *emf.Recorder
	flush    time.Duration
	reserve  time.Duration
	inflight *invocations
	started  atomic.Int64 // invocations begun, for the cold-start flag
}

// New builds the Fleet of this execution environment from cfg and the
// environment variables: the DynamoDB client, the Executor (fleet.New,
// which reads the table once), the metrics and the logger. Bad
// configuration is an error naming the variable or the Config field.
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	s, err := fromEnvironment(cfg, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	log := s.Log
	if log == nil {
		log = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.logLevel})
	}
	f := &Fleet{flush: s.FlushTimeout, reserve: s.Reserve, inflight: &invocations{}}
	f.Logger = slog.New(&invocationHandler{Handler: log, inflight: f.inflight})
	dims := map[string]string{"Partner": s.Name}
	if fn := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); fn != "" {
		dims["FunctionName"] = fn
	}
	w := s.Metrics
	if w == nil {
		w = os.Stdout
	}
	var now func() time.Time
	if c := s.Fleet.Retry.Clock; c != nil {
		now = c.Now
	}
	if f.metrics, err = emf.New(w, emf.Options{Namespace: s.Namespace, Dimensions: dims, Now: now}); err != nil {
		return nil, fmt.Errorf("herdlambda: metrics (HERDGUARD_METRICS_NAMESPACE, HERDGUARD_NAME): %w", err)
	}
	fc := s.Fleet
	f.hook(&fc)
	f.metrics.Instrument(&fc.Retry, &fc.Breaker)
	if s.Budgets != nil {
		f.Executor, err = fleet.NewWithStores(s.Budgets, s.Breakers, s.Name, fc)
	} else if _, err = fleet.NewWithStores(local.NewBudgetStore(), local.NewBreakerStore(), s.Name, fc); err == nil {
		// The configuration was checked first, over in-memory stores, so
		// that it is reported before the table is touched (or when there
		// is no way to reach it).
		api, cerr := dynamo.NewClient(ctx, dynamo.ClientOptions{Endpoint: s.DynamoDBEndpoint})
		if cerr != nil {
			return nil, fmt.Errorf("herdlambda: DynamoDB client: %w", cerr)
		}
		f.Executor, err = fleet.New(ctx, api, s.Table, s.Name, fc)
	}
	if err != nil {
		return nil, s.name(err)
	}
	return f, nil
}

// hook logs the Executor's and the breaker's store faults and the
// breaker's state changes, then calls the hook cfg already had, if any.
func (f *Fleet) hook(cfg *fleet.Config) {
	warn := func(msg string, attrs ...slog.Attr) {
		f.Logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
	}
	onStore := cfg.Retry.OnStoreError
	cfg.Retry.OnStoreError = func(layer int, err error) {
		warn(MsgBudgetStoreUnavailable, slog.Int("layer", layer), slog.String("error", err.Error()))
		if onStore != nil {
			onStore(layer, err)
		}
	}
	onBreakerStore := cfg.Breaker.OnStoreError
	cfg.Breaker.OnStoreError = func(op string, err error) {
		warn(MsgBreakerStoreUnavailable, slog.String("op", op), slog.String("error", err.Error()))
		if onBreakerStore != nil {
			onBreakerStore(op, err)
		}
	}
	onChange := cfg.Breaker.OnStateChange
	cfg.Breaker.OnStateChange = func(c breaker.StateChange) {
		warn(MsgBreakerStateChanged, slog.String("breaker", c.Name), slog.String("from", c.From.String()),
			slog.String("to", c.To.String()), slog.String("origin", c.Origin.String()),
			slog.Int64("successes", c.Counts.Successes), slog.Int64("failures", c.Counts.Failures))
		if onChange != nil {
			onChange(c)
		}
	}
}

// Start builds the Fleet (New), runs setup once with it to get the
// handler, and hands the wrapped handler (Wrap) to lambda.Start. setup's
// context ends with the initialisation (at most 10 s, Lambda's limit). If New or
// setup fails, it reports the error to the Lambda Runtime API as an init
// error (Runtime.InvalidConfiguration) and exits.
func Start[E, R any](cfg Config, setup func(context.Context, *Fleet) (func(context.Context, E) (R, error), error)) {
	// Lambda gives initialisation 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	f, err := New(ctx, cfg)
	var h func(context.Context, E) (R, error)
	if err == nil {
		h, err = setup(ctx, f)
	}
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "herdlambda: initialisation failed: %v\n", err)
		reportInitError(os.Getenv("AWS_LAMBDA_RUNTIME_API"), err)
		os.Exit(1)
	}
	lambda.Start(Wrap(f, h))
}

// Wrap returns h run as the package documentation says: with a deadline
// that leaves time for the flush, then the flush, and refusals answered
// with 503 and Retry-After (or a *RefusedError).
func Wrap[E, R any](f *Fleet, h func(context.Context, E) (R, error)) func(context.Context, E) (R, error) {
	return func(ctx context.Context, event E) (R, error) {
		ctx, end := f.begin(ctx)
		defer end()
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok {
			hctx, cancel = context.WithDeadline(ctx, dl.Add(-(f.reserve + f.flush)))
		}
		resp, err := h(hctx, event)
		cancel()
		f.flushAll(ctx)
		if err == nil {
			return resp, nil
		}
		reason := refusal(err)
		if reason == "" {
			return resp, err
		}
		secs := retryAfterSeconds(err)
		f.Logger.LogAttrs(ctx, slog.LevelInfo, MsgRefused, slog.String("reason", reason),
			slog.Int("retry_after_s", secs), slog.String("error", err.Error()))
		if answer503(&resp, event, reason, secs) {
			return resp, nil
		}
		return resp, &RefusedError{Reason: reason, RetryAfter: time.Duration(secs) * time.Second, Err: err}
	}
}

// flushAll flushes the Executor within FlushTimeout and before the
// deadline less Reserve, even when ctx has ended, then writes the metrics.
func (f *Fleet) flushAll(ctx context.Context) {
	d := f.flush
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)-f.reserve)
	}
	if d > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		if err := f.Executor.Flush(fctx); err != nil {
			f.Logger.LogAttrs(ctx, slog.LevelWarn, "flush failed; counts stay in memory or are dropped", slog.String("error", err.Error()))
		}
		cancel()
	}
	if err := f.metrics.Flush(); err != nil {
		f.Logger.LogAttrs(ctx, slog.LevelWarn, "writing the metrics failed", slog.String("error", err.Error()))
	}
}

// RefusedError is a refusal answered to an event that is not an HTTP
// request. Unwrap gives the Executor's error: errors.Is(err,
// budget.ErrExhausted) and errors.Is(err, breaker.ErrOpen) still hold.
type RefusedError struct {
	// Reason is ReasonBudgetExhausted, ReasonBreakerOpen or
	// ReasonPartnerBusy.
	Reason string
	// RetryAfter is when to try again, in whole seconds, at least 1.
	RetryAfter time.Duration
	Err        error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("herdlambda: partner unavailable (%s), retry after %v: %v", e.Reason, e.RetryAfter, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusal returns the reason err is a refusal, or "".
func refusal(err error) string {
	var se *retry.StatusError
	switch {
	case errors.Is(err, breaker.ErrOpen):
		return ReasonBreakerOpen
	case errors.Is(err, budget.ErrExhausted):
		return ReasonBudgetExhausted
	case errors.As(err, &se) && se.RetryAfter > 0 &&
		(se.StatusCode == http.StatusTooManyRequests || se.StatusCode == http.StatusServiceUnavailable):
		return ReasonPartnerBusy
	}
	return ""
}

// retryAfterSeconds is err's hint rounded up to whole seconds, from 1 to a
// day (fallbackRetryAfter without a hint).
func retryAfterSeconds(err error) int {
	d, ok := retry.RetryAfter(err)
	if !ok {
		d = fallbackRetryAfter
	}
	return int(min(max(math.Ceil(d.Seconds()), 1), 86400))
}

// answer503 sets *resp to the 503 of a refusal to event when it is an HTTP
// response it knows, and reports whether it was.
func answer503(resp, event any, reason string, secs int) bool {
	body, _ := json.Marshal(struct {
		Message           string `json:"message"`
		Reason            string `json:"reason"`
		RetryAfterSeconds int    `json:"retryAfterSeconds"`
	}{"partner currently unavailable", reason, secs})
	h := map[string]string{"Content-Type": "application/json", "Retry-After": strconv.Itoa(secs)}
	mv := map[string][]string{"Content-Type": {"application/json"}, "Retry-After": {strconv.Itoa(secs)}}
	const code = http.StatusServiceUnavailable
	switch r := resp.(type) {
	case *events.APIGatewayV2HTTPResponse:
		*r = events.APIGatewayV2HTTPResponse{StatusCode: code, Headers: h, Body: string(body)}
	case *events.APIGatewayProxyResponse:
		*r = events.APIGatewayProxyResponse{StatusCode: code, Headers: h, MultiValueHeaders: mv, Body: string(body)}
	case *events.LambdaFunctionURLResponse:
		*r = events.LambdaFunctionURLResponse{StatusCode: code, Headers: h, Body: string(body)}
	case *events.ALBTargetGroupResponse:
		// A target group with multi-value headers sends multiValueHeaders
		// and reads only those; one without, headers.
		*r = events.ALBTargetGroupResponse{StatusCode: code, StatusDescription: "503 Service Unavailable", Headers: h, Body: string(body)}
		if req, ok := event.(events.ALBTargetGroupRequest); ok && req.MultiValueHeaders != nil {
			r.Headers, r.MultiValueHeaders = nil, mv
		}
	default:
		return false
	}
	return true
}
