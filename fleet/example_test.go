package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/fleet"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// NewWithStores puts in-memory stores where New puts the table, so that a
// test exercises the Executor its code gets in production: here two
// execution environments of one function share the fleet-wide budget, and
// a partner that keeps answering 503 with a Retry-After gets one retry from
// each, then refusals.
func ExampleNewWithStores() {
	budgets, breakers := local.NewBudgetStore(), local.NewBreakerStore()
	var envs []*retry.Executor
	for range 2 {
		exec, err := fleet.NewWithStores(budgets, breakers, "payments", fleet.Config{})
		if err != nil {
			fmt.Println(err)
			return
		}
		envs = append(envs, exec)
	}

	calls := 0
	partner := func(ctx context.Context, attempt int) error {
		calls++
		return &retry.StatusError{StatusCode: http.StatusServiceUnavailable, RetryAfter: time.Millisecond}
	}
	for i, exec := range envs {
		err := exec.Do(context.Background(), partner)
		var gu *retry.GiveUpError
		if errors.As(err, &gu) {
			fmt.Printf("environment %d: %d attempts, budget exhausted: %t\n", i, gu.Attempts, errors.Is(err, budget.ErrExhausted))
		}
		if err := exec.Flush(context.Background()); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("partner calls:", calls)
	// Output:
	// environment 0: 2 attempts, budget exhausted: true
	// environment 1: 2 attempts, budget exhausted: true
	// partner calls: 4
}
