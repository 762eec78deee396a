package local_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/budgetcheck"
	"github.com/herdguard/herdguard/local"
)

var t0 = time.UnixMilli(1_700_000_000_000)

func mustBucket(t testing.TB, cfg local.TokenBucketConfig) *local.TokenBucket {
	t.Helper()
	b, err := local.NewTokenBucket(cfg)
	if err != nil {
		t.Fatalf("NewTokenBucket(%+v): %v", cfg, err)
	}
	return b
}

var (
	mustGrant  = budgetcheck.MustGrant
	mustRefuse = budgetcheck.MustRefuse
)

// Seed (1) of the retry-budget article: capacity 30, transient cost 14.
func TestTokenBucketSeedTwoRetriesThenRefundToSixteen(t *testing.T) {
	b := mustBucket(t, local.TokenBucketConfig{Capacity: 30, TransientCost: 14})
	first := mustGrant(t, b, t0, budget.Transient)
	mustGrant(t, b, t0, budget.Transient)
	mustRefuse(t, b, t0, budget.Transient, "local-token-bucket") // only 2 tokens left
	if got := b.Available(); got != 2 {
		t.Fatalf("Available() = %d after two grants, want 2", got)
	}
	first(budget.RetrySucceeded) // a successful retry refunds its 14
	if got := b.Available(); got != 16 {
		t.Fatalf("Available() = %d after a successful retry, want 16", got)
	}
}

func TestTokenBucketDefaults(t *testing.T) {
	b := mustBucket(t, local.TokenBucketConfig{})
	// The AWS SDK standard mode's: 500 tokens, 14 and 5 per retry, 1 back.
	if b.Available() != 500 {
		t.Fatalf("zero config: available %d; want 500, full", b.Available())
	}
	rel := mustGrant(t, b, t0, budget.Transient)
	if got := b.Available(); got != 486 {
		t.Fatalf("after a transient retry: %d, want 486", got)
	}
	rel(budget.RetryFailed)
	mustGrant(t, b, t0, budget.Throttling)(budget.RetryFailed)
	if got := b.Available(); got != 481 {
		t.Fatalf("after a throttling retry: %d, want 481", got)
	}
	b.RecordRequest(t0) // free
	b.RecordSuccess(t0)
	if got := b.Available(); got != 482 {
		t.Fatalf("after a first-attempt success: %d, want 482", got)
	}
}

func TestTokenBucketOutcomes(t *testing.T) {
	cfg := local.TokenBucketConfig{Capacity: 100, TransientCost: 10, ThrottlingCost: 4, SuccessReward: 3}
	for _, c := range []struct {
		kind    budget.Kind
		outcome budget.Outcome
		want    int
	}{
		{budget.Transient, budget.RetryFailed, 90},
		{budget.Transient, budget.RetrySucceeded, 100},
		{budget.Transient, budget.RetryNotUsed, 100},
		{budget.Throttling, budget.RetryFailed, 96},
		{budget.Throttling, budget.RetrySucceeded, 100},
		{budget.Throttling, budget.RetryNotUsed, 100},
		{budget.Kind(9), budget.RetryFailed, 90}, // unknown kinds pay the transient price
	} {
		b := mustBucket(t, cfg)
		mustGrant(t, b, t0, c.kind)(c.outcome)
		if got := b.Available(); got != c.want {
			t.Errorf("%v retry, %v: Available() = %d, want %d", c.kind, c.outcome, got, c.want)
		}
	}
}

func TestTokenBucketRefillsUpToCapacity(t *testing.T) {
	b := mustBucket(t, local.TokenBucketConfig{Capacity: 20, TransientCost: 14, SuccessReward: 5})
	rel := mustGrant(t, b, t0, budget.Transient) // 6
	b.RecordSuccess(t0)                          // 11
	b.RecordSuccess(t0)                          // 16
	rel(budget.RetrySucceeded)                   // 30, capped at 20
	if got := b.Available(); got != 20 {
		t.Fatalf("Available() = %d, want the capacity 20", got)
	}
	b.RecordSuccess(t0)
	if got := b.Available(); got != 20 {
		t.Fatalf("a success on a full bucket: Available() = %d, want 20", got)
	}
}

func TestTokenBucketEmptyRefusesUntilRefilled(t *testing.T) {
	b := mustBucket(t, local.TokenBucketConfig{Capacity: 14})
	mustGrant(t, b, t0, budget.Transient)(budget.RetryFailed)
	ex := mustRefuse(t, b, t0, budget.Transient, "local-token-bucket")
	if ex.RetryAfter != 0 {
		t.Fatalf("token bucket refusal RetryAfter = %v; it cannot know when successes refill it", ex.RetryAfter)
	}
	// Time alone does not refill a token bucket.
	mustRefuse(t, b, t0.Add(time.Hour), budget.Throttling, "local-token-bucket")
	for range 5 {
		b.RecordSuccess(t0)
	}
	mustGrant(t, b, t0, budget.Throttling)
	mustRefuse(t, b, t0, budget.Throttling, "local-token-bucket")
}

func TestTokenBucketConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg   local.TokenBucketConfig
		field string
	}{
		{local.TokenBucketConfig{Capacity: -1}, "Capacity"},
		{local.TokenBucketConfig{TransientCost: -1}, "TransientCost"},
		{local.TokenBucketConfig{ThrottlingCost: -5}, "ThrottlingCost"},
		{local.TokenBucketConfig{SuccessReward: -1}, "SuccessReward"},
		{local.TokenBucketConfig{Capacity: 13}, "Capacity (13) is below TransientCost (14)"},
		{local.TokenBucketConfig{Capacity: 20, TransientCost: 10, ThrottlingCost: 21}, "Capacity (20) is below ThrottlingCost (21)"},
		{local.TokenBucketConfig{TransientCost: 501}, "Capacity (500) is below TransientCost (501)"},
	} {
		b, err := local.NewTokenBucket(c.cfg)
		if err == nil {
			t.Errorf("NewTokenBucket(%+v) = %p, <nil>; want an error naming %s", c.cfg, b, c.field)
			continue
		}
		if b != nil {
			t.Errorf("NewTokenBucket(%+v) returned a bucket with error %v", c.cfg, err)
		}
		if !strings.HasPrefix(err.Error(), "herdguard: local.TokenBucketConfig."+c.field) {
			t.Errorf("NewTokenBucket(%+v) error %q does not name local.TokenBucketConfig.%s", c.cfg, err, c.field)
		}
	}
	// The smallest valid bucket: capacity equal to the dearer cost.
	b := mustBucket(t, local.TokenBucketConfig{Capacity: 14})
	mustGrant(t, b, t0, budget.Transient)
}

// Concurrent grants never take more than the bucket holds, and refunds
// never push it past its capacity.
func TestTokenBucketConcurrent(t *testing.T) {
	const capacity, cost = 1000, 7
	b := mustBucket(t, local.TokenBucketConfig{Capacity: capacity, TransientCost: cost, ThrottlingCost: cost})
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []budget.Release
	)
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.RecordRequest(t0)
				if rel, err := b.AcquireRetry(context.Background(), t0, budget.Transient); err == nil {
					mu.Lock()
					granted = append(granted, rel)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if want := capacity / cost; len(granted) != want {
		t.Fatalf("granted %d retries of cost %d from %d tokens, want %d", len(granted), cost, capacity, want)
	}
	if got := b.Available(); got != capacity%cost {
		t.Fatalf("Available() = %d, want %d", got, capacity%cost)
	}
	for i, rel := range granted {
		wg.Go(func() {
			rel(budget.RetrySucceeded)
			if i%2 == 0 {
				b.RecordSuccess(t0)
			}
		})
	}
	wg.Wait()
	if got := b.Available(); got != capacity {
		t.Fatalf("Available() = %d after every refund, want the capacity %d", got, capacity)
	}
}

func TestTokenBucketHotPathDoesNotAllocate(t *testing.T) {
	b := mustBucket(t, local.TokenBucketConfig{})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		b.RecordRequest(t0)
		rel, err := b.AcquireRetry(ctx, t0, budget.Throttling)
		if err != nil {
			t.Fatal(err)
		}
		rel(budget.RetrySucceeded)
		b.RecordSuccess(t0)
	})
	if allocs != 0 {
		t.Fatalf("RecordRequest + AcquireRetry + Release + RecordSuccess: %v allocs, want 0", allocs)
	}
}
