package fleet_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/fleet"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// tableAPI answers the warm-up read (BatchGetItem) with err, or with an
// empty table; the stores' writes are not expected.
type tableAPI struct {
	err   error
	reads int
}

func (a *tableAPI) BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	a.reads++
	if a.err != nil {
		return nil, a.err
	}
	return &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}, nil
}

func (a *tableAPI) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, errors.New("tableAPI: GetItem not expected")
}

func (a *tableAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, errors.New("tableAPI: UpdateItem not expected")
}

// apiError is what the SDK returns for an error answer of DynamoDB.
func apiError(status int, err error) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "BatchGetItem", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err},
	}}
}

func TestNewRejectsBadConfigNamingTheFleetField(t *testing.T) {
	// A table that cannot be read: bad config is reported first, and
	// before any read.
	ok := &tableAPI{err: apiError(400, &types.ResourceNotFoundException{Message: new(string)})}
	for _, tc := range []struct {
		api   *tableAPI
		table string
		name  string
		cfg   fleet.Config
		field string
	}{
		{ok, "herdguard", "a#b", fleet.Config{}, "fleet.New name"},
		{ok, "ab", "p", fleet.Config{}, "fleet.New table"},
		{ok, "herdguard", "p", fleet.Config{Ratio: 2}, "fleet.Config.Ratio"},
		{ok, "herdguard", "p", fleet.Config{Window: time.Millisecond}, "fleet.Config.Window"},
		{ok, "herdguard", "p", fleet.Config{Shards: -1}, "fleet.Config.Shards"},
		{ok, "herdguard", "p", fleet.Config{LocalFloor: -1}, "fleet.Config.LocalFloor"},
		{ok, "herdguard", "p", fleet.Config{Breaker: breaker.Settings{FailureRatio: 2}}, "fleet.Config.Breaker.FailureRatio"},
		{ok, "herdguard", "p", fleet.Config{Breaker: breaker.Settings{Store: local.NewBreakerStore()}}, "fleet.Config.Breaker.Store"},
		{ok, "herdguard", "p", fleet.Config{Retry: retry.Config{MaxAttempts: -1}}, "fleet.Config.Retry.MaxAttempts"},
		{ok, "herdguard", "p", fleet.Config{Retry: retry.Config{Budgets: []budget.Budget{}}}, "fleet.Config.Retry.Budgets"},
	} {
		_, err := fleet.New(context.Background(), tc.api, tc.table, tc.name, tc.cfg)
		var ce *herdguard.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.HasPrefix(err.Error(), "herdguard: "+tc.field+" ") {
			t.Errorf("New(%q, %q, %+v) = %v; want a *herdguard.ConfigError naming %s", tc.table, tc.name, tc.cfg, err, tc.field)
		}
	}
	if ok.reads != 0 {
		t.Errorf("%d reads of the table for bad config; want none", ok.reads)
	}
	if _, err := fleet.New(context.Background(), nil, "herdguard", "p", fleet.Config{}); err == nil || !strings.Contains(err.Error(), "fleet.New api is nil") {
		t.Errorf("New(nil api) = %v", err)
	}
}

// TestNewWarmsUpAndChecksTheTable: New reads the breaker's state once; a
// table DynamoDB will not serve fails it with an error naming the table,
// a sick one does not (the fault goes to the breaker's OnStoreError).
func TestNewWarmsUpAndChecksTheTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		fails bool
	}{
		{"healthy", nil, false},
		{"missing table", apiError(400, &types.ResourceNotFoundException{Message: new(string)}), true},
		{"access denied", apiError(400, &smithy.GenericAPIError{Code: "AccessDeniedException"}), true},
		{"throttled", apiError(400, &types.ProvisionedThroughputExceededException{}), false},
		{"server error", apiError(500, &types.InternalServerError{}), false},
		{"no answer", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &tableAPI{err: tc.err}
			var faults []string
			cfg := fleet.Config{Breaker: breaker.Settings{OnStoreError: func(op string, err error) { faults = append(faults, op) }}}
			exec, err := fleet.New(context.Background(), api, "orders-table", "payments", cfg)
			if api.reads != 1 {
				t.Errorf("%d reads of the table, want the one warm-up read", api.reads)
			}
			if tc.fails {
				if err == nil || exec != nil || !strings.Contains(err.Error(), `"orders-table"`) || !errors.Is(err, tc.err) {
					t.Fatalf("New = %v, %v; want an error naming the table and wrapping DynamoDB's", exec, err)
				}
				return
			}
			if err != nil || exec == nil {
				t.Fatalf("New = %v, %v; want an Executor", exec, err)
			}
			if want := tc.err != nil; want != (len(faults) == 1 && faults[0] == "load") {
				t.Errorf("OnStoreError saw %q; want one load fault: %v", faults, want)
			}
		})
	}
}

// stack builds New's Executor over in-memory stores.
func stack(t *testing.T, budgets *local.BudgetStore, breakers *local.BreakerStore, cfg fleet.Config) *retry.Executor {
	t.Helper()
	exec, err := fleet.NewWithStores(budgets, breakers, "payments", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return exec
}

var unavailable = &retry.StatusError{StatusCode: http.StatusServiceUnavailable, RetryAfter: time.Millisecond}

func failing(ctx context.Context, _ int) error { return unavailable }

// TestLocalRatioInFrontOfTheGlobalOne: with no traffic, each environment
// gets its local floor (1) a window, whatever the fleet's floor allows; the
// fleet gets its floor, whatever the environments' floors add up to.
func TestLocalRatioInFrontOfTheGlobalOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		budgets := local.NewBudgetStore()
		cfg := fleet.Config{Floor: 2, NoBreaker: true, Retry: retry.Config{MaxAttempts: 3}}
		var envs []*retry.Executor
		for range 3 {
			envs = append(envs, stack(t, budgets, local.NewBreakerStore(), cfg))
		}
		var exhausted []string
		for _, e := range envs {
			err := e.Do(ctx, failing)
			var gu *retry.GiveUpError
			var ex *budget.ExhaustedError
			if !errors.As(err, &gu) || gu.Reason != retry.BudgetExhausted || !errors.As(err, &ex) {
				t.Fatalf("Do = %v; want a budget refusal", err)
			}
			exhausted = append(exhausted, ex.Budget)
		}
		// Environment 1: its local floor's retry (from the fleet's floor),
		// then local-ratio refuses; 2: the same; 3: the fleet's floor (2)
		// is spent: the global layer refuses its first retry.
		want := []string{"local-ratio", "local-ratio", "global:payments"}
		for i := range want {
			if exhausted[i] != want[i] {
				t.Errorf("refused by %q, want %q", exhausted, want)
				break
			}
		}
	})
}

// TestFlushReportsWithTheExecutorsClock: exec.Flush is the one flush; it
// deposits the environment's requests once its contact is due, by the
// Executor's clock (here synctest's).
func TestFlushReportsWithTheExecutorsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		budgets := local.NewBudgetStore()
		exec := stack(t, budgets, local.NewBreakerStore(), fleet.Config{NoBreaker: true, Retry: retry.Config{MaxAttempts: 2}})
		for range 50 {
			_ = exec.Do(ctx, func(context.Context, int) error { return nil })
		}
		_ = exec.Do(ctx, failing) // one retry: engages the fleet budget (one write)
		writes := budgets.Stats().Writes
		if err := exec.Flush(ctx); err != nil || budgets.Stats().Writes != writes {
			t.Fatalf("Flush before the contact is due: %v, %d writes; want none", err, budgets.Stats().Writes-writes)
		}
		time.Sleep(4 * time.Second) // past the next contact (2.5 s ± 50%)
		_ = exec.Do(ctx, func(context.Context, int) error { return nil })
		if err := exec.Flush(ctx); err != nil || budgets.Stats().Writes != writes+1 {
			t.Fatalf("Flush after the contact is due: %v, %d writes; want the one deposit", err, budgets.Stats().Writes-writes)
		}
	})
}

// TestBreakerIsSharedThroughTheTable: a breaker opened by one environment
// rejects the calls of another that reads the table.
func TestBreakerIsSharedThroughTheTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		budgets, breakers := local.NewBudgetStore(), local.NewBreakerStore()
		cfg := fleet.Config{Retry: retry.Config{MaxAttempts: 1}}
		a, b := stack(t, budgets, breakers, cfg), stack(t, budgets, breakers, cfg)
		if err := breakers.SetOverride(ctx, "payments", breaker.ForcedOpen, time.Time{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute) // past any cached state
		for _, e := range []*retry.Executor{a, b} {
			err := e.Do(ctx, func(context.Context, int) error { return nil })
			var gu *retry.GiveUpError
			if !errors.As(err, &gu) || gu.Reason != retry.BreakerOpen || !errors.Is(err, breaker.ErrOpen) {
				t.Errorf("Do = %v; want the fleet's forced-open breaker", err)
			}
		}
		noBreaker := stack(t, budgets, breakers, fleet.Config{NoBreaker: true})
		if err := noBreaker.Do(ctx, func(context.Context, int) error { return nil }); err != nil {
			t.Errorf("NoBreaker: Do = %v; want no breaker at all", err)
		}
	})
}
