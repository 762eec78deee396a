package dynamo

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
)

func newFakeBreakerStore(t *testing.T, f *fakeAPI, rnd func() float64) *BreakerStore {
	t.Helper()
	s, err := NewBreakerStore(f, "herdguard", BreakerStoreConfig{Rand: rnd})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantStoreError checks that err is a store fault wrapping cause (if not
// nil), and none of the domain answers.
func wantStoreError(t *testing.T, what string, err error, cause any) {
	t.Helper()
	if !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("%s: error %v, want one satisfying errors.Is(err, breaker.ErrStore)", what, err)
	}
	if errors.Is(err, breaker.ErrConflict) || errors.Is(err, breaker.ErrProbeDenied) {
		t.Fatalf("%s: error %v is also a domain answer", what, err)
	}
	switch c := cause.(type) {
	case nil:
	case error:
		if !errors.Is(err, c) {
			t.Fatalf("%s: error %v does not wrap %v", what, err, c)
		}
	default:
		if !errors.As(err, cause) {
			t.Fatalf("%s: error %v does not wrap a %T", what, err, cause)
		}
	}
}

func TestNewBreakerStoreValidates(t *testing.T) {
	if _, err := NewBreakerStore(nil, "herdguard", BreakerStoreConfig{}); err == nil || !strings.Contains(err.Error(), "api is nil") {
		t.Errorf("NewBreakerStore(nil api) error = %v", err)
	}
	if _, err := NewBreakerStore(&fakeAPI{}, "bad table", BreakerStoreConfig{}); err == nil || !strings.Contains(err.Error(), "table name") {
		t.Errorf("NewBreakerStore(bad table) error = %v", err)
	}
}

func TestBreakerLoad(t *testing.T) {
	var in *dynamodb.BatchGetItemInput
	f := &fakeAPI{batchGetItem: func(i *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
		in = i
		// DynamoDB returns the items in any order.
		return &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{"herdguard": {
			{"pk": sAV("c#payments#override"), "override": sAV("force-open"), "until": nAV("1700003600000")},
			{"pk": sAV("c#payments"), "state": sAV("open"), "epoch": nAV("4"), "open_until": nAV("1700000030000"), "reopens": nAV("2")},
		}}}, nil
	}}
	s := newFakeBreakerStore(t, f, nil)
	snap, err := s.Load(t.Context(), "payments")
	if err != nil {
		t.Fatal(err)
	}
	want := breaker.Snapshot{State: breaker.Open, Epoch: 4, OpenUntil: time.UnixMilli(1_700_000_030_000), Reopens: 2, Override: breaker.ForcedOpen, OverrideUntil: time.UnixMilli(1_700_003_600_000)}
	if snap.State != want.State || snap.Epoch != want.Epoch || !snap.OpenUntil.Equal(want.OpenUntil) || snap.Reopens != want.Reopens ||
		snap.Override != want.Override || !snap.OverrideUntil.Equal(want.OverrideUntil) {
		t.Fatalf("Load = %+v, want %+v", snap, want)
	}
	ka, ok := in.RequestItems["herdguard"]
	if !ok || len(in.RequestItems) != 1 || len(ka.Keys) != 2 {
		t.Fatalf("BatchGetItem request %+v, want two keys of table herdguard", in.RequestItems)
	}
	if aws.ToBool(ka.ConsistentRead) {
		t.Errorf("Load asks for a strongly consistent read (twice the cost)")
	}
	var keys []string
	for _, k := range ka.Keys {
		keys = append(keys, k["pk"].(*types.AttributeValueMemberS).Value)
	}
	if strings.Join(keys, " ") != "c#payments c#payments#override" {
		t.Errorf("BatchGetItem keys %v", keys)
	}
	if st := s.Stats(); st != (Stats{Reads: 1}) {
		t.Errorf("Stats = %+v, want one read", st)
	}
	if s.Reads() != 1 || s.Writes() != 0 {
		t.Errorf("Reads, Writes = %d, %d; want 1, 0", s.Reads(), s.Writes())
	}
}

func TestBreakerLoadFaults(t *testing.T) {
	state := attrs{"pk": sAV("c#p"), "state": sAV("open"), "epoch": nAV("1")}
	for _, c := range []struct {
		name  string
		out   *dynamodb.BatchGetItemOutput
		err   error
		cause any
	}{
		{"throttled", nil, throttled(), new(*types.ProvisionedThroughputExceededException)},
		{"unprocessed override", &dynamodb.BatchGetItemOutput{
			Responses:       map[string][]map[string]types.AttributeValue{"herdguard": {state}},
			UnprocessedKeys: map[string]types.KeysAndAttributes{"herdguard": {Keys: []map[string]types.AttributeValue{{"pk": sAV("c#p#override")}}}},
		}, nil, nil},
		{"item not asked for", &dynamodb.BatchGetItemOutput{
			Responses: map[string][]map[string]types.AttributeValue{"herdguard": {{"pk": sAV("c#other")}}},
		}, nil, nil},
		{"malformed state", &dynamodb.BatchGetItemOutput{
			Responses: map[string][]map[string]types.AttributeValue{"herdguard": {{"pk": sAV("c#p"), "state": sAV("ajar"), "epoch": nAV("1")}}},
		}, nil, new(*MalformedItemError)},
		{"malformed override", &dynamodb.BatchGetItemOutput{
			Responses: map[string][]map[string]types.AttributeValue{"herdguard": {state, {"pk": sAV("c#p#override"), "override": sAV("force_open")}}},
		}, nil, new(*MalformedItemError)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{batchGetItem: func(*dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) { return c.out, c.err }}
			s := newFakeBreakerStore(t, f, nil)
			snap, err := s.Load(t.Context(), "p")
			wantStoreError(t, "Load", err, c.cause)
			if snap != (breaker.Snapshot{}) {
				t.Errorf("Load returned %+v with its error, want the zero snapshot", snap)
			}
		})
	}
}

func TestBreakerReport(t *testing.T) {
	var in *dynamodb.UpdateItemInput
	f := &fakeAPI{updateItem: func(i *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		in = i
		return &dynamodb.UpdateItemOutput{Attributes: attrs{"successes": nAV("5"), "failures": nAV("8"), "envs": &types.AttributeValueMemberSS{Value: []string{"a", "b"}}}}, nil
	}}
	s := newFakeBreakerStore(t, f, nil)
	w := time.UnixMilli(1_700_000_000_000)
	got, err := s.Report(t.Context(), "payments", w, "a", 1, 2, w.Add(time.Minute))
	if err != nil || got != (breaker.Tally{Successes: 5, Failures: 8, Reporters: 2}) {
		t.Fatalf("Report = %+v, %v", got, err)
	}
	if pk := in.Key["pk"].(*types.AttributeValueMemberS).Value; pk != "c#payments#w#1700000000000" {
		t.Errorf("Report wrote %s", pk)
	}
	if in.ReturnValues != types.ReturnValueAllNew || in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
		t.Errorf("ReturnValues %s / %s", in.ReturnValues, in.ReturnValuesOnConditionCheckFailure)
	}

	for _, c := range []struct {
		name  string
		err   error
		out   attrs
		cause any
	}{
		{"refusal carrying a malformed item", ccf(attrs{"successes": sAV("1")}), nil, new(*MalformedItemError)},
		{"refusal carrying a well-formed item", ccf(attrs{"successes": nAV("1")}), nil, new(*types.ConditionalCheckFailedException)},
		{"answer with negative failures", nil, attrs{"successes": nAV("1"), "failures": nAV("-1")}, new(*MalformedItemError)},
		{"throttled", throttled(), nil, new(*types.ProvisionedThroughputExceededException)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				if c.err != nil {
					return nil, c.err
				}
				return &dynamodb.UpdateItemOutput{Attributes: c.out}, nil
			}}
			s := newFakeBreakerStore(t, f, nil)
			got, err := s.Report(t.Context(), "payments", w, "a", 1, 2, w.Add(time.Minute))
			wantStoreError(t, "Report", err, c.cause)
			if got != (breaker.Tally{}) {
				t.Errorf("Report returned %+v with its error", got)
			}
		})
	}
}

func TestBreakerTransition(t *testing.T) {
	override := attrs{"pk": sAV("c#p#override"), "override": sAV("force-closed")}
	t.Run("success reads the override", func(t *testing.T) {
		var upd *dynamodb.UpdateItemInput
		var get *dynamodb.GetItemInput
		f := &fakeAPI{
			updateItem: func(i *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				upd = i
				return &dynamodb.UpdateItemOutput{Attributes: attrs{"pk": sAV("c#p"), "state": sAV("open"), "epoch": nAV("3"), "reopens": nAV("1")}}, nil
			},
			getItem: func(i *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				get = i
				return &dynamodb.GetItemOutput{Item: override}, nil
			},
		}
		s := newFakeBreakerStore(t, f, nil)
		snap, err := s.Transition(t.Context(), "p", 2, breaker.Snapshot{State: breaker.Open, Epoch: 3, Reopens: 1})
		if err != nil || snap != (breaker.Snapshot{State: breaker.Open, Epoch: 3, Reopens: 1, Override: breaker.ForcedClosed}) {
			t.Fatalf("Transition = %+v, %v", snap, err)
		}
		if upd.ReturnValues != types.ReturnValueAllNew || upd.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
			t.Errorf("ReturnValues %s / %s", upd.ReturnValues, upd.ReturnValuesOnConditionCheckFailure)
		}
		if pk := get.Key["pk"].(*types.AttributeValueMemberS).Value; pk != "c#p#override" || aws.ToBool(get.ConsistentRead) {
			t.Errorf("GetItem %s consistent %v, want the override, eventually consistent", pk, aws.ToBool(get.ConsistentRead))
		}
		if got := f.calls(); len(got) != 2 || got[0].op != "UpdateItem" || got[1].op != "GetItem" {
			t.Errorf("requests %+v, want UpdateItem then GetItem", got)
		}
		if st := s.Stats(); st != (Stats{Reads: 1, Writes: 1}) {
			t.Errorf("Stats = %+v", st)
		}
	})

	for _, c := range []struct {
		name string
		prev uint64
		item attrs
		want breaker.Snapshot
	}{
		{"conflict with the stored state", 2, attrs{"pk": sAV("c#p"), "state": sAV("half-open"), "epoch": nAV("5")}, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 5, Override: breaker.ForcedClosed}},
		{"conflict with a missing item", 2, nil, breaker.Snapshot{Override: breaker.ForcedClosed}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{
				updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(c.item) },
				getItem: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
					return &dynamodb.GetItemOutput{Item: override}, nil
				},
			}
			s := newFakeBreakerStore(t, f, nil)
			snap, err := s.Transition(t.Context(), "p", c.prev, breaker.Snapshot{State: breaker.Open, Epoch: c.prev + 1})
			if !errors.Is(err, breaker.ErrConflict) || errors.Is(err, breaker.ErrStore) || snap != c.want {
				t.Fatalf("Transition = %+v, %v; want %+v and ErrConflict only", snap, err, c.want)
			}
			if st := s.Stats(); st != (Stats{Reads: 1, Writes: 1, ConditionalFailures: 1}) {
				t.Errorf("Stats = %+v", st)
			}
		})
	}

	t.Run("refusal finding next stored is a success", func(t *testing.T) {
		// An attempt applied the update but its answer was lost; the SDK's
		// retry is refused because the epoch moved, to exactly next.
		until := time.UnixMilli(1_700_000_030_000)
		f := &fakeAPI{
			updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return nil, ccf(attrs{"state": sAV("open"), "epoch": nAV("3"), "open_until": nAV("1700000030000"), "reopens": nAV("2")})
			},
			getItem: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return &dynamodb.GetItemOutput{}, nil },
		}
		s := newFakeBreakerStore(t, f, nil)
		next := breaker.Snapshot{State: breaker.Open, Epoch: 3, OpenUntil: until.Add(700 * time.Microsecond), Reopens: 2}
		snap, err := s.Transition(t.Context(), "p", 2, next)
		if err != nil || snap.State != breaker.Open || snap.Epoch != 3 || !snap.OpenUntil.Equal(until) || snap.Reopens != 2 {
			t.Fatalf("Transition = %+v, %v; want next and no error", snap, err)
		}
		// Anything else stored at that epoch is a conflict.
		for _, other := range []breaker.Snapshot{
			{State: breaker.HalfOpen, Epoch: 3, OpenUntil: until, Reopens: 2},
			{State: breaker.Open, Epoch: 3, OpenUntil: until.Add(time.Millisecond), Reopens: 2},
			{State: breaker.Open, Epoch: 3, OpenUntil: until, Reopens: 1},
			{State: breaker.Open, Epoch: 3, Reopens: 2},
		} {
			if _, err := s.Transition(t.Context(), "p", 2, other); !errors.Is(err, breaker.ErrConflict) {
				t.Errorf("Transition to %+v over another state at epoch 3 = %v, want ErrConflict", other, err)
			}
		}
	})

	for _, c := range []struct {
		name    string
		update  func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
		get     func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
		cause   any
		wantGet bool
	}{
		{"throttled", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, throttled() }, nil,
			new(*types.ProvisionedThroughputExceededException), false},
		{"refusal carrying a malformed epoch", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(attrs{"state": sAV("open"), "epoch": sAV("2")})
		}, nil, new(*MalformedItemError), false},
		{"refusal although the epoch matches", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(attrs{"state": sAV("open"), "epoch": nAV("2")})
		}, nil, new(*types.ConditionalCheckFailedException), false},
		{"answer malformed", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: attrs{"state": sAV("open")}}, nil
		}, nil, new(*MalformedItemError), false},
		{"override read fails", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: attrs{"state": sAV("open"), "epoch": nAV("3")}}, nil
		}, func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return nil, throttled() },
			new(*types.ProvisionedThroughputExceededException), true},
		{"override malformed", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: attrs{"state": sAV("open"), "epoch": nAV("3")}}, nil
		}, func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: attrs{"override": nAV("1")}}, nil
		}, new(*MalformedItemError), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{updateItem: c.update, getItem: c.get}
			s := newFakeBreakerStore(t, f, nil)
			snap, err := s.Transition(t.Context(), "p", 2, breaker.Snapshot{State: breaker.Open, Epoch: 3})
			wantStoreError(t, "Transition", err, c.cause)
			if snap != (breaker.Snapshot{}) {
				t.Errorf("Transition returned %+v with its error", snap)
			}
			if got := len(f.calls()); got != map[bool]int{false: 1, true: 2}[c.wantGet] {
				t.Errorf("%d requests, want %d", got, map[bool]int{false: 1, true: 2}[c.wantGet])
			}
		})
	}
}

func TestBreakerAcquireProbeOrder(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		rnd   float64
		limit int
		want  string // slots tried when all are held
	}{
		{0, 4, "0 1 2 3"},
		{0.5, 4, "2 3 0 1"},
		{0.99, 4, "3 0 1 2"},
		{1, 4, "0 1 2 3"},                // out of range: clamped
		{-0.5, 4, "0 1 2 3"},             // likewise
		{math.Inf(1), 3, "0 1 2"},        // likewise
		{0.7, 1, "0"},                    // one slot
		{0.3, MaxProbeSlots, "19 20 21"}, // first three of 64
	} {
		f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, ccf(nil) }}
		s := newFakeBreakerStore(t, f, func() float64 { return c.rnd })
		slot, err := s.AcquireProbe(t.Context(), "p", 1, c.limit, now, now.Add(time.Second))
		if !errors.Is(err, breaker.ErrProbeDenied) || errors.Is(err, breaker.ErrStore) || slot != -1 {
			t.Fatalf("AcquireProbe with every slot held = %d, %v; want ErrProbeDenied", slot, err)
		}
		var tried []string
		for _, r := range f.calls() {
			tried = append(tried, strings.TrimPrefix(r.key, "c#p#p#"))
		}
		if len(tried) != c.limit {
			t.Errorf("rand %v limit %d: tried %d slots, want all %d", c.rnd, c.limit, len(tried), c.limit)
		}
		if got := strings.Join(tried, " "); !strings.HasPrefix(got, c.want) {
			t.Errorf("rand %v limit %d: tried slots %s, want them to start with %s", c.rnd, c.limit, got, c.want)
		}
		if st := s.Stats(); st != (Stats{Writes: int64(c.limit), ConditionalFailures: int64(c.limit)}) {
			t.Errorf("Stats = %+v", st)
		}
	}
}

func TestBreakerAcquireProbe(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	t.Run("first free slot wins", func(t *testing.T) {
		n := 0
		f := &fakeAPI{updateItem: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			n++
			if n < 3 {
				return nil, ccf(nil)
			}
			return &dynamodb.UpdateItemOutput{}, nil
		}}
		s := newFakeBreakerStore(t, f, func() float64 { return 0.25 })
		slot, err := s.AcquireProbe(t.Context(), "p", 1, 4, now, now.Add(time.Second))
		if err != nil || slot != 3 {
			t.Fatalf("AcquireProbe = %d, %v; want slot 3 (tried 1, 2, 3)", slot, err)
		}
	})
	t.Run("fault stops the search", func(t *testing.T) {
		f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, throttled() }}
		s := newFakeBreakerStore(t, f, nil)
		slot, err := s.AcquireProbe(t.Context(), "p", 1, 4, now, now.Add(time.Second))
		wantStoreError(t, "AcquireProbe", err, new(*types.ProvisionedThroughputExceededException))
		if slot != -1 || len(f.calls()) != 1 {
			t.Fatalf("AcquireProbe = %d after %d requests; want -1 after 1", slot, len(f.calls()))
		}
	})
	t.Run("deadline stops the search", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			cancel() // the caller's deadline passes during the first request
			return nil, ccf(nil)
		}}
		s := newFakeBreakerStore(t, f, nil)
		_, err := s.AcquireProbe(ctx, "p", 1, 4, now, now.Add(time.Second))
		wantStoreError(t, "AcquireProbe", err, context.Canceled)
		if len(f.calls()) != 1 {
			t.Fatalf("%d requests, want 1", len(f.calls()))
		}
	})
	t.Run("limit 0 admits no probe and costs nothing", func(t *testing.T) {
		f := &fakeAPI{}
		s := newFakeBreakerStore(t, f, nil)
		if _, err := s.AcquireProbe(t.Context(), "p", 1, 0, now, now.Add(time.Second)); !errors.Is(err, breaker.ErrProbeDenied) {
			t.Fatalf("AcquireProbe(limit 0) = %v, want ErrProbeDenied", err)
		}
		if len(f.calls()) != 0 {
			t.Fatalf("%d requests, want none", len(f.calls()))
		}
	})
}

func TestBreakerSetOverride(t *testing.T) {
	var in *dynamodb.UpdateItemInput
	f := &fakeAPI{updateItem: func(i *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		in = i
		return &dynamodb.UpdateItemOutput{}, nil
	}}
	s := newFakeBreakerStore(t, f, nil)
	if err := s.SetOverride(t.Context(), "p", breaker.Disabled, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if aws.ToString(in.TableName) != "herdguard" || in.ConditionExpression != nil || in.ReturnValues != "" {
		t.Errorf("UpdateItem table %q condition %v return values %q", aws.ToString(in.TableName), in.ConditionExpression, in.ReturnValues)
	}
	if got := f.calls(); len(got) != 1 || got[0] != (fakeRequest{op: "UpdateItem", key: "c#p#override"}) {
		t.Errorf("requests %+v, want one UpdateItem of c#p#override", got)
	}
	_, want, err := overrideExpression("p", breaker.Disabled, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(in.UpdateExpression) != aws.ToString(want.Update()) || len(in.ExpressionAttributeNames) != len(want.Names()) || len(in.ExpressionAttributeValues) != len(want.Values()) {
		t.Errorf("UpdateItem %q %v %v, want the override expression %q", aws.ToString(in.UpdateExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, aws.ToString(want.Update()))
	}

	f = &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, throttled() }}
	s = newFakeBreakerStore(t, f, nil)
	err = s.SetOverride(t.Context(), "p", breaker.ForcedOpen, time.Time{})
	wantStoreError(t, "SetOverride", err, new(*types.ProvisionedThroughputExceededException))
	if st := s.Stats(); st != (Stats{Writes: 1, Errors: 1, Throttled: 1}) {
		t.Errorf("Stats = %+v", st)
	}
}

// TestBreakerInvalidArgumentsSendNothing checks that every operation
// rejects bad arguments with a store error before sending a request.
func TestBreakerInvalidArgumentsSendNothing(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	f := &fakeAPI{}
	s := newFakeBreakerStore(t, f, nil)
	ctx := t.Context()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for what, err := range map[string]error{
		"Load bad name":                 func() error { _, err := s.Load(ctx, "a b"); return err }(),
		"Load canceled":                 func() error { _, err := s.Load(canceled, "p"); return err }(),
		"Report empty env":              func() error { _, err := s.Report(ctx, "p", now, "", 1, 1, now.Add(time.Minute)); return err }(),
		"Report negative":               func() error { _, err := s.Report(ctx, "p", now, "e", -1, 1, now.Add(time.Minute)); return err }(),
		"Report canceled":               func() error { _, err := s.Report(canceled, "p", now, "e", 1, 1, now.Add(time.Minute)); return err }(),
		"Transition epoch skip":         func() error { _, err := s.Transition(ctx, "p", 1, breaker.Snapshot{Epoch: 3}); return err }(),
		"Transition canceled":           func() error { _, err := s.Transition(canceled, "p", 1, breaker.Snapshot{Epoch: 2}); return err }(),
		"AcquireProbe lease before now": func() error { _, err := s.AcquireProbe(ctx, "p", 1, 1, now, now); return err }(),
		"AcquireProbe too many": func() error {
			_, err := s.AcquireProbe(ctx, "p", 1, MaxProbeSlots+1, now, now.Add(time.Second))
			return err
		}(),
		"AcquireProbe canceled": func() error { _, err := s.AcquireProbe(canceled, "p", 1, 1, now, now.Add(time.Second)); return err }(),
		"SetOverride unknown":   s.SetOverride(ctx, "p", breaker.Override(-1), time.Time{}),
		"SetOverride canceled":  s.SetOverride(canceled, "p", breaker.ForcedOpen, time.Time{}),
	} {
		wantStoreError(t, what, err, nil)
	}
	if n := len(f.calls()); n != 0 {
		t.Fatalf("%d requests sent, want none", n)
	}
	if st := s.Stats(); st != (Stats{}) {
		t.Errorf("Stats = %+v, want zero", st)
	}
}

// TestNilAnswersDoNotPanic checks the stores against a client that answers
// with neither an output nor an error (the SDK never does; a wrapper
// might).
func TestNilAnswersDoNotPanic(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	f := &fakeAPI{
		batchGetItem: func(*dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) { return nil, nil },
		getItem:      func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return nil, nil },
		updateItem:   func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, nil },
	}
	s := newFakeBreakerStore(t, f, nil)
	_, err := s.Load(t.Context(), "p")
	wantStoreError(t, "Load", err, errNoOutput)
	_, err = s.Report(t.Context(), "p", now, "e", 1, 1, now.Add(time.Minute))
	wantStoreError(t, "Report", err, errNoOutput)
	_, err = s.Transition(t.Context(), "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
	wantStoreError(t, "Transition", err, errNoOutput)
	// AcquireProbe and SetOverride do not read their answer.
	if _, err := s.AcquireProbe(t.Context(), "p", 1, 1, now, now.Add(time.Second)); err != nil {
		t.Errorf("AcquireProbe = %v", err)
	}
	if err := s.SetOverride(t.Context(), "p", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Errorf("SetOverride = %v", err)
	}
	b := newFakeBudgetStore(t, f)
	if _, err := b.Apply(t.Context(), testKey, take(1)); !errors.Is(err, errNoOutput) {
		t.Errorf("Apply = %v, want errNoOutput", err)
	}
	// A transition whose override read answers nothing.
	f.updateItem = func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{Attributes: attrs{"state": sAV("open"), "epoch": nAV("1")}}, nil
	}
	_, err = s.Transition(t.Context(), "p", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
	wantStoreError(t, "Transition", err, errNoOutput)
}
