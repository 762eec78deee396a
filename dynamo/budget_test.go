package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/budget"
)

func newFakeBudgetStore(t *testing.T, f *fakeAPI) *BudgetStore {
	t.Helper()
	s, err := NewBudgetStore(f, "herdguard", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	testWindow = time.UnixMilli(1_700_000_000_000)
	testKey    = budget.Key{Name: "payments", Shard: 1, Window: testWindow}
	testPK     = "b#payments#1#1700000000000"
)

func take(n int64) budget.Update {
	return budget.Update{Floor: 3, Take: n, Expires: testWindow.Add(time.Minute)}
}

func TestNewBudgetStoreValidates(t *testing.T) {
	if _, err := NewBudgetStore(nil, "herdguard", StoreOptions{}); err == nil || !strings.Contains(err.Error(), "api is nil") {
		t.Errorf("NewBudgetStore(nil api) error = %v", err)
	}
	if _, err := NewBudgetStore(&fakeAPI{}, "x", StoreOptions{}); err == nil || !strings.Contains(err.Error(), "table name") {
		t.Errorf("NewBudgetStore(table x) error = %v", err)
	}
}

func TestBudgetApplyRequest(t *testing.T) {
	var in *dynamodb.UpdateItemInput
	f := &fakeAPI{updateItem: func(i *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		in = i
		return &dynamodb.UpdateItemOutput{Attributes: attrs{"pk": sAV(testPK), "allowance": nAV("2"), "expires": nAV("1700000060")}}, nil
	}}
	s := newFakeBudgetStore(t, f)
	got, err := s.Apply(t.Context(), testKey, take(1))
	if err != nil || got != 2 {
		t.Fatalf("Apply = %d, %v; want 2, <nil>", got, err)
	}
	if aws.ToString(in.TableName) != "herdguard" {
		t.Errorf("TableName = %q", aws.ToString(in.TableName))
	}
	if pk := in.Key["pk"].(*types.AttributeValueMemberS).Value; pk != testPK || len(in.Key) != 1 {
		t.Errorf("Key = %v, want only pk %s", in.Key, testPK)
	}
	if in.ReturnValues != types.ReturnValueAllNew || in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
		t.Errorf("ReturnValues = %s, on failure %s; want ALL_NEW and ALL_OLD", in.ReturnValues, in.ReturnValuesOnConditionCheckFailure)
	}
	if in.ConditionExpression == nil || in.UpdateExpression == nil {
		t.Errorf("update %v, condition %v: want both", in.UpdateExpression, in.ConditionExpression)
	}
	if st := s.Stats(); st != (Stats{Writes: 1}) {
		t.Errorf("Stats = %+v, want one write", st)
	}
	if s.Stats().Reads != 0 || s.Stats().Writes != 1 {
		t.Errorf("Reads, Writes = %d, %d; want 0, 1", s.Stats().Reads, s.Stats().Writes)
	}
}

func TestBudgetApplyRefusal(t *testing.T) {
	for _, c := range []struct {
		name string
		item attrs
		want int64
	}{
		{"existing item", attrs{"pk": sAV(testPK), "allowance": nAV("1")}, 1},
		{"no item (floor too low)", nil, 3},
		{"item without allowance", attrs{"pk": sAV(testPK), "expires": nAV("1")}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(c.item) }}
			s := newFakeBudgetStore(t, f)
			got, err := s.Apply(t.Context(), testKey, take(4))
			if !errors.Is(err, budget.ErrInsufficient) || got != c.want {
				t.Fatalf("Apply = %d, %v; want %d, ErrInsufficient", got, err, c.want)
			}
			if !strings.Contains(err.Error(), testKey.String()) {
				t.Errorf("error %q does not name the key", err)
			}
			if st := s.Stats(); st != (Stats{Writes: 1, ConditionalFailures: 1}) {
				t.Errorf("Stats = %+v, want one refused write", st)
			}
		})
	}
}

func TestBudgetApplyMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		out  attrs
	}{
		{"refusal carrying a string allowance", ccf(attrs{"pk": sAV(testPK), "allowance": sAV("9")}), nil},
		{"refusal carrying a negative allowance", ccf(attrs{"pk": sAV(testPK), "allowance": nAV("-1")}), nil},
		{"refusal carrying a huge allowance", ccf(attrs{"pk": sAV(testPK), "allowance": nAV("1e30")}), nil},
		{"answer with a fraction", nil, attrs{"pk": sAV(testPK), "allowance": nAV("1.5")}},
		{"answer without allowance", nil, attrs{"pk": sAV(testPK)}},
		{"answer without attributes", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				if c.err != nil {
					return nil, c.err
				}
				return &dynamodb.UpdateItemOutput{Attributes: c.out}, nil
			}}
			s := newFakeBudgetStore(t, f)
			got, err := s.Apply(t.Context(), testKey, take(1))
			var m *MalformedItemError
			if !errors.As(err, &m) || errors.Is(err, budget.ErrInsufficient) || got != 0 {
				t.Fatalf("Apply = %d, %v; want 0 and a *MalformedItemError that is not ErrInsufficient", got, err)
			}
			if m.Key != testPK || m.Attribute != "allowance" {
				t.Errorf("MalformedItemError = %+v", m)
			}
			if st := s.Stats(); st.Malformed != 1 {
				t.Errorf("Stats = %+v, want Malformed 1", st)
			}
		})
	}

	// A deposit can only be refused for a malformed item; if DynamoDB
	// refused one over a well-formed item, that is not a refusal either.
	f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, ccf(attrs{"pk": sAV(testPK), "allowance": nAV("4")})
	}}
	s := newFakeBudgetStore(t, f)
	got, err := s.Apply(t.Context(), testKey, budget.Update{Deposit: 2, Expires: testWindow.Add(time.Minute)})
	if err == nil || errors.Is(err, budget.ErrInsufficient) {
		t.Fatalf("refused deposit = %d, %v; want an error that is not ErrInsufficient", got, err)
	}
}

func TestBudgetApplyFaults(t *testing.T) {
	deadline := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	for _, c := range []struct {
		name string
		ctx  func(t *testing.T) (context.Context, context.CancelFunc)
		err  func(ctx context.Context) error
		is   error
	}{
		{"throttled", nil, func(context.Context) error { return throttled() }, nil},
		{"deadline", func(t *testing.T) (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), time.Millisecond)
		}, deadline, context.DeadlineExceeded},
		{"network", nil, func(context.Context) error { return errors.New("connection reset by peer") }, nil},
	} {
		// In a synctest bubble: the 1 ms deadline passes only once the
		// request is in flight (the fake API waits for it), never before
		// Apply has sent it, however slow the machine.
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := t.Context(), context.CancelFunc(func() {})
				if c.ctx != nil {
					ctx, cancel = c.ctx(t)
				}
				defer cancel()
				var sent error
				f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					sent = c.err(ctx)
					return nil, sent
				}}
				s := newFakeBudgetStore(t, f)
				got, err := s.Apply(ctx, testKey, take(1))
				if err == nil || errors.Is(err, budget.ErrInsufficient) || got != 0 {
					t.Fatalf("Apply = %d, %v; want 0 and an error that is not ErrInsufficient", got, err)
				}
				if !errors.Is(err, sent) || (c.is != nil && !errors.Is(err, c.is)) {
					t.Errorf("Apply error %v does not wrap the cause %v", err, sent)
				}
				want := Stats{Writes: 1, Errors: 1}
				if c.name == "throttled" {
					want.Throttled = 1
				}
				if st := s.Stats(); st != want {
					t.Errorf("Stats = %+v, want one failed write", st)
				}
			})
		})
	}
}

func TestBudgetApplyCanceledSendsNothing(t *testing.T) {
	f := &fakeAPI{}
	s := newFakeBudgetStore(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Apply(ctx, testKey, take(1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a canceled context: %v", err)
	}
	if _, err := s.Apply(t.Context(), budget.Key{Name: "bad#name", Window: testWindow}, take(1)); err == nil {
		t.Fatal("Apply with an invalid name: no error")
	}
	if _, err := s.Apply(t.Context(), testKey, budget.Update{Take: -1, Expires: testWindow}); err == nil {
		t.Fatal("Apply with a negative take: no error")
	}
	if n := len(f.calls()); n != 0 {
		t.Fatalf("%d requests sent, want none", n)
	}
	if st := s.Stats(); st != (Stats{}) {
		t.Errorf("Stats = %+v, want zero", st)
	}
}
