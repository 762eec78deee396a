package retry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// foreignCall runs the loop of StartAttempt's documentation over results,
// the error of each attempt in turn (nil ends the call), with a fixed
// verdict per error and a fixed wait.
func foreignCall(ctx context.Context, e *retry.Executor, wait time.Duration, results []error, verdict func(error) retry.Verdict) (attempts int, err error) {
	var release budget.Release
	for attempt := 1; ; attempt++ {
		done, gerr := e.StartAttempt(ctx, attempt)
		if gerr != nil {
			release.Done(budget.RetryNotUsed)
			return attempt - 1, gerr
		}
		aerr := results[attempt-1]
		v := retry.NoOpinion
		if aerr != nil {
			v = verdict(aerr)
		}
		done(aerr, v)
		if aerr == nil {
			release.Done(budget.RetrySucceeded)
		} else {
			release.Done(budget.RetryFailed)
		}
		if aerr == nil || !v.Retryable() || attempt == e.MaxAttempts() {
			return attempt, aerr
		}
		kind := budget.Transient
		if v == retry.RetryThrottling {
			kind = budget.Throttling
		}
		if release, gerr = e.AcquireRetry(ctx, retry.RetryEvent{Attempt: attempt, Delay: wait, Err: aerr, Kind: kind}); gerr != nil {
			return attempt, gerr
		}
	}
}

var errPartner = errors.New("partner failed")

func transient(error) retry.Verdict { return retry.RetryTransient }

func TestForeignLoopAccounting(t *testing.T) {
	ctx := context.Background()
	b := &fakeBudget{}
	br := mustBreaker(t)
	var retries []retry.RetryEvent
	e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Breaker: br, Clock: newFakeClock(),
		OnRetry: func(ev retry.RetryEvent) { retries = append(retries, ev) }})

	// Success at once: one request, one first-attempt success, no retry.
	if n, err := foreignCall(ctx, e, time.Millisecond, []error{nil}, transient); n != 1 || err != nil {
		t.Fatalf("healthy call: %d attempts, %v", n, err)
	}
	if s := b.snapshot(); s.requests != 1 || s.successes != 1 || len(s.acquires) != 0 {
		t.Errorf("after a healthy call the budget saw %+v", s)
	}

	// Two failures then a success: still one request, two retries granted,
	// the first released as failed and the second as succeeded, and no
	// first-attempt success.
	results := []error{errPartner, errPartner, nil}
	if n, err := foreignCall(ctx, e, 7*time.Millisecond, results, transient); n != 3 || err != nil {
		t.Fatalf("call with two retries: %d attempts, %v", n, err)
	}
	s := b.snapshot()
	if s.requests != 2 || s.successes != 1 {
		t.Errorf("requests %d, successes %d; want 2 and 1 (a retry's success is reported through its release)", s.requests, s.successes)
	}
	if want := []budget.Outcome{budget.RetryFailed, budget.RetrySucceeded}; !slices.Equal(s.outcomes, want) {
		t.Errorf("grant outcomes %v, want %v", s.outcomes, want)
	}
	if len(retries) != 2 || retries[0].Attempt != 1 || retries[1].Attempt != 2 || retries[1].Delay != 7*time.Millisecond || !errors.Is(retries[0].Err, errPartner) {
		t.Errorf("OnRetry events %+v", retries)
	}
	// The breaker counted every attempt: 2 successes (one per call) and 2
	// failures.
	if c := br.Counts(); c.Successes != 2 || c.Failures != 2 {
		t.Errorf("breaker counts %+v, want 2 successes and 2 failures", c)
	}
}

func TestForeignLoopVerdictsDecideTheBreakerOutcome(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		v         retry.Verdict
		err       error
		successes int64
		failures  int64
		excluded  int64
	}{
		{"NoRetry counts the partner healthy", retry.NoRetry, errPartner, 1, 0, 0},
		{"NoRetryFailure counts a failure", retry.NoRetryFailure, errPartner, 0, 1, 0},
		{"NoRetryExcluded counts nothing", retry.NoRetryExcluded, errPartner, 0, 0, 1},
		{"RetryThrottling counts a failure", retry.RetryThrottling, errPartner, 0, 1, 0},
		{"NoOpinion asks the Executor's chain: a 503", retry.NoOpinion, status(503), 0, 1, 0},
		{"NoOpinion asks the Executor's chain: a 404", retry.NoOpinion, status(404), 1, 0, 0},
		{"NoOpinion asks the Executor's chain: an unknown error", retry.NoOpinion, errPartner, 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := mustBreaker(t)
			e := mustNew(t, retry.Config{Breaker: br, Clock: newFakeClock()})
			done, err := e.StartAttempt(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			done(tc.err, tc.v)
			done(nil, retry.NoOpinion) // a second call does nothing
			c := br.Counts()
			if c.Successes != tc.successes || c.Failures != tc.failures || c.Excluded != tc.excluded {
				t.Errorf("breaker counts %+v; want %d successes, %d failures, %d excluded", c, tc.successes, tc.failures, tc.excluded)
			}
		})
	}
}

func TestForeignLoopBreakerOpen(t *testing.T) {
	ctx := context.Background()
	b := &fakeBudget{}
	br, err := breaker.New("partner", breaker.Settings{ConsecutiveFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	var giveUps []*retry.GiveUpError
	e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Breaker: br, Clock: newFakeClock(),
		OnGiveUp: func(ev *retry.GiveUpError) { giveUps = append(giveUps, ev) }})
	// One failure trips it: open for OpenDuration, with a probe scheduled.
	trip, err := e.StartAttempt(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	trip(errPartner, retry.RetryTransient)
	b.requests = 0

	// A first attempt: the breaker's own error, as Do returns it, and no
	// request recorded for a call that never went out.
	done, err := e.StartAttempt(ctx, 1)
	var oe *breaker.OpenError
	if done != nil || !errors.As(err, &oe) || oe.RetryAfter <= 0 {
		t.Fatalf("StartAttempt(1) = %v, %v; want a *breaker.OpenError with a RetryAfter and no done", done != nil, err)
	}
	if d, ok := retry.RetryAfter(err); !ok || d != oe.RetryAfter {
		t.Errorf("RetryAfter(err) = %v, %v; want the breaker's %v", d, ok, oe.RetryAfter)
	}
	if s := b.snapshot(); s.requests != 0 {
		t.Errorf("%d requests recorded for a rejected call", s.requests)
	}

	// A later attempt: a *GiveUpError with Reason BreakerOpen that still
	// matches breaker.ErrOpen.
	_, err = e.StartAttempt(ctx, 3)
	gu := asGiveUp(t, err)
	if gu.Reason != retry.BreakerOpen || gu.Attempts != 2 || !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("StartAttempt(3) = %+v; want Reason BreakerOpen after 2 attempts, matching breaker.ErrOpen", gu)
	}
	if d, ok := retry.RetryAfter(err); !ok || d <= 0 {
		t.Errorf("RetryAfter(err) = %v, %v; want the time to the next probe", d, ok)
	}
	if len(giveUps) != 2 || giveUps[0].Attempts != 0 || giveUps[1].Attempts != 2 || giveUps[1].Reason != retry.BreakerOpen {
		t.Errorf("OnGiveUp events %+v", giveUps)
	}
}

func TestForeignLoopRefusals(t *testing.T) {
	ctx := context.Background()
	t.Run("budget exhausted", func(t *testing.T) {
		b := &fakeBudget{refuse: &budget.ExhaustedError{Budget: "local-ratio", RetryAfter: 3 * time.Second}}
		var exhausted []*retry.GiveUpError
		var retries int
		e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Clock: newFakeClock(),
			OnGiveUp: func(gu *retry.GiveUpError) { exhausted = append(exhausted, gu) },
			OnRetry:  func(retry.RetryEvent) { retries++ }})
		n, err := foreignCall(ctx, e, time.Millisecond, []error{errPartner, nil}, transient)
		var ex *budget.ExhaustedError
		var gu *retry.GiveUpError
		if n != 1 || !errors.As(err, &ex) || !errors.Is(err, budget.ErrExhausted) || !errors.Is(err, errPartner) || !errors.As(err, &gu) {
			t.Fatalf("%d attempts, %v; want a refusal after 1 attempt wrapping the partner's error", n, err)
		}
		if gu.Attempts != 1 || gu.Reason != retry.BudgetExhausted || ex.Budget != "local-ratio" || ex.RetryAfter != 3*time.Second {
			t.Errorf("refusal %+v, %+v", gu, ex)
		}
		if len(exhausted) != 1 || exhausted[0] != gu || retries != 0 {
			t.Errorf("OnGiveUp %d times, OnRetry %d times; want 1 with the returned error and 0", len(exhausted), retries)
		}
	})
	t.Run("wait past the deadline spends nothing", func(t *testing.T) {
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Clock: newFakeClock(), DeadlineMargin: 100 * time.Millisecond})
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := e.AcquireRetry(dctx, retry.RetryEvent{Attempt: 1, Delay: 950 * time.Millisecond, Err: errPartner})
		if gu := asGiveUp(t, err); gu.Reason != retry.DeadlineTooClose || !errors.Is(err, errPartner) {
			t.Errorf("AcquireRetry = %+v; want DeadlineTooClose wrapping the partner's error", gu)
		}
		if s := b.snapshot(); len(s.acquires) != 0 {
			t.Errorf("the budget was asked %d times", len(s.acquires))
		}
		if _, err := e.AcquireRetry(dctx, retry.RetryEvent{Attempt: 1, Delay: 10 * time.Millisecond, Err: errPartner}); err != nil {
			t.Errorf("a wait that fits: %v", err)
		}
	})
	t.Run("hint above MaxRetryAfter", func(t *testing.T) {
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Clock: newFakeClock(), MaxRetryAfter: time.Second})
		_, err := e.AcquireRetry(ctx, retry.RetryEvent{Attempt: 2, Delay: 2 * time.Second, RetryAfter: 2 * time.Second, Err: errPartner})
		if gu := asGiveUp(t, err); gu.Reason != retry.RetryAfterTooLong || gu.Attempts != 2 {
			t.Errorf("AcquireRetry = %+v; want RetryAfterTooLong after 2 attempts", gu)
		}
		if s := b.snapshot(); len(s.acquires) != 0 {
			t.Errorf("the budget was asked %d times", len(s.acquires))
		}
	})
	t.Run("context already done", func(t *testing.T) {
		e := mustNew(t, retry.Config{Clock: newFakeClock()})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := e.AcquireRetry(cctx, retry.RetryEvent{Attempt: 1, Err: errPartner})
		if gu := asGiveUp(t, err); gu.Reason != retry.ContextDone || !errors.Is(err, context.Canceled) {
			t.Errorf("AcquireRetry = %+v; want ContextDone", gu)
		}
	})
}

// throttlingStore is a breaker Store whose fleet counts show adaptive
// throttling in force: 70% of the calls of the last seconds failed.
type throttlingStore struct{ snap breaker.Snapshot }

func newThrottlingStore(now time.Time) *throttlingStore {
	s := breaker.Snapshot{WatchUntil: now.Add(20 * time.Second)}
	for i := range int64(3) {
		n := now.Unix() - i
		s.Buckets[n%breaker.FleetSlots] = breaker.Bucket{Num: n, Requests: 300, Successes: 90, Failures: 210, Samples: 300}
	}
	return &throttlingStore{snap: s}
}

func (s *throttlingStore) Load(context.Context, string) (breaker.Snapshot, error) { return s.snap, nil }
func (s *throttlingStore) Report(context.Context, string, breaker.Report) (breaker.Snapshot, error) {
	return s.snap, nil
}
func (s *throttlingStore) Transition(_ context.Context, _ string, _ uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	return next, nil
}
func (s *throttlingStore) AcquireProbe(context.Context, string, uint64, int, time.Time, time.Time) (int, error) {
	return 0, breaker.ErrProbeDenied
}
func (s *throttlingStore) SetOverride(context.Context, string, breaker.Override, time.Time) error {
	return nil
}

// A foreign loop's later attempts are retries to the breaker, as Do's are:
// while adaptive throttling admits a share of first attempts it refuses
// retries.
func TestForeignLoopRetriesAreRetriesToTheBreaker(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	br, err := breaker.New("partner", breaker.Settings{Store: newThrottlingStore(clk.Now()), Adaptive: true,
		Rand: func() float64 { return 0 }, StoreTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, retry.Config{Breaker: br, Clock: clk})
	done, err := e.StartAttempt(ctx, 1)
	if err != nil {
		t.Fatalf("StartAttempt(1) while throttling with Rand 0: %v; want a first attempt admitted", err)
	}
	done(nil, retry.NoOpinion)
	_, err = e.StartAttempt(ctx, 2)
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !oe.Throttled {
		t.Fatalf("StartAttempt(2) while throttling: %v; want the retry refused by throttling", err)
	}
}

// AcquireRetry charges no budget for a retry an open breaker would reject.
func TestForeignLoopAcquireRetryWhileOpen(t *testing.T) {
	ctx := context.Background()
	b := &fakeBudget{}
	br := mustBreaker(t)
	br.Override(breaker.ForcedOpen)
	e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Breaker: br, Clock: newFakeClock()})
	_, err := e.AcquireRetry(ctx, retry.RetryEvent{Attempt: 1, Err: errPartner, Kind: budget.Transient})
	if gu := asGiveUp(t, err); gu.Reason != retry.BreakerOpen || !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("AcquireRetry = %+v; want Reason BreakerOpen", gu)
	}
	if s := b.snapshot(); len(s.acquires) != 0 {
		t.Errorf("budget asked %d times; want never", len(s.acquires))
	}
}
