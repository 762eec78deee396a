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
	"github.com/herdguard/herdguard/internal/hint"
)

// Verdict is a classifier's answer about one failed attempt: retry it (and
// as which kind of failure), never retry it (and how the circuit breaker
// should count it), or no opinion, in which case the next classifier of the
// chain decides.
type Verdict uint8

const (
	// NoOpinion passes the error on to the next classifier. An error no
	// classifier has an opinion about is a failure of the partner, as in
	// sony/gobreaker, failsafe-go, resilience4j and Polly: the breaker
	// counts it, and it is retried as transient when the call is
	// idempotent (RetryTransient), not otherwise (NoRetryFailure). Return
	// NoRetryExcluded from a classifier for errors that are not the
	// partner's doing.
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

// retryable reports whether v retries (RetryTransient or RetryThrottling).
func (v Verdict) retryable() bool { return v == RetryTransient || v == RetryThrottling }

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
// Callers' classifiers (Config.Classifiers) run before the built-in chain,
// which the package documentation describes.
type Classifier func(err error, idempotent bool) Verdict

// classifyControl handles errors that are decisions rather than faults:
// context.Canceled (NoRetryExcluded), and refusals of another herdguard
// layer (budget.ErrExhausted, breaker.ErrOpen, returned by an executor
// nested inside the operation), which are never retried again on top
// (NoRetryExcluded): retrying at every layer is what multiplies the load.
// context.DeadlineExceeded is left to classifyNetwork, as a timeout.
func classifyControl(err error, _ bool) Verdict {
	if errors.Is(err, context.Canceled) ||
		errors.Is(err, budget.ErrExhausted) ||
		errors.Is(err, breaker.ErrOpen) {
		return NoRetryExcluded
	}
	return NoOpinion
}

// classifyStatus handles *StatusError. One rule for every call, Do's and
// Transport's alike: a call that is not idempotent is retried only when the
// answer proves that the partner did not do the work.
//
//   - 429, and 503 with a Retry-After (or x-amz-retry-after): the partner
//     refused the request and said when to come back. Retried as
//     throttling, idempotent or not.
//   - 408, 500, 502, 504, and 503 without a hint: retried as transient only
//     when the call is idempotent; otherwise NoRetryFailure. The partner,
//     or the upstream behind a gateway, may have done the work: a 502 or
//     504 is a gateway's word for an upstream that failed or was slow
//     after the request reached it, a 500 may come after a partial write,
//     and a bare 503 is what a proxy such as Envoy answers when the
//     upstream reset the connection after reading the request.
//   - Other 5xx (501, 505, ...): NoRetryFailure.
//   - Every other status: NoRetry (the partner is healthy; the request is
//     wrong).
func classifyStatus(err error, idempotent bool) Verdict {
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
		return transientIf(idempotent)
	case http.StatusRequestTimeout, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusGatewayTimeout:
		return transientIf(idempotent)
	}
	if se.StatusCode >= 500 && se.StatusCode <= 599 {
		return NoRetryFailure
	}
	return NoRetry
}

// transientIf is RetryTransient for an idempotent call, NoRetryFailure
// otherwise: a partner fault after which the partner may have done the
// work.
func transientIf(idempotent bool) Verdict {
	if idempotent {
		return RetryTransient
	}
	return NoRetryFailure
}

// classifyNetwork handles timeouts and connection errors.
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
func classifyNetwork(err error, idempotent bool) Verdict {
	if neverSent(err) {
		return RetryTransient
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return NoRetryExcluded
	}
	if mayHaveReached(err) {
		return transientIf(idempotent)
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

// RetryEveryError is a Classifier for callers who want every error retried,
// as a plain retry loop (or sony/gobreaker under one) would: put it in
// Config.Classifiers and every error is RetryTransient, whether or not the
// call is idempotent, 4xx answers and timeouts of a POST included. Only
// the caller's cancellation and a nested herdguard layer's refusal
// (budget.ErrExhausted, breaker.ErrOpen) keep their verdict
// (NoRetryExcluded): retrying them would multiply the load. The budgets,
// the breaker, MaxAttempts and the deadline still bound the retries.
func RetryEveryError(err error, idempotent bool) Verdict {
	if v := classifyControl(err, idempotent); v != NoOpinion {
		return v
	}
	return RetryTransient
}

// classifyUnknown is the last link of the built-in chain: an error nobody
// recognised is a failure of the partner, retried only when the call is
// idempotent.
func classifyUnknown(_ error, idempotent bool) Verdict { return transientIf(idempotent) }

// defaultClassifiers is the built-in chain, run after Config.Classifiers.
var defaultClassifiers = [...]Classifier{classifyControl, classifyStatus, classifyNetwork, classifyUnknown}

// StatusError is the error an operation returns for an HTTP response it
// counts as failed. The built-in classification decides from StatusCode
// (see the package documentation); the executor waits at least RetryAfter
// before the retry.
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
	d, _ := hint.FromHeader(resp.Header, now)
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
