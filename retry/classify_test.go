package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// TestClassifyStatus: one rule for every call (Do's and Transport's): a
// call that is not idempotent is retried only when the answer proves the
// partner did not do the work (429, 503 with a Retry-After); 408, 500,
// 502, 504 and a bare 503 only when it is idempotent.
func TestClassifyStatus(t *testing.T) {
	type verdicts struct{ notIdempotent, idempotent retry.Verdict }
	for code, want := range map[int]verdicts{
		400: {retry.NoRetry, retry.NoRetry}, 401: {retry.NoRetry, retry.NoRetry}, 403: {retry.NoRetry, retry.NoRetry},
		404: {retry.NoRetry, retry.NoRetry}, 409: {retry.NoRetry, retry.NoRetry}, 422: {retry.NoRetry, retry.NoRetry},
		429: {retry.RetryThrottling, retry.RetryThrottling},
		408: {retry.NoRetryFailure, retry.RetryTransient},
		500: {retry.NoRetryFailure, retry.RetryTransient}, 502: {retry.NoRetryFailure, retry.RetryTransient},
		503: {retry.NoRetryFailure, retry.RetryTransient}, 504: {retry.NoRetryFailure, retry.RetryTransient},
		501: {retry.NoRetryFailure, retry.NoRetryFailure}, 505: {retry.NoRetryFailure, retry.NoRetryFailure},
		599: {retry.NoRetryFailure, retry.NoRetryFailure},
		200: {retry.NoRetry, retry.NoRetry}, 302: {retry.NoRetry, retry.NoRetry},
	} {
		if got := retry.ClassifyStatus(status(code), false); got != want.notIdempotent {
			t.Errorf("ClassifyStatus(%d, not idempotent) = %v, want %v", code, got, want.notIdempotent)
		}
		if got := retry.ClassifyStatus(status(code), true); got != want.idempotent {
			t.Errorf("ClassifyStatus(%d, idempotent) = %v, want %v", code, got, want.idempotent)
		}
	}
	for _, idempotent := range []bool{false, true} {
		if got := retry.ClassifyStatus(&retry.StatusError{StatusCode: 503, RetryAfter: time.Second}, idempotent); got != retry.RetryThrottling {
			t.Errorf("503 with Retry-After (idempotent %v) = %v, want throttling", idempotent, got)
		}
	}
	if got := retry.ClassifyStatus(fmt.Errorf("wrapped: %w", status(429)), false); got != retry.RetryThrottling {
		t.Errorf("wrapped 429 = %v, want throttling", got)
	}
	if got := retry.ClassifyStatus(errors.New("x"), true); got != retry.NoOpinion {
		t.Errorf("non-status error = %v, want no opinion", got)
	}
}

// TestNonIdempotentStatusRuleInDoAndTransport: Do and Transport follow the
// same rule for a call that is not idempotent (Do without
// Config.Idempotent, a POST without Idempotency-Key): the partner sees one
// attempt for a 500, 502, 503 or 504, and every attempt for a 429 or a 503
// with Retry-After; with Idempotent (or a key), every attempt for all.
func TestNonIdempotentStatusRuleInDoAndTransport(t *testing.T) {
	for _, tc := range []struct {
		code       int
		retryAfter string
		once       bool // not idempotent: a single attempt
	}{
		{500, "", true}, {502, "", true}, {503, "", true}, {504, "", true}, {408, "", true},
		{429, "", false}, {503, "1", false}, {429, "1", false},
	} {
		name := fmt.Sprintf("%d retry-after %q", tc.code, tc.retryAfter)
		answer := func(w http.ResponseWriter) {
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			w.WriteHeader(tc.code)
		}
		statusErr := &retry.StatusError{StatusCode: tc.code}
		if tc.retryAfter == "1" {
			statusErr.RetryAfter = time.Second
		}
		for _, idempotent := range []bool{false, true} {
			want := 3
			if tc.once && !idempotent {
				want = 1
			}
			cfg := retry.Config{Clock: newFakeClock(), Budgets: noBudget, Idempotent: idempotent}
			calls := 0
			_ = mustNew(t, cfg).Do(context.Background(), failing(&calls, statusErr, statusErr, statusErr))
			if calls != want {
				t.Errorf("%s, Do with Idempotent %v: %d attempts, want %d", name, idempotent, calls, want)
			}

			var arrivals int
			srv := newPartner(t, func(n int, w http.ResponseWriter, r *http.Request) { arrivals = n; answer(w) })
			c := newClient(t, retry.Config{Clock: newFakeClock(), Budgets: noBudget}, retry.TransportOptions{}, nil)
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order"))
			if idempotent {
				req.Header.Set("Idempotency-Key", "k1")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: POST: %v", name, err)
			}
			readAll(t, resp)
			if resp.StatusCode != tc.code || arrivals != want {
				t.Errorf("%s, POST with key %v: %d arrivals, status %d; want %d and the partner's %d", name, idempotent, arrivals, resp.StatusCode, want, tc.code)
			}
		}
	}
}

func TestClassifyNetwork(t *testing.T) {
	urlErr := func(err error) error { return &url.Error{Op: "Get", URL: "http://partner", Err: err} }
	for _, tc := range []struct {
		name          string
		err           error
		notIdempotent retry.Verdict
		idempotent    retry.Verdict
	}{
		{"dial refused", urlErr(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), retry.RetryTransient, retry.RetryTransient},
		{"dial timeout", &net.OpError{Op: "dial", Err: timeoutError{}}, retry.RetryTransient, retry.RetryTransient},
		{"bare refused", syscall.ECONNREFUSED, retry.RetryTransient, retry.RetryTransient},
		{"dns temporary", &net.DNSError{Err: "timeout", IsTimeout: true}, retry.RetryTransient, retry.RetryTransient},
		{"dns not found", &net.DNSError{Err: "no such host", IsNotFound: true}, retry.NoRetryExcluded, retry.NoRetryExcluded},
		{"read reset", urlErr(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), retry.NoRetryFailure, retry.RetryTransient},
		{"write broken pipe", &net.OpError{Op: "write", Err: syscall.EPIPE}, retry.NoRetryFailure, retry.RetryTransient},
		{"aborted", syscall.ECONNABORTED, retry.NoRetryFailure, retry.RetryTransient},
		{"read timeout", urlErr(timeoutError{}), retry.NoRetryFailure, retry.RetryTransient},
		{"deadline", fmt.Errorf("attempt: %w", context.DeadlineExceeded), retry.NoRetryFailure, retry.RetryTransient},
		{"os deadline", os.ErrDeadlineExceeded, retry.NoRetryFailure, retry.RetryTransient},
		{"unexpected EOF", io.ErrUnexpectedEOF, retry.NoRetryFailure, retry.RetryTransient},
		{"EOF", urlErr(io.EOF), retry.NoRetryFailure, retry.RetryTransient},
		{"closed conn", net.ErrClosed, retry.NoRetryFailure, retry.RetryTransient},
		{"other", errors.New("json: cannot unmarshal"), retry.NoOpinion, retry.NoOpinion},
	} {
		if got := retry.ClassifyNetwork(tc.err, false); got != tc.notIdempotent {
			t.Errorf("%s, not idempotent: %v, want %v", tc.name, got, tc.notIdempotent)
		}
		if got := retry.ClassifyNetwork(tc.err, true); got != tc.idempotent {
			t.Errorf("%s, idempotent: %v, want %v", tc.name, got, tc.idempotent)
		}
	}
}

func TestClassifyControl(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want retry.Verdict
	}{
		{context.Canceled, retry.NoRetryExcluded},
		{fmt.Errorf("x: %w", context.Canceled), retry.NoRetryExcluded},
		{&budget.ExhaustedError{Budget: "inner"}, retry.NoRetryExcluded},
		{&breaker.OpenError{Name: "inner"}, retry.NoRetryExcluded},
		{context.DeadlineExceeded, retry.NoOpinion},
		{status(503), retry.NoOpinion},
	} {
		if got := retry.ClassifyControl(tc.err, true); got != tc.want {
			t.Errorf("ClassifyControl(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestVerdictAndReasonStrings(t *testing.T) {
	for v, want := range map[retry.Verdict]string{
		retry.NoOpinion: "no-opinion", retry.RetryTransient: "retry-transient", retry.RetryThrottling: "retry-throttling",
		retry.NoRetry: "no-retry", retry.NoRetryFailure: "no-retry-failure", retry.NoRetryExcluded: "no-retry-excluded",
		retry.Verdict(42): "retry.Verdict(42)",
	} {
		if v.String() != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", v, v.String(), want)
		}
	}
	if retry.BreakerOpen.String() != "breaker open" || retry.Reason(99).String() != "retry.Reason(99)" {
		t.Errorf("Reason strings: %q, %q", retry.BreakerOpen, retry.Reason(99))
	}
	if (&retry.GiveUpError{Err: fmt.Errorf("read: %w", timeoutError{})}).Timeout() != true ||
		(&retry.GiveUpError{Err: status(504)}).Timeout() != false {
		t.Errorf("GiveUpError.Timeout does not follow the partner's error")
	}
	for _, tc := range []struct {
		gu   *retry.GiveUpError
		want string
	}{
		{&retry.GiveUpError{Attempts: 3, Reason: retry.AttemptsExhausted, Err: status(503)},
			"herdguard: gave up after 3 attempt(s) (attempts exhausted): partner answered 503 Service Unavailable"},
		{&retry.GiveUpError{Attempts: 2, Reason: retry.BudgetExhausted, Err: status(503), Cause: &budget.ExhaustedError{Budget: "local-ratio"}},
			"herdguard: gave up after 2 attempt(s) (budget exhausted): partner answered 503 Service Unavailable; retry budget exhausted (local-ratio)"},
		{&retry.GiveUpError{Reason: retry.ContextDone, Cause: context.Canceled},
			"herdguard: context done: context canceled"},
	} {
		if got := tc.gu.Error(); got != tc.want {
			t.Errorf("GiveUpError.Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestNewStatusError(t *testing.T) {
	now := time.Now()
	resp := &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{"Retry-After": {"4"}}}
	se := retry.NewStatusError(resp, now)
	if se.StatusCode != 503 || se.RetryAfter != 4*time.Second || se.Status != resp.Status || se.Header == nil {
		t.Errorf("NewStatusError = %+v", se)
	}
	if got, want := se.Error(), "herdguard: partner answered 503 Service Unavailable (retry after 4s)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&retry.StatusError{StatusCode: 429}).Error(), "herdguard: partner answered 429 Too Many Requests"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
