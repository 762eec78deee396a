// Package breaker is herdguard's circuit breaker: a state machine (closed,
// open, half-open) that stops calls to a partner that is failing, and the
// Store contract through which a fleet of processes shares one breaker.
//
// A Breaker on its own is in-memory and per process. Given a Store (package
// local for one process, package dynamo for a fleet of AWS Lambda execution
// environments) its state is shared: opening it anywhere blocks first
// attempts everywhere.
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
// Done take no lock, make no Store call and do not allocate.
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
// An open breaker rejects every call for OpenDuration (30 s). Every
// re-open, a failed probe, doubles the duration up to MaxOpenDuration
// (5 min), and every duration is spread over ±Jitter (20%) with the
// injected Rand, so a fleet does not probe in lockstep. When it has passed
// the breaker is half-open: at most HalfOpenProbes (1) calls go through at
// once, each holding its slot for at most ProbeLease (10 s) so that a probe
// whose Done never comes cannot wedge the breaker. A successful probe
// closes the breaker; a failed one re-opens it.
//
// Every change of state starts a new generation: counts start from zero,
// and the outcome of a call admitted in an earlier generation is dropped
// (a slow call that started before a trip cannot close, or re-trip, the
// breaker). OnStateChange sees every change of the state State reports,
// with the counts as they were just before it.
//
// ForceOpen, ForceClose and Disable are this process's operator overrides;
// they beat both the state machine and an override stored in the Store,
// and write nothing. Reset clears them.
//
// # Shared mode
//
// With Settings.Store, the state machine is the fleet's, kept in the Store
// with optimistic concurrency: every transition names the epoch it was
// decided on and fails with ErrConflict if another environment moved
// first, in which case the breaker adopts the state the winner wrote; no
// write ever overwrites a newer state. Each Breaker:
//
//   - caches the fleet state for CacheTTL (1 s): when the cache is stale,
//     exactly one caller reloads it (Store.Load) while concurrent callers
//     go on with the stale state; no lock is held across a Store call;
//   - counts outcomes locally, always, and while this environment sees
//     failures, reports its successes and failures for the current fleet
//     window (windows of length Window aligned to the Unix epoch, so every
//     environment uses the same keys) at most once per ReportInterval (1 s)
//     and on Flush (and at each failed local probe while held, see below);
//     a window without failures is never reported;
//   - trips the fleet (Closed→Open) only when the window's totals returned
//     by Store.Report reach FailureRatio of at least MinRequests calls AND
//     come from at least MinReporters (2) environments: one sick
//     environment cannot open the breaker for everyone;
//   - once the open duration has passed, moves the fleet to half-open
//     (Open→HalfOpen) and asks for one of HalfOpenProbes fleet-wide probe
//     slots (Store.AcquireProbe, a lease of ProbeLease); an environment
//     refused a slot does not ask again for CacheTTL. The probe's outcome
//     closes (HalfOpen→Closed, Reopens reset) or re-opens (HalfOpen→Open,
//     Reopens+1, doubled duration) the fleet;
//   - honours an operator override read from the Store (force-open,
//     force-closed, disabled, optionally until a time): it beats the
//     state machine, and this process's own overrides beat it.
//
// What the fleet is guaranteed, with every environment's clock and Store
// answers in order: an open breaker rejects first attempts in every
// environment within CacheTTL of the trip (a new environment at its first
// call); at most HalfOpenProbes probes are in flight fleet-wide per
// half-open epoch (a probe lost with its environment frees its slot when
// its lease lapses); a close reaches every environment within CacheTTL;
// no single environment's failures open the fleet unless MinReporters is
// 1. Fleet windows are fixed, not rolling: counts reported before a close
// still count in the window that holds the close, so keep OpenDuration ×
// (1 − Jitter) at least Window (the defaults do) if a fresh close must not
// re-trip on old counts.
//
// What it costs, per environment: healthy (closed, no failures) at most
// one Load per CacheTTL and no writes, whatever the call rate. During an
// outage, at most one Report per ReportInterval while the environment
// sees failures; one Transition per trip or probe result (plus a losing,
// conflicting one per environment that raced); while half-open, one
// Transition attempt and one AcquireProbe per environment when the open
// duration ends, then at most one AcquireProbe per CacheTTL; while open,
// one Load per CacheTTL; held on its local state machine (see below), one
// Load per CacheTTL and one Report per failed probe. With package dynamo's
// Store, a Load is one eventually consistent read request (the state and
// the override item) and every other call one conditional write.
//
// Counts reported to a fleet window are never sent twice by the Breaker:
// what it hands to Report is remembered for the window (in the current
// generation) whatever the Report's fate, and left out when, back from a
// Store fault in the same window, it gathers its counts again from the
// rolling window. The bound that remains: a Report that failed before it
// was applied loses its counts (those gathered since the environment's
// previous report), and a Report applied whose answer was lost is not
// repeated by the Breaker but may be by the Store itself; package dynamo's
// client makes at most one SDK retry, so at most one Report's counts per
// lost answer are added twice (never its environment as a reporter: the
// reporters are a set).
//
// # When the Store fails
//
// Every Store call runs under context.WithTimeout(ctx, StoreTimeout)
// (50 ms), in a goroutine of its own, so it never blocks the caller past
// StoreTimeout or ctx's deadline even if the Store ignores its context,
// and a panicking Store is recovered. A fault (an error that is neither
// ErrConflict nor ErrProbeDenied, a timeout, a malformed snapshot) is
// reported to OnStoreError and switches the Breaker to degraded mode: its
// local state machine, starting from the last fleet state it knew, decides
// alone, exactly as an in-memory breaker would: it trips on this
// environment's own counts (ratio, minimum throughput, consecutive
// failures), opens, probes locally and closes. A transition the fault
// interrupted is applied locally. In degraded mode the Breaker writes
// nothing and tries one Load per CacheTTL. The last override read from the
// Store is still honoured. A caller whose own context ends during a Store
// call is not a Store fault: the call is abandoned and retried by a later
// caller.
//
// The first Load that succeeds ends degraded mode, and the fleet state
// decides again, with one exception: a breaker never goes from open to
// closed without a successful probe. An environment that is open or
// half-open on its local state machine when the Store comes back, and
// finds the fleet closed, is held on its local state machine until its own
// probe succeeds: when its open duration has passed one call goes through
// as a local probe (no fleet probe slot, no fleet transition); a success
// closes it and it rejoins the fleet, a failure opens it again, locally,
// for the doubled duration. Meanwhile it reads the fleet state once per
// CacheTTL and reports each failed probe to the fleet window, so that the
// fleet trips if MinReporters environments see the outage (such a Report
// trips the fleet like anyone's when the window's totals call for it); it
// never writes Open to the fleet on its own. As soon as the fleet is open
// or half-open,
// or an operator's override is in force, the fleet state takes over.
// (Closing every environment that tripped alone when the Store returns
// would send them all at once to a partner that may still be failing.)
//
// # When the stored state goes back
//
// The state item can be lost: DynamoDB Local restarted with an empty
// table, a table recreated, an operator deleting "c#<name>" as a repair.
// The Store then holds a lower epoch than the environments know, and a
// transition decided on the epoch they know can never succeed. A
// Transition's conflict answer is the item as it stands (not an eventually
// consistent read): when it shows an epoch below the one the transition
// was decided on, the Breaker follows it, and decides again from there. A
// Load that shows an epoch below the one held may be a stale read, and is
// ignored once; a second Load in a row below it is followed. Following a
// lower epoch obeys the rule above: an environment open or half-open when
// the fleet's state went back to closed stays so until its own probe
// succeeds. (An operator who wants the fleet closed at once writes the
// force-closed override instead of deleting the state item.)
package breaker
