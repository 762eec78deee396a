package dynamo

import (
	"context"
	"errors"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
)

func newFakeBreakerStore(t *testing.T, f *fakeAPI, rnd func() float64) *BreakerStore {
	t.Helper()
	s, err := NewBreakerStore(f, "herdguard", StoreOptions{Rand: rnd})
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
	var ce *herdguard.ConfigError
	if _, err := NewBreakerStore(nil, "herdguard", StoreOptions{}); !errors.As(err, &ce) || ce.Field != "dynamo.NewBreakerStore api" {
		t.Errorf("NewBreakerStore(nil api) error = %v", err)
	}
	if _, err := NewBreakerStore(&fakeAPI{}, "bad table", StoreOptions{}); !errors.As(err, &ce) || ce.Field != "dynamo.NewBreakerStore table" {
		t.Errorf("NewBreakerStore(bad table) error = %v", err)
	}
	if _, err := NewBudgetStore(&fakeAPI{}, "ab", StoreOptions{}); !errors.As(err, &ce) || ce.Field != "dynamo.NewBudgetStore table" {
		t.Errorf("NewBudgetStore(short table) error = %v", err)
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
	if s.Stats().Reads != 1 || s.Stats().Writes != 0 {
		t.Errorf("Reads, Writes = %d, %d; want 1, 0", s.Stats().Reads, s.Stats().Writes)
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

// stateItem returns a state item at epoch with slot 4 holding bucket
// held (none if 0) and the given counts.
func stateItem(epoch string, held int64, counts ...string) attrs {
	a := attrs{"pk": sAV("c#payments"), "state": sAV("closed"), "epoch": nAV(epoch)}
	if held != 0 {
		a["b4"] = nAV(strconv.FormatInt(held, 10))
		for i, n := range []string{"r4", "s4", "f4", "n4"} {
			a[n] = nAV(counts[i])
		}
	}
	return a
}

// scripted returns a fakeAPI whose i-th UpdateItem is answered with
// script[i] (the last entry again past the end): an error, or the attrs
// of the item after the update. ins collects the requests.
func scripted(script ...any) (f *fakeAPI, ins *[]*dynamodb.UpdateItemInput) {
	ins = new([]*dynamodb.UpdateItemInput)
	f = &fakeAPI{updateItem: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		a := script[min(len(*ins), len(script)-1)]
		*ins = append(*ins, in)
		if err, ok := a.(error); ok {
			return nil, err
		}
		return &dynamodb.UpdateItemOutput{Attributes: a.(attrs)}, nil
	}}
	return f, ins
}

// reportForms returns the forms the Report requests ins were sent in,
// from their update expressions.
func reportForms(t *testing.T, ins []*dynamodb.UpdateItemInput) string {
	t.Helper()
	var forms []string
	for _, in := range ins {
		switch up := renderWith(t, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues); {
		case strings.HasPrefix(up, "ADD r4 "):
			forms = append(forms, "add")
		case strings.HasPrefix(up, "SET b4 = "):
			forms = append(forms, "reset")
		case strings.HasPrefix(up, "SET watch_until = ") && !strings.Contains(up, ","):
			forms = append(forms, "late")
		default:
			t.Fatalf("unexpected Report update %s", up)
		}
	}
	return strings.Join(forms, " ")
}

func TestBreakerReport(t *testing.T) {
	const n = 1_700_000_004 // slot 4
	watch := time.UnixMilli(1_700_000_020_000)
	r := breaker.Report{Epoch: 2, Bucket: n, Requests: 4, Successes: 1, Failures: 2, Samples: 3}
	rw := r
	rw.WatchUntil = watch
	watching := func(a attrs) attrs {
		a["watch_until"] = nAV("1700000020000")
		return a
	}

	t.Run("first report resets the slot", func(t *testing.T) {
		f, ins := scripted(watching(stateItem("2", n, "4", "1", "2", "3")))
		s := newFakeBreakerStore(t, f, nil)
		got, err := s.Report(t.Context(), "payments", rw)
		var want breaker.Snapshot
		want.Epoch, want.WatchUntil = 2, watch
		want.Buckets[4] = breaker.Bucket{Num: n, Requests: 4, Successes: 1, Failures: 2, Samples: 3}
		if err != nil || !sameSnapshot(got, want) {
			t.Fatalf("Report = %+v, %v; want %+v", got, err, want)
		}
		in := (*ins)[0]
		if pk := in.Key["pk"].(*types.AttributeValueMemberS).Value; pk != "c#payments" {
			t.Errorf("Report wrote %s, want the state item", pk)
		}
		if in.ReturnValues != types.ReturnValueAllNew || in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
			t.Errorf("ReturnValues %s / %s", in.ReturnValues, in.ReturnValuesOnConditionCheckFailure)
		}
		if st := s.Stats(); st != (Stats{Writes: 1}) {
			t.Errorf("Stats = %+v, want one write", st)
		}
		// The next report of the bucket adds to it at once.
		if _, err := s.Report(t.Context(), "payments", r); err != nil {
			t.Fatal(err)
		}
		if forms := reportForms(t, *ins); forms != "reset add" || len(f.calls()) != 2 {
			t.Errorf("forms sent %s in %d requests, want reset add", forms, len(f.calls()))
		}
	})

	t.Run("slot already started: add, and add first next time", func(t *testing.T) {
		f, ins := scripted(
			ccf(stateItem("2", n, "10", "5", "5", "10")), // reset refused: another environment started the bucket
			stateItem("2", n, "14", "6", "7", "13"),
			ccf(stateItem("2", n, "14", "6", "7", "13")), // add for bucket n+10 refused: the slot still holds n
			stateItem("2", n+10, "4", "1", "2", "3"),
			stateItem("2", n+20, "4", "1", "2", "3"), // the reset taught the store to reset first again
		)
		s := newFakeBreakerStore(t, f, nil)
		got, err := s.Report(t.Context(), "payments", r)
		if err != nil || got.Buckets[4] != (breaker.Bucket{Num: n, Requests: 14, Successes: 6, Failures: 7, Samples: 13}) {
			t.Fatalf("Report = %+v, %v", got, err)
		}
		if forms := reportForms(t, *ins); forms != "reset add" {
			t.Fatalf("forms sent %s, want reset add", forms)
		}
		if st := s.Stats(); st != (Stats{Writes: 2, ConditionalFailures: 1}) {
			t.Errorf("Stats = %+v", st)
		}
		for _, b := range []int64{n + 10, n + 20} {
			rb := r
			rb.Bucket = b
			if _, err := s.Report(t.Context(), "payments", rb); err != nil {
				t.Fatal(err)
			}
		}
		if forms := reportForms(t, *ins); forms != "reset add add reset reset" {
			t.Fatalf("forms sent %s, want reset add, add reset, reset", forms)
		}
	})

	t.Run("another epoch is a conflict", func(t *testing.T) {
		a := stateItem("3", 0)
		a["state"], a["open_until"] = sAV("open"), nAV("1700000030000")
		f, _ := scripted(ccf(a))
		s := newFakeBreakerStore(t, f, nil)
		got, err := s.Report(t.Context(), "payments", r)
		want := breaker.Snapshot{State: breaker.Open, Epoch: 3, OpenUntil: time.UnixMilli(1_700_000_030_000)}
		if !errors.Is(err, breaker.ErrConflict) || errors.Is(err, breaker.ErrStore) || !sameSnapshot(got, want) {
			t.Fatalf("Report = %+v, %v; want %+v and ErrConflict only", got, err, want)
		}
		if len(f.calls()) != 1 {
			t.Errorf("%d requests, want 1", len(f.calls()))
		}
	})

	t.Run("a missing item at epoch 2 is a conflict at epoch 0", func(t *testing.T) {
		f, _ := scripted(ccf(nil))
		s := newFakeBreakerStore(t, f, nil)
		got, err := s.Report(t.Context(), "payments", r)
		if !errors.Is(err, breaker.ErrConflict) || !sameSnapshot(got, breaker.Snapshot{}) {
			t.Fatalf("Report = %+v, %v; want the zero snapshot and ErrConflict", got, err)
		}
	})

	// A late report (the slot holds a newer bucket) writes only its
	// watch; without one its first refusal is the answer. Once the store
	// knows the slot holds a newer bucket, a report with a watch sends
	// the late form at once, one without still sends reset, since only a
	// write can tell the item as it stands.
	late := stateItem("2", n+10, "1", "1", "0", "1")
	for _, c := range []struct {
		name   string
		r      breaker.Report
		script []any
		watch  time.Time
		forms  string
	}{
		{"late report without a watch", r, []any{ccf(late)}, time.Time{}, "reset reset"},
		{"late report with a watch", rw, []any{ccf(late), watching(maps.Clone(late))}, watch, "reset late late"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, ins := scripted(c.script...)
			s := newFakeBreakerStore(t, f, nil)
			for range 2 {
				got, err := s.Report(t.Context(), "payments", c.r)
				if err != nil || !got.WatchUntil.Equal(c.watch) || got.Buckets[4].Num != n+10 {
					t.Fatalf("Report = %+v, %v", got, err)
				}
			}
			if forms := reportForms(t, *ins); forms != c.forms {
				t.Fatalf("forms sent %s, want %s", forms, c.forms)
			}
		})
	}

	for _, c := range []struct {
		name   string
		script []any
		cause  any
		forms  string
	}{
		{"refusal carrying a malformed item", []any{ccf(attrs{"state": sAV("closed"), "epoch": nAV("2"), "b4": sAV("1")})}, new(*MalformedItemError), "reset"},
		{"refusal carrying a slot without its counts", []any{ccf(attrs{"state": sAV("closed"), "epoch": nAV("2"), "b4": nAV("1700000004")})}, new(*MalformedItemError), "reset"},
		{"refusal although the item calls for the form sent", []any{ccf(stateItem("2", 0))}, new(*types.ConditionalCheckFailedException), "reset"},
		{"answer with negative failures", []any{stateItem("2", n, "1", "1", "-1", "1")}, new(*MalformedItemError), "reset"},
		{"answer with the bucket in another slot", []any{stateItem("2", n+1, "1", "1", "1", "1")}, new(*MalformedItemError), "reset"},
		{"throttled", []any{throttled()}, new(*types.ProvisionedThroughputExceededException), "reset"},
		{"second write throttled", []any{ccf(stateItem("2", n, "1", "1", "0", "1")), throttled()}, new(*types.ProvisionedThroughputExceededException), "reset add"},
		// The slot moved on after each refusal (two buckets FleetSlots
		// apart racing): no fourth write.
		{"slot kept moving", []any{ccf(stateItem("2", n, "1", "1", "0", "1")), ccf(stateItem("2", n+10, "1", "1", "0", "1")), ccf(stateItem("2", n+20, "1", "1", "0", "1"))},
			new(*types.ConditionalCheckFailedException), "reset add late"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, ins := scripted(c.script...)
			s := newFakeBreakerStore(t, f, nil)
			got, err := s.Report(t.Context(), "payments", rw)
			wantStoreError(t, "Report", err, c.cause)
			if !sameSnapshot(got, breaker.Snapshot{}) {
				t.Errorf("Report returned %+v with its error", got)
			}
			if forms := reportForms(t, *ins); forms != c.forms || len(f.calls()) != len(*ins) {
				t.Errorf("forms sent %s in %d requests, want %s", forms, len(f.calls()), c.forms)
			}
		})
	}

	t.Run("bucket started by another environment between the writes", func(t *testing.T) {
		f, ins := scripted(
			ccf(stateItem("2", n, "1", "1", "0", "1")), // a first report learns that others start buckets
			stateItem("2", n, "5", "2", "2", "4"),
			ccf(stateItem("2", n, "5", "2", "2", "4")),    // n+10: add refused, the slot still holds n
			ccf(stateItem("2", n+10, "3", "3", "0", "3")), // reset refused: another environment started n+10
			stateItem("2", n+10, "7", "4", "2", "6"),
		)
		s := newFakeBreakerStore(t, f, nil)
		for _, b := range []int64{n, n + 10} {
			rb := r
			rb.Bucket = b
			if _, err := s.Report(t.Context(), "payments", rb); err != nil {
				t.Fatalf("Report of bucket %d: %v", b, err)
			}
		}
		if forms := reportForms(t, *ins); forms != "reset add add reset add" {
			t.Fatalf("forms sent %s, want reset add, add reset add", forms)
		}
	})

	t.Run("deadline between the writes", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		f := &fakeAPI{updateItem: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			cancel()
			return nil, ccf(stateItem("2", n, "1", "1", "0", "1"))
		}}
		s := newFakeBreakerStore(t, f, nil)
		_, err := s.Report(ctx, "payments", r)
		wantStoreError(t, "Report", err, context.Canceled)
		if len(f.calls()) != 1 {
			t.Fatalf("%d requests, want 1", len(f.calls()))
		}
	})
}

// sameSnapshot compares snapshots with times compared by Equal.
func sameSnapshot(a, b breaker.Snapshot) bool {
	return a.State == b.State && a.Epoch == b.Epoch && a.OpenUntil.Equal(b.OpenUntil) && a.Reopens == b.Reopens &&
		a.Override == b.Override && a.OverrideUntil.Equal(b.OverrideUntil) && a.WatchUntil.Equal(b.WatchUntil) && a.Buckets == b.Buckets
}

func TestBreakerTransition(t *testing.T) {
	override := attrs{"pk": sAV("c#p#override"), "override": sAV("force-closed")}
	t.Run("success is one UpdateItem", func(t *testing.T) {
		var upd *dynamodb.UpdateItemInput
		f := &fakeAPI{
			updateItem: func(i *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				upd = i
				return &dynamodb.UpdateItemOutput{Attributes: attrs{"pk": sAV("c#p"), "state": sAV("open"), "epoch": nAV("3"), "reopens": nAV("1")}}, nil
			},
			// The override item is not read: an answer here would be wrong.
			getItem: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: override}, nil
			},
		}
		s := newFakeBreakerStore(t, f, nil)
		snap, err := s.Transition(t.Context(), "p", 2, breaker.Snapshot{State: breaker.Open, Epoch: 3, Reopens: 1})
		if err != nil || snap != (breaker.Snapshot{State: breaker.Open, Epoch: 3, Reopens: 1}) {
			t.Fatalf("Transition = %+v, %v; want the state written and no override", snap, err)
		}
		if upd.ReturnValues != types.ReturnValueAllNew || upd.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
			t.Errorf("ReturnValues %s / %s", upd.ReturnValues, upd.ReturnValuesOnConditionCheckFailure)
		}
		if got := f.calls(); len(got) != 1 || got[0].op != "UpdateItem" {
			t.Errorf("requests %+v, want one UpdateItem", got)
		}
		if st := s.Stats(); st != (Stats{Writes: 1}) {
			t.Errorf("Stats = %+v", st)
		}
	})

	for _, c := range []struct {
		name string
		prev uint64
		item attrs
		want breaker.Snapshot
	}{
		{"conflict with the stored state", 2, attrs{"pk": sAV("c#p"), "state": sAV("half-open"), "epoch": nAV("5")}, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 5}},
		{"conflict with a missing item", 2, nil, breaker.Snapshot{}},
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
			if st := s.Stats(); st != (Stats{Writes: 1, ConditionalFailures: 1}) {
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
		name   string
		update func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
		cause  any
	}{
		{"throttled", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, throttled() },
			new(*types.ProvisionedThroughputExceededException)},
		{"refusal carrying a malformed epoch", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(attrs{"state": sAV("open"), "epoch": sAV("2")})
		}, new(*MalformedItemError)},
		{"refusal although the epoch matches", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return nil, ccf(attrs{"state": sAV("open"), "epoch": nAV("2")})
		}, new(*types.ConditionalCheckFailedException)},
		{"answer malformed", func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			return &dynamodb.UpdateItemOutput{Attributes: attrs{"state": sAV("open")}}, nil
		}, new(*MalformedItemError)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{updateItem: c.update}
			s := newFakeBreakerStore(t, f, nil)
			snap, err := s.Transition(t.Context(), "p", 2, breaker.Snapshot{State: breaker.Open, Epoch: 3})
			wantStoreError(t, "Transition", err, c.cause)
			if snap != (breaker.Snapshot{}) {
				t.Errorf("Transition returned %+v with its error", snap)
			}
			if got := len(f.calls()); got != 1 {
				t.Errorf("%d requests, want 1", got)
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
		{0.3, maxProbeSlots, "19 20 21"}, // first three of 64
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
		"Report bucket 0":               func() error { _, err := s.Report(ctx, "p", breaker.Report{Requests: 1}); return err }(),
		"Report negative":               func() error { _, err := s.Report(ctx, "p", breaker.Report{Bucket: 1, Failures: -1}); return err }(),
		"Report canceled":               func() error { _, err := s.Report(canceled, "p", breaker.Report{Bucket: 1}); return err }(),
		"Transition epoch skip":         func() error { _, err := s.Transition(ctx, "p", 1, breaker.Snapshot{Epoch: 3}); return err }(),
		"Transition canceled":           func() error { _, err := s.Transition(canceled, "p", 1, breaker.Snapshot{Epoch: 2}); return err }(),
		"AcquireProbe lease before now": func() error { _, err := s.AcquireProbe(ctx, "p", 1, 1, now, now); return err }(),
		"AcquireProbe too many": func() error {
			_, err := s.AcquireProbe(ctx, "p", 1, maxProbeSlots+1, now, now.Add(time.Second))
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
	_, err = s.Report(t.Context(), "p", breaker.Report{Bucket: 1, Requests: 1})
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
}
