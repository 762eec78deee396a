package retry

import (
	"errors"
	"strconv"
	"strings"
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
	// ContextDone: the context ended while waiting, before the first
	// attempt, or while a budget asked its store for the retry. Cause is
	// ctx.Err().
	ContextDone
	// BudgetExhausted: a retry budget refused the retry. Cause is the
	// budget's *budget.ExhaustedError.
	BudgetExhausted
	// BreakerOpen: the circuit breaker rejected the attempt, the first
	// one included. Cause is the breaker's *breaker.OpenError.
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

// GiveUpError is every error an Executor returns (Do, DoIdempotent,
// the generic Do and DoIdempotent, a Transport's refusals, StartAttempt
// and AcquireRetry): Reason says why it stopped, Attempts how many attempts
// reached the partner, Err is the partner's error from the last attempt
// (nil when none was made) and Cause what stopped the call when that is
// not Err itself: the budget's *budget.ExhaustedError, the breaker's
// *breaker.OpenError, or ctx.Err(). It unwraps to both, so that
//
//	errors.Is(err, budget.ErrExhausted) // a budget refused the retry
//	errors.Is(err, breaker.ErrOpen)     // the breaker rejected an attempt
//	errors.Is(err, context.Canceled)    // the caller gave up
//	errors.As(err, &statusErr)          // the partner's *StatusError
//	errors.As(err, &giveUp)             // giveUp.Attempts, giveUp.Reason
//
// hold as they apply, and RetryAfter(err) returns the hint a handler passes
// on with a 503.
type GiveUpError struct {
	// Attempts is the number of attempts made (0 when the breaker rejected
	// the first one, or the context had ended before it).
	Attempts int
	// Reason is why no further attempt was made.
	Reason Reason
	// Err is the partner's error from the last attempt; nil if none was
	// made.
	Err error
	// Cause is what stopped the call when that is not Err itself: the
	// budget's *budget.ExhaustedError (Reason BudgetExhausted), the
	// breaker's *breaker.OpenError (BreakerOpen), or the context's error
	// (ContextDone). Nil for the other reasons.
	Cause error
	// RetryAfter is the longest wait the partner's last answer, the
	// refusing budget or the breaker asked for; zero when none did.
	RetryAfter time.Duration
}

// Error describes the give-up, the partner's error and the cause.
func (e *GiveUpError) Error() string {
	msg := "herdguard: " + e.Reason.String()
	if e.Attempts > 0 {
		msg = "herdguard: gave up after " + strconv.Itoa(e.Attempts) + " attempt(s) (" + e.Reason.String() + ")"
	}
	sep := ": "
	for _, err := range [...]error{e.Err, e.Cause} {
		if err != nil {
			msg += sep + strings.TrimPrefix(err.Error(), "herdguard: ")
			sep = "; "
		}
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

// RetryAfter returns the longest wait an error carries, for a handler to
// pass on as an HTTP Retry-After (together with a 503):
//   - a *GiveUpError's RetryAfter, the longest of those below;
//   - *budget.ExhaustedError: its RetryAfter (the executor fills in the
//     wait it would have made when the budget could not tell);
//   - *breaker.OpenError: the time until the breaker's next probe;
//   - *StatusError (or any RetryAfterHinter): the partner's own
//     Retry-After.
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
