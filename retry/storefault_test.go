package retry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/memstore"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// A fleet-wide budget whose store is down is reported through OnStoreError
// whether it fails open (abstains: the local layer decides) or fails closed
// (refuses: the call ends with an ExhaustedError that still carries both
// the partner's error and the store fault).
func TestStoreFaultIsReportedFailOpenAndClosed(t *testing.T) {
	storeDown := errors.New("table unreachable")
	for _, failClosed := range []bool{false, true} {
		store := memstore.NewBudgetStore(memstore.Options{
			Fault: func(context.Context, string) error { return storeDown },
		})
		now := time.Unix(1_700_000_000, 0)
		global, err := budget.NewGlobal(store, "partner", budget.GlobalConfig{
			FailOpen: !failClosed,
		})
		if err != nil {
			t.Fatal(err)
		}
		bucket, err := local.NewTokenBucket(local.TokenBucketConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var reported []error
		e := twoAttemptExecutor(t, now, &reported, bucket, global)
		partner := &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
		calls := 0
		err = e.Do(context.Background(), func(context.Context, int) error { calls++; return partner })

		if len(reported) != 1 || !errors.Is(reported[0], storeDown) || !errors.Is(reported[0], budget.ErrUnavailable) {
			t.Fatalf("failClosed=%v: OnStoreError saw %v, want one report of the store fault", failClosed, reported)
		}
		if !errors.Is(err, partner) {
			t.Fatalf("failClosed=%v: the partner's error is not reachable from %v", failClosed, err)
		}
		if failClosed {
			if calls != 1 || !errors.Is(err, budget.ErrExhausted) || !errors.Is(err, storeDown) {
				t.Fatalf("fail closed: %d calls, err %v; want 1 call and an exhaustion carrying the store fault", calls, err)
			}
		} else if calls != 2 || errors.Is(err, budget.ErrExhausted) {
			t.Fatalf("fail open: %d calls, err %v; want the local bucket to grant the retry", calls, err)
		}
	}
}

// fixedClock is a Clock whose time stands still and whose Sleep returns at
// once unless ctx is done.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func (c fixedClock) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// A caller whose context ends while the fleet-wide budget asks its store
// has not seen a store fault: the call ends with Reason ContextDone (not a
// budget refusal), OnStoreError hears nothing, and the partner's error is
// still reachable, whether the layer fails open or closed.
func TestContextEndingDuringABudgetStoreCall(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		store := memstore.NewBudgetStore(memstore.Options{
			Fault: func(sctx context.Context, _ string) error {
				cancel() // the caller gives up while the store call is in flight
				<-sctx.Done()
				return sctx.Err()
			},
		})
		global, err := budget.NewGlobal(store, "partner", budget.GlobalConfig{FailOpen: failOpen, StoreTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var reported []error
		e := twoAttemptExecutor(t, time.Unix(1_700_000_000, 0), &reported, global)
		partner := &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
		calls := 0
		err = e.Do(ctx, func(context.Context, int) error { calls++; return partner })
		var gu *retry.GiveUpError
		if !errors.As(err, &gu) || gu.Reason != retry.ContextDone || !errors.Is(err, context.Canceled) ||
			errors.Is(err, budget.ErrExhausted) || errors.Is(err, budget.ErrUnavailable) || !errors.Is(err, partner) {
			t.Fatalf("FailOpen %v: %v, want a ContextDone give-up carrying the partner's error and no budget refusal", failOpen, err)
		}
		if calls != 1 || len(reported) != 0 {
			t.Fatalf("FailOpen %v: %d calls, OnStoreError saw %v; want 1 call and no report", failOpen, calls, reported)
		}
		cancel()
	}
}

// twoAttemptExecutor is an Executor of two attempts over budgets, at a time
// that stands still, whose OnStoreError appends to reported.
func twoAttemptExecutor(t *testing.T, now time.Time, reported *[]error, budgets ...budget.Budget) *retry.Executor {
	t.Helper()
	e, err := retry.New(retry.Config{
		MaxAttempts:  2,
		Idempotent:   true,
		Budgets:      budgets,
		Clock:        fixedClock{now},
		Rand:         func() float64 { return 0 },
		OnStoreError: func(layer int, err error) { *reported = append(*reported, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
