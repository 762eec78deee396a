package local_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
)

// A bucket of 30 tokens affords two retries after transient failures (14
// tokens each); a retry that succeeds gets its cost back.
func ExampleTokenBucket() {
	b, err := local.NewTokenBucket(local.TokenBucketConfig{Capacity: 30, TransientCost: 14})
	if err != nil {
		panic(err)
	}
	ctx, now := context.Background(), time.Now()

	first, _ := b.AcquireRetry(ctx, now, budget.Transient)
	second, _ := b.AcquireRetry(ctx, now, budget.Transient)
	fmt.Println("after two retries:", b.Available())

	_, err = b.AcquireRetry(ctx, now, budget.Transient)
	fmt.Println("third retry refused:", errors.Is(err, budget.ErrExhausted))

	first.Done(budget.RetrySucceeded) // refunds 14
	second.Done(budget.RetryFailed)   // keeps its cost
	fmt.Println("after a successful retry:", b.Available())
	// Output:
	// after two retries: 2
	// third retry refused: true
	// after a successful retry: 16
}

// At most 10% of the requests of the last 10 seconds may be retried, and
// at least 3 retries per window; a refusal says when retries free up.
func ExampleRatio() {
	r, err := local.NewRatio(local.RatioConfig{Ratio: 0.1, Window: 10 * time.Second, MinRetries: 3})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for range 50 {
		r.RecordRequest(start)
	}
	granted := 0
	var refusal *budget.ExhaustedError
	for range 10 {
		rel, err := r.AcquireRetry(ctx, start.Add(2*time.Second), budget.Transient)
		if errors.As(err, &refusal) {
			continue
		}
		granted++
		rel.Done(budget.RetryFailed)
	}
	fmt.Println("granted:", granted)
	fmt.Println("refused by:", refusal.Budget, "retry after:", refusal.RetryAfter)

	_, err = r.AcquireRetry(ctx, start.Add(12*time.Second), budget.Transient)
	fmt.Println("12 s later, the floor grants:", err == nil)
	// Output:
	// granted: 5
	// refused by: local-ratio retry after: 10s
	// 12 s later, the floor grants: true
}

// The in-memory budget store: a window shard starts at its floor, and a
// take that would overdraw it is refused without changing it.
func ExampleBudgetStore() {
	s := local.NewBudgetStore()
	ctx := context.Background()
	k := budget.Key{Name: "payments", Shard: 0, Window: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}

	left, _ := s.Apply(ctx, k, budget.Update{Floor: 3, Deposit: 2, Take: 1})
	fmt.Println("left:", left)
	left, err := s.Apply(ctx, k, budget.Update{Floor: 3, Take: 5})
	fmt.Println("refused:", errors.Is(err, budget.ErrInsufficient), "left:", left)
	fmt.Println("writes:", s.Stats().Writes)
	// Output:
	// left: 4
	// refused: true left: 4
	// writes: 2
}

// Two environments decide to open the same breaker from epoch 0: one
// transition wins, the other learns the current state.
func ExampleBreakerStore() {
	s := local.NewBreakerStore()
	ctx := context.Background()
	until := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: until, Reopens: 1}

	_, err := s.Transition(ctx, "payments", 0, open)
	fmt.Println("first:", err)
	cur, err := s.Transition(ctx, "payments", 0, open)
	fmt.Println("second conflicts:", errors.Is(err, breaker.ErrConflict), "state:", cur.State, "epoch:", cur.Epoch)
	// Output:
	// first: <nil>
	// second conflicts: true state: open epoch: 1
}
