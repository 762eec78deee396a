package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/internal/fakeclock"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// relFakeClock is a retry.Clock whose time moves only when told to (Sleep
// moves it by the wait), so that CacheTTLs and windows pass exactly when
// the test says.
type relFakeClock = fakeclock.Clock

func relS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func relN(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }

// relPut writes an item by hand, as an operator or another program would.
func relPut(t *testing.T, api *dynamodb.Client, table string, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := api.PutItem(callContext(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem %v: %v", item["pk"], err)
	}
}

// relGet reads an item (strongly consistent).
func relGet(t *testing.T, api *dynamodb.Client, table, pk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := api.GetItem(callContext(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": relS(pk)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem %s: %v", pk, err)
	}
	return out.Item
}

// relItem builds an item with pk and attrs.
func relItem(pk string, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{"pk": relS(pk)}
	for k, v := range attrs {
		item[k] = v
	}
	return item
}

// relStoreErrors collects the errors a hook reports.
type relStoreErrors struct {
	mu   sync.Mutex
	errs []error
}

func (r *relStoreErrors) add(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// malformed returns the first reported error that is a
// *dynamo.MalformedItemError naming attr, if any, and all errors.
func (r *relStoreErrors) malformed(attr string) (*dynamo.MalformedItemError, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		var m *dynamo.MalformedItemError
		if errors.As(err, &m) && m.Attribute == attr {
			return m, r.errs
		}
	}
	return nil, r.errs
}

// TestReliabilityBadBreakerItems writes malformed breaker state and
// override items by hand (wrong types, missing attributes, absurd values,
// unknown states) and runs calls through an Executor. Precisely:
//
//   - every environment's breaker reports a *dynamo.MalformedItemError
//     (also satisfying breaker.ErrStore) through OnStoreError, and falls
//     back to its local state machine; nothing panics;
//   - an environment that had read the fleet's open state before the item
//     was broken stays open: its calls are rejected (breaker.ErrOpen) and
//     never reach the partner, exactly as the correct open item would have
//     had them rejected. A malformed item never admits a call that the
//     state this environment knew would have blocked;
//   - an environment that never read a valid state runs on its own local
//     breaker, closed, so its calls go through (the documented fallback);
//   - once the item is deleted (the documented repair) the fleet state is
//     read again.
func TestReliabilityBadBreakerItems(t *testing.T) {
	requireDynamoDB(t)
	relNoLeaks(t)
	table := newTable(t)
	admin := newAPI(t)
	api := relStoreClient(t, dynamoEndpoint)
	start := time.UnixMilli(time.Now().UnixMilli())
	const cacheTTL = 100 * time.Millisecond

	cases := []struct {
		name  string
		state map[string]types.AttributeValue // attributes of c#<name>, nil = leave the valid open state
		ovr   map[string]types.AttributeValue // attributes of c#<name>#override, nil = none
		attr  string                          // the attribute the error must name
	}{
		{"state-as-number", map[string]types.AttributeValue{"state": relN("1"), "epoch": relN("5")}, nil, "state"},
		{"state-unknown", map[string]types.AttributeValue{"state": relS("ajar"), "epoch": relN("5")}, nil, "state"},
		{"state-missing", map[string]types.AttributeValue{"epoch": relN("5")}, nil, "state"},
		{"epoch-as-string", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relS("6")}, nil, "epoch"},
		{"epoch-missing", map[string]types.AttributeValue{"state": relS("closed")}, nil, "epoch"},
		{"epoch-negative", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("-6")}, nil, "epoch"},
		{"epoch-huge", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("1e40")}, nil, "epoch"},
		{"open-until-negative", map[string]types.AttributeValue{"state": relS("open"), "epoch": relN("6"), "open_until": relN("-1")}, nil, "open_until"},
		{"open-until-year-300000", map[string]types.AttributeValue{"state": relS("open"), "epoch": relN("6"), "open_until": relN("9467000000000000")}, nil, "open_until"},
		{"open-until-as-string", map[string]types.AttributeValue{"state": relS("open"), "epoch": relN("6"), "open_until": relS("later")}, nil, "open_until"},
		{"reopens-negative", map[string]types.AttributeValue{"state": relS("open"), "epoch": relN("6"), "reopens": relN("-1")}, nil, "reopens"},
		// The fleet's counts live in the state item's slots (b<i>, r<i>,
		// s<i>, f<i>, n<i>) beside watch_until.
		{"slot-bucket-as-string", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("6"),
			"b3": relS("1700000003"), "r3": relN("1"), "s3": relN("0"), "f3": relN("1"), "n3": relN("1")}, nil, "b3"},
		{"slot-bucket-in-another-slot", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("6"),
			"b3": relN("1700000004"), "r3": relN("1"), "s3": relN("0"), "f3": relN("1"), "n3": relN("1")}, nil, "b3"},
		{"slot-failures-negative", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("6"),
			"b3": relN("1700000003"), "r3": relN("1"), "s3": relN("0"), "f3": relN("-1"), "n3": relN("1")}, nil, "f3"},
		{"slot-samples-missing", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("6"),
			"b3": relN("1700000003"), "r3": relN("1"), "s3": relN("0"), "f3": relN("1")}, nil, "n3"},
		{"slot-requests-huge", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("6"),
			"b3": relN("1700000003"), "r3": relN("1e30"), "s3": relN("0"), "f3": relN("1"), "n3": relN("1")}, nil, "r3"},
		{"watch-until-as-string", map[string]types.AttributeValue{"state": relS("closed"), "epoch": relN("6"), "watch_until": relS("later")}, nil, "watch_until"},
		{"override-typo", nil, map[string]types.AttributeValue{"override": relS("force_closed")}, "override"},
		{"override-as-number", nil, map[string]types.AttributeValue{"override": relN("2")}, "override"},
		{"override-until-garbage", nil, map[string]types.AttributeValue{"override": relS("force-closed"), "until": relS("tomorrow")}, "until"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("bad-breaker-%d", i)
			clock := fakeclock.New(start)
			openUntil := start.Add(time.Hour)
			// The fleet is open for an hour: a valid item.
			relPut(t, admin, table, relItem("c#"+name, map[string]types.AttributeValue{
				"state": relS("open"), "epoch": relN("5"), "open_until": relN(strconv.FormatInt(openUntil.UnixMilli(), 10)), "reopens": relN("0"),
			}))
			var arrivals atomic.Int64
			op := func(context.Context, int) error { arrivals.Add(1); return nil }
			newEnv := func() (*retry.Executor, *relStoreErrors) {
				errs := &relStoreErrors{}
				cs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
				if err != nil {
					t.Fatal(err)
				}
				b, err := breaker.New(name, breaker.Settings{Store: cs, CacheTTL: cacheTTL, StoreTimeout: 2 * time.Second,
					OnStoreError: func(_ string, err error) { errs.add(err) }})
				if err != nil {
					t.Fatal(err)
				}
				e, err := retry.New(retry.Config{Breaker: b, Clock: clock, MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				return e, errs
			}
			seen, seenErrs := newEnv()
			if err := seen.Do(context.Background(), op); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("with the fleet open, a call = %v; want ErrOpen", err)
			}

			// Break the item(s).
			if tc.state != nil {
				relPut(t, admin, table, relItem("c#"+name, tc.state))
			}
			if tc.ovr != nil {
				relPut(t, admin, table, relItem("c#"+name+"#override", tc.ovr))
			}
			clock.Advance(2 * cacheTTL) // the cached state is stale: the next call reads the item
			fresh, freshErrs := newEnv()
			for range 3 {
				if err := seen.Do(context.Background(), op); !errors.Is(err, breaker.ErrOpen) {
					t.Errorf("an environment that knew the fleet was open: call = %v after the item was broken; want ErrOpen (its local breaker is still open)", err)
				}
				clock.Advance(2 * cacheTTL)
			}
			if n := arrivals.Load(); n != 0 {
				t.Errorf("%d calls of the environment that knew the fleet was open reached the partner; want none", n)
			}
			for range 3 {
				if err := fresh.Do(context.Background(), op); err != nil {
					t.Errorf("a fresh environment: call = %v; want it through on its local (closed) breaker", err)
				}
			}
			for _, r := range []struct {
				env  string
				errs *relStoreErrors
			}{{"seen", seenErrs}, {"fresh", freshErrs}} {
				m, all := r.errs.malformed(tc.attr)
				if m == nil {
					t.Errorf("env %s: OnStoreError got %v; want a *dynamo.MalformedItemError naming %q", r.env, all, tc.attr)
					continue
				}
				for _, err := range all {
					if !errors.Is(err, breaker.ErrStore) {
						t.Errorf("env %s: store error %v does not satisfy errors.Is(err, breaker.ErrStore)", r.env, err)
					}
				}
			}
			if m, _ := seenErrs.malformed(tc.attr); m != nil {
				t.Logf("%s: %v", tc.name, m)
			}

			// Repair: delete the broken items; the state is read again.
			for _, pk := range []string{"c#" + name, "c#" + name + "#override"} {
				if _, err := admin.DeleteItem(callContext(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": relS(pk)}}); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(2 * cacheTTL)
			n0 := len(freshErrs.errs)
			if err := fresh.Do(context.Background(), op); err != nil {
				t.Errorf("after deleting the broken items: call = %v; want it through (fleet closed)", err)
			}
			if len(freshErrs.errs) != n0 {
				t.Errorf("after deleting the broken items the store still fails: %v", freshErrs.errs[n0:])
			}
		})
	}
}

// TestReliabilityBadBudgetItems writes malformed allowance items into the
// current window shard of a Global budget and runs failing calls through
// Executors with a local budget and the Global. The Global must report a
// *dynamo.MalformedItemError (through the Executor's OnStoreError) and
// never grant a retry from the broken item; with FailClosed false the
// retry is left to the local budget (the call succeeds on its retry), with
// FailClosed true it is refused. The item never becomes a valid allowance.
func TestReliabilityBadBudgetItems(t *testing.T) {
	requireDynamoDB(t)
	relNoLeaks(t)
	table := newTable(t)
	admin := newAPI(t)
	api := relStoreClient(t, dynamoEndpoint)
	clock := fakeclock.New(time.UnixMilli(time.Now().UnixMilli()))

	cases := []struct {
		name      string
		allowance types.AttributeValue
	}{
		{"allowance-as-string", relS("100000000")},
		{"allowance-as-bool", &types.AttributeValueMemberBOOL{Value: true}},
		{"allowance-as-map", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"n": relN("100000000")}}},
		{"allowance-as-number-set", &types.AttributeValueMemberNS{Value: []string{"100000000"}}},
		{"allowance-negative", relN("-5000000")},
		{"allowance-fraction", relN("2500000.5")},
		{"allowance-huge", relN("1e30")},
		{"allowance-beyond-int64", relN("9223372036854775808")},
		{"allowance-beyond-max", relN(strconv.FormatInt(maxAmount+1, 10))},
	}
	for i, tc := range cases {
		for _, failClosed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failClosed=%v", tc.name, failClosed), func(t *testing.T) {
				name := fmt.Sprintf("bad-budget-%d-%v", i, failClosed)
				bs, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{})
				if err != nil {
					t.Fatal(err)
				}
				g, err := budget.NewGlobal(bs, name, budget.GlobalConfig{Window: time.Hour, Floor: 1000, FailOpen: !failClosed, FaultCooldown: -1, StoreTimeout: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				w := g.WindowStart(clock.Now())
				pk := fmt.Sprintf("b#%s#0#%d", name, w.UnixMilli())
				item := relItem(pk, map[string]types.AttributeValue{"allowance": tc.allowance, "expires": relN("4102444800")})
				relPut(t, admin, table, item)

				lb, err := local.NewRatio(local.RatioConfig{Ratio: 1, MinRetries: 1000})
				if err != nil {
					t.Fatal(err)
				}
				errs := &relStoreErrors{}
				e, err := retry.New(retry.Config{
					MaxAttempts: 2, Idempotent: true, Clock: clock, Budgets: []budget.Budget{lb, g},
					OnStoreError: func(layer int, err error) {
						if layer == 1 {
							errs.add(err)
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				const calls = 5
				var arrivals atomic.Int64
				for range calls {
					err := e.Do(context.Background(), func(_ context.Context, attempt int) error {
						arrivals.Add(1)
						if attempt == 1 {
							return &retry.StatusError{StatusCode: 503}
						}
						return nil
					})
					switch {
					case !failClosed && err != nil:
						t.Errorf("fail open: call = %v; want success on a retry the local budget granted", err)
					case failClosed && !errors.Is(err, budget.ErrExhausted):
						t.Errorf("fail closed: call = %v; want the retry refused (ErrExhausted)", err)
					}
				}
				st := g.Stats()
				if st.Granted != 0 || st.LeasedRetries != 0 {
					t.Errorf("the Global granted %d retries (leased %d) from a malformed item; want none", st.Granted, st.LeasedRetries)
				}
				if want := int64(calls * 2); failClosed {
					if n := arrivals.Load(); n != calls {
						t.Errorf("fail closed: %d attempts reached the partner for %d calls; want one each", n, calls)
					}
				} else if n := arrivals.Load(); n != want {
					t.Errorf("fail open: %d attempts reached the partner for %d calls; want two each", n, calls)
				}
				if failClosed {
					// The refusal wraps the store's fault; OnStoreError is
					// for abstentions only. Ask the Global directly.
					_, err := g.AcquireRetry(context.Background(), clock.Now(), budget.Transient)
					var m *dynamo.MalformedItemError
					if !errors.Is(err, budget.ErrExhausted) || !errors.Is(err, budget.ErrUnavailable) || !errors.As(err, &m) {
						t.Errorf("fail closed: AcquireRetry = %v; want an ExhaustedError wrapping the ErrUnavailable fault and its *dynamo.MalformedItemError", err)
					}
				} else {
					m, all := errs.malformed("allowance")
					if m == nil {
						t.Errorf("OnStoreError got %v; want a *dynamo.MalformedItemError naming allowance", all)
					} else if !strings.Contains(m.Error(), pk) {
						t.Errorf("MalformedItemError %q does not name the item %q", m.Error(), pk)
					}
					for _, err := range all {
						if !errors.Is(err, budget.ErrUnavailable) {
							t.Errorf("store error %v does not satisfy errors.Is(err, budget.ErrUnavailable)", err)
						}
					}
					if m != nil {
						t.Logf("%s: %v", tc.name, m)
					}
				}
				// The item may have been written to (DynamoDB's BETWEEN
				// holds for a fraction, so a take can apply before the
				// answer is found malformed), but never turned into an
				// allowance that could fund a retry.
				got := relGet(t, admin, table, pk)["allowance"]
				if n, ok := got.(*types.AttributeValueMemberN); ok {
					if v, err := strconv.ParseInt(n.Value, 10, 64); err == nil && v >= 0 && v <= maxAmount {
						t.Errorf("the broken item now holds a valid allowance %d (was %v)", v, tc.allowance)
					}
					t.Logf("%s: the item's allowance after %d calls: %s", tc.name, calls, n.Value)
				}
			})
		}
	}
}

// TestReliabilityBadNames checks that budget and breaker names that would
// break the key layout or collide with another item ('#' separators, forged
// suffixes, empty, too long, not UTF-8, control characters, spaces) are
// rejected with an error naming the problem by every constructor and every
// store method, in memory and in DynamoDB, and that nothing is written;
// and that the longest valid names work and never share an item.
func TestReliabilityBadNames(t *testing.T) {
	requireDynamoDB(t)
	relNoLeaks(t)
	table := newTable(t)
	admin := newAPI(t)
	api := relStoreClient(t, dynamoEndpoint)
	dbs, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dcs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lbs, lcs := local.NewBudgetStore(), local.NewBreakerStore()
	now := farWindow // items that expire in the past are DynamoDB Local's to delete (see farWindow)
	ctx := context.Background()

	bad := []struct{ label, name, want string }{
		{"empty", "", "empty"},
		{"separator", "pay#ments", `'#'`},
		{"forged-override", "payments#override", `'#'`},      // a breaker named so would be "payments"'s override item
		{"forged-window", "payments#w#1700000000000", `'#'`}, // the fleet window items of older versions
		{"forged-probe", "payments#p#0", `'#'`},
		{"forged-shard", "payments#0#1700000000000", `'#'`}, // a budget named so would be shard 0 of "payments"
		{"129-bytes", strings.Repeat("n", 128+1), "bytes long"},
		{"4096-bytes", strings.Repeat("n", 4096), "bytes long"},
		{"not-utf8", "\xff\xfe", "character"},
		{"nul", "pay\x00ments", "character"},
		{"newline", "pay\nments", "character"},
		{"space", "pay ments", "character"},
		{"slash", "pay/ments", "character"},
		{"non-ascii", "paymënts", "character"},
	}
	for _, b := range bad {
		t.Run(b.label, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Errorf("%s accepted the name %q", what, b.name)
					return
				}
				if !strings.Contains(err.Error(), b.want) {
					t.Errorf("%s: error %q does not say what is wrong (%s)", what, err, b.want)
				}
			}
			_, err := budget.NewGlobal(lbs, b.name, budget.GlobalConfig{})
			check("budget.NewGlobal", err)
			_, err = breaker.New(b.name, breaker.Settings{})
			check("breaker.New", err)
			k := budget.Key{Name: b.name, Window: now}
			u := budget.Update{Floor: 1, Take: 1, Expires: now.Add(time.Minute)}
			for _, s := range []struct {
				kind string
				bs   budget.Store
				cs   breaker.Store
			}{{"local", lbs, lcs}, {"dynamo", dbs, dcs}} {
				_, err = s.bs.Apply(ctx, k, u)
				check(s.kind+" BudgetStore.Apply", err)
				_, err = s.cs.Load(ctx, b.name)
				check(s.kind+" BreakerStore.Load", err)
				_, err = s.cs.Report(ctx, b.name, breaker.Report{Bucket: now.Unix(), Requests: 1, Failures: 1, Samples: 1})
				check(s.kind+" BreakerStore.Report", err)
				_, err = s.cs.Transition(ctx, b.name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: now.Add(time.Minute)})
				check(s.kind+" BreakerStore.Transition", err)
				_, err = s.cs.AcquireProbe(ctx, b.name, 1, 1, now, now.Add(time.Second))
				check(s.kind+" BreakerStore.AcquireProbe", err)
				err = s.cs.SetOverride(ctx, b.name, breaker.ForcedOpen, time.Time{})
				check(s.kind+" BreakerStore.SetOverride", err)
			}
		})
	}
	if n := relCountItems(t, admin, table); n != 0 {
		t.Errorf("the table holds %d items after only invalid names were used; want none", n)
	}

	// The longest valid names, and names that share prefixes, each get
	// their own items.
	long := strings.Repeat("n", 128)
	valid := []string{long, long[:128-1], "p", "p.override", "p-w", "p:p:0", "P", "p_0"}
	for _, name := range valid {
		if _, err := dbs.Apply(ctx, budget.Key{Name: name, Shard: 0, Window: now}, budget.Update{Floor: 1, Take: 1, Expires: now.Add(time.Minute)}); err != nil {
			t.Errorf("budget %q: Apply: %v", name, err)
		}
		if _, err := dcs.Transition(ctx, name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: now.Add(time.Minute)}); err != nil {
			t.Errorf("breaker %q: Transition: %v", name, err)
		}
		if err := dcs.SetOverride(ctx, name, breaker.ForcedClosed, time.Time{}); err != nil {
			t.Errorf("breaker %q: SetOverride: %v", name, err)
		}
	}
	if got, want := relCountItems(t, admin, table), 3*len(valid); got != want {
		t.Errorf("the table holds %d items for %d names × (budget shard, breaker state, override); want %d distinct items", got, len(valid), want)
	}
	for _, name := range valid {
		snap, err := dcs.Load(ctx, name)
		if err != nil || snap.State != breaker.Open || snap.Epoch != 1 || snap.Override != breaker.ForcedClosed {
			t.Errorf("breaker %q reads back as %+v, %v; want its own open state at epoch 1 and its own override", name, snap, err)
		}
	}
}

// relCountItems counts the items of a table with a bounded scan.
func relCountItems(t *testing.T, api *dynamodb.Client, table string) int {
	t.Helper()
	n := 0
	var start map[string]types.AttributeValue
	for range 100 {
		out, err := api.Scan(callContext(t), &dynamodb.ScanInput{TableName: aws.String(table), Select: types.SelectCount, ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		n += int(out.Count)
		if start = out.LastEvaluatedKey; len(start) == 0 {
			return n
		}
	}
	t.Fatal("Scan did not end after 100 pages")
	return n
}
