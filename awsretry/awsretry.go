// Package awsretry makes the AWS SDK for Go v2 draw its retries from a
// herdguard retry.Executor: an SDK client of any service, given the retryer
// from New, sends every attempt through the Executor's circuit breaker and
// asks the Executor's budgets (local and fleet-wide) before every retry, so
// that a partner reached through the SDK is protected exactly like one
// reached through retry.Do or retry.Transport:
//
//	exec, err := retry.New(retry.Config{Budgets: ..., Breaker: ...}) // one per partner
//	r, err := awsretry.New(exec, awsretry.Options{})
//	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.Retryer = r })
//
// The SDK keeps running its own retry loop (its Attempt middleware), and
// the retryer keeps what the SDK does well: which errors are retryable and
// which are throttling (the SDK's standard classification, or Options.Base),
// its backoff (2026 retry behaviour: full jitter over 50 ms for transient
// errors, 1 s for throttling), its clock skew correction and its handling of
// x-amz-retry-after. In place of the SDK's retry quota (a token bucket per
// client; kept only when Options.Base brings one) it uses the Executor:
//
//   - every attempt asks the breaker first (GetAttemptToken). When it is
//     open the SDK call fails at once, before anything is sent, with an
//     error for which errors.Is(err, breaker.ErrOpen) holds and
//     retry.RetryAfter(err) returns the time until the next probe; the
//     attempt's outcome is reported to the breaker when the SDK releases the
//     token (retryable errors and other 5xx are failures, 4xx answers
//     successes, cancellations are not counted);
//   - the first attempt of a call records the request with the budgets,
//     and a first-attempt success is recorded too;
//   - every retry asks the budgets (GetRetryToken), charged as
//     budget.Throttling when the SDK calls the error throttling and as
//     budget.Transient otherwise. A refusal ends the call with the SDK's
//     last error joined to a *retry.GiveUpError with Reason BudgetExhausted
//     that is also a *ratelimit.QuotaExceededError (package
//     github.com/aws/aws-sdk-go-v2/aws/ratelimit), the error of the SDK's
//     own retry quota: errors.As finds either, errors.Is(err,
//     budget.ErrExhausted) holds, and retry.RetryAfter(err) gives the
//     budget's hint. As in retry.Do, a wait that would end within the
//     Executor's DeadlineMargin of the context's deadline, or a server hint
//     above its MaxRetryAfter, ends the call at once with a
//     *retry.GiveUpError and spends nothing;
//   - the service's throttling (ThrottlingException,
//     ProvisionedThroughputExceededException, 429, ...) is retried within
//     the budgets after the SDK's throttling backoff, but the breaker does
//     not count it (Options.ThrottlingOpensBreaker makes it a failure): a
//     throttled table or key says the service is busy, not down, and must
//     not open the breaker for every call to the service;
//   - the Executor's MaxAttempts is the most attempts a call makes. The
//     client's RetryMaxAttempts (or AWS_MAX_ATTEMPTS, or
//     retry.AddWithMaxAttempts around this retryer) may lower it; a higher
//     number is capped, the call ending with a *retry.GiveUpError with
//     Reason AttemptsExhausted. A DynamoDB client's own default of 4
//     attempts belongs to the SDK's retryer and does not carry over: give
//     the Executor of a DynamoDB partner MaxAttempts: 4 to keep it.
//
// The wait before a retry is the SDK's backoff, raised to the server's hint
// (x-amz-retry-after, and Retry-After, which the SDK alone ignores): a hint
// is a lower bound, as everywhere in herdguard. The Executor's hooks
// (OnRetry, OnGiveUp, OnStoreError) and the breaker's
// OnStateChange see the SDK's calls as they see the Executor's own.
//
// The part of a hint the SDK's loop would not wait whatever RetryDelay
// says (a Retry-After; an x-amz-retry-after beyond the 5 s the SDK raises
// its delay by) is waited in GetRetryToken, so that
// retry.AddWithMaxBackoffDelay around this retryer, which replaces
// RetryDelay, shortens the backoff but never the hint. Precedence, then:
// the Executor's MaxAttempts caps the attempts, which the client's
// RetryMaxAttempts and retry.AddWithMaxAttempts may lower; Options.Base's
// backoff, or a wrapper's, is raised to the server's hint.
//
// One limit comes from the SDK's loop: a retry the budgets granted that the
// SDK then never sends (the breaker rejected it, or the context ended during
// the wait) is never released by the SDK, so it stays spent as if it had
// failed: fewer retries, never more.
//
// Never give this retryer to the DynamoDB client of herdguard's own stores:
// the budgets and the breaker must not depend on the table that serves them.
// dynamo.NewClient always installs its own retryer, whatever the aws.Config
// it is given says. See "Foreign retry loops and the AWS SDK" in
// docs/ARCHITECTURE.md for how the SDK's calls map onto the Executor's.
package awsretry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	sdkretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/hint"
	"github.com/herdguard/herdguard/retry"
)

// Options configures New. The zero value is the SDK's standard
// classification and backoff.
type Options struct {
	// Base decides which errors are retried (IsErrorRetryable) and the
	// backoff before a retry (RetryDelay); nil means the SDK's standard
	// retryer, retry.NewStandard() of package
	// github.com/aws/aws-sdk-go-v2/aws/retry. To retry more error codes,
	// pass retry.AddWithErrorCodes(retry.NewStandard(), codes...).
	//
	// Base's MaxAttempts must equal the Executor's (New rejects another
	// number with a *herdguard.ConfigError naming Options.Base): build it
	// with StandardOptions.MaxAttempts set to retry.Config.MaxAttempts.
	// Base's retry quota (StandardOptions.RateLimiter) is honoured: a
	// retry needs Base's retry token as well as the budgets' grant, and a
	// token not used is given back (the default Base has none:
	// ratelimit.None). Adaptive mode (*retry.AdaptiveMode), whose point is
	// its client-side rate limiting of first attempts, is rejected.
	Base aws.Retryer

	// ThrottlingOpensBreaker makes the breaker count the service's
	// throttling (ThrottlingException, ProvisionedThroughputExceeded, 429,
	// ...) as failures. By default it does not: a throttled call is retried
	// within the budgets (charged as budget.Throttling) after the SDK's
	// throttling backoff raised to the service's hint, and the breaker
	// counts the attempt as neither success nor failure, so that one hot
	// key or table does not open the breaker for every call to the
	// service.
	ThrottlingOpensBreaker bool
}

// retryer is the aws.RetryerV2 over a retry.Executor that New returns.
type retryer struct {
	exec          *retry.Executor
	base          aws.Retryer
	throttle      sdkretry.IsErrorThrottle
	throttleOpens bool
	waits         waitRing
}

var _ aws.RetryerV2 = (*retryer)(nil)

// New returns an aws.RetryerV2 that takes its breaker and budgets from
// exec; see the package documentation. It is safe for concurrent use: share
// one per partner between the clients that call it. A nil exec is a
// *herdguard.ConfigError.
func New(exec *retry.Executor, opts Options) (aws.RetryerV2, error) {
	if exec == nil {
		return nil, &herdguard.ConfigError{Field: "awsretry.New exec", Reason: "is nil"}
	}
	base := opts.Base
	bad := func(reason string) error {
		return &herdguard.ConfigError{Field: "awsretry.Options.Base", Reason: reason}
	}
	switch b := base.(type) {
	case nil:
		base = sdkretry.NewStandard(func(o *sdkretry.StandardOptions) {
			o.MaxAttempts = exec.MaxAttempts()
			o.RateLimiter = ratelimit.None
		})
	case *sdkretry.AdaptiveMode:
		return nil, bad("is adaptive mode, whose client-side rate limiting awsretry does not run (the Executor's budgets and breaker replace it); use retry.NewStandard")
	default:
		if n := b.MaxAttempts(); n != exec.MaxAttempts() {
			return nil, bad(fmt.Sprintf("MaxAttempts() is %d, the Executor's MaxAttempts %d; give both the same number", n, exec.MaxAttempts()))
		}
	}
	return &retryer{exec: exec, base: base, throttle: sdkretry.IsErrorThrottles(sdkretry.DefaultThrottles), throttleOpens: opts.ThrottlingOpensBreaker}, nil
}

// MaxAttempts returns the Executor's MaxAttempts.
func (r *retryer) MaxAttempts() int { return r.exec.MaxAttempts() }

// quotaExceeded is a budget's refusal of a retry as GetRetryToken returns
// it: the Executor's *retry.GiveUpError, which is also a
// ratelimit.QuotaExceededError, the error the SDK's own retry quota
// returns (as a value; errors.As finds the pointer form too), for code
// written for the SDK.
type quotaExceeded struct {
	err   error
	quota *ratelimit.QuotaExceededError
}

func (e *quotaExceeded) Error() string   { return e.err.Error() }
func (e *quotaExceeded) Unwrap() []error { return []error{e.err, e.quota, *e.quota} }

// IsErrorRetryable reports whether Options.Base retries err. A refusal of a
// herdguard layer (budget.ErrExhausted, breaker.ErrOpen) and a cancellation
// are never retried.
func (r *retryer) IsErrorRetryable(err error) bool {
	if refusedOrCanceled(err) {
		return false
	}
	return r.base.IsErrorRetryable(err)
}

// GetAttemptToken gates the attempt through the Executor's breaker (see
// retry.Executor.StartAttempt). The token it returns reports the attempt's
// outcome to the breaker when the SDK releases it.
func (r *retryer) GetAttemptToken(ctx context.Context) (func(error) error, error) {
	done, err := r.exec.StartAttempt(ctx, attemptNumber(ctx))
	if err != nil {
		return nil, err
	}
	return func(err error) error {
		v := r.verdict(err)
		if v == retry.RetryThrottling && !r.throttleOpens {
			v = retry.NoRetryExcluded // throttling says the service is busy, not broken
		}
		done(err, v)
		return nil
	}, nil
}

// GetInitialToken is the SDK's deprecated form of GetAttemptToken, which
// the SDK never calls on a RetryerV2. It returns a token that does nothing.
func (r *retryer) GetInitialToken() func(error) error { return nopRelease }

// GetRetryToken asks the Executor's budgets for a retry after the SDK
// attempt whose error is opErr (see retry.Executor.AcquireRetry). The token
// it returns tells the budgets whether the retry succeeded.
func (r *retryer) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	attempt := attemptNumber(ctx)
	hint := serverHint(opErr)
	backoff, err := r.base.RetryDelay(attempt, opErr)
	if err != nil {
		return nil, err
	}
	wait := max(backoff, hint)
	// Base's retry quota first: in memory, and a refusal there costs the
	// budgets nothing.
	quota, err := r.base.GetRetryToken(ctx, opErr)
	if err != nil {
		return nil, err
	}
	kind := budget.Transient
	if r.verdict(opErr) == retry.RetryThrottling {
		kind = budget.Throttling
	}
	release, err := r.exec.AcquireRetry(ctx, retry.RetryEvent{Attempt: attempt, Delay: wait, RetryAfter: hint, Err: opErr, Kind: kind})
	if err != nil {
		_ = quota(nil) // not used: Base's quota gets its token back
		if errors.Is(err, budget.ErrExhausted) {
			err = &quotaExceeded{err: err, quota: &ratelimit.QuotaExceededError{Available: 0, Requested: 1}}
		}
		return nil, err
	}
	xamz, hasX := sdkHint(opErr)
	pre, delay := splitWait(wait, hint, xamz, hasX)
	if pre > 0 {
		// The part of the hint the SDK's own loop does not honour whatever
		// RetryDelay returns (a Retry-After; x-amz-retry-after beyond 5 s),
		// waited here, so that a wrapper replacing RetryDelay
		// (retry.AddWithMaxBackoffDelay) cannot shorten it.
		t := time.NewTimer(pre)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			release.Done(budget.RetryNotUsed)
			_ = quota(nil)
			return nil, &retry.GiveUpError{Attempts: attempt, Reason: retry.ContextDone, Err: opErr, Cause: ctx.Err(), RetryAfter: hint}
		}
	}
	r.waits.put(opErr, delay)
	return func(err error) error {
		if err == nil {
			release.Done(budget.RetrySucceeded)
		} else {
			release.Done(budget.RetryFailed)
		}
		return quota(err)
	}, nil
}

// RetryDelay returns the wait before the retry after attempt failed with
// err: what is left of the one GetRetryToken checked against the deadline
// when it granted the retry (less the part of the hint it waited itself),
// or else Options.Base's backoff raised to the server's hint.
func (r *retryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	if d, ok := r.waits.take(err); ok {
		return d, nil
	}
	d, derr := r.base.RetryDelay(attempt, err)
	if derr != nil {
		return 0, derr
	}
	return max(d, serverHint(err)), nil
}

// verdict maps the SDK's view of an attempt's error onto herdguard's: the
// Verdict decides the breaker's outcome and the kind of a retry.
func (r *retryer) verdict(err error) retry.Verdict {
	if err == nil {
		return retry.NoOpinion
	}
	if refusedOrCanceled(err) {
		return retry.NoRetryExcluded // canceled, or refused by a herdguard layer: not the partner's doing
	}
	if r.base.IsErrorRetryable(err) {
		if r.throttle.IsErrorThrottle(err) == aws.TrueTernary {
			return retry.RetryThrottling
		}
		return retry.RetryTransient
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return retry.NoRetryFailure // the service did not answer in the time the caller had
	}
	var sc interface{ HTTPStatusCode() int }
	if errors.As(err, &sc) {
		if sc.HTTPStatusCode() >= 500 {
			return retry.NoRetryFailure
		}
		return retry.NoRetry // the service answered: the request is at fault
	}
	return retry.NoRetryExcluded // no answer and no known cause: most likely not the service's fault
}

// sdkHintSlack is how far the SDK's Attempt middleware raises RetryDelay's
// answer towards x-amz-retry-after, at most.
const sdkHintSlack = 5 * time.Second

// sdkHint returns x-amz-retry-after as the SDK's Attempt middleware reads
// it (whole milliseconds, not negative), and whether it is set.
func sdkHint(err error) (time.Duration, bool) {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return 0, false
	}
	ms, perr := strconv.ParseInt(re.Response.Header.Get("X-Amz-Retry-After"), 10, 64)
	if perr != nil || ms < 0 || ms > int64(time.Duration(1<<63-1)/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// splitWait divides the wait before a retry, at least hint, into pre, which
// GetRetryToken sleeps itself, and delay, which RetryDelay returns, such
// that:
//   - with RetryDelay answering delay, the SDK (which raises it to
//     x-amz-retry-after, by at most sdkHintSlack) sleeps wait - pre, so the
//     whole wait is the one checked against the deadline;
//   - whatever another RetryDelay answers (a wrapper's), pre plus what the
//     SDK then sleeps is at least hint.
func splitWait(wait, hint, xamz time.Duration, hasX bool) (pre, delay time.Duration) {
	var sure time.Duration // what the SDK sleeps at least, whatever RetryDelay says
	if hasX {
		sure = min(xamz, sdkHintSlack)
	}
	pre = max(hint-sure, 0)
	rest := max(wait-pre, 0) // what the SDK must sleep
	delay = rest
	if hasX && rest < xamz { // the SDK raises delay to min(xamz, delay+slack)
		delay = max(rest-sdkHintSlack, 0)
	}
	return pre, delay
}

// serverHint returns the wait the response behind err asked for:
// x-amz-retry-after or Retry-After, whichever is longer (retry's parsers:
// malformed values are ignored, huge ones clamped).
func serverHint(err error) time.Duration {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return 0
	}
	d, _ := hint.FromHeader(re.Response.Header, time.Now())
	return d
}

func nopRelease(error) error { return nil }

// refusedOrCanceled reports whether err is the caller's cancellation or a
// refusal of a herdguard layer (a budget, a breaker, of this Executor or of
// one nested in the call), which are never retried again on top.
func refusedOrCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, budget.ErrExhausted) || errors.Is(err, breaker.ErrOpen)
}

// attemptNumber returns the number, from 1, of the SDK attempt whose
// context ctx is.
//
// The SDK's Attempt middleware keeps it in a context value that only its
// own package reads (retry.Standard uses it to refund tokens after first
// attempts only), and no exported function returns it. Its exported
// MetricsHeader middleware writes it into the amz-sdk-request header as
// "attempt=N; max=M", so attemptNumber runs that middleware on a request of
// its own and reads the header back. MetricsHeader is deprecated because
// the clients no longer put it in their stacks (the Attempt middleware sets
// the header itself); it stays, as the module keeps its exported API, and a
// test of this package fails if it ever stops telling retries from first
// attempts. A context the SDK did not make is attempt 1.
func attemptNumber(ctx context.Context) int {
	req := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	next := middleware.FinalizeHandlerFunc(func(context.Context, middleware.FinalizeInput) (middleware.FinalizeOutput, middleware.Metadata, error) {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, nil
	})
	//lint:ignore SA1019 the only exported reader of the attempt number; see above.
	if _, _, err := (sdkretry.MetricsHeader{}).HandleFinalize(ctx, middleware.FinalizeInput{Request: req}, next); err != nil {
		return 1
	}
	for _, part := range strings.Split(req.Header.Get("Amz-Sdk-Request"), ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 1 {
				return n
			}
		}
	}
	return 1
}

// waitRing hands the wait GetRetryToken checked for a granted retry to
// RetryDelay, which the SDK calls right after it with the same error value.
// Errors are matched by identity, so only pointer errors (all the SDK's
// are) are kept; a retry whose wait is not found gets a fresh backoff from
// RetryDelay. The ring is small and overwritten in turn, so that a wrapper
// with a RetryDelay of its own (retry.AddWithMaxBackoffDelay), which never
// takes the waits back, costs no memory.
type waitRing struct {
	mu    sync.Mutex
	next  int
	slots [64]struct {
		err  error
		wait time.Duration
	}
}

func (w *waitRing) put(err error, wait time.Duration) {
	if err == nil || reflect.TypeOf(err).Kind() != reflect.Pointer {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slots[w.next].err, w.slots[w.next].wait = err, wait
	w.next = (w.next + 1) % len(w.slots)
}

func (w *waitRing) take(err error) (time.Duration, bool) {
	if err == nil || reflect.TypeOf(err).Kind() != reflect.Pointer {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.slots {
		if s := &w.slots[i]; s.err == err { // both pointers: comparable
			s.err = nil
			return s.wait, true
		}
	}
	return 0, false
}
