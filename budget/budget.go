package budget

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kind is the kind of failure a retry follows. Budgets may price the kinds
// differently: the AWS SDK's token bucket charges less for a retry after
// throttling than after a transient error.
type Kind uint8

const (
	// Transient is a failure that may go away by itself: a 5xx response, a
	// timeout, a dropped connection.
	Transient Kind = iota
	// Throttling is a failure in which the partner asked the caller to slow
	// down: HTTP 429, or 503 with Retry-After.
	Throttling
)

// String returns "transient" or "throttling".
func (k Kind) String() string {
	switch k {
	case Transient:
		return "transient"
	case Throttling:
		return "throttling"
	default:
		return fmt.Sprintf("budget.Kind(%d)", uint8(k))
	}
}

// Outcome is what became of a granted retry. It is passed to the Release
// returned with the grant.
type Outcome uint8

const (
	// RetryFailed means the retry ran and failed. The budget keeps its cost.
	RetryFailed Outcome = iota
	// RetrySucceeded means the retry ran and succeeded. A budget may refund
	// the retry's cost (the token bucket does; a ratio budget does not).
	RetrySucceeded
	// RetryNotUsed means the retry never ran: a later budget layer refused,
	// the wait would have passed the deadline, or the context ended while
	// waiting. The budget takes the whole grant back, as if it had never
	// been given.
	RetryNotUsed
)

// String returns "failed", "succeeded" or "not-used".
func (o Outcome) String() string {
	switch o {
	case RetryFailed:
		return "failed"
	case RetrySucceeded:
		return "succeeded"
	case RetryNotUsed:
		return "not-used"
	default:
		return fmt.Sprintf("budget.Outcome(%d)", uint8(o))
	}
}

// Release reports what became of a granted retry. Call it exactly once.
// A nil Release is valid and does nothing when called through Done.
type Release func(Outcome)

// Done calls r with o if r is not nil.
func (r Release) Done(o Outcome) {
	if r != nil {
		r(o)
	}
}

// Budget is a retry budget. Implementations are safe for concurrent use.
//
// RecordRequest and RecordSuccess run on every call, healthy or not: they
// must not block, must not do I/O and should not allocate. AcquireRetry runs
// only before a retry; a backend that has to ask a remote store does so
// there, bounded by ctx.
type Budget interface {
	// RecordRequest records the first attempt of a logical call.
	RecordRequest(now time.Time)
	// RecordSuccess records a logical call that succeeded on its first
	// attempt. (A retry's success is reported through its Release.)
	RecordSuccess(now time.Time)
	// AcquireRetry asks for one retry after a failure of the given kind.
	//
	// It returns a Release (possibly nil) and a nil error when the retry is
	// granted. It returns an error for which errors.Is(err, ErrExhausted)
	// holds when the budget refuses; the error may be an *ExhaustedError
	// carrying a RetryAfter hint. It returns an error for which
	// errors.Is(err, ErrUnavailable) holds when it could not decide (its
	// store failed or timed out); callers then rely on their other layers.
	// It never returns a Release together with a non-nil error.
	AcquireRetry(ctx context.Context, now time.Time, kind Kind) (Release, error)
}

var (
	// ErrExhausted is the sentinel for a refused retry. Every refusal, from
	// any layer, satisfies errors.Is(err, ErrExhausted).
	ErrExhausted = errors.New("herdguard: retry budget exhausted")

	// ErrUnavailable means a budget could not reach its store (timeout,
	// throttling, malformed data). It is not a refusal: the retry.Executor
	// treats that layer as abstaining, and the executor reports the fault.
	ErrUnavailable = errors.New("herdguard: retry budget unavailable")
)

// ExhaustedError is a refused retry, as a budget's AcquireRetry returns
// it. The retry.Executor returns it to its caller as the Cause of a
// *retry.GiveUpError (Reason BudgetExhausted), which also carries the
// partner's last error and the number of attempts, so that
//
//	errors.Is(err, budget.ErrExhausted)     // true
//	errors.Is(err, partnerErr)              // true
//	errors.As(err, &exhausted)              // exhausted.Budget, .RetryAfter
//
// all hold.
type ExhaustedError struct {
	// Budget names the layer that refused: "local-ratio" and
	// "local-token-bucket" for package local's budgets, "global:<name>"
	// for a Global.
	Budget string
	// RetryAfter is when the budget expects to grant again, relative to the
	// refusal; zero when it cannot tell. A handler can pass it on as a
	// Retry-After header.
	RetryAfter time.Duration
	// Cause, if set, is why the budget refused when the reason is not its
	// allowance: the store's fault, matching ErrUnavailable, when a
	// fleet-wide layer configured to fail closed could not reach its store.
	Cause error
}

// Error describes the refusal.
func (e *ExhaustedError) Error() string {
	msg := "herdguard: retry budget exhausted"
	if e.Budget != "" {
		msg += " (" + e.Budget + ")"
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns ErrExhausted and, if set, the cause.
func (e *ExhaustedError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrExhausted}
	}
	return []error{ErrExhausted, e.Cause}
}

// unavailableError is a budget whose store failed; it matches
// ErrUnavailable and its cause, err.
type unavailableError struct {
	budget string
	err    error
}

// Error names the budget and the cause.
func (e *unavailableError) Error() string {
	return "herdguard: retry budget " + e.budget + " unavailable: " + fmt.Sprint(e.err)
}

// Unwrap returns ErrUnavailable and the cause.
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }
