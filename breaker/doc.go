// Package breaker is herdguard's circuit breaker: a state machine (closed,
// open, half-open) that stops calls to a partner that is failing, and the
// Store contract through which a fleet of processes shares one breaker.
//
// A Breaker on its own is in-memory and per process. Given a Store (package
// local for one process, package dynamo for a fleet of AWS Lambda execution
// environments) its state is the fleet's: opening it anywhere blocks first
// attempts everywhere. With Settings.Adaptive it throttles instead of
// stopping. Example shows one breaker, Example_fleet a shared one, and
// ExampleBreaker_Override an operator's override.
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
// A retry loop asks Allow for a call's first attempt and AllowRetry for
// each retry (ExampleBreaker_AllowRetry): the fleet's counts sample first
// attempts only.
//
// Times are passed in, in the style of golang.org/x/time/rate: the caller
// (usually a retry.Executor) owns the clock. On the healthy path Allow and
// Done take no lock, make no Store call and do not allocate. A Breaker is
// safe for concurrent use.
//
// # The state machine
//
// A closed breaker trips when failures reach FailureRatio (50%) of at least
// MinRequests (20) calls in a rolling Window (10 s), or after
// ConsecutiveFailures in a row if set; Excluded outcomes are not counted,
// and with SlowCallThreshold a slow success is a failure. An open breaker
// rejects every call for OpenDuration (30 s), doubled on every re-open up
// to MaxOpenDuration (5 min), spread by ±Jitter (20%). Half-open admits
// HalfOpenProbes (1) probes, each leased for at most ProbeLease (10 s); a
// successful probe closes the breaker, a failed one re-opens it. Every
// change of state starts a new generation: outcomes of calls admitted
// before it are dropped. Breaker.Override sets this process's operator
// override, which beats the state machine and a stored override.
//
// # Shared mode
//
// With Settings.Store, transitions are compare-and-swaps on an epoch (a
// loser gets ErrConflict and adopts the winner's state). While no
// environment sees a failure, the fleet is quiet: nothing is written, and
// each environment reads the state once per 15 × CacheTTL. A failure raises
// an alarm; while the fleet watches, environments sample about 250 first
// attempts a second fleet-wide, report them at most once a second, and the
// fleet trips when the sampled failure ratio exceeds FailureRatio by one
// standard error. Half-open moves and probe slots are spread so that the
// fleet does not probe in lockstep. A Lambda handler calls Flush before
// returning (retry.Executor.Flush does). StateChange.Origin tells the one
// environment that wrote a transition (OriginWrote) from those that
// followed it.
//
// Every Store call runs under StoreTimeout (50 ms) in a goroutine of its
// own, so a slow, hanging or panicking Store never blocks the caller past
// its deadline. A fault is reported to OnStoreError and switches the
// Breaker to its local state machine (degraded mode) until a Load succeeds;
// a breaker never goes from open to closed without a successful probe.
//
// # Adaptive throttling
//
// Settings.Adaptive (with a Store) replaces the hard stop by fleet-wide
// client-side throttling: where the hard stop would trip, under a stricter
// test, the fleet admits about the share of calls the partner serves,
// probing for more in alternate seconds, and admits every call again once
// a probe shows no failure. A rejected call gets an *OpenError with
// Throttled set (errors.Is(err, ErrOpen)). Every environment that names one
// breaker must agree on the mode.
//
// docs/ARCHITECTURE.md ("Circuit breaker", "Adaptive throttling") gives the
// protocols step by step, their invariants and why they hold, degraded mode
// and the hold, and the costs in DynamoDB.
package breaker
