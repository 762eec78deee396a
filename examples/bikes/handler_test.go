package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	"github.com/herdguard/herdguard/fleet"
	"github.com/herdguard/herdguard/internal/fakeclock"
	"github.com/herdguard/herdguard/internal/fleethook"
	"github.com/herdguard/herdguard/internal/pipenet"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// fakeClock is a retry.Clock whose Sleep advances Now instead of waiting.
type fakeClock = fakeclock.Clock

// midWindow is a time in the middle of a 10 s window, so that a test's few
// simulated milliseconds never cross a window boundary.
var midWindow = time.UnixMilli(1_800_000_005_000)

// partner is a test partner API: answer decides the response per attempt.
type partner struct {
	srv      *httptest.Server
	calls    atomic.Int64
	mu       sync.Mutex
	paths    []string
	attempts []string
}

func newPartner(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, attempt int)) *partner {
	t.Helper()
	p := &partner{}
	p.srv = httptest.NewServer(p.handler(answer))
	t.Cleanup(p.srv.Close)
	return p
}

// newPipePartner is a partner on an in-memory network (internal/pipenet),
// for tests in a synctest bubble: its URL is pipenet.URL, and fn's HTTP
// client is pointed at it. Call it inside the bubble.
func newPipePartner(t *testing.T, fn *function, answer func(w http.ResponseWriter, r *http.Request, attempt int)) *partner {
	t.Helper()
	p := &partner{}
	tr, stop := pipenet.Serve(p.handler(answer))
	t.Cleanup(stop)
	fn.client = &http.Client{Transport: tr}
	return p
}

// handler records each request and answers it with answer.
func (p *partner) handler(answer func(w http.ResponseWriter, r *http.Request, attempt int)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.calls.Add(1)
		a := r.Header.Get(retry.DefaultAttemptHeader)
		p.mu.Lock()
		p.paths = append(p.paths, r.URL.Path)
		p.attempts = append(p.attempts, a)
		p.mu.Unlock()
		n, _ := strconv.Atoi(a)
		answer(w, r, n)
	})
}

func (p *partner) seen() (paths, attempts []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.paths...), append([]string(nil), p.attempts...)
}

func bikesJSON(w http.ResponseWriter, _ *http.Request, _ int) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"available":7}`)
}

func status(code int) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(code) }
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fixture is a function wired to in-memory stores and a test partner.
type fixture struct {
	fn       *function
	budgets  *local.BudgetStore
	breakers *local.BreakerStore
	emf      *syncBuffer
	clock    *fakeClock
}

// testConfig is a configuration for unit tests: tiny waits, a breaker that
// one environment can trip, and the partner at base.
func testConfig(t *testing.T, base string) Config {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Table:          "bikes-test",
		PartnerURL:     u,
		Name:           "bikes-partner",
		FunctionName:   "bikes-test",
		LogLevel:       "info",
		MaxAttempts:    3,
		AttemptTimeout: 2 * time.Second,
		BaseDelay:      time.Millisecond,
		MaxDelay:       5 * time.Millisecond,
		Ratio:          0.1,
		Window:         10 * time.Second,
		Floor:          3,
		LocalFloor:     1,
		Shards:         1,
		FailureRatio:   0.5,
		MinRequests:    1000,
		BreakerWindow:  10 * time.Second,
		OpenDuration:   30 * time.Second,
		CacheTTL:       time.Second,
		StoreTimeout:   time.Second,
		FlushTimeout:   time.Second,
	}
}

// inMemory builds the executor fleet.New would build, over in-memory
// stores instead of the table.
func inMemory(budgets *local.BudgetStore, breakers *local.BreakerStore, name string) func(fleet.Config) (*retry.Executor, error) {
	return func(fc fleet.Config) (*retry.Executor, error) { return fleethook.Build(budgets, breakers, name, fc) }
}

// newFixture builds a function over in-memory stores. clock may be nil
// for the system clock.
func newFixture(t *testing.T, cfg Config, clock *fakeClock) *fixture {
	t.Helper()
	f := &fixture{
		budgets:  local.NewBudgetStore(),
		breakers: local.NewBreakerStore(),
		emf:      &syncBuffer{},
		clock:    clock,
	}
	d := deps{
		executor: inMemory(f.budgets, f.breakers, cfg.Name),
		rand:     lockedRand(1),
		metrics:  f.emf,
		logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if clock != nil {
		d.clock = clock
	}
	fn, err := newFunction(cfg, d)
	if err != nil {
		t.Fatalf("newFunction: %v", err)
	}
	f.fn = fn
	return f
}

func request(station string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RouteKey: "GET /stations/{stationId}/bikes",
		RawPath:  "/stations/" + station + "/bikes",
	}
	req.RequestContext.HTTP.Method = http.MethodGet
	if station != "" {
		req.PathParameters = map[string]string{pathParam: station}
	}
	return req
}

func (f *fixture) handle(t *testing.T, ctx context.Context, req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := f.fn.Handle(ctx, req)
	if err != nil {
		t.Fatalf("Handle returned an error: %v", err)
	}
	return resp
}

func decodeError(t *testing.T, resp events.APIGatewayV2HTTPResponse) errorBody {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal([]byte(resp.Body), &b); err != nil {
		t.Fatalf("body %q is not an error body: %v", resp.Body, err)
	}
	return b
}

// emfRecords parses the EMF lines written so far.
func emfRecords(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("EMF line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// metricSum sums a metric over the EMF records.
func metricSum(recs []map[string]any, metric string) int {
	n := 0.0
	for _, r := range recs {
		if v, ok := r[metric].(float64); ok {
			n += v
		}
	}
	return int(n)
}

// exhaustedBudgets returns the budgets the records list as having refused.
func exhaustedBudgets(recs []map[string]any) map[string]bool {
	out := map[string]bool{}
	for _, r := range recs {
		names, _ := r["ExhaustedBudgets"].([]any)
		for _, n := range names {
			out[fmt.Sprint(n)] = true
		}
	}
	return out
}

func retryAfterHeader(t *testing.T, resp events.APIGatewayV2HTTPResponse) int {
	t.Helper()
	v, ok := resp.Headers["Retry-After"]
	if !ok {
		t.Fatalf("503 without Retry-After: headers %v", resp.Headers)
	}
	secs, err := strconv.Atoi(v)
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After %q is not a whole number of seconds >= 1", v)
	}
	return secs
}

func TestHandleOK(t *testing.T) {
	p := newPartner(t, bikesJSON)
	f := newFixture(t, testConfig(t, p.srv.URL+"/v1"), nil)
	resp := f.handle(t, context.Background(), request("nord-3"))
	if resp.StatusCode != http.StatusOK || resp.Body != `{"available":7}` {
		t.Fatalf("got %d %q, want 200 with the partner's JSON", resp.StatusCode, resp.Body)
	}
	if ct := resp.Headers["Content-Type"]; ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	paths, attempts := p.seen()
	if len(paths) != 1 || paths[0] != "/v1/stations/nord-3/bikes" || attempts[0] != "1" {
		t.Errorf("partner saw paths %v attempts %v, want one call to /v1/stations/nord-3/bikes, attempt 1", paths, attempts)
	}
}

func TestHandleRejectsBadStationIDs(t *testing.T) {
	p := newPartner(t, bikesJSON)
	f := newFixture(t, testConfig(t, p.srv.URL), nil)
	for _, id := range []string{"", "a/b", "a b", "..", "%2F", "nörd", "x;y", strings.Repeat("a", maxStationIDLen+1)} {
		resp := f.handle(t, context.Background(), request(id))
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("station %q: got %d, want 400", id, resp.StatusCode)
		}
		if b := decodeError(t, resp); b.Message == "" {
			t.Errorf("station %q: 400 without a message", id)
		}
	}
	req := request("nord-3")
	req.PathParameters = nil
	if resp := f.handle(t, context.Background(), req); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no path parameters: got %d, want 400", resp.StatusCode)
	}
	if resp := f.handle(t, context.Background(), request(strings.Repeat("A-9", maxStationIDLen/3))); resp.StatusCode != http.StatusOK {
		t.Errorf("a valid id of %d characters: got %d", maxStationIDLen/3*3, resp.StatusCode)
	}
	if n := p.calls.Load(); n != 1 {
		t.Errorf("partner called %d times, want only for the valid id", n)
	}
}

func TestHandleRejectsOtherMethods(t *testing.T) {
	p := newPartner(t, bikesJSON)
	f := newFixture(t, testConfig(t, p.srv.URL), nil)
	req := request("nord-3")
	req.RequestContext.HTTP.Method = http.MethodPost
	resp := f.handle(t, context.Background(), req)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Headers["Allow"] != http.MethodGet {
		t.Fatalf("got %d %v, want 405 with Allow: GET", resp.StatusCode, resp.Headers)
	}
	if p.calls.Load() != 0 {
		t.Error("partner called")
	}
}

func TestHandleAnswers503WhenBreakerForcedOpenInTable(t *testing.T) {
	p := newPartner(t, bikesJSON)
	f := newFixture(t, testConfig(t, p.srv.URL), nil)
	if err := f.breakers.SetOverride(context.Background(), "bikes-partner", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatal(err)
	}
	resp := f.handle(t, context.Background(), request("nord-3"))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s, want 503", resp.StatusCode, resp.Body)
	}
	secs := retryAfterHeader(t, resp)
	if b := decodeError(t, resp); b.Reason != reasonBreakerOpen || b.RetryAfterSeconds != secs {
		t.Errorf("body %+v, want reason %q and retryAfterSeconds %d", b, reasonBreakerOpen, secs)
	}
	if p.calls.Load() != 0 {
		t.Error("partner called although the breaker is forced open")
	}
	recs := emfRecords(t, f.emf.String())
	if n := metricSum(recs, "BreakerOpened"); n != 1 {
		t.Errorf("BreakerOpened %d, want 1; EMF:\n%s", n, f.emf.String())
	}
}

func TestHandleOpensBreakerOnFailures(t *testing.T) {
	p := newPartner(t, status(http.StatusInternalServerError))
	cfg := testConfig(t, p.srv.URL)
	cfg.MaxAttempts = 1
	cfg.MinRequests = 4
	clock := fakeclock.New(midWindow)
	f := newFixture(t, cfg, clock)
	// Invocations a quarter of the breaker's ReportInterval apart, as a
	// busy environment sees them: the handler flushes after each one, but
	// the breaker reports the window's counts at most once per
	// ReportInterval, so the breaker opens only once a report has carried
	// MinRequests failures to the store, a few invocations after the
	// MinRequests-th. 16 invocations span 3.75 s, well inside midWindow's
	// 10 s window and well past the few reports the breaker needs.
	const (
		step        = time.Second / 4 // the breaker reports at most once a second
		invocations = 16
	)
	var resp events.APIGatewayV2HTTPResponse
	for i := 0; i < invocations; i++ {
		resp = f.handle(t, context.Background(), request("nord-3"))
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("call %d: got %d, want 502 while the breaker is closed", i, resp.StatusCode)
		}
		clock.Sleep(context.Background(), step)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("breaker never opened in %d invocations %v apart; partner calls %d", invocations, step, p.calls.Load())
	}
	secs := retryAfterHeader(t, resp)
	if maxSecs := int(cfg.OpenDuration.Seconds()*(1+0.2)) + 1; secs > maxSecs {
		t.Errorf("Retry-After %d s, above the open duration %v plus jitter", secs, cfg.OpenDuration)
	}
	if b := decodeError(t, resp); b.Reason != reasonBreakerOpen {
		t.Errorf("reason %q, want %q", b.Reason, reasonBreakerOpen)
	}
	calls := p.calls.Load()
	if calls < cfg.MinRequests {
		t.Errorf("breaker opened after %d calls, before MinRequests %d", calls, cfg.MinRequests)
	}
	t.Logf("breaker opened after %d partner calls over %v", calls, clock.Now().Sub(midWindow))
	snap, err := f.breakers.Load(context.Background(), "bikes-partner")
	if err != nil || snap.State != breaker.Open {
		t.Errorf("state in the store: %+v, %v; want open", snap, err)
	}
	recs := emfRecords(t, f.emf.String())
	if n := metricSum(recs, "BreakerOpened"); n != 1 {
		t.Errorf("BreakerOpened %d, want 1; EMF:\n%s", n, f.emf.String())
	}
	// While open, calls do not reach the partner.
	if resp := f.handle(t, context.Background(), request("nord-3")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("next call: %d, want 503", resp.StatusCode)
	}
	if p.calls.Load() != calls {
		t.Error("partner called while the breaker is open")
	}
}

func TestHandleAnswers503WhenBudgetExhausted(t *testing.T) {
	p := newPartner(t, status(http.StatusServiceUnavailable))
	clock := fakeclock.New(midWindow)
	f := newFixture(t, testConfig(t, p.srv.URL), clock)

	// First call: the local floor (1 retry) pays for one retry, then
	// attempts are left but the local budget refuses.
	resp := f.handle(t, context.Background(), request("nord-3"))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s, want 503", resp.StatusCode, resp.Body)
	}
	secs := retryAfterHeader(t, resp)
	if b := decodeError(t, resp); b.Reason != reasonBudgetExhausted || b.RetryAfterSeconds != secs {
		t.Errorf("body %+v, want reason %q and retryAfterSeconds %d as in the header", b, reasonBudgetExhausted, secs)
	}
	if _, attempts := p.seen(); strings.Join(attempts, ",") != "1,2" {
		t.Errorf("partner saw attempts %v, want 1,2", attempts)
	}

	// Second call, through the function's executor and fetch at the same
	// (fake) instant: no retry at all, and the very refusal the first call
	// met, since a refusal changes nothing in the budget. Its hint is what
	// the Retry-After header must carry: rounded up to whole seconds, not
	// the handler's fallback.
	_, err := retry.Do(context.Background(), f.fn.exec, func(ctx context.Context, attempt int) ([]byte, error) {
		return f.fn.fetch(ctx, "nord-3", attempt)
	})
	if !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("second call: %v, want the budget's refusal", err)
	}
	if _, attempts := p.seen(); strings.Join(attempts, ",") != "1,2,1" {
		t.Errorf("partner saw attempts %v, want 1,2,1", attempts)
	}
	hint, ok := retry.RetryAfter(err)
	if !ok {
		t.Fatalf("the refusal %v carries no Retry-After hint", err)
	}
	want := int(math.Ceil(hint.Seconds()))
	if want == int(fallbackRetryAfter.Seconds()) {
		t.Fatalf("the refusal's hint %v rounds to the fallback %v: this test could not tell them apart", hint, fallbackRetryAfter)
	}
	if secs != want {
		t.Errorf("Retry-After %d s, want ceil(%v) = %d s, the refusal's own hint (the fallback is %v)", secs, hint, want, fallbackRetryAfter)
	}
	t.Logf("budget refusal: hint %v, Retry-After %d s (fallback %v)", hint, secs, fallbackRetryAfter)
	if again := retryAfterHeader(t, f.fn.failure(context.Background(), "nord-3", err)); again != want {
		t.Errorf("the handler answers the second refusal with Retry-After %d s, want %d s", again, want)
	}

	f.fn.flush(context.Background()) // the second call went around Handle, which flushes
	recs := emfRecords(t, f.emf.String())
	if n := metricSum(recs, "BudgetExhausted"); n != 2 || !exhaustedBudgets(recs)["local-ratio"] {
		t.Errorf("BudgetExhausted %d, budgets %v; want 2 from %s; EMF:\n%s", n, exhaustedBudgets(recs), "local-ratio", f.emf.String())
	}
}

func TestHandleGlobalBudgetRefuses(t *testing.T) {
	p := newPartner(t, status(http.StatusServiceUnavailable))
	cfg := testConfig(t, p.srv.URL)
	cfg.LocalFloor = 100 // the local layer would grant: the fleet-wide one decides
	cfg.Floor = 2
	clock := fakeclock.New(midWindow)
	f := newFixture(t, cfg, clock)
	retries := 0
	for i := 0; i < 4; i++ {
		resp := f.handle(t, context.Background(), request("nord-3"))
		if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("call %d: got %d", i, resp.StatusCode)
		}
	}
	_, attempts := p.seen()
	for _, a := range attempts {
		if a != "1" {
			retries++
		}
	}
	// 4 requests at ratio 0.1 earn 0.4 retries; the floor is 2.
	if retries != 2 {
		t.Errorf("fleet granted %d retries, want the floor of 2 (attempts %v)", retries, attempts)
	}
	recs := emfRecords(t, f.emf.String())
	if n := metricSum(recs, "BudgetExhausted"); n < 1 || !exhaustedBudgets(recs)["global:bikes-partner"] {
		t.Errorf("BudgetExhausted %d, budgets %v; want refusals from the global budget; EMF:\n%s", n, exhaustedBudgets(recs), f.emf.String())
	}
}

func TestHandlePartnerFailureIs502AfterRetries(t *testing.T) {
	p := newPartner(t, status(http.StatusInternalServerError))
	cfg := testConfig(t, p.srv.URL)
	cfg.Ratio, cfg.LocalFloor, cfg.Floor = 1, 100, 100
	f := newFixture(t, cfg, fakeclock.New(midWindow))
	resp := f.handle(t, context.Background(), request("nord-3"))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d, want 502", resp.StatusCode)
	}
	if _, ok := resp.Headers["Retry-After"]; ok {
		t.Error("502 with Retry-After")
	}
	if _, attempts := p.seen(); strings.Join(attempts, ",") != "1,2,3" {
		t.Errorf("attempts %v, want 1,2,3", attempts)
	}
}

func TestHandlePartnerAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     func(http.ResponseWriter, *http.Request, int)
		want       int
		wantCalls  int64
		wantReason string
	}{
		{"unknown station", status(http.StatusNotFound), http.StatusNotFound, 1, ""},
		{"bad request", status(http.StatusBadRequest), http.StatusBadGateway, 1, ""},
		{"not JSON", func(w http.ResponseWriter, _ *http.Request, _ int) { _, _ = io.WriteString(w, "<html>") }, http.StatusBadGateway, 1, ""},
		{"too long", func(w http.ResponseWriter, _ *http.Request, _ int) {
			_, _ = io.WriteString(w, `"`+strings.Repeat("x", maxPartnerBody)+`"`)
		}, http.StatusBadGateway, 1, ""},
		{"busy with a long Retry-After", func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, http.StatusServiceUnavailable, 1, reasonPartnerBusy},
		{"fails once", func(w http.ResponseWriter, r *http.Request, attempt int) {
			if attempt == 1 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			bikesJSON(w, r, attempt)
		}, http.StatusOK, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPartner(t, tc.answer)
			f := newFixture(t, testConfig(t, p.srv.URL), fakeclock.New(midWindow))
			resp := f.handle(t, context.Background(), request("nord-3"))
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, resp.Body, tc.want)
			}
			if n := p.calls.Load(); n != tc.wantCalls {
				t.Errorf("partner called %d times, want %d", n, tc.wantCalls)
			}
			if tc.wantReason != "" {
				if b := decodeError(t, resp); b.Reason != tc.wantReason {
					t.Errorf("reason %q, want %q", b.Reason, tc.wantReason)
				}
				if secs := retryAfterHeader(t, resp); secs != 120 {
					t.Errorf("Retry-After %d, want the partner's 120", secs)
				}
			}
		})
	}
}

// TestHandleAttemptTimeout runs in a synctest bubble over an in-memory
// network, so that the 50 ms AttemptTimeout fires on the hanging first
// attempt at exactly 50 ms and never on the second one, however loaded the
// machine.
func TestHandleAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first attempt hangs until the client gives up on it; the
		// second answers.
		cfg := testConfig(t, pipenet.URL)
		cfg.AttemptTimeout = 50 * time.Millisecond
		f := newFixture(t, cfg, nil)
		p := newPipePartner(t, f.fn, func(w http.ResponseWriter, r *http.Request, attempt int) {
			if attempt == 1 {
				<-r.Context().Done()
				return
			}
			bikesJSON(w, r, attempt)
		})
		start := time.Now()
		resp := f.handle(t, context.Background(), request("nord-3"))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("got %d %s, want 200 from the second attempt", resp.StatusCode, resp.Body)
		}
		if _, attempts := p.seen(); strings.Join(attempts, ",") != "1,2" {
			t.Errorf("attempts %v, want 1,2", attempts)
		}
		// One attempt timeout, then a backoff of at most MaxDelay.
		if took := time.Since(start); took < cfg.AttemptTimeout || took > cfg.AttemptTimeout+cfg.MaxDelay {
			t.Errorf("Handle took %v of the bubble's time; want the %v attempt timeout plus at most MaxDelay %v", took, cfg.AttemptTimeout, cfg.MaxDelay)
		}
	})
}

// TestHandleRespectsInvocationDeadline runs in a synctest bubble over an
// in-memory network: the partner never answers and the attempt timeout is
// longer than the invocation, so the invocation's deadline must end the
// call at FlushTimeout + responseReserve before it, leaving time to flush
// and answer. In the bubble's time that is exact, not a race between a
// loaded machine and a wall-clock deadline.
func TestHandleRespectsInvocationDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(t, pipenet.URL)
		cfg.AttemptTimeout = time.Minute
		cfg.FlushTimeout = 100 * time.Millisecond
		f := newFixture(t, cfg, nil)
		p := newPipePartner(t, f.fn, func(w http.ResponseWriter, r *http.Request, _ int) { <-r.Context().Done() })
		deadline := time.Now().Add(1500 * time.Millisecond)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		resp := f.handle(t, ctx, request("nord-3"))
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("got %d %s, want 502", resp.StatusCode, resp.Body)
		}
		// The partner call ends FlushTimeout + responseReserve before the
		// deadline; the flush (in-memory stores) takes no time here.
		if left, want := time.Until(deadline), cfg.FlushTimeout+responseReserve; left != want {
			t.Errorf("Handle returned %v before the invocation's deadline; want %v (FlushTimeout + responseReserve)", left, want)
		}
		if n := p.calls.Load(); n != 1 {
			t.Errorf("partner called %d times; no retry fits after the deadline", n)
		}
	})
}

func TestHealthyInvocationsWriteNothing(t *testing.T) {
	p := newPartner(t, bikesJSON)
	clock := fakeclock.New(midWindow)
	f := newFixture(t, testConfig(t, p.srv.URL), clock)
	for i := 0; i < 20; i++ {
		if resp := f.handle(t, context.Background(), request("nord-3")); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d", i, resp.StatusCode)
		}
		clock.Sleep(context.Background(), 10*time.Millisecond) // 200 ms in all: within one CacheTTL
	}
	if w := f.budgets.Stats().Writes + f.breakers.Stats().Writes; w != 0 {
		t.Errorf("%d store writes on the healthy path, want 0", w)
	}
	if r := f.breakers.Stats().Reads; r != 1 {
		t.Errorf("%d breaker reads in one CacheTTL, want 1", r)
	}
	if f.emf.String() != "" {
		t.Errorf("EMF on the healthy path: %s", f.emf.String())
	}
}

func TestFlushReportsPendingRequests(t *testing.T) {
	// Once this environment has used the fleet-wide budget in a window, its
	// later requests are deposited by the flush at the end of an
	// invocation, at most once per contact interval (2.5 s ± 50% with a
	// 10 s window), so that allowance they earn is not lost when the
	// environment is frozen.
	p := newPartner(t, func(w http.ResponseWriter, r *http.Request, attempt int) {
		if attempt == 1 && strings.Contains(r.URL.Path, "fails-once") {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		bikesJSON(w, r, attempt)
	})
	cfg := testConfig(t, p.srv.URL)
	cfg.Ratio = 1 // every request earns a whole retry, so every flush has something to write
	clock := fakeclock.New(midWindow)
	f := newFixture(t, cfg, clock)

	if resp := f.handle(t, context.Background(), request("fails-once")); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if w := f.budgets.Stats().Writes; w != 1 {
		t.Fatalf("%d budget writes after one global retry, want 1 (the lease, with the request deposited)", w)
	}
	if resp := f.handle(t, context.Background(), request("nord-3")); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if w := f.budgets.Stats().Writes; w != 1 {
		t.Errorf("%d budget writes after a healthy invocation right after, want 1 (the next contact is not due)", w)
	}
	clock.Sleep(context.Background(), 3750*time.Millisecond) // the latest the next contact can be; still the same window
	if resp := f.handle(t, context.Background(), request("nord-3")); resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if w := f.budgets.Stats().Writes; w != 2 {
		t.Errorf("%d budget writes after a healthy invocation at the next contact, want 2 (its requests flushed)", w)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&breaker.OpenError{Name: "p", State: breaker.Open, RetryAfter: 1500 * time.Millisecond}, 2},
		{&breaker.OpenError{Name: "p", State: breaker.Open, RetryAfter: time.Millisecond}, 1},
		{&breaker.OpenError{Name: "p", State: breaker.Open, RetryAfter: 3 * time.Second}, 3},
		{&breaker.OpenError{Name: "p", State: breaker.Open}, int(fallbackRetryAfter / time.Second)},
		{&retry.StatusError{StatusCode: 503, RetryAfter: 48 * time.Hour}, 86400},
	} {
		if got := retryAfterSeconds(tc.err); got != tc.want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestValidStationID(t *testing.T) {
	for id, want := range map[string]bool{
		"nord-3": true, "A": true, "0-0": true, strings.Repeat("z", 64): true,
		"": false, strings.Repeat("z", 65): false, "a_b": false, "a.b": false, "a/b": false, "ä": false, "a\x00": false,
	} {
		if got := validStationID(id); got != want {
			t.Errorf("validStationID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestConcurrentInvocations(t *testing.T) {
	// Lambda Managed Instances run several invocations in one environment
	// at once; the function and its metrics must be safe for that.
	p := newPartner(t, func(w http.ResponseWriter, r *http.Request, attempt int) {
		if attempt == 1 && strings.HasSuffix(r.URL.Path, "7/bikes") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		bikesJSON(w, r, attempt)
	})
	f := newFixture(t, testConfig(t, p.srv.URL), nil)
	var wg sync.WaitGroup
	codes := make([]int, 40)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := f.fn.Handle(context.Background(), request("s-"+strconv.Itoa(i)))
			if err != nil {
				t.Error(err)
			}
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK && c != http.StatusServiceUnavailable {
			t.Errorf("call %d: %d", i, c)
		}
	}
}

// TestLogLinesCarryTheRequestID: the handler's own records carry the
// invocation's request id from its context (lambdacontext), and so do
// records herdguard's hooks make without a context while the invocation is
// the only one in progress; with two in progress such a record carries
// none rather than a wrong one.
func TestLogLinesCarryTheRequestID(t *testing.T) {
	p := newPartner(t, bikesJSON)
	var logs syncBuffer
	breakers := local.NewBreakerStore()
	cfg := testConfig(t, p.srv.URL)
	fn, err := newFunction(cfg, deps{
		executor: inMemory(local.NewBudgetStore(), breakers, cfg.Name),
		metrics:  &syncBuffer{},
		logger:   slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Forced open in the table: the invocation's first Allow reads it, the
	// breaker's hook logs the state change (no context), and the handler
	// logs the 503 (with the invocation's context).
	if err := breakers.SetOverride(context.Background(), "bikes-partner", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatal(err)
	}
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	if resp, _ := fn.Handle(ctx, request("nord-3")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %d, want 503", resp.StatusCode)
	}
	byMsg := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		byMsg[fmt.Sprint(rec["msg"])] = rec
	}
	for _, msg := range []string{"partner unavailable", msgBreakerStateChanged} {
		rec, ok := byMsg[msg]
		if !ok {
			t.Errorf("no %q record; logs:\n%s", msg, logs.String())
			continue
		}
		if rec[logKeyRequestID] != "req-1" {
			t.Errorf("%q carries requestId %v, want req-1", msg, rec[logKeyRequestID])
		}
	}

	// Two invocations in progress: a record without a context is nobody's.
	var in invocations
	endA, endB := in.begin("a"), in.begin("b")
	if id := in.only(); id != "" {
		t.Errorf("only() = %q with two invocations in progress", id)
	}
	endA()
	if id := in.only(); id != "b" {
		t.Errorf("only() = %q, want b", id)
	}
	endB()
	if id := in.only(); id != "" {
		t.Errorf("only() = %q with none in progress", id)
	}
}

// lockedRand returns a seeded source of uniform numbers in [0, 1), safe for
// concurrent use. (A constant would fix the jitter, but the breaker also
// draws its fleet samples from it: a constant samples all calls or none.)
func lockedRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 7))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}
