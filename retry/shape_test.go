package retry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// TestEveryFailureIsAGiveUpError: whatever ends a call (the partner, a
// budget, the breaker, the context), Do, the generic Do and DoIdempotent,
// StartAttempt and AcquireRetry return a *retry.GiveUpError whose Reason
// says why, which unwraps to the partner's last error and to the cause,
// and from which RetryAfter reads the hint; OnGiveUp sees that same error.
func TestEveryFailureIsAGiveUpError(t *testing.T) {
	type entry func(ctx context.Context, e *retry.Executor, errs ...error) error
	entries := map[string]entry{
		"Do": func(ctx context.Context, e *retry.Executor, errs ...error) error {
			calls := 0
			return e.Do(ctx, failing(&calls, errs...))
		},
		"DoIdempotent": func(ctx context.Context, e *retry.Executor, errs ...error) error {
			calls := 0
			return e.DoIdempotent(ctx, true, failing(&calls, errs...))
		},
		"generic Do": func(ctx context.Context, e *retry.Executor, errs ...error) error {
			calls := 0
			f := failing(&calls, errs...)
			_, err := retry.Do(ctx, e, func(ctx context.Context, attempt int) (int, error) { return 1, f(ctx, attempt) })
			return err
		},
		"generic DoIdempotent": func(ctx context.Context, e *retry.Executor, errs ...error) error {
			calls := 0
			f := failing(&calls, errs...)
			_, err := retry.DoIdempotent(ctx, e, true, func(ctx context.Context, attempt int) (int, error) { return 1, f(ctx, attempt) })
			return err
		},
	}
	openBreaker := func(t *testing.T) *breaker.Breaker {
		br, err := breaker.New("partner", breaker.Settings{ConsecutiveFailures: 1, Jitter: -1})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		p, _ := br.Allow(context.Background(), now)
		br.Done(context.Background(), now, p, breaker.Failure) // open for 30 s from now
		return br
	}
	hint := 3 * time.Second
	partner := &retry.StatusError{StatusCode: http.StatusServiceUnavailable, RetryAfter: hint}
	for _, tc := range []struct {
		name     string
		cfg      func(t *testing.T) retry.Config
		ctx      func() context.Context
		errs     []error
		reason   retry.Reason
		attempts int
		cause    error // matched with errors.Is
		partner  bool  // errors.Is(err, partner)
		after    time.Duration
	}{
		{name: "attempts exhausted", cfg: func(*testing.T) retry.Config { return retry.Config{MaxAttempts: 2} },
			errs: []error{partner, partner}, reason: retry.AttemptsExhausted, attempts: 2, partner: true, after: hint},
		{name: "not retryable", cfg: func(*testing.T) retry.Config { return retry.Config{} },
			errs: []error{status(404)}, reason: retry.NotRetryable, attempts: 1},
		{name: "budget exhausted", cfg: func(*testing.T) retry.Config {
			return retry.Config{Budgets: []budget.Budget{&fakeBudget{refuse: &budget.ExhaustedError{Budget: "b", RetryAfter: 7 * time.Second}}}}
		}, errs: []error{partner}, reason: retry.BudgetExhausted, attempts: 1, cause: budget.ErrExhausted, partner: true, after: 7 * time.Second},
		{name: "breaker open at the first attempt", cfg: func(t *testing.T) retry.Config { return retry.Config{Breaker: openBreaker(t)} },
			reason: retry.BreakerOpen, cause: breaker.ErrOpen, after: -1 /* the breaker's */},
		{name: "context ended before the first attempt", cfg: func(*testing.T) retry.Config { return retry.Config{} },
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}, reason: retry.ContextDone, cause: context.Canceled},
		{name: "retry-after too long", cfg: func(*testing.T) retry.Config { return retry.Config{MaxRetryAfter: time.Second} },
			errs: []error{partner}, reason: retry.RetryAfterTooLong, attempts: 1, partner: true, after: hint},
	} {
		for name, call := range entries {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				var seen []*retry.GiveUpError
				cfg := tc.cfg(t)
				cfg.Clock = newFakeClock()
				cfg.OnGiveUp = func(gu *retry.GiveUpError) { seen = append(seen, gu) }
				e := mustNew(t, cfg)
				ctx := context.Background()
				if tc.ctx != nil {
					ctx = tc.ctx()
				}
				err := call(ctx, e, tc.errs...)
				var gu *retry.GiveUpError
				if !errors.As(err, &gu) || error(gu) != err {
					t.Fatalf("err = %T %v; want a *retry.GiveUpError", err, err)
				}
				if gu.Reason != tc.reason || gu.Attempts != tc.attempts {
					t.Errorf("Reason %v after %d attempts; want %v after %d", gu.Reason, gu.Attempts, tc.reason, tc.attempts)
				}
				if tc.cause != nil && (gu.Cause == nil || !errors.Is(err, tc.cause)) {
					t.Errorf("err %v: Cause %v; want one matching %v", err, gu.Cause, tc.cause)
				}
				if tc.cause == nil && gu.Cause != nil {
					t.Errorf("Cause %v; want none", gu.Cause)
				}
				if errors.Is(err, partner) != tc.partner {
					t.Errorf("errors.Is(err, partner's error) = %v; want %v", !tc.partner, tc.partner)
				}
				want := tc.after
				var oe *breaker.OpenError
				if want < 0 && errors.As(err, &oe) {
					want = oe.RetryAfter // the time until the probe, less than 30 s
					if want <= 29*time.Second || want > 30*time.Second {
						t.Errorf("the breaker's RetryAfter is %v; want just under 30 s", want)
					}
				}
				if d, ok := retry.RetryAfter(err); d != want || ok != (want > 0) {
					t.Errorf("RetryAfter = %v, %v; want %v", d, ok, want)
				}
				if len(seen) != 1 || seen[0] != gu {
					t.Errorf("OnGiveUp saw %v; want the returned error once", seen)
				}
			})
		}
	}
}

// TestForeignLoopFailuresAreGiveUpErrors: StartAttempt and AcquireRetry,
// the hook for loops the Executor does not run, return the same shape.
func TestForeignLoopFailuresAreGiveUpErrors(t *testing.T) {
	br := mustBreaker(t)
	br.Override(breaker.ForcedOpen)
	e := mustNew(t, retry.Config{Breaker: br, Clock: newFakeClock()})
	_, err := e.StartAttempt(context.Background(), 1)
	var gu *retry.GiveUpError
	if !errors.As(err, &gu) || gu.Reason != retry.BreakerOpen || gu.Attempts != 0 || !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("StartAttempt of an open breaker: %v; want a GiveUpError with Reason BreakerOpen", err)
	}
	e = mustNew(t, retry.Config{Budgets: []budget.Budget{&fakeBudget{refuse: budget.ErrExhausted}}, Clock: newFakeClock()})
	_, err = e.AcquireRetry(context.Background(), retry.RetryEvent{Attempt: 1, Delay: time.Millisecond, Err: errPartner})
	if !errors.As(err, &gu) || gu.Reason != retry.BudgetExhausted || gu.Attempts != 1 ||
		!errors.Is(err, budget.ErrExhausted) || !errors.Is(err, errPartner) {
		t.Errorf("AcquireRetry refused: %v; want a GiveUpError with Reason BudgetExhausted", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = e.AcquireRetry(ctx, retry.RetryEvent{Attempt: 1, Err: errPartner})
	if !errors.As(err, &gu) || gu.Reason != retry.ContextDone || !errors.Is(err, context.Canceled) {
		t.Errorf("AcquireRetry with a canceled ctx: %v; want a GiveUpError with Reason ContextDone", err)
	}
}
