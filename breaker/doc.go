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
//     environment uses the same keys): at its first failure in a window,
//     then at most once per ReportInterval (1 s); what it gathered for a
//     window that has ended and not yet reported (the remainder) is due at
//     once, whatever ReportInterval says, and goes once: with the first
//     Done or Flush that notices the window's end, or, if a Report is in
//     flight then, with the next one; remainders waiting are queued, never
//     replaced by a later window's; a window without failures is never
//     reported (and each failed local probe while held is, see below);
//   - sends on Flush only what is due: every remainder of an ended window
//     not yet sent, and the current window's counts if its last report is
//     at least ReportInterval old (as of the latest time it has seen). A Lambda handler that calls Flush after every
//     invocation reports at the pace of an environment that never calls
//     it; Flush only makes sure that what is due goes before the
//     environment may be frozen;
//   - trips the fleet (Closed→Open) on a sliding-window estimate of the
//     fleet's failure ratio, made from the totals its Reports returned:
//     at a fraction f of fleet window w, the totals last seen for w−1
//     count for (1 − f) and those of w fully (those of w alone when it saw
//     none of w−1 in the current fleet epoch). The estimate trips when it
//     holds at least MinRequests (20) calls, at least FailureRatio of them
//     failures, reported by at least MinReporters (2) environments (the
//     larger count of the two windows): one sick environment cannot open
//     the breaker for everyone, and early in a window, when only the
//     environments that failed first have reported a few calls, the
//     previous window's totals outweigh them;
//   - moves the fleet to half-open without a stampede: it waits its own
//     delay past OpenUntil (drawn with Rand in [0, CacheTTL), once per
//     epoch; counted from when it learnt of the epoch or came back after
//     sitting idle past it, if later), reads the state again, and only if
//     the fleet is still open makes the Open→HalfOpen transition, which
//     records when the half-open epoch began (as its OpenUntil). Across the
//     fleet the first environment's transition is read by the others
//     instead of being repeated. The environment that made it arms the
//     epoch: it alone asks for the epoch's probe slots (Store.AcquireProbe,
//     leases of ProbeLease), during the epoch's first 2 × CacheTTL and
//     until one is refused; the others ask for none. The probe's outcome
//     closes (HalfOpen→Closed, Reopens reset) or re-opens (HalfOpen→Open,
//     Reopens+1, doubled duration) the fleet. If the epoch is still
//     half-open once every lease it gave has lapsed (2 × CacheTTL +
//     ProbeLease after it began: its probes were lost), the environments
//     move the fleet to a new half-open epoch the same way (own delay,
//     read, one conditional write), and the one that succeeds arms it;
//   - reads an OpenUntil further than MaxOpenDuration × (1 + Jitter) from
//     now (a bug, a clock far ahead, a hand-edited item) as now +
//     MaxOpenDuration, the longest it would open for itself;
//   - honours an operator override read from the Store (force-open,
//     force-closed, disabled, optionally until a time): it beats the
//     state machine, and this process's own overrides beat it.
//
// What the fleet is guaranteed, with every environment's clock and Store
// answers in order: an open breaker rejects first attempts in every
// environment within CacheTTL of the trip (a new environment at its first
// call); the first probe goes within CacheTTL after OpenUntil (or at the
// first call of any environment after that); at most HalfOpenProbes probes
// are in flight fleet-wide per half-open epoch, and when an epoch's probes
// are lost (with their environment, say) the next epoch begins only once
// all their leases have lapsed; a close reaches every environment within
// CacheTTL; no single environment's failures open the fleet unless
// MinReporters is 1. Totals seen in an earlier fleet epoch never enter an
// estimate, but a window's item holds every count reported into it: counts
// reported before a close still count in the window that holds the close,
// so keep OpenDuration × (1 − Jitter) at least Window (the defaults do) if
// a fresh close must not re-trip on old counts.
//
// The sliding estimate needs the previous window's totals. In the first
// window in which an environment sees failures (the start of an outage
// or brownout) it has none, and estimates from that window alone, as fixed
// windows did: early in it only the environments that have already failed
// have reported, their few calls over-represent failures, and a fleet
// failing somewhat below FailureRatio can trip there. From the second
// window of a brownout on, it cannot (a fleet failing 45% of its calls
// does not trip at the 50% default, window after window).
//
// What it costs, per environment: healthy (closed, no failures) at most
// one Load per CacheTTL and no writes, whatever the call rate. During an
// outage, at most one Report of the current window per ReportInterval
// while the environment sees failures, plus one remainder per fleet
// window, Flush included; one Transition per trip or probe result (plus a
// losing, conflicting one per environment that raced); while open, one
// Load per CacheTTL, and one more when the open duration ends. For the
// whole fleet, the end of an open period costs one Open→HalfOpen
// Transition and at most HalfOpenProbes AcquireProbe calls, plus a
// conflicting Transition for each environment whose read raced with the
// winner's write (its delay fell within a Load's staleness of the
// winner's); a half-open epoch whose probes were lost, the same again per
// 2 × CacheTTL + ProbeLease. Held on its local state machine (see below),
// an environment makes one Load per CacheTTL and one Report per failed
// probe. With package dynamo's Store, a Load is one eventually consistent
// read request (the state and the override item), an AcquireProbe one
// conditional write per slot tried (all HalfOpenProbes slots when it is
// refused), and every other call one conditional write.
//
// An Excluded probe (its caller canceled, say) keeps its fleet slot until
// its lease lapses: the Store contract has no release. The arming
// environment's next call asks for a slot again and is refused if every
// slot is leased; with HalfOpenProbes 1 the fleet then waits for the next
// half-open epoch (2 × CacheTTL + ProbeLease after this one began) for a
// probe.
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
// reported to OnStoreError and, with the exception below, switches the
// Breaker to degraded mode: its local state machine, starting from the
// last fleet state it knew, decides alone, exactly as an in-memory breaker
// would: it trips on this environment's own counts (ratio, minimum
// throughput, consecutive failures), opens, probes locally and closes. A
// transition the fault interrupted is applied locally. In degraded mode
// the Breaker writes nothing and tries one Load per CacheTTL. The last
// override read from the Store is still honoured. A caller whose own
// context ends during a Store call is not a Store fault: the call is
// abandoned and retried by a later caller.
//
// The exception: a fault of the move to half-open (Open→HalfOpen, or to a
// new half-open epoch) or of AcquireProbe. The environment makes these
// writes only on a fleet state it has just read (the fleet is open or
// half-open), and at the end of an open period a Store that throttles one
// would fault many environments at once: on their local state machines
// each would admit a probe of its own, and HalfOpenProbes would mean
// nothing. So the environment stays on the fleet state: it rejects the
// call (the fleet is open), reports the fault, and tries again, reading
// the state first, CacheTTL later, the wait doubling with every fault in a
// row up to ProbeLease. A transition whose answer was lost may have been
// applied: if the state read later is the epoch it wrote (same start),
// the environment knows it armed it, and takes its probes. Degraded mode
// is for a Store that cannot be read: only a failed Load, or a fault of
// the transition that records a probe's result, sends an environment that
// knows the fleet is open or half-open to its local state machine, whose
// open period then ends, and whose probe goes, on this environment's own
// clock.
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
// trips the fleet like anyone's when the fleet's counts call for it); it
// never writes Open to the fleet on its own. As soon as the fleet is open
// or half-open, or an operator's override is in force, the fleet state
// takes over: a held environment then follows the fleet's schedule like
// any other (its own delay past the fleet's OpenUntil, its local probe
// dropped). (Closing every environment that tripped alone when the Store
// returns would send them all at once to a partner that may still be
// failing.) The two faults of the exception above never start a hold, since
// the environment never leaves the fleet state; a held environment makes
// neither write (its probes are local).
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
//
// # Adaptive throttling
//
// Settings.Adaptive (with a Store) replaces the hard stop by fleet-wide
// client-side throttling, the Google SRE book's, over the fleet's sampled
// counts: the breaker never opens on its counts. While every call goes,
// the fleet starts throttling only where the hard stop would trip, with a
// stricter test (FailureRatio plus 2 standard errors), so that a partial
// outage is left to the retry budgets. It then admits 1.15 times the share
// of calls the partner accepts, at least 2%, and no retry: while the
// partner turns calls away it serves the same share whatever the fleet
// admits, so the share admitted reaches its fixed point in one step and
// delays in the loop cannot make it overshoot. When the latest admitted
// calls succeed (at most 5% of 100 sampled outcomes failing) the share
// doubles, and every call goes at once if none failed. A rejected call gets
// an *OpenError with Throttled set (errors.Is(err, ErrOpen)). An adaptive
// environment reads the fleet state every CacheTTL/4 while the fleet
// watches, starts sampling at a random moment within a bucket of learning
// of a watch, and reports its first second of samples whole, so that the
// pattern of the failures within a second cannot bias the start. See
// docs/ARCHITECTURE.md, "Adaptive throttling", for the law, its stability,
// its cost and what it measured.
package breaker
