// Package retry is herdguard's retry loop and its Executor: one object that
// runs a call to a partner behind a circuit breaker and retry budgets, with
// full-jitter backoff, Retry-After as a lower bound, the context deadline
// respected, errors classified by a chain of small predicates, and
// idempotency taken into account. ExampleExecutor_Do, ExampleDo,
// ExampleNewTransport and ExampleRetryAfter are runnable.
//
// # The loop
//
// Executor.Do (or the generic Do, which returns a value) gates every attempt
// through Config.Breaker, classifies each failure (see Classifier), and
// before a retry waits the partner's Retry-After plus full jitter,
// random × min(MaxDelay, base × 2^retry) (bases 50 ms for transient
// failures, 1 s for throttling). A retry is made only if attempts are left,
// the wait ends at least DeadlineMargin before the context's deadline, the
// Retry-After is at most MaxRetryAfter, the breaker is not open, and every
// budget of Config.Budgets grants it, asked in order (local first, then
// fleet-wide; by default a local ratio of the Executor's own). Otherwise the
// call ends at once: a retry that is not made spends nothing, and one an
// open breaker rejects is never charged to the budgets. A budget whose store
// failed is reported to OnStoreError and abstains or refuses, as it chooses
// (budget.Global refuses unless configured with FailOpen).
//
// Every outcome is recorded: each budget sees RecordRequest once per call,
// RecordSuccess for a first-attempt success, and the outcome of each retry
// it granted (succeeded, failed, or not used); the breaker sees every
// attempt it admitted, and Excluded for a permit whose attempt never ran.
// See "One call through the Executor" in docs/ARCHITECTURE.md for the loop
// step by step.
//
// # Errors
//
// Every error the Executor returns is a *GiveUpError: Reason and Attempts
// say how the call ended, and it unwraps to the partner's last error
// (errors.Is and errors.As reach a *StatusError, a net.Error, ...) and to
// what stopped the call when that was not the partner: a budget's
// *budget.ExhaustedError (errors.Is(err, budget.ErrExhausted)), the
// breaker's *breaker.OpenError (errors.Is(err, breaker.ErrOpen)), or the
// context's error. RetryAfter extracts the hint it carries, so that a
// handler can answer 503 with a Retry-After rather than retrying on top:
//
//	err := e.Do(ctx, op)
//	if d, ok := retry.RetryAfter(err); ok && (errors.Is(err, budget.ErrExhausted) || errors.Is(err, breaker.ErrOpen)) {
//		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
//		w.WriteHeader(http.StatusServiceUnavailable)
//		return
//	}
//
// # Classification
//
// Callers' Config.Classifiers run first, then the built-in chain; the first
// answer other than NoOpinion wins. An error nobody recognises
// (errors.New("boom")) is a failure of the partner, as in sony/gobreaker,
// failsafe-go, resilience4j and Polly: the breaker counts it, and it is
// retried, as transient, only when the call is idempotent. A classifier
// that returns NoRetryExcluded keeps the breaker from counting errors that
// are not the partner's doing (a bug of the caller's own); put
// RetryEveryError in Config.Classifiers to retry every error whatever the
// idempotency. The built-in chain:
//
//   - context.Canceled, and another herdguard layer's refusal
//     (budget.ErrExhausted, breaker.ErrOpen, from an Executor nested in the
//     operation): not retried, not counted by the breaker (retrying at
//     every layer is what multiplies the load).
//   - A *StatusError: 429, and 503 with a Retry-After (or
//     x-amz-retry-after), are retried as throttling; 408, 500, 502, 504 and
//     a bare 503 as transient failures, but only when the call is
//     idempotent; 400, 401, 403, 404, 422 and other 4xx never (the breaker
//     counts them as successes: the partner is healthy), nor 501, 505 and
//     other 5xx.
//   - Failures proving the request never reached the partner (a failed
//     dial, a refused connection, a temporary DNS failure) are retried;
//     timeouts, resets and broken connections only when the call is
//     idempotent.
//   - Any other error: a failure, retried only when the call is
//     idempotent.
//
// One rule covers Do and Transport: a call that is not idempotent
// (Config.Idempotent unset for Do, or DoIdempotent with false; a POST or
// PATCH without Idempotency-Key for Transport) is retried only when the
// partner provably did not do the work: the request never left, or the
// partner refused it and said when to come back (429, 503 with
// Retry-After). After a 408, 500, 502, 504, a bare 503 or a timeout the
// partner or its upstream may have done the work (see "One call through the
// Executor" in docs/ARCHITECTURE.md for why).
//
// # HTTP
//
// Transport is an http.RoundTripper over an Executor: GET, HEAD, OPTIONS,
// TRACE, PUT and DELETE are idempotent, and so are POST and PATCH with an
// Idempotency-Key (which TransportOptions.GenerateIdempotencyKey can add);
// bodies are replayed through GetBody; each attempt carries its number in
// an attempt header; failed responses are drained and closed before the
// next attempt, and Retry-After and x-amz-retry-after are honoured.
//
// # Do and Transport
//
// Both answer a give-up the same way, whatever ended it (the
// classification, MaxAttempts, the deadline, a long Retry-After, a budget,
// the breaker): when the partner answered the last attempt, Do returns a
// *GiveUpError that unwraps to its *StatusError, and the Transport returns
// that response with a nil error; when it did not (a network error, the
// breaker rejected the first attempt, the context ended), both return the
// same *GiveUpError. The Reason and Attempts are the same, and OnGiveUp
// sees each give-up, a Transport's too: count refusals there, since the
// Transport's caller sees the partner's answer. Every response the
// Transport does not return is drained (up to DrainLimit) and closed.
//
// # Hooks, logging and Flush
//
// OnRetry, OnGiveUp and OnStoreError observe the loop;
// breaker state changes are reported by the breaker itself, through
// breaker.Settings.OnStateChange. A *slog.Logger (nil by default: silent)
// logs budget exhaustion and store faults at Warn and give-ups at Info (at
// Debug for first-attempt client errors, breaker rejections and
// cancellations, which would otherwise flood the log in an outage).
// Executor.Flush reports what the budgets and the breaker keep in memory;
// a Lambda handler calls it before returning.
//
// # Performance
//
// An Executor is immutable and safe for concurrent use. On the healthy path
// (breaker closed, in-memory budgets, first attempt succeeds, no
// AttemptTimeout) Do and the generic Do make no allocation; see
// BenchmarkHealthyPath in the repository's bench module (bench/) for a
// comparison with sony/gobreaker and failsafe-go.
//
// Time comes from time.Now, read at every call, and randomness from
// math/rand/v2. To test code that uses an Executor, run it in a
// testing/synctest bubble (Go 1.25), whose fake clock drives the waits, the
// budgets' windows and the breaker's durations; simulations inject
// Config.Clock and Config.Rand instead.
package retry
