package breaker

import (
	"errors"
	"fmt"
	"time"
)

// State is a circuit breaker's state.
type State int8

const (
	// Closed lets every call through and counts outcomes.
	Closed State = iota
	// Open rejects every call until the open duration has passed.
	Open
	// HalfOpen lets a limited number of probe calls through: a successful
	// probe closes the breaker, a failed one opens it again.
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	default:
		return fmt.Sprintf("breaker.State(%d)", int8(s))
	}
}

// Outcome is how one call counts for the breaker.
type Outcome int8

const (
	// Success counts towards closing (or keeping closed) the breaker.
	Success Outcome = iota
	// Failure counts towards opening it.
	Failure
	// Excluded does not count at all: the call was canceled by its caller,
	// or failed for a reason that is not the partner's fault.
	Excluded
)

// String returns "success", "failure" or "excluded".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Excluded:
		return "excluded"
	default:
		return fmt.Sprintf("breaker.Outcome(%d)", int8(o))
	}
}

// Override is an operator's decision that takes precedence over the state
// machine.
type Override int8

const (
	// NoOverride lets the state machine decide.
	NoOverride Override = iota
	// ForcedOpen rejects every call, probes included.
	ForcedOpen
	// ForcedClosed lets every call through; outcomes are still counted but
	// never open the breaker.
	ForcedClosed
	// Disabled turns the breaker off: calls pass and nothing is counted.
	Disabled
)

// String returns "none", "force-open", "force-closed" or "disabled"; these
// are also the values an operator writes into a store's override item.
func (o Override) String() string {
	switch o {
	case NoOverride:
		return "none"
	case ForcedOpen:
		return "force-open"
	case ForcedClosed:
		return "force-closed"
	case Disabled:
		return "disabled"
	default:
		return fmt.Sprintf("breaker.Override(%d)", int8(o))
	}
}

// ParseOverride is the inverse of Override.String.
func ParseOverride(s string) (Override, error) {
	switch s {
	case "none", "":
		return NoOverride, nil
	case "force-open":
		return ForcedOpen, nil
	case "force-closed":
		return ForcedClosed, nil
	case "disabled":
		return Disabled, nil
	}
	return NoOverride, fmt.Errorf("herdguard: unknown breaker override %q (want none, force-open, force-closed or disabled)", s)
}

// Counts are the outcomes a breaker has seen in its current window.
type Counts struct {
	Requests             int64 // calls admitted (successes + failures + excluded + in flight)
	Successes            int64
	Failures             int64
	Excluded             int64
	ConsecutiveFailures  int64
	ConsecutiveSuccesses int64
}

// Snapshot is the shared state of one breaker as a Store holds it.
type Snapshot struct {
	// State is the fleet-wide state.
	State State
	// Epoch increases by exactly one on every transition. It is the token
	// for optimistic concurrency: a transition names the epoch it was
	// decided on and fails if another environment moved first.
	Epoch uint64
	// OpenUntil is, while Open, the earliest time a probe may go.
	OpenUntil time.Time
	// Reopens counts consecutive openings without a close in between; the
	// open duration grows exponentially with it.
	Reopens int
	// Override is the operator's override, stored apart from the state so
	// that writing it never races with transitions.
	Override Override
	// OverrideUntil, if not zero, is when the override lapses.
	OverrideUntil time.Time
}

// Tally is a fleet window's totals, as returned by Store.Report.
type Tally struct {
	Successes int64
	Failures  int64
	// Reporters is the number of distinct environments that reported into
	// the window.
	Reporters int
}

var (
	// ErrOpen is the sentinel for a call rejected because the breaker is
	// open (or half-open with every probe slot taken). Rejections are
	// *OpenError values, which satisfy errors.Is(err, ErrOpen).
	ErrOpen = errors.New("herdguard: circuit breaker is open")

	// ErrConflict is returned by Store.Transition when the stored epoch is
	// not the one the transition was decided on.
	ErrConflict = errors.New("herdguard: breaker state changed concurrently")

	// ErrProbeDenied is returned by Store.AcquireProbe when every probe slot
	// of the epoch is held by an unexpired lease.
	ErrProbeDenied = errors.New("herdguard: no half-open probe slot free")

	// ErrStore wraps every error of a breaker Store that is not one of the
	// domain errors above: timeouts, throttling, malformed items.
	ErrStore = errors.New("herdguard: breaker store failed")
)

// OpenError is a call rejected by an open breaker.
type OpenError struct {
	// Name is the breaker's name.
	Name string
	// State is the state that rejected the call (Open, or HalfOpen with no
	// probe slot free).
	State State
	// RetryAfter is the time until the next probe may go, usable as an HTTP
	// Retry-After.
	RetryAfter time.Duration
	// Forced is true when an operator's override rejected the call.
	Forced bool
}

// Error names the breaker and the wait.
func (e *OpenError) Error() string {
	s := fmt.Sprintf("herdguard: circuit breaker %q is %s", e.Name, e.State)
	if e.Forced {
		s += " (forced by operator)"
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf("; next probe in %s", e.RetryAfter.Round(time.Millisecond))
	}
	return s
}

// Unwrap returns ErrOpen.
func (e *OpenError) Unwrap() error { return ErrOpen }
