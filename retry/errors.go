package retry

import (
	"errors"
	"strconv"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
)

// Reason is why the executor stopped retrying a call.
type Reason uint8

const (
	// NotRetryable: the classification chain said not to retry.
	NotRetryable Reason = iota
	// AttemptsExhausted: MaxAttempts attempts were made.
	AttemptsExhausted
	// DeadlineTooClose: the wait before the next attempt would have ended
	// after the context's deadline minus Config.DeadlineMargin.
	DeadlineTooClose
	// RetryAfterTooLong: the partner's Retry-After exceeded
	// Config.MaxRetryAfter.
	RetryAfterTooLong
	// ContextDone: the context ended while waiting, or before an attempt.
	ContextDone
	// BudgetExhausted: a retry budget refused the retry. The error returned
	// is a *budget.ExhaustedError, not a *GiveUpError.
	BudgetExhausted
	// BreakerOpen: the circuit breaker rejected the attempt.
	BreakerOpen
)

// String returns the reason's name.
func (r Reason) String() string {
	switch r {
	case NotRetryable:
		return "not retryable"
	case AttemptsExhausted:
		return "attempts exhausted"
	case DeadlineTooClose:
		return "deadline too close"
	case RetryAfterTooLong:
		return "retry-after too long"
	case ContextDone:
		return "context done"
	case BudgetExhausted:
		return "budget exhausted"
	case BreakerOpen:
		return "breaker open"
	default:
		return "retry.Reason(" + strconv.Itoa(int(r)) + ")"
	}
}

// GiveUpError is returned when the executor gives up on a call after at
// least one attempt: it carries the partner's error from the last attempt
// and the number of attempts, and unwraps to the partner's error, so
// errors.Is and errors.As see through it:
//
//	var se *retry.StatusError
//	errors.As(err, &se)  // the partner's 503
//	var gu *retry.GiveUpError
//	errors.As(err, &gu)  // gu.Attempts, gu.Reason
//
// When the breaker rejected a later attempt, or the context ended during
// the wait, Cause holds that error (*breaker.OpenError, ctx.Err()) and is
// unwrapped too: errors.Is(err, breaker.ErrOpen) and
// errors.Is(err, context.Canceled) hold.
type GiveUpError struct {
	// Attempts is the number of attempts made.
	Attempts int
	// Reason is why no further attempt was made.
	Reason Reason
	// Err is the partner's error from the last attempt.
	Err error
	// Cause is what stopped the retries when that is not Err itself: the
	// breaker's *OpenError or the context's error. Usually nil.
	Cause error
	// RetryAfter is the partner's Retry-After from the last attempt, or the
	// breaker's hint with BreakerOpen; zero when unknown.
	RetryAfter time.Duration
}

// Error describes the give-up and the partner's error.
func (e *GiveUpError) Error() string {
	msg := "herdguard: gave up after " + strconv.Itoa(e.Attempts) + " attempt(s) (" + e.Reason.String() + ")"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Cause != nil {
		msg += "; " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns the partner's error and, if set, Cause.
func (e *GiveUpError) Unwrap() []error {
	switch {
	case e.Err == nil && e.Cause == nil:
		return nil
	case e.Cause == nil:
		return []error{e.Err}
	case e.Err == nil:
		return []error{e.Cause}
	}
	return []error{e.Err, e.Cause}
}

// Timeout reports whether the partner's error is a timeout (has a
// Timeout method that returns true), so that checks such as
// (*url.Error).Timeout, which http.Client errors offer, see through a
// give-up.
func (e *GiveUpError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.Err, &t) && t.Timeout()
}

// RetryAfter returns the longest wait a refusal or a give-up carries, for a
// handler to pass on as an HTTP Retry-After (together with a 503):
//   - *budget.ExhaustedError: its RetryAfter (the executor fills in the
//     wait it would have made when the budget could not tell);
//   - *breaker.OpenError: the time until the breaker's next probe;
//   - *GiveUpError and *StatusError (or any RetryAfterHinter): the
//     partner's own Retry-After.
//
// It reports false when err carries no positive hint.
func RetryAfter(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	var d time.Duration
	var ex *budget.ExhaustedError
	if errors.As(err, &ex) && ex.RetryAfter > d {
		d = ex.RetryAfter
	}
	var oe *breaker.OpenError
	if errors.As(err, &oe) && oe.RetryAfter > d {
		d = oe.RetryAfter
	}
	var gu *GiveUpError
	if errors.As(err, &gu) && gu.RetryAfter > d {
		d = gu.RetryAfter
	}
	if h := partnerHint(err); h > d {
		d = h
	}
	return d, d > 0
}
