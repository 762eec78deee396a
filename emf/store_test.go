package emf_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// budgetStoreFunc is a budget.Store whose every Apply answers err().
type budgetStoreFunc func() error

func (f budgetStoreFunc) Apply(context.Context, budget.Key, budget.Update) (int64, error) {
	return 0, f()
}

// downBreakerStore is a breaker.Store whose table cannot be reached.
type downBreakerStore struct{}

var errTableDown = fmt.Errorf("%w: dial tcp: connection refused", breaker.ErrStore)

func (downBreakerStore) Load(context.Context, string) (breaker.Snapshot, error) {
	return breaker.Snapshot{}, errTableDown
}
func (downBreakerStore) Report(context.Context, string, breaker.Report) (breaker.Snapshot, error) {
	return breaker.Snapshot{}, errTableDown
}
func (downBreakerStore) Transition(context.Context, string, uint64, breaker.Snapshot) (breaker.Snapshot, error) {
	return breaker.Snapshot{}, errTableDown
}
func (downBreakerStore) AcquireProbe(context.Context, string, uint64, int, time.Time, time.Time) (int, error) {
	return 0, errTableDown
}
func (downBreakerStore) SetOverride(context.Context, string, breaker.Override, time.Time) error {
	return errTableDown
}

// runGlobal makes calls calls, each failing with a 503 and asking one
// retry of a fleet-wide budget (failing closed, the default) over store,
// and returns the metrics of the flush and whether every call was refused
// by the budget.
func runGlobal(t *testing.T, store budget.Store, calls int) (map[string]float64, map[string]any, bool) {
	t.Helper()
	var buf bytes.Buffer
	rec := newRecorder(t, &buf, time.Now())
	g, err := budget.NewGlobal(store, "payments", budget.GlobalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := retry.Config{MaxAttempts: 2, Idempotent: true, Budgets: []budget.Budget{g},
		TransientBase: time.Microsecond, MaxDelay: time.Microsecond}
	rec.Instrument(&cfg, nil)
	exec, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	refused := true
	for range calls {
		err := exec.Do(context.Background(), func(context.Context, int) error { return &retry.StatusError{StatusCode: 503} })
		refused = refused && errors.Is(err, budget.ErrExhausted)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	ls := lines(&buf)
	if len(ls) != 1 {
		t.Fatalf("%d lines, want 1", len(ls))
	}
	_, values, root := parse(t, ls[0])
	return values, root, refused
}

// TestStoreFaultsAreNotRefusals: a fleet-wide budget whose table fails
// refuses the retries (it fails closed), and the caller sees a refusal,
// but the metrics count store errors, never BudgetExhausted, so a table
// problem does not look like a partner outage. The same budget refusing
// because its allowance is spent counts BudgetExhausted, and no store
// error. A breaker whose table fails counts BreakerStoreErrors and rejects
// nothing while the partner is healthy.
func TestStoreFaultsAreNotRefusals(t *testing.T) {
	const calls = 20
	for _, tc := range []struct {
		name  string
		err   error
		calls int
	}{
		{"unreachable table", errors.New("dial tcp: connection refused"), calls},
		{"malformed item", errors.New("allowance attribute is not a number"), calls},
		// A throttled call refuses, and so do the calls answered from
		// memory until the next contact: each carries the throttle.
		{"throttled", fmt.Errorf("ProvisionedThroughputExceededException: %w", budget.ErrThrottled), calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, root, refused := runGlobal(t, budgetStoreFunc(func() error { return tc.err }), tc.calls)
			if !refused {
				t.Error("a call was not refused by the budget: failing closed, a store fault refuses the retry")
			}
			if n, ok := values["BudgetExhausted"]; ok {
				t.Errorf("BudgetExhausted = %v on a store fault; want none (all metrics: %v)", n, values)
			}
			if values["BudgetStoreErrors"] != float64(tc.calls) {
				t.Errorf("BudgetStoreErrors = %v, want %d, one per refused retry", values["BudgetStoreErrors"], tc.calls)
			}
			if ex, ok := root["ExhaustedBudgets"]; ok {
				t.Errorf("ExhaustedBudgets = %v on a store fault; want none", ex)
			}
		})
	}
	t.Run("allowance spent", func(t *testing.T) {
		values, root, refused := runGlobal(t, budgetStoreFunc(func() error { return budget.ErrInsufficient }), calls)
		if !refused || values["BudgetExhausted"] != calls {
			t.Errorf("BudgetExhausted = %v (every call refused: %v), want %d", values["BudgetExhausted"], refused, calls)
		}
		if n, ok := values["BudgetStoreErrors"]; ok {
			t.Errorf("BudgetStoreErrors = %v on plain refusals, want none", n)
		}
		if got := fmt.Sprint(root["ExhaustedBudgets"]); got != "[global:payments]" {
			t.Errorf("ExhaustedBudgets = %s, want [global:payments]", got)
		}
	})
	t.Run("breaker table down", func(t *testing.T) {
		var buf bytes.Buffer
		rec := newRecorder(t, &buf, time.Now())
		s := breaker.Settings{Store: downBreakerStore{}}
		cfg := retry.Config{}
		rec.Instrument(&cfg, &s)
		br, err := breaker.New("payments", s)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Breaker = br
		exec, err := retry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range calls {
			if err := exec.Do(context.Background(), func(context.Context, int) error { return nil }); err != nil {
				t.Fatalf("a healthy partner's call failed on a breaker store fault: %v", err)
			}
		}
		if err := rec.Flush(); err != nil {
			t.Fatal(err)
		}
		_, values, _ := parse(t, lines(&buf)[0])
		if values["BreakerStoreErrors"] < 1 {
			t.Errorf("BreakerStoreErrors = %v, want at least 1 (all: %v)", values["BreakerStoreErrors"], values)
		}
		if n, ok := values["BreakerRejected"]; ok {
			t.Errorf("BreakerRejected = %v on a store fault; want none", n)
		}
	})
}

// TestStoreFaultRefusalsOfAnyLayer: a give-up whose cause is a store fault,
// of a budget or of the breaker, is never counted as a refusal.
func TestStoreFaultRefusalsOfAnyLayer(t *testing.T) {
	var buf bytes.Buffer
	r := newRecorder(t, &buf, time.Now())
	h := hooksOf(r)
	h.GiveUp(&retry.GiveUpError{Reason: retry.BudgetExhausted,
		Cause: &budget.ExhaustedError{Budget: "global:payments", Cause: fmt.Errorf("%w: timeout", budget.ErrUnavailable)}})
	h.GiveUp(&retry.GiveUpError{Reason: retry.BreakerOpen, Cause: errTableDown})
	h.GiveUp(&retry.GiveUpError{Reason: retry.BreakerOpen, Cause: &breaker.OpenError{Name: "payments", State: breaker.Open}})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	_, values, root := parse(t, lines(&buf)[0])
	if len(values) != 1 || values["BreakerRejected"] != 1 {
		t.Errorf("metrics %v, want BreakerRejected 1 alone (the open breaker's)", values)
	}
	if _, ok := root["ExhaustedBudgets"]; ok {
		t.Errorf("ExhaustedBudgets %v; the only budget refusal was a store fault", root["ExhaustedBudgets"])
	}
}
