package herdlambda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/fleet"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// clearEnv unsets every HERDGUARD_* variable for the test, so that the
// machine's environment cannot leak into it.
func clearEnv(t *testing.T) {
	for _, v := range []string{"NAME", "TABLE", "DYNAMODB_ENDPOINT", "MAX_ATTEMPTS", "ATTEMPT_TIMEOUT",
		"BASE_DELAY", "MAX_DELAY", "RATIO", "WINDOW", "FLOOR", "LOCAL_FLOOR", "SHARDS", "STORE_TIMEOUT",
		"BREAKER_FAILURE_RATIO", "BREAKER_MIN_REQUESTS", "BREAKER_WINDOW", "BREAKER_OPEN_DURATION",
		"BREAKER_CACHE_TTL", "FLUSH_TIMEOUT", "RESERVE", "METRICS_NAMESPACE", "LOG_LEVEL"} {
		t.Setenv("HERDGUARD_"+v, "")
	}
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "")
}

// localConfig is a Config over in-memory stores, logging to log and
// writing metrics to metrics.
func localConfig(log, metrics io.Writer) Config {
	return Config{
		Name:     "partner",
		Budgets:  local.NewBudgetStore(),
		Breakers: local.NewBreakerStore(),
		Metrics:  metrics,
		Log:      slog.NewJSONHandler(log, nil),
		// Rand 0: no jitter, and the fleet-wide budget's next contact
		// half a DepositInterval after the last.
		Fleet: fleet.Config{Retry: retry.Config{Idempotent: true, Rand: func() float64 { return 0 }}},
	}
}

func TestBadVariableFailsNamingIt(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"HERDGUARD_RATIO", "2"},           // rejected by fleet.New
		{"HERDGUARD_RATIO", "ten percent"}, // not a number
		{"HERDGUARD_WINDOW", "1ms"},        // rejected by fleet.New
		{"HERDGUARD_WINDOW", "10"},         // no unit
		{"HERDGUARD_MAX_ATTEMPTS", "-1"},
		{"HERDGUARD_MAX_ATTEMPTS", "three"},
		{"HERDGUARD_ATTEMPT_TIMEOUT", "-5s"},
		{"HERDGUARD_SHARDS", "-2"},
		{"HERDGUARD_LOCAL_FLOOR", "-1"},
		{"HERDGUARD_BREAKER_FAILURE_RATIO", "1.5"},
		{"HERDGUARD_BREAKER_MIN_REQUESTS", "many"},
		{"HERDGUARD_BREAKER_OPEN_DURATION", "soon"},
		{"HERDGUARD_FLUSH_TIMEOUT", "0s"},
		{"HERDGUARD_LOG_LEVEL", "loud"},
		{"HERDGUARD_DYNAMODB_ENDPOINT", "localhost:8000"},
		{"HERDGUARD_NAME", "a#b"},
	} {
		// Over in-memory stores, and over a table behind an endpoint that
		// refuses connections: a fault New would survive (it reports it
		// and goes on), so only the configuration check can fail it.
		for _, table := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s=%s,table=%t", tc.name, tc.value, table), func(t *testing.T) {
				clearEnv(t)
				cfg := localConfig(io.Discard, io.Discard)
				cfg.Name = ""
				t.Setenv("HERDGUARD_NAME", "partner")
				if table {
					cfg.Budgets, cfg.Breakers = nil, nil
					t.Setenv("HERDGUARD_TABLE", "herdguard")
					t.Setenv("HERDGUARD_DYNAMODB_ENDPOINT", "http://127.0.0.1:9")
					t.Setenv("AWS_REGION", "us-east-1")
					t.Setenv("AWS_ACCESS_KEY_ID", "herdguard")
					t.Setenv("AWS_SECRET_ACCESS_KEY", "herdguard")
					t.Setenv("AWS_CONFIG_FILE", os.DevNull)
					t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
				}
				t.Setenv(tc.name, tc.value)
				_, err := New(context.Background(), cfg)
				if err == nil || !strings.Contains(err.Error(), tc.name) {
					t.Fatalf("New with %s=%q: %v; want an error naming %s", tc.name, tc.value, err, tc.name)
				}
			})
		}
	}
}

// TestTableUnreachableIsNoInitError: the valid configuration of the test
// above, over the table that refuses connections, initialises (the
// breaker starts on its local state), so that the test's failures are the
// configuration's.
func TestTableUnreachableIsNoInitError(t *testing.T) {
	clearEnv(t)
	for k, v := range map[string]string{"HERDGUARD_NAME": "partner", "HERDGUARD_TABLE": "herdguard",
		"HERDGUARD_DYNAMODB_ENDPOINT": "http://127.0.0.1:9", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "herdguard",
		"AWS_SECRET_ACCESS_KEY": "herdguard", "AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull} {
		t.Setenv(k, v)
	}
	var logs bytes.Buffer
	if _, err := New(context.Background(), Config{Metrics: io.Discard, Log: slog.NewJSONHandler(&logs, nil)}); err != nil {
		t.Fatalf("New over an unreachable table: %v", err)
	}
	if !strings.Contains(logs.String(), MsgBreakerStoreUnavailable) {
		t.Errorf("the failed warm-up read was not logged:\n%s", logs.String())
	}
}

func TestMissingSettingsAreNamedAtOnce(t *testing.T) {
	clearEnv(t)
	t.Setenv("HERDGUARD_RATIO", "abc")
	_, err := New(context.Background(), Config{})
	for _, want := range []string{"HERDGUARD_NAME", "HERDGUARD_TABLE", "HERDGUARD_RATIO"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with nothing set: %v; want an error naming %s", err, want)
		}
	}
}

func TestCodeWinsOverEnvironment(t *testing.T) {
	env := map[string]string{
		"HERDGUARD_NAME": "from-env", "HERDGUARD_TABLE": "t-env", "HERDGUARD_RATIO": "0.2",
		"HERDGUARD_WINDOW": "20s", "HERDGUARD_FLOOR": "0", "HERDGUARD_BREAKER_MIN_REQUESTS": "7",
		"HERDGUARD_RESERVE": "80ms", "HERDGUARD_BASE_DELAY": "5ms",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	s, err := fromEnvironment(Config{Name: "from-code", Fleet: fleet.Config{Ratio: 0.5}}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "from-code" || s.Fleet.Ratio != 0.5 {
		t.Errorf("code's Name and Ratio lost: %q %v", s.Name, s.Fleet.Ratio)
	}
	if s.Table != "t-env" || s.Fleet.Window != 20*time.Second || s.Fleet.Floor != -1 || s.Fleet.Breaker.MinRequests != 7 ||
		s.Reserve != 80*time.Millisecond || s.Fleet.Retry.TransientBase != 5*time.Millisecond || s.Fleet.Retry.ThrottlingBase != 5*time.Millisecond {
		t.Errorf("environment not applied to the zero fields: %+v", s.Config)
	}
	if s.FlushTimeout != DefaultFlushTimeout || s.Namespace != DefaultNamespace {
		t.Errorf("defaults: FlushTimeout %v, Namespace %q", s.FlushTimeout, s.Namespace)
	}
}

// slowBudgets is a budget store that, once slow is set, answers only when
// its context ends: a table that stopped answering in time. It records
// when each slow call ended.
type slowBudgets struct {
	budget.Store
	slow  atomic.Bool
	mu    sync.Mutex
	calls []time.Time
}

func (s *slowBudgets) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	if !s.slow.Load() {
		return s.Store.Apply(ctx, k, u)
	}
	<-ctx.Done()
	s.mu.Lock()
	s.calls = append(s.calls, time.Now())
	s.mu.Unlock()
	return 0, ctx.Err()
}

// ended returns when the slow calls ended, once every goroutine of the
// test's bubble is idle (a store call runs on a goroutine of its own).
func (s *slowBudgets) ended() []time.Time {
	synctest.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls...)
}

// slowFleet returns the Fleet of cfg over a slowBudgets, whose store calls
// may take far longer than an invocation.
func slowFleet(t *testing.T, cfg Config) (*Fleet, *slowBudgets) {
	t.Helper()
	store := &slowBudgets{Store: local.NewBudgetStore()}
	cfg.Budgets = store
	cfg.Fleet.StoreTimeout = time.Hour
	f, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, store
}

// TestFlushEndsBeforeDeadlineLessReserve: the handler's context ends at
// the invocation's deadline less Reserve and FlushTimeout; a handler that
// overruns it leaves the flush less than FlushTimeout, and with a table that
// stopped answering (and store calls allowed far longer than the
// invocation) the flush ends at the deadline less Reserve, and the wrapped
// handler returns then.
func TestFlushEndsBeforeDeadlineLessReserve(t *testing.T) {
	clearEnv(t)
	synctest.Test(t, func(t *testing.T) {
		cfg := localConfig(io.Discard, io.Discard)
		cfg.FlushTimeout, cfg.Reserve = time.Second, 300*time.Millisecond
		f, store := slowFleet(t, cfg)
		start := time.Now()
		deadline := start.Add(5 * time.Second)
		var handlerDeadline time.Time
		h := Wrap(f, func(ctx context.Context, _ string) (string, error) {
			handlerDeadline, _ = ctx.Deadline()
			err := retryTwice(ctx, f, start)
			store.slow.Store(true)
			time.Sleep(time.Until(start.Add(4200 * time.Millisecond))) // overruns its deadline
			return "", err
		})
		ctx, cancel := context.WithDeadline(lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "r-1"}), deadline)
		defer cancel()
		_, err := h(ctx, "event")
		returned := time.Now()
		if want := deadline.Add(-cfg.Reserve - cfg.FlushTimeout); !handlerDeadline.Equal(want) {
			t.Errorf("the handler's deadline is %v after the start, want %v (the invocation's less Reserve and FlushTimeout)", handlerDeadline.Sub(start), want.Sub(start))
		}
		limit := deadline.Add(-cfg.Reserve)
		if returned.After(limit) {
			t.Errorf("returned %v after the start, after the deadline less Reserve (%v)", returned.Sub(start), limit.Sub(start))
		}
		calls := store.ended()
		if len(calls) != 1 {
			t.Fatalf("%d slow store calls (the handler's error: %v); want the flush's", len(calls), err)
		}
		if !calls[0].Equal(limit) {
			t.Errorf("the flush's store call ended %v after the start, want at the deadline less Reserve (%v)", calls[0].Sub(start), limit.Sub(start))
		}
	})
}

// retryTwice makes the fleet-wide budget owe the table a report at the end
// of the invocation: a call that retries (the budget's store contact), then,
// once the budget's next contact is due (half a DepositInterval, a quarter
// of the 10 s window, after the first with Rand 0), a request it has not reported.
func retryTwice(ctx context.Context, f *Fleet, start time.Time) error {
	unavailable := func(context.Context, int) error {
		return &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
	}
	_ = f.Executor.Do(ctx, unavailable)
	time.Sleep(time.Until(start.Add(2600 * time.Millisecond)))
	return f.Executor.Do(ctx, unavailable)
}

// TestFlushWithinFlushTimeout: with plenty of time before the deadline, the
// flush of a table that stopped answering takes FlushTimeout.
func TestFlushWithinFlushTimeout(t *testing.T) {
	clearEnv(t)
	synctest.Test(t, func(t *testing.T) {
		f, store := slowFleet(t, localConfig(io.Discard, io.Discard))
		var returned time.Time
		start := time.Now()
		h := Wrap(f, func(ctx context.Context, _ string) (string, error) {
			err := retryTwice(ctx, f, start)
			store.slow.Store(true)
			returned = time.Now()
			return "", err
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := h(ctx, "e"); err == nil {
			t.Fatal("a partner that answers 503 returned no error")
		}
		if took := time.Since(returned); took != DefaultFlushTimeout {
			t.Errorf("the flush took %v with a minute left; want FlushTimeout, %v", took, DefaultFlushTimeout)
		}
		if calls := store.ended(); len(calls) != 1 {
			t.Errorf("%d slow store calls, want the flush's", len(calls))
		}
	})
}

// invokeRefused runs a handler with response type R that fails with err.
func invokeRefused[R any](t *testing.T, err error) (R, error) {
	t.Helper()
	f, nerr := New(context.Background(), localConfig(io.Discard, io.Discard))
	if nerr != nil {
		t.Fatal(nerr)
	}
	h := Wrap(f, func(context.Context, json.RawMessage) (R, error) {
		var zero R
		return zero, err
	})
	return h(context.Background(), json.RawMessage(`{}`))
}

// refused503 runs a handler with response type R that fails with err and
// checks that the answer, whose status, headers and body fields gives, is
// 503 with the reason and the Retry-After.
func refused503[R any](t *testing.T, kind string, err error, reason, retryAfter string, fields func(R) (int, map[string]string, string)) R {
	t.Helper()
	resp, herr := invokeRefused[R](t, err)
	if herr != nil {
		t.Errorf("%s: error %v, want a response", kind, herr)
	}
	status, headers, body := fields(resp)
	var b struct {
		Reason            string `json:"reason"`
		RetryAfterSeconds int    `json:"retryAfterSeconds"`
	}
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", kind, body, err)
	}
	if status != http.StatusServiceUnavailable || headers["Retry-After"] != retryAfter || b.Reason != reason ||
		strconv.Itoa(b.RetryAfterSeconds) != retryAfter || headers["Content-Type"] != "application/json" {
		t.Errorf("%s: %d, headers %v, body %q; want 503 with Retry-After %s and reason %s", kind, status, headers, body, retryAfter, reason)
	}
	return resp
}

func TestRefusalIs503WithRetryAfterPerEventType(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		err                error
		reason, retryAfter string
	}{
		{&retry.GiveUpError{Reason: retry.BudgetExhausted, Attempts: 1, Cause: &budget.ExhaustedError{Budget: "global:partner", RetryAfter: 2500 * time.Millisecond}}, ReasonBudgetExhausted, "3"},
		{&breaker.OpenError{Name: "partner", State: breaker.Open, RetryAfter: 10 * time.Second}, ReasonBreakerOpen, "10"},
		{&retry.StatusError{StatusCode: http.StatusTooManyRequests, RetryAfter: 7 * time.Second}, ReasonPartnerBusy, "7"},
		{&budget.ExhaustedError{Budget: "local-ratio"}, ReasonBudgetExhausted, "5"}, // no hint: the fallback
		{&breaker.OpenError{RetryAfter: 200 * time.Millisecond}, ReasonBreakerOpen, "1"},
	} {
		refused503(t, "HTTP API", tc.err, tc.reason, tc.retryAfter, func(r events.APIGatewayV2HTTPResponse) (int, map[string]string, string) {
			return r.StatusCode, r.Headers, r.Body
		})
		v1 := refused503(t, "REST API", tc.err, tc.reason, tc.retryAfter, func(r events.APIGatewayProxyResponse) (int, map[string]string, string) {
			return r.StatusCode, r.Headers, r.Body
		})
		if got := v1.MultiValueHeaders["Retry-After"]; len(got) != 1 || got[0] != tc.retryAfter {
			t.Errorf("REST API: multi-value Retry-After %v", got)
		}
		refused503(t, "function URL", tc.err, tc.reason, tc.retryAfter, func(r events.LambdaFunctionURLResponse) (int, map[string]string, string) {
			return r.StatusCode, r.Headers, r.Body
		})
		alb := refused503(t, "ALB", tc.err, tc.reason, tc.retryAfter, func(r events.ALBTargetGroupResponse) (int, map[string]string, string) {
			return r.StatusCode, r.Headers, r.Body
		})
		if alb.MultiValueHeaders != nil || alb.StatusDescription != "503 Service Unavailable" {
			t.Errorf("ALB without multi-value headers: multi-value headers %v, status description %q", alb.MultiValueHeaders, alb.StatusDescription)
		}

		// Any other event: a typed error that keeps the cause.
		_, err := invokeRefused[events.SQSEventResponse](t, tc.err)
		var re *RefusedError
		if !errors.As(err, &re) || re.Reason != tc.reason || re.RetryAfter.String() != tc.retryAfter+"s" || !errors.Is(err, tc.err) {
			t.Errorf("SQS: %v, want a *RefusedError %s after %ss wrapping %v", err, tc.reason, tc.retryAfter, tc.err)
		}
	}
}

// TestRefusalToALBWithMultiValueHeaders: a target group with multi-value
// headers reads only multiValueHeaders.
func TestRefusalToALBWithMultiValueHeaders(t *testing.T) {
	clearEnv(t)
	f, err := New(context.Background(), localConfig(io.Discard, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	h := Wrap(f, func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		return events.ALBTargetGroupResponse{}, &breaker.OpenError{RetryAfter: 4 * time.Second}
	})
	resp, err := h(context.Background(), events.ALBTargetGroupRequest{MultiValueHeaders: map[string][]string{"accept": {"*/*"}}})
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Headers != nil ||
		len(resp.MultiValueHeaders["Retry-After"]) != 1 || resp.MultiValueHeaders["Retry-After"][0] != "4" {
		t.Errorf("got %+v, %v; want 503 with Retry-After 4 in multiValueHeaders only", resp, err)
	}
}

func TestOtherErrorsPassThrough(t *testing.T) {
	clearEnv(t)
	boom := errors.New("boom")
	for _, err := range []error{boom, &retry.StatusError{StatusCode: http.StatusServiceUnavailable}, &retry.StatusError{StatusCode: http.StatusNotFound, RetryAfter: time.Second}} {
		resp, got := invokeRefused[events.APIGatewayV2HTTPResponse](t, err)
		if got != err || resp.StatusCode != 0 {
			t.Errorf("handler error %v: got %v and status %d, want the error unchanged", err, got, resp.StatusCode)
		}
	}
}

// TestLogRecordsCarryRequestIDAndColdStart: records made with the
// invocation's context and without it (the Executor's hooks) carry the
// request id; the first invocation of the environment is the cold start.
func TestLogRecordsCarryRequestIDAndColdStart(t *testing.T) {
	clearEnv(t)
	var logs bytes.Buffer
	f, err := New(context.Background(), localConfig(&logs, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	h := Wrap(f, func(ctx context.Context, msg string) (string, error) {
		f.Logger.InfoContext(ctx, msg+" with context")
		f.Logger.Info(msg + " without context")
		return "", nil
	})
	for _, id := range []string{"req-1", "req-2"} {
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: id})
		if _, err := h(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	f.Logger.Info("between invocations")
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5:\n%s", len(recs), logs.String())
	}
	for i, want := range []struct {
		id   any
		cold any
	}{{"req-1", true}, {"req-1", true}, {"req-2", false}, {"req-2", false}, {nil, nil}} {
		if recs[i]["requestId"] != want.id || recs[i]["coldStart"] != want.cold {
			t.Errorf("record %d %v: want requestId %v, coldStart %v", i, recs[i], want.id, want.cold)
		}
	}
}

// TestMetricsWrittenEachInvocation: a refused invocation's counts reach
// the metrics writer, as one EMF line, before the handler returns.
func TestMetricsWrittenEachInvocation(t *testing.T) {
	clearEnv(t)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "bikes")
	var metrics bytes.Buffer
	f, err := New(context.Background(), localConfig(io.Discard, &metrics))
	if err != nil {
		t.Fatal(err)
	}
	h := Wrap(f, func(ctx context.Context, _ string) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, f.Executor.Do(ctx, func(context.Context, int) error {
			return &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
		})
	})
	for range 3 {
		if _, err := h(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
	}
	var exhausted float64
	for _, line := range strings.Split(strings.TrimSpace(metrics.String()), "\n") {
		var m struct {
			AWS             any     `json:"_aws"`
			FunctionName    string  `json:"FunctionName"`
			Partner         string  `json:"Partner"`
			BudgetExhausted float64 `json:"BudgetExhausted"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.AWS == nil || m.FunctionName != "bikes" || m.Partner != "partner" {
			t.Fatalf("metrics line %q (%v): want EMF with FunctionName bikes and Partner partner", line, err)
		}
		exhausted += m.BudgetExhausted
	}
	if exhausted < 1 {
		t.Errorf("BudgetExhausted %v after three refused invocations:\n%s", exhausted, metrics.String())
	}
}

func TestReportInitError(t *testing.T) {
	type got struct{ path, errType, body string }
	ch := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.URL.Path, r.Header.Get("Lambda-Runtime-Function-Error-Type"), string(b)}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	reportInitError(strings.TrimPrefix(srv.URL, "http://"), errors.New("HERDGUARD_TABLE is not set"))
	g := <-ch
	if g.path != "/2018-06-01/runtime/init/error" || g.errType != "Runtime.InvalidConfiguration" {
		t.Errorf("posted %+v", g)
	}
	var body struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	if err := json.Unmarshal([]byte(g.body), &body); err != nil || body.Message != "HERDGUARD_TABLE is not set" || body.Type != "Runtime.InvalidConfiguration" {
		t.Errorf("body %q: %+v %v", g.body, body, err)
	}
	// Outside Lambda there is nobody to tell; it must not block or panic.
	reportInitError("", errors.New("x"))
}

func TestNamespacePrecedence(t *testing.T) {
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, c := range []struct{ code, herdguard, powertools, want string }{
		{"", "", "", DefaultNamespace},
		{"", "", "Shop", "Shop"},
		{"", "Bikes", "Shop", "Bikes"},
		{"Code", "Bikes", "Shop", "Code"},
	} {
		clear(env)
		if c.herdguard != "" {
			env["HERDGUARD_METRICS_NAMESPACE"] = c.herdguard
		}
		if c.powertools != "" {
			env[emf.EnvNamespace] = c.powertools
		}
		s, _ := fromEnvironment(Config{Namespace: c.code}, lookup)
		if s.Namespace != c.want {
			t.Errorf("code %q, HERDGUARD_METRICS_NAMESPACE %q, %s %q: namespace %q, want %q", c.code, c.herdguard, emf.EnvNamespace, c.powertools, s.Namespace, c.want)
		}
	}
}
