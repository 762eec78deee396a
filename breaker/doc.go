// Package breaker is herdguard's circuit breaker: a state machine (closed,
// open, half-open) that stops calls to a partner that is failing, and the
// Store contract through which a fleet of processes shares one breaker.
//
// A Breaker on its own is in-memory and per process. Given a Store (package
// local for one process, package dynamo for a fleet of AWS Lambda execution
// environments) its state is shared: opening it anywhere blocks first
// attempts everywhere. With Settings.Adaptive it throttles instead of
// stopping (see Adaptive throttling below).
//
// # Using a breaker
//
// Every call asks Allow first and reports its outcome to Done:
//
//	p, err := b.Allow(ctx, now)
//	if err != nil {
//		return err // *OpenError: errors.Is(err, ErrOpen); RetryAfter says when to come back
//	}
//	err = callPartner(ctx)
//	b.Done(ctx, time.Now(), p, outcomeOf(err)) // Success, Failure or Excluded
//
// Times are passed in, in the style of golang.org/x/time/rate: the caller
// (usually a retry.Executor) owns the clock. The Permit is a small value;
// on the healthy path (closed, no override, fresh fleet state) Allow and
// Done take no lock, make no Store call and do not allocate. A Breaker is
// safe for concurrent use.
//
// # The state machine
//
// A closed breaker counts outcomes in a rolling Window (10 s in 10 slots).
// It trips when failures reach FailureRatio (50%) of at least MinRequests
// (20) counted calls in the window, or, if ConsecutiveFailures is set,
// after that many failures in a row. Excluded outcomes (the caller's
// cancellation, errors that are not the partner's fault) are not counted;
// with SlowCallThreshold set, a success slower than it is a failure.
//
// An open breaker rejects every call for OpenDuration (30 s), doubled on
// every re-open (a failed probe) up to MaxOpenDuration (5 min) and spread
// over ±Jitter (20%) with the injected Rand. Then it is half-open: at most
// HalfOpenProbes (1) calls go through at once, each holding its slot for at
// most ProbeLease (10 s), so that a probe whose Done never comes cannot
// wedge the breaker. A successful probe closes the breaker; a failed one
// re-opens it.
//
// Every change of state starts a new generation: counts start from zero,
// and the outcome of a call admitted in an earlier generation is dropped.
// OnStateChange sees every change of the state State reports, with the
// counts as they were just before it.
//
// Breaker.Override sets this process's operator override (ForcedOpen,
// ForcedClosed, Disabled, or NoOverride to clear it); it beats both the
// state machine and an override stored in the Store, and writes nothing.
// Reset clears it too.
//
// # Shared mode
//
// With Settings.Store, the state machine is the fleet's, kept in the Store
// with optimistic concurrency on an epoch: a transition that another
// environment beat fails with ErrConflict, and the breaker adopts the
// winner's state. Counts never cross a transition. What a fleet gets:
//
//   - Quiet: while no environment sees a failure, nothing is written and
//     each environment reads the state once per 15 × CacheTTL (15 s), at
//     a phase it draws, so that environments that read together do not
//     keep reading together.
//   - Watching: a failure that finds the fleet quiet writes an alarm; for
//     two Windows after the latest reported failure, every environment
//     reads once per CacheTTL and samples its first attempts (never a
//     retry), about 250 calls a second fleet-wide whatever the fleet's
//     size, and reports them at most once a second.
//   - Tripping: the fleet opens when its rolling window holds at least
//     MinRequests sampled outcomes and the estimated failure ratio is at
//     least FailureRatio plus one standard error of the (effective) sample
//     size. One environment alone is the whole fleet; one sick environment
//     among healthy ones counts for its share of the calls. A fleet making
//     fewer than 2 × MinRequests calls a window opens within 3 windows,
//     not 2.
//   - Half-open: each environment waits its own delay in [0, CacheTTL) past
//     the open period before one of them moves the fleet to half-open and
//     takes its probe slots, at most HalfOpenProbes fleet-wide; a caller of
//     any gap gets its probe within OpenDuration (plus jitter) + its gap +
//     CacheTTL. If the probes are lost, a new half-open epoch starts
//     2 × CacheTTL + ProbeLease later. An Excluded probe keeps its slot
//     until its lease lapses (with HalfOpenProbes 1, the fleet's next probe
//     then waits for the next half-open epoch).
//   - Overrides: one read from the Store beats the state machine, and this
//     process's own beats it; a new one reaches a quiet environment within
//     15 × CacheTTL. An OpenUntil further than MaxOpenDuration × (1 +
//     Jitter) ahead reads as now + MaxOpenDuration.
//   - Events: StateChange.Origin is OriginWrote in the one environment that
//     wrote a fleet transition (count these to count trips),
//     OriginFollowed where it was read, OriginLocal for a local decision.
//
// A Lambda handler calls Flush before returning (retry.Executor.Flush does),
// since the environment may be frozen with samples pending.
//
// Costs per environment: quiet, one Load per 15 × CacheTTL and no writes;
// watching, one Load per CacheTTL and at most one report a second while it
// has samples. Fleet-wide, a trip, a probe's result or a move to half-open
// is one Transition (plus a refused one per environment that raced), and a
// half-open epoch at most HalfOpenProbes AcquireProbe calls. With package
// dynamo's Store a Load is one eventually consistent BatchGetItem, a report
// one to three conditional writes on the state item, which stays under 1 KB
// whatever the fleet's size. An environment's first Load, and its first
// after idling more than 2 × 15 × CacheTTL, gets 4 × StoreTimeout.
//
// See "Circuit breaker" in docs/ARCHITECTURE.md for the protocol step by
// step, why the estimate is unbiased and what bias remains, and the
// measured costs and trip times.
//
// # When the Store fails
//
// Every Store call runs under context.WithTimeout(ctx, StoreTimeout)
// (50 ms) in a goroutine of its own, so it never blocks the caller past
// StoreTimeout or ctx's deadline even if the Store ignores its context,
// and a panicking Store is recovered. A fault (an error that is neither
// ErrConflict nor ErrProbeDenied, a timeout, a malformed snapshot) is
// reported to OnStoreError and switches the Breaker to degraded mode: its
// local state machine, starting from the last fleet state it knew, decides
// alone as an in-memory breaker would, honours the last override it read,
// writes nothing, and tries one Load per CacheTTL. A caller whose own
// context ends during a Store call is not a Store fault.
//
// The exception: a fault of the move to half-open or of AcquireProbe
// leaves the environment on the fleet state, rejecting calls and trying
// again with a backoff from CacheTTL up to ProbeLease, so that a Store that
// throttles at the end of an open period cannot let every environment
// probe on its own.
//
// The first Load that succeeds ends degraded mode, but a breaker never goes
// from open to closed without a successful probe: an environment open or
// half-open on its local state machine that finds the fleet closed stays
// on it until its own local probe succeeds. It never writes Open to the
// fleet on its own; an open or half-open fleet, or an operator's override,
// takes over at once.
//
// If the stored state goes back (the state item lost, a table recreated,
// "c#<name>" deleted), the environments follow the lower epoch, under the
// same rule. To close a fleet at once, write the force-closed override
// instead of deleting the state item. Sampled counts are never sent twice
// by the Breaker, but a report that failed loses them. See "Degraded mode
// and recovery" in docs/ARCHITECTURE.md.
//
// # Adaptive throttling
//
// Settings.Adaptive (with a Store) replaces the hard stop by fleet-wide
// client-side throttling over the fleet's sampled counts: the breaker
// never opens on its counts (overrides still apply). Where the hard stop
// would trip, under a stricter test (FailureRatio plus 2 standard errors,
// so that a partial outage is left to the retry budgets), the fleet
// throttles, in buckets of alternating phase: base buckets admit the share
// of calls the partner accepts, estimated from the latest buckets in which
// it turned calls away, probe buckets 1.175 times it, at least 2%, and
// no retry. A probe bucket in which no admitted call failed says the
// partner has room: every call goes at once, and the fleet throttles
// again as soon as calls fail. A rejected call gets an *OpenError with
// Throttled set (errors.Is(err, ErrOpen)). While the fleet watches, an
// adaptive environment reads the state every CacheTTL/4, and one that
// makes several calls per report interval counts every call (it reports
// once per interval either way). Every environment that
// names one breaker must agree on the mode. See "Adaptive throttling" in
// docs/ARCHITECTURE.md for the law, why it settles, its cost and what it
// measured.
package breaker
