package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/breaker/breakertest"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/budget/budgettest"
	"github.com/herdguard/herdguard/local"
)

func TestBudgetStoreConformance(t *testing.T) {
	budgettest.Run(t, func(*testing.T) budget.Store { return local.NewBudgetStore() })
}

func TestBreakerStoreConformance(t *testing.T) {
	breakertest.Run(t, func(*testing.T) breaker.Store { return local.NewBreakerStore() })
}

func TestStoreStatsCountCalls(t *testing.T) {
	ctx := context.Background()
	bs := local.NewBudgetStore()
	k := budget.Key{Name: "p", Window: t0}
	if _, err := bs.Apply(ctx, k, budget.Update{Floor: 1, Expires: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Apply(ctx, k, budget.Update{Take: 5, Expires: t0.Add(time.Minute)}); err == nil {
		t.Fatal("an overdraft was granted")
	}
	if got := bs.Stats(); got != (local.StoreStats{Writes: 2}) {
		t.Errorf("budget store Stats = %+v, want 2 writes (a refusal counts)", got)
	}
	cs := local.NewBreakerStore()
	if _, err := cs.Load(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Report(ctx, "p", breaker.Report{Bucket: t0.Unix(), Requests: 1, Successes: 1, Samples: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if got := cs.Stats(); got != (local.StoreStats{Reads: 1, Writes: 2}) {
		t.Errorf("breaker store Stats = %+v, want 1 read, 2 writes", got)
	}
}
