package retry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layers"
)

// StartAttempt and AcquireRetry are the Executor's hook for retry loops it
// does not run itself: the AWS SDK's (package awsretry adapts it), a gRPC
// interceptor's, a message consumer's redelivery. The foreign loop keeps its
// own classification, backoff and attempt limit; the Executor supplies the
// breaker and the budgets, with the same rules and hooks as Do (the retry
// side is the very code Do runs: fits and grant), so that every call to a
// partner, whoever loops over it, counts against one budget and one
// breaker. A foreign loop runs, per call:
//
//	for attempt := 1; ; attempt++ {
//		done, err := exec.StartAttempt(ctx, attempt)
//		if err != nil {
//			release.Done(budget.RetryNotUsed)
//			return err // breaker open: nothing was sent
//		}
//		err = send(ctx)
//		v := classify(err) // the loop's own verdict
//		done(err, v)
//		release.Done(outcomeOf(err)) // the previous retry's grant, if any
//		if err == nil || !v.Retryable() || attempt == max {
//			return err
//		}
//		wait := backoff(attempt)
//		if release, err = exec.AcquireRetry(ctx, retry.RetryEvent{Attempt: attempt, Delay: wait, Err: err, Kind: kind}); err != nil {
//			return err // budget exhausted, or the wait cannot fit before the deadline
//		}
//		sleep(ctx, wait)
//	}

// StartAttempt gates attempt number attempt (from 1) of a call made by a
// foreign retry loop through the breaker, as Do gates its own attempts; the
// first attempt of a call also records the request with every budget
// (RecordRequest), which is what funds retries.
//
// When the breaker rejects the attempt, StartAttempt returns what Do would,
// a *GiveUpError with Reason BreakerOpen (errors.Is(err, breaker.ErrOpen)
// holds and RetryAfter returns the time until the next probe), OnGiveUp
// sees it, and the attempt must not be sent.
//
// Otherwise send the attempt, then call done exactly once with its error
// (nil for a success) and the loop's verdict on it: RetryTransient or
// RetryThrottling for an error the loop retries, NoRetry for an answer that
// blames the request (the partner is healthy), NoRetryFailure for a partner
// fault it does not retry, NoRetryExcluded for an error that says nothing
// about the partner (the caller canceled). NoOpinion lets the Executor's own
// classification chain decide, as for Do, with Config.Idempotent. The
// breaker counts the outcome, and a first attempt's success is recorded with
// the budgets (RecordSuccess). Further calls of done do nothing.
func (e *Executor) StartAttempt(ctx context.Context, attempt int) (done func(err error, v Verdict), err error) {
	now := e.now()
	first := attempt <= 1
	var permit breaker.Permit
	if err := e.admit(ctx, now, first, &permit); err != nil {
		return nil, e.rejected(ctx, max(attempt-1, 0), nil, err)
	}
	var ended atomic.Bool
	return func(aerr error, v Verdict) {
		if ended.Swap(true) {
			return
		}
		if aerr != nil && v == NoOpinion {
			v = e.classify(ctx, call{idempotent: e.idempotent}, aerr, false)
		}
		e.settle(ctx, e.attemptEnd(now), &permit, first, aerr, v)
	}, nil
}

// AcquireRetry asks for the retry a foreign loop is about to make after
// attempt ev.Attempt failed with ev.Err (see StartAttempt). ev.Kind prices
// it, ev.Delay is the wait the loop will make before it, and ev.RetryAfter
// the partner's hint included in that wait (zero if none).
//
// It applies Do's rules. A retry after attempt MaxAttempts ends the call
// with Reason AttemptsExhausted, whatever number of attempts the foreign
// loop allows. A hint above Config.MaxRetryAfter, or a wait that
// would end within DeadlineMargin of ctx's deadline, ends the call at once
// with a *GiveUpError wrapping ev.Err (Reason RetryAfterTooLong or
// DeadlineTooClose) and nothing spent; so does an open breaker (Reason
// BreakerOpen), as StartAttempt would reject the retry. Then every budget must grant (in
// order): a refusal is a *GiveUpError with Reason BudgetExhausted carrying
// ev.Attempt and ev.Err (errors.Is(err, budget.ErrExhausted)), and OnGiveUp
// and OnStoreError see what they see for Do. A
// grant is reported to OnRetry with ev, and its Release must be called
// exactly once: RetrySucceeded or RetryFailed once the retry has ended,
// RetryNotUsed if it is never sent.
func (e *Executor) AcquireRetry(ctx context.Context, ev RetryEvent) (budget.Release, error) {
	if err := ctx.Err(); err != nil {
		return nil, e.giveUp(ctx, ev.Attempt, ContextDone, ev.Err, err)
	}
	if ev.Attempt >= e.maxAttempts {
		// The foreign loop allows more attempts than the Executor.
		return nil, e.giveUp(ctx, ev.Attempt, AttemptsExhausted, ev.Err, nil)
	}
	now := e.now()
	deadline, hasDeadline := ctx.Deadline()
	if reason, ok := e.fits(now, deadline, hasDeadline, max(ev.RetryAfter, 0), max(ev.Delay, 0)); !ok {
		return nil, e.giveUp(ctx, ev.Attempt, reason, ev.Err, nil)
	}
	if oerr := e.openGate(ctx, now); oerr != nil {
		return nil, e.rejected(ctx, ev.Attempt, ev.Err, oerr)
	}
	return e.grant(ctx, now, ev)
}

// admit gates an attempt through the breaker, storing its permit in
// *permit, and, for the first attempt of a call, records the request with
// every budget: the steps loop takes before each attempt. settle is the
// steps it takes after one. loop writes both out in place rather than
// calling these: on the healthy path the two calls, passing the permit and
// the time, cost about 10 ns of a 90 ns call (measured with
// BenchmarkHealthyPath), and they are three lines each.
func (e *Executor) admit(ctx context.Context, now time.Time, first bool, permit *breaker.Permit) error {
	if e.breaker != nil {
		var (
			p   breaker.Permit
			err error
		)
		if first {
			p, err = e.breaker.Allow(ctx, now)
		} else { // as the loop asks for its retries
			p, err = e.breaker.AllowRetry(ctx, now)
		}
		if err != nil {
			return err
		}
		*permit = p
	}
	if first {
		for _, b := range e.budgets {
			b.RecordRequest(now)
		}
	}
	return nil
}

// settle records how an admitted attempt ended at now: the breaker's
// outcome (Success when err is nil, otherwise decided by v), and for the
// success of a first attempt RecordSuccess with every budget. The grant of
// a retry is released by the loop that holds it.
func (e *Executor) settle(ctx context.Context, now time.Time, permit *breaker.Permit, first bool, err error, v Verdict) {
	if e.breaker != nil {
		o := breaker.Success
		if err != nil {
			o = v.outcome()
		}
		e.breaker.Done(ctx, now, *permit, o)
	}
	if err == nil && first {
		for _, b := range e.budgets {
			b.RecordSuccess(now)
		}
	}
}

// grant asks the budgets for the retry ev describes, once its wait has been
// checked, and reports a grant to OnRetry. A refusal is the error to return
// to the caller. Do and AcquireRetry share it.
func (e *Executor) grant(ctx context.Context, now time.Time, ev RetryEvent) (budget.Release, error) {
	rel, err := layers.Acquire(ctx, now, ev.Kind, e.budgets, e.storeErr)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// The caller's context ended while a layer asked its store:
			// the call is over, whatever the budget would have said.
			return nil, e.giveUp(ctx, ev.Attempt, ContextDone, ev.Err, cerr)
		}
		return nil, e.exhausted(ctx, ev.Attempt, ev.Err, err, ev.Delay)
	}
	if e.onRetry != nil {
		e.onRetry(ev)
	}
	return rel, nil
}

// fits checks a retry's wait and the partner's hint included in it against
// MaxRetryAfter and the deadline, and returns the reason to give up when it
// does not fit: ok means now + wait + DeadlineMargin is before the deadline.
func (e *Executor) fits(now, deadline time.Time, hasDeadline bool, hint, wait time.Duration) (reason Reason, ok bool) {
	if hint > e.maxRetryAfter {
		return RetryAfterTooLong, false
	}
	if hasDeadline && wait >= subSat(deadline.Sub(now), e.margin) {
		return DeadlineTooClose, false
	}
	return 0, true
}
