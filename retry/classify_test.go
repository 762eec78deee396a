package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

func TestClassifyStatus(t *testing.T) {
	for code, want := range map[int]retry.Verdict{
		400: retry.NoRetry, 401: retry.NoRetry, 403: retry.NoRetry, 404: retry.NoRetry, 409: retry.NoRetry, 422: retry.NoRetry,
		408: retry.RetryTransient, 429: retry.RetryThrottling,
		500: retry.RetryTransient, 502: retry.RetryTransient, 503: retry.RetryTransient, 504: retry.RetryTransient,
		501: retry.NoRetryFailure, 505: retry.NoRetryFailure, 599: retry.NoRetryFailure,
		200: retry.NoRetry, 302: retry.NoRetry,
	} {
		for _, idempotent := range []bool{false, true} {
			if got := retry.ClassifyStatus(status(code), idempotent); got != want {
				t.Errorf("ClassifyStatus(%d, %v) = %v, want %v", code, idempotent, got, want)
			}
		}
	}
	if got := retry.ClassifyStatus(&retry.StatusError{StatusCode: 503, RetryAfter: time.Second}, false); got != retry.RetryThrottling {
		t.Errorf("503 with Retry-After = %v, want throttling", got)
	}
	if got := retry.ClassifyStatus(fmt.Errorf("wrapped: %w", status(429)), false); got != retry.RetryThrottling {
		t.Errorf("wrapped 429 = %v, want throttling", got)
	}
	if got := retry.ClassifyStatus(errors.New("x"), true); got != retry.NoOpinion {
		t.Errorf("non-status error = %v, want no opinion", got)
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
