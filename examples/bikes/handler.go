package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/retry"
)

const (
	// maxPartnerBody bounds the partner's answer; a longer one is a
	// malformed answer (502), not a reason to exhaust the function's memory.
	maxPartnerBody = 1 << 20
	// maxStationIDLen bounds a station id.
	maxStationIDLen = 64
	// pathParam is the route's path parameter: GET /stations/{stationId}/bikes.
	pathParam = "stationId"
	// responseReserve is kept free before the Lambda deadline, on top of
	// the flush timeout, to send the response to the Runtime API.
	responseReserve = 50 * time.Millisecond
	// fallbackRetryAfter is the Retry-After sent when a refusal carries no
	// hint of its own.
	fallbackRetryAfter = 5 * time.Second
)

// Reasons in the body of a 503, so that a client (and the fleet test) can
// tell a breaker rejection from an exhausted budget.
const (
	reasonBreakerOpen     = "breaker-open"
	reasonBudgetExhausted = "budget-exhausted"
	// reasonPartnerBusy: the partner itself answered 429 or 503 with a
	// Retry-After on the last attempt; its hint is passed on.
	reasonPartnerBusy = "partner-busy"
)

// function serves GET /stations/{stationId}/bikes. One lives per execution
// environment (see main.go); it is safe for concurrent use, as Lambda
// Managed Instances run several invocations in one environment at once.
type function struct {
	exec         *retry.Executor
	metrics      *emf.Recorder
	client       *http.Client
	partner      *url.URL
	flushTimeout time.Duration
	now          func() time.Time // the executor's clock
	log          *slog.Logger     // adds the invocation's request id (logging.go)
	inflight     *invocations
}

// errorBody is the JSON body of every answer other than 200.
type errorBody struct {
	Message string `json:"message"`
	// Reason is set on 503: breaker-open, budget-exhausted or
	// partner-busy.
	Reason string `json:"reason,omitempty"`
	// RetryAfterSeconds repeats the Retry-After header on 503.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

// badAnswerError is a 200 from the partner whose body is not usable: too
// long, or not JSON. The partner is at fault, but a second attempt would
// most likely get the same answer.
type badAnswerError struct{ reason string }

func (e *badAnswerError) Error() string { return "partner answered 200 with " + e.reason }

// classifyBadAnswer makes a malformed answer count as a partner failure for
// the breaker without being retried.
func classifyBadAnswer(err error, _ bool) retry.Verdict {
	var bad *badAnswerError
	if errors.As(err, &bad) {
		return retry.NoRetryFailure
	}
	return retry.NoOpinion
}

// Handle is the Lambda handler. It always answers with an HTTP response, so
// the error is always nil: API Gateway turns a function error into a bare
// 500, which tells the client nothing.
func (f *function) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	defer f.inflight.begin(requestID(ctx))()
	resp := f.serve(ctx, req)
	f.flush(ctx)
	return resp, nil
}

// serve answers one request without flushing.
func (f *function) serve(ctx context.Context, req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	if m := req.RequestContext.HTTP.Method; m != "" && m != http.MethodGet {
		resp := jsonError(http.StatusMethodNotAllowed, errorBody{Message: "only GET is supported"})
		resp.Headers["Allow"] = http.MethodGet
		return resp
	}
	station, ok := req.PathParameters[pathParam]
	if !ok || station == "" {
		return jsonError(http.StatusBadRequest, errorBody{Message: "stationId is missing"})
	}
	if !validStationID(station) {
		return jsonError(http.StatusBadRequest, errorBody{
			Message: fmt.Sprintf("stationId must be 1 to %d letters, digits or '-'", maxStationIDLen),
		})
	}

	// Keep time before the Lambda deadline for the flush and the response.
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-(f.flushTimeout + responseReserve)))
		defer cancel()
	}
	body, err := retry.Do(ctx, f.exec, func(ctx context.Context, attempt int) ([]byte, error) {
		return f.fetch(ctx, station, attempt)
	})
	if err == nil {
		return events.APIGatewayV2HTTPResponse{
			StatusCode: http.StatusOK,
			Headers:    map[string]string{"Content-Type": "application/json"},
			Body:       string(body),
		}
	}
	return f.failure(ctx, station, err)
}

// failure maps the executor's error to a response.
func (f *function) failure(ctx context.Context, station string, err error) events.APIGatewayV2HTTPResponse {
	refusal := ""
	switch {
	case errors.Is(err, breaker.ErrOpen):
		refusal = reasonBreakerOpen
	case errors.Is(err, budget.ErrExhausted):
		refusal = reasonBudgetExhausted
	case partnerBusy(err):
		refusal = reasonPartnerBusy
	}
	if refusal != "" {
		// The partner is in trouble: answer fast and honestly instead of
		// pushing harder, and tell the client when to come back.
		secs := retryAfterSeconds(err)
		f.log.LogAttrs(ctx, slog.LevelInfo, "partner unavailable",
			slog.String("station", station), slog.String("reason", refusal),
			slog.Int("retry_after_s", secs), slog.String("error", err.Error()))
		resp := jsonError(http.StatusServiceUnavailable, errorBody{
			Message: "partner currently unavailable", Reason: refusal, RetryAfterSeconds: secs,
		})
		resp.Headers["Retry-After"] = strconv.Itoa(secs)
		return resp
	}
	var se *retry.StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusNotFound {
		return jsonError(http.StatusNotFound, errorBody{Message: "unknown station"})
	}
	f.log.LogAttrs(ctx, slog.LevelWarn, "partner call failed",
		slog.String("station", station), slog.String("error", err.Error()))
	return jsonError(http.StatusBadGateway, errorBody{Message: "partner call failed"})
}

// fetch is one attempt. The executor bounds ctx by the attempt timeout.
func (f *function) fetch(ctx context.Context, station string, attempt int) ([]byte, error) {
	u := f.partner.JoinPath("stations", station, "bikes")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set(retry.DefaultAttemptHeader, strconv.Itoa(attempt))
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, retry.NewStatusError(resp, f.now())
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPartnerBody+1))
	if err != nil {
		return nil, err // a timeout or reset while reading: the built-in classification decides
	}
	if len(body) > maxPartnerBody {
		return nil, &badAnswerError{reason: fmt.Sprintf("a body over %d bytes", maxPartnerBody)}
	}
	if !json.Valid(body) {
		return nil, &badAnswerError{reason: "a body that is not JSON"}
	}
	return body, nil
}

// flush reports the counts kept in memory (the global budget's requests,
// the breaker's outcomes) before the environment is frozen. It is bounded
// by FlushTimeout and by the invocation's deadline, and runs even when the
// invocation's context has ended. Then it writes the invocation's metrics
// (one EMF line, none when nothing happened), which costs no network call.
func (f *function) flush(ctx context.Context) {
	defer func() {
		if err := f.metrics.Flush(); err != nil {
			f.log.LogAttrs(ctx, slog.LevelWarn, "writing the metrics failed", slog.String("error", err.Error()))
		}
	}()
	d := f.flushTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	if err := f.exec.Flush(fctx); err != nil {
		f.log.LogAttrs(ctx, slog.LevelWarn, "flush failed; counts stay in memory or are dropped",
			slog.String("error", err.Error()))
	}
}

// partnerBusy reports whether the partner's last answer was 429 or 503
// with a Retry-After.
func partnerBusy(err error) bool {
	var se *retry.StatusError
	return errors.As(err, &se) && se.RetryAfter > 0 &&
		(se.StatusCode == http.StatusTooManyRequests || se.StatusCode == http.StatusServiceUnavailable)
}

// retryAfterSeconds is the refusal's hint rounded up to whole seconds, at
// least 1 (fallbackRetryAfter without a hint).
func retryAfterSeconds(err error) int {
	d, ok := retry.RetryAfter(err)
	if !ok {
		d = fallbackRetryAfter
	}
	secs := math.Ceil(d.Seconds())
	switch {
	case secs < 1:
		return 1
	case secs > 86400:
		return 86400
	}
	return int(secs)
}

// validStationID reports whether id is 1 to maxStationIDLen ASCII letters,
// digits or '-'.
func validStationID(id string) bool {
	if len(id) == 0 || len(id) > maxStationIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		default:
			return false
		}
	}
	return true
}

func jsonError(status int, body errorBody) events.APIGatewayV2HTTPResponse {
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{"message":"internal error"}`)
	}
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       string(b),
	}
}

// newHTTPClient returns the client for the partner. It has no overall
// timeout: the executor bounds every attempt, and the invocation's
// deadline bounds the call.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = 16
	t.IdleConnTimeout = 60 * time.Second
	return &http.Client{Transport: t}
}
