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
// Breaker.Override sets this process's operator override (ForcedOpen,
// ForcedClosed, Disabled, or NoOverride to clear it); it beats both the
// state machine and an override stored in the Store, and writes nothing.
// Reset clears it too.
//
// # Shared mode
//
// With Settings.Store, the state machine is the fleet's, kept in the Store
// with optimistic concurrency: every transition names the epoch it was
// decided on and fails with ErrConflict if another environment moved
// first, in which case the breaker adopts the state the winner wrote; no
// write ever overwrites a newer state. The fleet's counts live in the same
// state item, as FleetSlots (10) buckets of Window/FleetSlots (1 s) each,
// emptied by every transition: counts from before a trip never count
// after it.
//
// Fleet counts. A fleet with no failure anywhere is quiet: nothing is
// written, and each environment reads the state once per 15 × CacheTTL
// (15 s). The first failure an environment sees while the fleet is quiet
// makes it read the state at once and, if the fleet is still quiet, write
// an alarm: a report with no counts that sets WatchUntil, two Windows
// ahead. While the fleet watches (reports with failures keep pushing
// WatchUntil), every environment reads the state once per CacheTTL and
// samples its calls: one first attempt in k, chosen with Rand before the
// outcome is known (never a retry: a retry exists because an attempt
// failed), each counting for k calls; k is derived from the fleet's
// request rate in the buckets so that about 250 calls a second are
// sampled fleet-wide, whatever the fleet's size. An environment reports
// what it sampled at most once a second, Flush included,
// into the bucket of the report's time (one conditional write, refused if
// the epoch moved), and drops samples older than the rolling window (an
// environment frozen with samples pending). The failure that raised the
// alarm is not counted: only samples chosen independently of the outcome
// make the estimate unbiased.
//
// Tripping. After each of its reports an environment looks at the buckets
// answered (the rolling window ending now): the fleet trips (Closed→Open)
// when they hold at least MinRequests sampled outcomes and the estimated
// failure ratio is at least FailureRatio plus one standard error of a
// sample of that size (samples weigh the sampling factor they were drawn
// with; with unequal weights the size is the effective one, (Σw)²/Σw²). The margin keeps a fleet failing 30% of its calls
// from tripping on the noise of a few samples (at 20 samples, from 4.8% of
// the time to 0.03%); with thousands of samples it is negligible. There is
// no minimum number of environments: one environment alone is the whole
// fleet, and one sick environment among healthy ones counts for its share
// of the calls, since the healthy ones sample theirs too. A fleet making
// fewer than 2 × MinRequests calls a window needs more than a window to
// gather MinRequests samples: it opens within 3 windows, not 2 (the
// statistical limit; docs/ARCHITECTURE.md has the figures).
//
// The move to half-open is made without a stampede: each environment
// waits its own delay past OpenUntil (drawn with Rand in [0, CacheTTL),
// once per epoch), reads the state again, and only if the fleet is still
// open makes the Open→HalfOpen transition, which records when the
// half-open epoch began (as its OpenUntil). An environment that learns of
// the epoch late (its calls are far apart, or it was frozen) makes the
// move at its first call past that time, on the state it has just read:
// a caller of any gap gets its probe within OpenDuration (plus jitter) +
// its gap + CacheTTL. The environment that made the move arms the epoch:
// it alone asks for the epoch's probe slots (Store.AcquireProbe, leases of
// ProbeLease), during the epoch's first 2 × CacheTTL and until one is
// refused. The probe's outcome closes (HalfOpen→Closed, Reopens reset) or
// re-opens (HalfOpen→Open, Reopens+1, doubled duration) the fleet. If the
// epoch is still half-open once every lease it gave has lapsed (2 ×
// CacheTTL + ProbeLease after it began: its probes were lost), the
// environments move the fleet to a new half-open epoch the same way.
//
// An OpenUntil further than MaxOpenDuration × (1 + Jitter) from now (a
// bug, a clock far ahead, a hand-edited item) reads as now +
// MaxOpenDuration. An operator override read from the Store (force-open,
// force-closed, disabled, optionally until a time) beats the state
// machine, and this process's own overrides beat it; it reaches a quiet
// environment within 15 × CacheTTL. OnStateChange tells a transition this
// environment wrote (StateChange.Origin is OriginWrote: one per fleet
// transition, fleet-wide) from one it followed (OriginFollowed) or decided
// alone (OriginLocal).
//
// What it costs, per environment: quiet, one Load per 15 × CacheTTL and
// no writes. Watching, one Load per CacheTTL and at most one report a
// second, and only while it samples something (about 250 sampled
// calls a second fleet-wide); one alarm per failure that finds the fleet
// quiet, at most once per CacheTTL (almost always only the first
// environment's, since a failure reads the state first). A trip or probe
// result is one Transition (plus a refused one for each environment that
// raced); the end of an open period one Open→HalfOpen Transition and at
// most HalfOpenProbes AcquireProbe calls. With package dynamo's Store a
// Load is one eventually consistent BatchGetItem (the state and override
// items), a report one conditional write on the state item (at most three
// when its guesses of the slot's contents are wrong),
// and the state item stays under 1 KB whatever the fleet's size.
// docs/ARCHITECTURE.md has the derivations and the remaining bias.
//
// A Lambda environment thawed after a long freeze reads the state before
// it trusts it: its first Load after idling more than 2 × 15 × CacheTTL
// (and every environment's first Load) gets coldLoadFactor (4) ×
// StoreTimeout, since its connection to the Store is new.
//
// An Excluded probe (its caller canceled, say) keeps its fleet slot until
// its lease lapses: the Store contract has no release. The arming
// environment's next call asks for a slot again and is refused if every
// slot is leased; with HalfOpenProbes 1 the fleet then waits for the next
// half-open epoch (2 × CacheTTL + ProbeLease after this one began) for a
// probe.
//
// Sampled counts are never sent twice by the Breaker: they leave it when
// their report is decided, whatever the report's fate. A report that
// failed before it was applied loses them; one applied whose answer was
// lost is not repeated by the Breaker but may be by the Store itself
// (package dynamo's client makes at most one SDK retry).
//
// # When the Store fails
//
// Every Store call runs under context.WithTimeout(ctx, StoreTimeout)
// (50 ms; a cold Load, four times that), in a goroutine of its own, so it never blocks the caller past
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
// CacheTTL (its probes are not fleet samples: the environments that
// follow the fleet sample their calls, and trip it if the partner is
// down); it never writes Open to the fleet on its own. As soon as the fleet is open
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
