package dynamo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
)

// Every way DynamoDB refuses a request for lack of capacity is an error
// satisfying errors.Is(err, budget.ErrThrottled), from every request of
// both stores, with the SDK's error still reachable; other faults are not.
func TestThrottlingIsErrThrottled(t *testing.T) {
	wrap := func(op string, err error) error {
		return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: op, Err: err}
	}
	msg := aws.String("Rate of requests exceeds the allowed throughput")
	for _, c := range []struct {
		name      string
		err       error
		throttled bool
	}{
		{"ProvisionedThroughputExceededException", &types.ProvisionedThroughputExceededException{Message: msg}, true},
		{"ThrottlingException", &types.ThrottlingException{Message: msg}, true},
		{"RequestLimitExceeded", &types.RequestLimitExceeded{Message: msg}, true},
		// An error the SDK could not map to a modelled type keeps its code.
		{"generic ThrottlingException", &smithy.GenericAPIError{Code: "ThrottlingException", Message: *msg}, true},
		{"InternalServerError", &types.InternalServerError{Message: aws.String("boom")}, false},
		{"ValidationException", &smithy.GenericAPIError{Code: "ValidationException", Message: "Item size has exceeded the maximum allowed size"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := &fakeAPI{
				batchGetItem: func(*dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
					return nil, wrap("BatchGetItem", c.err)
				},
				updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					return nil, wrap("UpdateItem", c.err)
				},
			}
			bs, err := NewBudgetStore(api, "herdguard", StoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var seen []error
			cs, err := NewBreakerStore(api, "herdguard", StoreOptions{OnRequest: func(ri RequestInfo) { seen = append(seen, ri.Err) }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			now := time.UnixMilli(1_700_000_000_000)
			_, errApply := bs.Apply(ctx, budget.Key{Name: "p", Window: now}, budget.Update{Take: 1, Expires: now.Add(time.Minute)})
			_, errLoad := cs.Load(ctx, "p")
			_, errReport := cs.Report(ctx, "p", breaker.Report{Bucket: now.Unix(), Requests: 1, Failures: 1, Samples: 1})
			_, errTransition := cs.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
			_, errProbe := cs.AcquireProbe(ctx, "p", 1, 1, now, now.Add(time.Second))
			errOverride := cs.SetOverride(ctx, "p", breaker.ForcedOpen, time.Time{})
			for op, err := range map[string]error{"Apply": errApply, "Load": errLoad, "Report": errReport,
				"Transition": errTransition, "AcquireProbe": errProbe, "SetOverride": errOverride} {
				if got := errors.Is(err, budget.ErrThrottled) && errors.Is(err, breaker.ErrThrottled); got != c.throttled {
					t.Errorf("%s: errors.Is(%v, budget.ErrThrottled and breaker.ErrThrottled) = %v, want %v", op, err, got, c.throttled)
				}
				if !errors.Is(err, c.err) {
					t.Errorf("%s: %v does not wrap the SDK's error", op, err)
				}
				if op != "Apply" && !errors.Is(err, breaker.ErrStore) {
					t.Errorf("%s: %v is not a breaker.ErrStore", op, err)
				}
			}
			for _, err := range seen {
				if got := errors.Is(err, budget.ErrThrottled); got != c.throttled {
					t.Errorf("OnRequest saw %v: errors.Is(err, budget.ErrThrottled) = %v, want %v", err, got, c.throttled)
				}
			}
			if len(seen) != 5 {
				t.Errorf("OnRequest saw %d requests, want 5", len(seen))
			}
		})
	}
}

// A BatchGetItem that leaves a key unprocessed (DynamoDB's answer when one
// of the items is throttled) is a throttle too.
func TestLoadUnprocessedIsErrThrottled(t *testing.T) {
	api := &fakeAPI{batchGetItem: func(*dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
		return &dynamodb.BatchGetItemOutput{
			UnprocessedKeys: map[string]types.KeysAndAttributes{"herdguard": {Keys: []map[string]types.AttributeValue{{"pk": sAV("c#p")}}}},
		}, nil
	}}
	cs, err := NewBreakerStore(api, "herdguard", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.Load(context.Background(), "p")
	if !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("Load with an unprocessed key: %v; want ErrThrottled and ErrStore", err)
	}
}

// Every request asks for its consumed capacity, and Stats adds up what
// DynamoDB reports.
func TestStatsAddConsumedCapacity(t *testing.T) {
	units := func(u float64) *types.ConsumedCapacity {
		return &types.ConsumedCapacity{TableName: aws.String("herdguard"), CapacityUnits: aws.Float64(u)}
	}
	var asked []types.ReturnConsumedCapacity
	api := &fakeAPI{
		batchGetItem: func(in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			asked = append(asked, in.ReturnConsumedCapacity)
			return &dynamodb.BatchGetItemOutput{ConsumedCapacity: []types.ConsumedCapacity{*units(1)}}, nil
		},
		getItem: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			asked = append(asked, in.ReturnConsumedCapacity)
			return &dynamodb.GetItemOutput{ConsumedCapacity: units(0.5)}, nil
		},
		updateItem: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			asked = append(asked, in.ReturnConsumedCapacity)
			switch pk := in.Key["pk"].(*types.AttributeValueMemberS).Value; {
			case pk == "c#p":
				return &dynamodb.UpdateItemOutput{Attributes: attrs{"pk": sAV("c#p"), "state": sAV("open"), "epoch": nAV("1")}, ConsumedCapacity: units(1)}, nil
			case pk == "b#p#0#1700000000000":
				return &dynamodb.UpdateItemOutput{Attributes: attrs{"allowance": nAV("2")}, ConsumedCapacity: units(1)}, nil
			}
			return &dynamodb.UpdateItemOutput{ConsumedCapacity: units(1)}, nil
		},
	}
	bs, err := NewBudgetStore(api, "herdguard", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := NewBreakerStore(api, "herdguard", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	if _, err := bs.Apply(ctx, budget.Key{Name: "p", Window: now}, budget.Update{Floor: 3, Take: 1, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Load(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Report(ctx, "p", breaker.Report{Bucket: now.Unix(), Requests: 1, Failures: 1, Samples: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Transition(ctx, "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AcquireProbe(ctx, "p", 1, 1, now, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := cs.SetOverride(ctx, "p", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for i, a := range asked {
		if a != types.ReturnConsumedCapacityTotal {
			t.Errorf("request %d asked for ReturnConsumedCapacity %q, want TOTAL", i, a)
		}
	}
	if len(asked) != 6 {
		t.Errorf("%d requests, want 6", len(asked))
	}
	if st := bs.Stats(); st.WriteUnits != 1 || st.ReadUnits != 0 {
		t.Errorf("budget store %+v, want 1 write unit", st)
	}
	// Load 1, Report 1, Transition 1, AcquireProbe 1, SetOverride 1.
	if st := cs.Stats(); st.WriteUnits != 4 || st.ReadUnits != 1 {
		t.Errorf("breaker store %+v, want 4 write units and 1 read unit", st)
	}
}
