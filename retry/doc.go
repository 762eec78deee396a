// Package retry is herdguard's retry loop and its Executor: one object that
// runs a call to a partner behind a circuit breaker and retry budgets, with
// full-jitter backoff, Retry-After as a lower bound, the context deadline
// respected, errors classified by a chain of small predicates, and
// idempotency taken into account.
//
// # The loop
//
// For each call, Executor.Do (or the generic Do, which returns a value)
// runs:
//
//  1. the breaker gate (Config.Breaker.Allow): an open breaker rejects the
//     attempt, with the time until its next probe;
//  2. the attempt, optionally bounded by Config.AttemptTimeout;
//  3. classification of its error (see Classifier) and the outcome for the
//     breaker: Success for a success and for the caller's own mistakes
//     (4xx), Failure for partner faults and timeouts, Excluded for
//     cancellations and errors a classifier marks as not the partner's
//     fault;
//  4. if the error is retryable and attempts are left: the wait, which is
//     the partner's Retry-After (if any) plus full jitter,
//     random × min(MaxDelay, base × 2^retry), with a separate base for
//     transient failures (50 ms) and throttling (1 s) as in the AWS SDKs'
//     2026 retry behaviour. A wait that would pass the context's deadline
//     minus DeadlineMargin, or a Retry-After above MaxRetryAfter, ends the
//     call at once with the partner's error: no budget is spent and no
//     idle time paid for;
//  5. the breaker gate for the next attempt, before any budget is asked, so
//     that a retry the breaker rejects is never charged to them;
//  6. the budgets (Config.Budgets, asked in order:
//     the local in-memory one, then the fleet-wide one). A refusal ends the
//     call and hands the breaker's permit back as Excluded; a layer whose store failed is reported to OnStoreError
//     and abstains or refuses, as it chooses (budget.Global refuses unless
//     configured with FailOpen);
//  7. the wait, through Config.Clock, which returns early when the context
//     ends; then the next attempt.
//
// Every outcome is recorded: each budget sees RecordRequest once per call,
// RecordSuccess for a first-attempt success, and the outcome of each retry
// it granted (succeeded, failed, or not used when the wait cut it short);
// the breaker sees every attempt it admitted, and Excluded for a permit
// whose attempt never ran.
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
// Callers' Config.Classifiers run first, then ClassifyControl,
// ClassifyStatus and ClassifyNetwork; the first answer other than NoOpinion
// wins, and an error nobody recognises is not retried (it is most likely a
// bug in the caller, which a retry would repeat). 408, 429, 500, 502, 503
// and 504 are retried, 429 and 503-with-Retry-After as throttling; 400,
// 401, 403, 404 and 422 never are. Timeouts and broken connections are
// retried only when the call is idempotent (Config.Idempotent for Do, or
// per call with DoIdempotent), because the partner may already have acted
// on the request; a failed dial or a refused connection never reached it
// and is always retried.
//
// # HTTP
//
// Transport is an http.RoundTripper over an Executor: GET, HEAD, OPTIONS,
// TRACE, PUT and DELETE are retried, POST and PATCH only with an
// Idempotency-Key (which TransportOptions.GenerateIdempotencyKey can add);
// bodies are replayed through GetBody; each attempt carries an attempt
// header; failed responses are drained and closed before the next attempt,
// and Retry-After and x-amz-retry-after are honoured.
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
// BenchmarkHealthyPath for a comparison with sony/gobreaker and failsafe-go.
//
// Time comes from Config.Clock and randomness from Config.Rand, both
// injectable, so tests and simulations drive the loop, the budgets and the
// breaker deterministically.
package retry
