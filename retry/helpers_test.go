package retry_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/fakeclock"
	"github.com/herdguard/herdguard/retry"
)

// fakeClock is the tests' Clock whose time moves only when Sleep is
// called. It starts at the real time so that context deadlines, which the
// runtime measures on the real clock, line up with it.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New(time.Now()) }

func constRand(v float64) func() float64 { return func() float64 { return v } }

// fakeBudget records what the executor tells it and answers AcquireRetry
// from a script.
type fakeBudget struct {
	mu        sync.Mutex
	requests  int
	successes int
	acquires  []budget.Kind
	outcomes  []budget.Outcome
	// refuse, if set, is returned by AcquireRetry instead of a grant.
	refuse    error
	flushed   int
	flushedAt time.Time
	flush     error
}

func (b *fakeBudget) RecordRequest(time.Time) { b.mu.Lock(); b.requests++; b.mu.Unlock() }
func (b *fakeBudget) RecordSuccess(time.Time) { b.mu.Lock(); b.successes++; b.mu.Unlock() }

func (b *fakeBudget) AcquireRetry(_ context.Context, _ time.Time, k budget.Kind) (budget.Release, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acquires = append(b.acquires, k)
	if b.refuse != nil {
		return nil, b.refuse
	}
	return func(o budget.Outcome) {
		b.mu.Lock()
		b.outcomes = append(b.outcomes, o)
		b.mu.Unlock()
	}, nil
}

func (b *fakeBudget) Flush(_ context.Context, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushed++
	b.flushedAt = now
	return b.flush
}

type budgetSnapshot struct {
	requests, successes int
	acquires            []budget.Kind
	outcomes            []budget.Outcome
}

func (b *fakeBudget) snapshot() budgetSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return budgetSnapshot{b.requests, b.successes, append([]budget.Kind(nil), b.acquires...), append([]budget.Outcome(nil), b.outcomes...)}
}

// timeoutError is a net.Error timeout, as a read deadline produces.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// status returns a *retry.StatusError.
func status(code int) error { return &retry.StatusError{StatusCode: code} }

// failing returns an op that fails with errs[i] on attempt i+1 and succeeds
// after the list, counting its calls.
func failing(calls *int, errs ...error) func(context.Context, int) error {
	return func(_ context.Context, attempt int) error {
		*calls++
		if attempt-1 < len(errs) {
			return errs[attempt-1]
		}
		return nil
	}
}

func mustNew(t testing.TB, cfg retry.Config) *retry.Executor {
	t.Helper()
	e, err := retry.New(cfg)
	if err != nil {
		t.Fatalf("retry.New: %v", err)
	}
	return e
}

func mustBreaker(t testing.TB) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("partner", breaker.Settings{})
	if err != nil {
		t.Fatalf("breaker.New: %v", err)
	}
	return b
}

// articleConfig is the backoff article's test setup: 4 attempts, base
// 100 ms for both kinds, cap 1 s, random 0.5, no deadline.
func articleConfig(clk *fakeClock) retry.Config {
	return retry.Config{
		Idempotent:     true, // the article's calls are GETs
		MaxAttempts:    4,
		TransientBase:  100 * time.Millisecond,
		ThrottlingBase: 100 * time.Millisecond,
		MaxDelay:       time.Second,
		Clock:          clk,
		Rand:           constRand(0.5),
	}
}

func asGiveUp(t *testing.T, err error) *retry.GiveUpError {
	t.Helper()
	var gu *retry.GiveUpError
	if !errors.As(err, &gu) {
		t.Fatalf("error %v (%T) is not a *retry.GiveUpError", err, err)
	}
	return gu
}

// noBudget is Config.Budgets for a test about something else than budgets:
// retries bounded by MaxAttempts only, instead of the default local ratio.
var noBudget = []budget.Budget{}
