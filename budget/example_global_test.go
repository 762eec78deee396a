package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// Two environments share one budget through a store (here in memory; in
// production dynamo.NewBudgetStore). Healthy traffic costs no store call;
// during an outage the fleet gets 10% of its requests as retries, plus the
// floor of 3 per window. Once the store shows the budget spent, refusals
// cost no store call until the environment's next contact, which the
// refusal's RetryAfter names (2.5 s ± 50% with the default settings; Rand
// is seeded here only to print a fixed value).
func ExampleGlobal() {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	store := local.NewBudgetStore()
	envA, _ := budget.NewGlobal(store, "payments", budget.GlobalConfig{Rand: rand.New(rand.NewPCG(1, 1)).Float64})
	envB, _ := budget.NewGlobal(store, "payments", budget.GlobalConfig{Rand: rand.New(rand.NewPCG(2, 2)).Float64})

	for range 40 {
		envA.RecordRequest(now)
		envB.RecordRequest(now)
	}
	fmt.Println("store writes while healthy:", store.Stats().Writes)

	// The partner fails: both environments ask for retries.
	granted := 0
	var refusal error
	for range 10 {
		for _, env := range []*budget.Global{envA, envB} {
			release, err := env.AcquireRetry(context.Background(), now, budget.Transient)
			if err != nil {
				refusal = err
				continue
			}
			granted++
			release(budget.RetryFailed)
		}
	}
	fmt.Println("granted:", granted, "of 80 requests × 0.1 + 3")
	var exhausted *budget.ExhaustedError
	if errors.As(refusal, &exhausted) {
		fmt.Println("refused by", exhausted.Budget, "retry after", exhausted.RetryAfter.Round(time.Millisecond))
	}
	fmt.Println("store writes:", store.Stats().Writes)
	// Output:
	// store writes while healthy: 0
	// granted: 11 of 80 requests × 0.1 + 3
	// refused by global:payments retry after 2.733s
	// store writes: 12
}

// A local budget first, then the fleet-wide one, in a retry.Executor:
// the local layer refuses without a store call, and while the store is
// down a global layer set to FailOpen abstains, so the local layer alone
// decides: its floor of 3 retries. (By default the global layer fails
// closed: it refuses while its store is down.)
func ExampleGlobal_layered() {
	global, _ := budget.NewGlobal(downStore{}, "payments", budget.GlobalConfig{FailOpen: true})
	ratio, _ := local.NewRatio(local.RatioConfig{})
	exec, _ := retry.New(retry.Config{
		MaxAttempts:   10,
		Idempotent:    true,
		TransientBase: time.Microsecond,
		Budgets:       []budget.Budget{ratio, global},
		OnStoreError: func(layer int, err error) {
			fmt.Println("layer", layer, "abstained:", errors.Is(err, budget.ErrUnavailable))
		},
	})
	err := exec.Do(context.Background(), func(context.Context, int) error {
		return &retry.StatusError{StatusCode: 503}
	})
	var gu *retry.GiveUpError
	if errors.As(err, &gu) {
		fmt.Println(gu.Reason, "after", gu.Attempts, "attempts")
	}
	// Output:
	// layer 1 abstained: true
	// layer 1 abstained: true
	// layer 1 abstained: true
	// budget exhausted after 4 attempts
}

// downStore is a budget.Store whose table cannot be reached.
type downStore struct{}

func (downStore) Apply(context.Context, budget.Key, budget.Update) (int64, error) {
	return 0, errors.New("table unreachable")
}
