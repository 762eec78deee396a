package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
)

// Verdict is a classifier's answer about one failed attempt: retry it (and
// as which kind of failure), never retry it (and how the circuit breaker
// should count it), or no opinion, in which case the next classifier of the
// chain decides.
type Verdict uint8

const (
	// NoOpinion passes the error on to the next classifier. An error no
	// classifier has an opinion about is not retried and not counted by
	// the breaker (as NoRetryExcluded): it is most likely the caller's own
	// bug, and the next attempt would fail the same way.
	NoOpinion Verdict = iota
	// RetryTransient retries after a failure that may go away by itself
	// (5xx, timeout, dropped connection). The breaker counts a failure.
	RetryTransient
	// RetryThrottling retries after the partner asked to slow down (429,
	// 503 with Retry-After): the backoff uses ThrottlingBase and budgets
	// may charge less. The breaker counts a failure.
	RetryThrottling
	// NoRetry gives up: the partner answered and the request itself is at
	// fault (400, 401, 403, 404, 422...). The breaker counts a success, since
	// the partner is healthy.
	NoRetry
	// NoRetryFailure gives up although the partner is at fault, because a
	// retry would be unsafe (a timeout of a call that is not idempotent) or
	// pointless. The breaker counts a failure.
	NoRetryFailure
	// NoRetryExcluded gives up on an error that says nothing about the
	// partner's health: the caller canceled, or a classifier marked the
	// error as not the partner's fault. The breaker does not count it.
	NoRetryExcluded
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case NoOpinion:
		return "no-opinion"
	case RetryTransient:
		return "retry-transient"
	case RetryThrottling:
		return "retry-throttling"
	case NoRetry:
		return "no-retry"
	case NoRetryFailure:
		return "no-retry-failure"
	case NoRetryExcluded:
		return "no-retry-excluded"
	default:
		return "retry.Verdict(" + strconv.Itoa(int(v)) + ")"
	}
}

// Retryable reports whether v retries (RetryTransient or RetryThrottling).
func (v Verdict) Retryable() bool { return v == RetryTransient || v == RetryThrottling }

// kind maps a retrying verdict to the budget kind it is charged as.
func (v Verdict) kind() budget.Kind {
	if v == RetryThrottling {
		return budget.Throttling
	}
	return budget.Transient
}

// outcome is how the breaker counts an attempt that ended with verdict v.
func (v Verdict) outcome() breaker.Outcome {
	switch v {
	case RetryTransient, RetryThrottling, NoRetryFailure:
		return breaker.Failure
	case NoRetry:
		return breaker.Success
	default:
		return breaker.Excluded
	}
}

// A Classifier is one link of the classification chain. It looks at the
// error of a failed attempt (never nil) and answers with a Verdict, or
// NoOpinion to let the next link decide. idempotent says whether the call
// may be repeated after it may have reached the partner; a classifier uses
// it for failures that leave that open (timeouts, resets).
//
// Classifiers must be cheap, must not block and are called concurrently.
// Callers' classifiers (Config.Classifiers) run before the built-in chain
// ClassifyControl, ClassifyStatus, ClassifyNetwork.
type Classifier func(err error, idempotent bool) Verdict

// ClassifyControl handles errors that are decisions rather than faults:
// context.Canceled (NoRetryExcluded), and refusals of another herdguard
// layer (budget.ErrExhausted, breaker.ErrOpen, returned by an executor
// nested inside the operation), which are never retried again on top
// (NoRetryExcluded): retrying at every layer is what multiplies the load.
// context.DeadlineExceeded is left to ClassifyNetwork, as a timeout.
func ClassifyControl(err error, _ bool) Verdict {
	if errors.Is(err, context.Canceled) ||
		errors.Is(err, budget.ErrExhausted) ||
		errors.Is(err, breaker.ErrOpen) {
		return NoRetryExcluded
	}
	return NoOpinion
}

// ClassifyStatus handles *StatusError: 408, 500, 502 and 504 retry as
// transient; 429 retries as throttling; 503 retries as throttling when it
// carries a Retry-After (the server said when to come back, so it is
// shedding load) and as transient otherwise. These statuses are retried
// whether or not the call is idempotent: the partner answered that it did
// not do the work. Every other status is NoRetry (the partner is healthy;
// the request is wrong), except other 5xx (501, 505, ...), which are
// NoRetryFailure. (Transport does not repeat a request whose method is not
// idempotent and that carries no idempotency key, whatever the status: it
// retries such a request only when it provably never reached the partner.)
func ClassifyStatus(err error, _ bool) Verdict {
	var se *StatusError
	if !errors.As(err, &se) {
		return NoOpinion
	}
	switch se.StatusCode {
	case http.StatusTooManyRequests:
		return RetryThrottling
	case http.StatusServiceUnavailable:
		if se.RetryAfter > 0 {
			return RetryThrottling
		}
		return RetryTransient
	case http.StatusRequestTimeout, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusGatewayTimeout:
		return RetryTransient
	}
	if se.StatusCode >= 500 && se.StatusCode <= 599 {
		return NoRetryFailure
	}
	return NoRetry
}

// ClassifyNetwork handles timeouts and connection errors.
//
// Errors proving the request never reached the partner are retried as
// transient whatever the idempotency: failed dials (*net.OpError with Op
// "dial", connection refused) and DNS failures other than "no such host"
// (which is a configuration error: NoRetryExcluded).
//
// Errors after which the partner may have received the request (timeouts
// including context.DeadlineExceeded of an attempt, connection resets and
// aborts, broken pipes, io.ErrUnexpectedEOF, io.EOF) are retried as
// transient only when the call is idempotent; otherwise they give up with
// NoRetryFailure.
func ClassifyNetwork(err error, idempotent bool) Verdict {
	if neverSent(err) {
		return RetryTransient
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return NoRetryExcluded
	}
	if mayHaveReached(err) {
		if idempotent {
			return RetryTransient
		}
		return NoRetryFailure
	}
	return NoOpinion
}

// neverSent reports whether err proves the request never left.
func neverSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && !dnsErr.IsNotFound
}

// mayHaveReached reports whether err is a timeout or a broken connection
// after which the partner may have the request.
func mayHaveReached(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// defaultClassifiers is the built-in chain, run after Config.Classifiers.
var defaultClassifiers = [...]Classifier{ClassifyControl, ClassifyStatus, ClassifyNetwork}

// StatusError is the error an operation returns for an HTTP response it
// counts as failed. ClassifyStatus decides from StatusCode; the executor
// waits at least RetryAfter before the retry.
//
//	if resp.StatusCode >= 400 {
//		return retry.NewStatusError(resp, time.Now())
//	}
type StatusError struct {
	// StatusCode is the response's status code.
	StatusCode int
	// RetryAfter is the wait the server asked for (Retry-After or
	// x-amz-retry-after); zero when it did not ask.
	RetryAfter time.Duration
	// Status is the status line text ("503 Service Unavailable"),
	// optional.
	Status string
	// Header is the response's header, optional, for callers' classifiers
	// (an error code header, for instance). The body is not kept.
	Header http.Header
}

// NewStatusError builds a *StatusError from a response, reading its
// Retry-After headers relative to now. It does not touch the body: the
// caller drains and closes it as usual.
func NewStatusError(resp *http.Response, now time.Time) *StatusError {
	d, _ := RetryAfterFromHeader(resp.Header, now)
	return &StatusError{StatusCode: resp.StatusCode, RetryAfter: d, Status: resp.Status, Header: resp.Header}
}

// Error returns "partner answered <status>".
func (e *StatusError) Error() string {
	s := e.Status
	if s == "" {
		s = strconv.Itoa(e.StatusCode)
		if t := http.StatusText(e.StatusCode); t != "" {
			s += " " + t
		}
	}
	msg := "herdguard: partner answered " + s
	if e.RetryAfter > 0 {
		msg += " (retry after " + e.RetryAfter.String() + ")"
	}
	return msg
}

// RetryAfterHint returns RetryAfter, and whether it is set.
func (e *StatusError) RetryAfterHint() (time.Duration, bool) {
	return e.RetryAfter, e.RetryAfter > 0
}

// RetryAfterHinter is implemented by errors that carry a server's
// Retry-After, as *StatusError does. The executor waits at least that long
// before retrying (bounded by Config.MaxRetryAfter and the deadline).
// Implement it on your own error types to have their hints honoured.
type RetryAfterHinter interface {
	RetryAfterHint() (time.Duration, bool)
}

// partnerHint returns the Retry-After carried by err, if any.
func partnerHint(err error) time.Duration {
	var h RetryAfterHinter
	if errors.As(err, &h) {
		if d, ok := h.RetryAfterHint(); ok && d > 0 {
			return d
		}
	}
	return 0
}
