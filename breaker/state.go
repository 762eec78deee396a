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
	// WatchUntil is when the fleet stops counting: until then, because
	// some environment saw a failure, every environment samples its calls
	// and reports them (see the package documentation). Zero or past: the
	// fleet is quiet and nothing is written.
	WatchUntil time.Time
	// Buckets are the fleet's counts in the current epoch, bucket n in
	// slot n mod FleetSlots; a slot may hold a bucket too old to count.
	Buckets [FleetSlots]Bucket
}

// FleetSlots is the number of buckets of fleet counts a Store keeps for
// one breaker: the fleet's rolling window of Settings.Window, cut into
// FleetSlots buckets of Window/FleetSlots each, aligned to the Unix epoch.
const FleetSlots = 10

// Bucket is the fleet's counts for one bucket of its rolling window, as a
// Store holds them. The counts are estimates of all the fleet's calls in
// the bucket: each environment reports a sample of its calls, chosen
// before their outcome was known, each counted as many times as it stands
// for (see the package documentation).
type Bucket struct {
	// Num is the bucket's number: Unix time in milliseconds divided by the
	// bucket width (Window/FleetSlots). Zero means empty.
	Num int64
	// Requests estimates the calls that asked to go, admitted or not;
	// Successes and Failures the outcomes of those admitted (Excluded
	// outcomes are in Requests only).
	Requests, Successes, Failures int64
	// Samples is the number of calls actually sampled: the sample size
	// behind the estimates.
	Samples int64
}

// Origin says who decided a change of state, for Settings.OnStateChange.
type Origin int8

const (
	// OriginLocal: this process's own state machine or override decided
	// (a breaker without a Store, one running on its local state machine
	// after a Store fault, Override, Reset).
	OriginLocal Origin = iota
	// OriginWrote: this environment wrote the fleet's transition. Each
	// fleet transition has exactly one such event across the fleet: count
	// these to count trips.
	OriginWrote
	// OriginFollowed: this environment followed a transition another
	// environment wrote, or an operator's override in the Store.
	OriginFollowed
)

// String returns "local", "wrote" or "followed".
func (o Origin) String() string {
	switch o {
	case OriginLocal:
		return "local"
	case OriginWrote:
		return "wrote"
	case OriginFollowed:
		return "followed"
	default:
		return fmt.Sprintf("breaker.Origin(%d)", int8(o))
	}
}

// StateChange is a change of the state Breaker.State reports, as passed to
// Settings.OnStateChange.
type StateChange struct {
	Name     string
	From, To State
	// Counts are the breaker's counts as they were before the change.
	Counts Counts
	Origin Origin
}

// Report is one environment's sampled counts for one bucket, as passed to
// Store.Report.
type Report struct {
	// Epoch is the fleet epoch the counts were gathered in. A Store
	// refuses a report of another epoch.
	Epoch uint64
	// Bucket is the bucket number (see Bucket.Num), at least 1.
	Bucket int64
	// Requests, Successes, Failures and Samples are added to the
	// bucket's (see Bucket); none may be negative.
	Requests, Successes, Failures, Samples int64
	// WatchUntil, if not zero, becomes the fleet's Snapshot.WatchUntil.
	WatchUntil time.Time
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

	// ErrThrottled marks, beside ErrStore, a Store request the database
	// refused for lack of capacity (DynamoDB's throttling), so that nothing
	// was applied. A Report so refused keeps its counts for this
	// environment's next one and does not send it to its local state
	// machine; any other Report fault drops them.
	ErrThrottled = errors.New("herdguard: breaker store throttled")
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
	// Throttled is true when adaptive throttling (Settings.Adaptive)
	// rejected the call, State being Closed; Admitting is the share of
	// calls the fleet admitted then.
	Throttled bool
	Admitting float64
}

// Error names the breaker and the wait.
func (e *OpenError) Error() string {
	s := fmt.Sprintf("herdguard: circuit breaker %q is %s", e.Name, e.State)
	if e.Throttled {
		s = fmt.Sprintf("herdguard: circuit breaker %q is throttling (admitting %.0f%% of calls)", e.Name, 100*e.Admitting)
	}
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
