package retry_test

// The seeds of ../shared/seeds reproduced exactly: the backoff article's
// vitest suite and the retry-budget article's node:test cases (3) and (4).

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/hint"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// fullJitterDelay(retry, {baseMs: 100, capMs: 1000}, () => 0.999999) is 99,
// 799 and 999 for retries 0, 3 and 10. The article floors to whole
// milliseconds; FullJitter works in nanoseconds, so its values floor to
// the article's.
func TestSeedFullJitterGrowsAndStaysBelowCap(t *testing.T) {
	for _, tc := range []struct {
		retry   int
		wantMs  time.Duration
		exactNs time.Duration
	}{
		{0, 99, 99_999_900},
		{3, 799, 799_999_200},
		{10, 999, 999_999_000},
	} {
		got := retry.FullJitter(tc.retry, 100*time.Millisecond, time.Second, 0.999999)
		if got != tc.exactNs {
			t.Errorf("FullJitter(%d) = %d ns, want %d ns", tc.retry, got, tc.exactNs)
		}
		if ms := got / time.Millisecond; ms != tc.wantMs {
			t.Errorf("FullJitter(%d) floored to ms = %d, want %d", tc.retry, ms, tc.wantMs)
		}
	}
}

// "retries transient errors and then returns the result": 503, 503, then
// "booked"; 3 calls; sleeps [50, 100].
func TestSeedRetriesTransientThenReturnsResult(t *testing.T) {
	clk := newFakeClock()
	e := mustNew(t, articleConfig(clk))
	calls := 0
	got, err := retry.Do(context.Background(), e, func(context.Context, int) (string, error) {
		calls++
		if calls < 3 {
			return "", status(http.StatusServiceUnavailable)
		}
		return "booked", nil
	})
	if err != nil || got != "booked" {
		t.Fatalf("Do = %q, %v; want booked, nil", got, err)
	}
	if calls != 3 {
		t.Errorf("calls = %d, want 3", calls)
	}
	if want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(clk.Sleeps(), want) {
		t.Errorf("sleeps = %v, want %v", clk.Sleeps(), want)
	}
}

// "gives up immediately on 400".
func TestSeedGivesUpImmediatelyOn400(t *testing.T) {
	clk := newFakeClock()
	e := mustNew(t, articleConfig(clk))
	calls := 0
	err := e.Do(context.Background(), failing(&calls, status(400), status(400), status(400), status(400)))
	var se *retry.StatusError
	if !errors.As(err, &se) || se.StatusCode != 400 {
		t.Fatalf("err = %v; want the 400 reachable", err)
	}
	if calls != 1 {
		t.Errorf("calls = %d, want 1", calls)
	}
	if gu := asGiveUp(t, err); gu.Attempts != 1 || gu.Reason != retry.NotRetryable {
		t.Errorf("GiveUpError = %+v; want 1 attempt, not retryable", gu)
	}
}

// "respects maxAttempts": a 500 with maxAttempts 4 is tried 4 times.
func TestSeedRespectsMaxAttempts(t *testing.T) {
	clk := newFakeClock()
	e := mustNew(t, articleConfig(clk))
	calls := 0
	err := e.Do(context.Background(), func(context.Context, int) error { calls++; return status(500) })
	if calls != 4 {
		t.Errorf("calls = %d, want 4", calls)
	}
	gu := asGiveUp(t, err)
	if gu.Attempts != 4 || gu.Reason != retry.AttemptsExhausted {
		t.Errorf("GiveUpError = %+v; want 4 attempts, attempts exhausted", gu)
	}
	var se *retry.StatusError
	if !errors.As(err, &se) || se.StatusCode != 500 {
		t.Errorf("the 500 is not reachable from %v", err)
	}
}

// "uses Retry-After as a lower bound": a 429 with Retry-After 2000 ms waits
// 2000 + jitter(0.5 × 100) = 2050 ms.
func TestSeedRetryAfterIsALowerBound(t *testing.T) {
	clk := newFakeClock()
	e := mustNew(t, articleConfig(clk))
	calls := 0
	err := e.Do(context.Background(), failing(&calls, &retry.StatusError{StatusCode: 429, RetryAfter: 2000 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{2050 * time.Millisecond}; !slices.Equal(clk.Sleeps(), want) {
		t.Errorf("sleeps = %v, want %v", clk.Sleeps(), want)
	}
}

// "stops when the wait would exceed the time budget": a 429 with
// Retry-After 30 s against a 10 s deadline gives up after 1 call.
func TestSeedStopsWhenWaitWouldExceedDeadline(t *testing.T) {
	clk := newFakeClock()
	e := mustNew(t, articleConfig(clk))
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(10*time.Second))
	defer cancel()
	calls := 0
	err := e.Do(ctx, func(context.Context, int) error {
		calls++
		return &retry.StatusError{StatusCode: 429, RetryAfter: 30 * time.Second}
	})
	if calls != 1 {
		t.Errorf("calls = %d, want 1", calls)
	}
	if gu := asGiveUp(t, err); gu.Reason != retry.DeadlineTooClose {
		t.Errorf("reason = %v, want %v", gu.Reason, retry.DeadlineTooClose)
	}
	var se *retry.StatusError
	if !errors.As(err, &se) || se.StatusCode != 429 {
		t.Errorf("the original 429 is not reachable from %v", err)
	}
	if len(clk.Sleeps()) != 0 {
		t.Errorf("slept %v; want no wait", clk.Sleeps())
	}
}

// parseRetryAfter("120") = 120 s; an HTTP date relative to now; garbage is
// undefined.
func TestSeedParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if d, ok := hint.Parse("120", now); !ok || d != 120*time.Second {
		t.Errorf(`ParseRetryAfter("120") = %v, %v; want 2m0s, true`, d, ok)
	}
	date := now.Add(90 * time.Second).Format(http.TimeFormat)
	if d, ok := hint.Parse(date, now); !ok || d != 90*time.Second {
		t.Errorf("ParseRetryAfter(%q) = %v, %v; want 1m30s, true", date, d, ok)
	}
	if d, ok := hint.Parse("soon", now); ok || d != 0 {
		t.Errorf(`ParseRetryAfter("soon") = %v, %v; want 0, false`, d, ok)
	}
}

// Retry-budget article (3): "withRetries retries 503 and gives up when the
// budget is empty": a bucket of capacity 14 (transient cost 14), maxAttempts
// 5, always 503: tried exactly twice, then budget exhausted.
func TestSeedBudgetExhaustedAfterTwoAttempts(t *testing.T) {
	bucket, err := local.NewTokenBucket(local.TokenBucketConfig{Capacity: 14})
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	e := mustNew(t, retry.Config{
		Idempotent:    true,
		MaxAttempts:   5,
		TransientBase: time.Millisecond,
		Budgets:       []budget.Budget{bucket},
		Clock:         clk,
		Rand:          constRand(0),
	})
	calls := 0
	err = e.Do(context.Background(), func(context.Context, int) error {
		calls++
		return &retry.StatusError{StatusCode: 503, Status: "503 overloaded"}
	})
	if calls != 2 {
		t.Errorf("calls = %d, want 2 (first attempt + one retry)", calls)
	}
	if !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("err = %v; want budget.ErrExhausted", err)
	}
	var gu *retry.GiveUpError
	if !errors.As(err, &gu) || gu.Reason != retry.BudgetExhausted || gu.Attempts != 2 {
		t.Fatalf("GiveUpError = %+v; want Reason BudgetExhausted after 2 attempts", gu)
	}
	var se *retry.StatusError
	if !errors.As(err, &se) || se.StatusCode != 503 {
		t.Errorf("the 503 is not reachable from %v", err)
	}
	if bucket.Available() != 0 {
		t.Errorf("bucket holds %d tokens, want 0 (the failed retry keeps its cost)", bucket.Available())
	}
}

// Retry-budget article (4): "withRetries does not retry 400".
func TestSeedBudgetDoesNotRetry400(t *testing.T) {
	bucket, err := local.NewTokenBucket(local.TokenBucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, retry.Config{Budgets: []budget.Budget{bucket}, Clock: newFakeClock()})
	calls := 0
	err = e.Do(context.Background(), func(context.Context, int) error { calls++; return status(400) })
	var se *retry.StatusError
	if !errors.As(err, &se) || se.StatusCode != 400 {
		t.Fatalf("err = %v; want the 400", err)
	}
	if calls != 1 {
		t.Errorf("calls = %d, want 1", calls)
	}
	if bucket.Available() != 500 {
		t.Errorf("bucket holds %d tokens, want 500 (nothing spent)", bucket.Available())
	}
}
