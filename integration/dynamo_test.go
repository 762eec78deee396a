package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/breaker/breakertest"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/budget/budgettest"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/internal/layout"
)

// newStoreClient returns a DynamoDB client for the shared DynamoDB Local
// built the way an application builds the stores' client: dynamo.NewClient,
// with its one SDK retry and its own retry quota and connection pool. The
// empty aws.Config keeps the test independent of the machine's AWS settings.
// Its idle connections are closed when the test ends.
func newStoreClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	requireDynamoDB(t)
	return newStoreClientAt(t, dynamoEndpoint)
}

func newBudgetStore(t testing.TB, api dynamo.API, table string) *dynamo.BudgetStore {
	t.Helper()
	s, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatalf("dynamo.NewBudgetStore: %v", err)
	}
	return s
}

func newBreakerStore(t testing.TB, api dynamo.API, table string) *dynamo.BreakerStore {
	t.Helper()
	s, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatalf("dynamo.NewBreakerStore: %v", err)
	}
	return s
}

// putItem writes an item by hand, as an operator or a bug would.
func putItem(t testing.TB, api *dynamodb.Client, table string, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := api.PutItem(callContext(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem %v: %v", item["pk"], err)
	}
}

func getItem(t testing.TB, api *dynamodb.Client, table, pk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := api.GetItem(callContext(t), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem %s: %v", pk, err)
	}
	return out.Item
}

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }

// storeCtx is a deadline like the one a Breaker or Global gives each store
// call in production, generous enough for a loaded CI machine.
func storeCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDynamoBudgetStoreConformance(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	budgettest.Run(t, func(t *testing.T) budget.Store { return newBudgetStore(t, api, table) })
}

func TestDynamoBreakerStoreConformance(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	breakertest.Run(t, func(t *testing.T) breaker.Store { return newBreakerStore(t, api, table) })
}

// TestDynamoCreateTable checks dynamo.CreateTable and dynamo.DeleteTable
// against DynamoDB Local: the table matches dynamo.Spec, both are
// idempotent, and a table keyed otherwise is refused.
func TestDynamoCreateTable(t *testing.T) {
	api := newAPI(t)
	table := tableName(t)
	ctx, cancel := context.WithTimeout(t.Context(), tableOpTimeout)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tableOpTimeout)
		defer cancel()
		if err := dynamo.DeleteTable(ctx, api, table); err != nil {
			t.Errorf("DeleteTable in cleanup: %v", err)
		}
	})

	for i := range 2 { // the second call finds everything in place
		if err := dynamo.CreateTable(ctx, api, table); err != nil {
			t.Fatalf("CreateTable #%d: %v", i+1, err)
		}
	}
	spec := dynamo.Spec()
	desc, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("DescribeTable: %v", err)
	}
	if ks := desc.Table.KeySchema; len(ks) != 1 || aws.ToString(ks[0].AttributeName) != spec.PartitionKey || ks[0].KeyType != types.KeyTypeHash {
		t.Errorf("key schema %+v, want only %s HASH", ks, spec.PartitionKey)
	}
	if ad := desc.Table.AttributeDefinitions; len(ad) != 1 || ad[0].AttributeType != spec.PartitionKeyType {
		t.Errorf("attribute definitions %+v, want %s %s", ad, spec.PartitionKey, spec.PartitionKeyType)
	}
	if bm := desc.Table.BillingModeSummary; bm == nil || bm.BillingMode != spec.BillingMode {
		t.Errorf("billing mode %+v, want %s", bm, spec.BillingMode)
	}
	if desc.Table.TableStatus != types.TableStatusActive {
		t.Errorf("status %s, want ACTIVE", desc.Table.TableStatus)
	}
	ttl, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("DescribeTimeToLive: %v", err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != spec.TTLAttribute || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Errorf("time to live %+v, want %s ENABLED", d, spec.TTLAttribute)
	}

	// A table of the same name keyed on something else is not accepted.
	other := tableName(t)
	if _, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(other),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatalf("creating a table keyed on id: %v", err)
	}
	err = dynamo.CreateTable(ctx, api, other)
	if err == nil || !strings.Contains(err.Error(), "key schema") {
		t.Errorf("CreateTable over a table keyed on id = %v, want a key schema error", err)
	}
	for i := range 2 { // deleting twice: the second finds nothing to delete
		if err := dynamo.DeleteTable(ctx, api, other); err != nil {
			t.Fatalf("DeleteTable #%d: %v", i+1, err)
		}
	}
	if _, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(other)}); !errors.As(err, new(*types.ResourceNotFoundException)) {
		t.Errorf("DescribeTable after DeleteTable = %v, want ResourceNotFoundException", err)
	}
}

// TestDynamoBudgetMalformedItems writes broken budget items by hand and
// checks that Apply returns a *dynamo.MalformedItemError (never a grant,
// never ErrInsufficient, never a panic), for an update that takes and for
// one that only deposits. It also pins what happens to the item, as
// BudgetStore.Apply documents: a value of another type, negative or above
// MaxAmount fails the condition and is left as it was; a fraction that
// BETWEEN admits (DynamoDB's conditions cannot test for a whole number) is
// updated, and only the decoding of the result reports it.
func TestDynamoBudgetMalformedItems(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	st := newBudgetStore(t, api, table)
	window := time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)
	expires := window.Add(time.Minute)
	wantExpires := avN(strconv.FormatInt(expires.Unix(), 10))

	// after maps the update ("take": Take 1, "deposit": Deposit 3, both with
	// Floor 5) to the allowance the item holds afterwards when the update
	// passed the condition; an update not listed was refused and must leave
	// the item untouched.
	cases := []struct {
		name      string
		allowance types.AttributeValue
		after     map[string]string
	}{
		{"string", avS("10"), nil},
		{"bool", &types.AttributeValueMemberBOOL{Value: true}, nil},
		{"null", &types.AttributeValueMemberNULL{Value: true}, nil},
		{"number-set", &types.AttributeValueMemberNS{Value: []string{"10"}}, nil},
		{"map", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"n": avN("10")}}, nil},
		{"negative", avN("-5"), nil},
		{"negative-fraction", avN("-0.5"), nil},
		{"fraction", avN("10.5"), map[string]string{"take": "9.5", "deposit": "13.5"}},
		// BETWEEN 1 AND max refuses 0.5 to a take; BETWEEN 0 AND max admits
		// it to a deposit.
		{"small-fraction", avN("0.5"), map[string]string{"deposit": "3.5"}},
		{"huge", avN("1e30"), nil},
		{"beyond-int64", avN("9223372036854775808"), nil},
		{"beyond-max-amount", avN("9007199254740993"), nil},
	}
	for i, c := range cases {
		for _, u := range []struct {
			kind          string
			deposit, take int64
		}{{"take", 0, 1}, {"deposit", 3, 0}} {
			t.Run(c.name+"/"+u.kind, func(t *testing.T) {
				k := budget.Key{Name: fmt.Sprintf("bad.%d.%s", i, u.kind), Shard: 1, Window: window}
				pk := fmt.Sprintf("b#%s#1#%d", k.Name, window.UnixMilli())
				putItem(t, api, table, map[string]types.AttributeValue{"pk": avS(pk), "allowance": c.allowance})
				before := st.Stats()
				got, err := st.Apply(storeCtx(t), k, budget.Update{Floor: 5, Deposit: u.deposit, Take: u.take, Expires: expires})
				var m *dynamo.MalformedItemError
				if !errors.As(err, &m) {
					t.Fatalf("Apply over allowance %#v = %d, %v; want a *dynamo.MalformedItemError", c.allowance, got, err)
				}
				if errors.Is(err, budget.ErrInsufficient) {
					t.Fatalf("Apply over a malformed item returned %v: a malformed item is a fault, not a refusal", err)
				}
				if m.Key != pk || m.Attribute != "allowance" {
					t.Errorf("MalformedItemError names item %q attribute %q, want %q allowance", m.Key, m.Attribute, pk)
				}
				after := st.Stats()
				if after.Malformed != before.Malformed+1 {
					t.Errorf("Stats().Malformed went from %d to %d, want +1", before.Malformed, after.Malformed)
				}

				item := getItem(t, api, table, pk)
				want, applied := c.after[u.kind]
				refused := after.ConditionalFailures - before.ConditionalFailures
				switch {
				case applied && refused != 0:
					t.Errorf("the condition refused the update; over allowance %v it holds", c.allowance)
				case !applied && refused != 1:
					t.Errorf("the condition admitted the update; over allowance %v it fails", c.allowance)
				}
				if !applied {
					if len(item) != 2 || !sameValue(item["allowance"], c.allowance) {
						t.Errorf("refused update changed the item to %#v; want it as written, allowance %#v", item, c.allowance)
					}
					return
				}
				n, ok := item["allowance"].(*types.AttributeValueMemberN)
				if !ok || n.Value != want {
					t.Errorf("admitted update left allowance %v, want %s (the fraction updated)", item["allowance"], want)
				}
				if fmt.Sprint(item["expires"]) != fmt.Sprint(wantExpires) {
					t.Errorf("admitted update left expires %v, want %v", item["expires"], wantExpires)
				}
			})
		}
	}

	// An item without an allowance (someone removed it) counts from the
	// floor, as a missing item does.
	k := budget.Key{Name: "bad.noallowance", Window: window}
	putItem(t, api, table, map[string]types.AttributeValue{"pk": avS(fmt.Sprintf("b#%s#0#%d", k.Name, window.UnixMilli())), "expires": avN("1")})
	if got, err := st.Apply(storeCtx(t), k, budget.Update{Floor: 4, Take: 1, Expires: window.Add(time.Minute)}); err != nil || got != 3 {
		t.Errorf("Apply over an item without allowance = %d, %v; want 3, <nil>", got, err)
	}
}

// sameValue reports whether two attribute values are equal as DynamoDB
// stores them: numbers by value (it normalises 1e30 to 1E+30), anything
// else exactly.
func sameValue(a, b types.AttributeValue) bool {
	an, aok := a.(*types.AttributeValueMemberN)
	bn, bok := b.(*types.AttributeValueMemberN)
	if aok && bok {
		x, xok := new(big.Rat).SetString(an.Value)
		y, yok := new(big.Rat).SetString(bn.Value)
		return xok && yok && x.Cmp(y) == 0
	}
	return reflect.DeepEqual(a, b)
}

// TestDynamoBreakerMalformedItems writes broken breaker items by hand and
// checks that every operation reading them returns an error satisfying
// errors.Is(err, breaker.ErrStore) and errors.As(err, **MalformedItemError),
// and that Transition never overwrites a state it could not read.
func TestDynamoBreakerMalformedItems(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	st := newBreakerStore(t, api, table)
	now := time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)

	wantMalformed := func(t *testing.T, op string, err error, attr string) {
		t.Helper()
		var m *dynamo.MalformedItemError
		if !errors.Is(err, breaker.ErrStore) || !errors.As(err, &m) {
			t.Fatalf("%s = %v; want an error satisfying errors.Is(err, breaker.ErrStore) and errors.As(err, **dynamo.MalformedItemError)", op, err)
		}
		if m.Attribute != attr {
			t.Errorf("%s: MalformedItemError names attribute %q, want %q (%v)", op, m.Attribute, attr, err)
		}
	}

	states := []struct {
		name  string
		attrs map[string]types.AttributeValue
		bad   string
	}{
		{"state-number", map[string]types.AttributeValue{"state": avN("1"), "epoch": avN("3")}, "state"},
		{"state-unknown", map[string]types.AttributeValue{"state": avS("ajar"), "epoch": avN("3")}, "state"},
		{"state-missing", map[string]types.AttributeValue{"epoch": avN("3")}, "state"},
		{"epoch-string", map[string]types.AttributeValue{"state": avS("open"), "epoch": avS("3")}, "epoch"},
		{"epoch-missing", map[string]types.AttributeValue{"state": avS("open")}, "epoch"},
		{"epoch-negative", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("-1")}, "epoch"},
		{"epoch-fraction", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("2.5")}, "epoch"},
		{"epoch-huge", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("1e30")}, "epoch"},
		{"open-until-string", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("3"), "open_until": avS("soon")}, "open_until"},
		{"open-until-negative", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("3"), "open_until": avN("-5")}, "open_until"},
		{"open-until-year-300000", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("3"), "open_until": avN("9467000000000000")}, "open_until"},
		{"reopens-negative", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("3"), "reopens": avN("-2")}, "reopens"},
		{"reopens-list", map[string]types.AttributeValue{"state": avS("open"), "epoch": avN("3"), "reopens": &types.AttributeValueMemberL{}}, "reopens"},
	}
	for _, c := range states {
		t.Run("state/"+c.name, func(t *testing.T) {
			name := "bad.state." + c.name
			item := map[string]types.AttributeValue{"pk": avS("c#" + name)}
			for k, v := range c.attrs {
				item[k] = v
			}
			putItem(t, api, table, item)
			_, err := st.Load(storeCtx(t), name)
			wantMalformed(t, "Load", err, c.bad)

			// A Report of epoch 3 or 0 is refused, or applied and its
			// answer found malformed: never a snapshot decoded from
			// garbage nor an ErrConflict with garbage.
			for _, prev := range []uint64{0, 3} {
				snap, err := st.Report(storeCtx(t), name, breaker.Report{Epoch: prev, Bucket: now.Unix(), Requests: 1, Failures: 1, Samples: 1})
				if errors.Is(err, breaker.ErrConflict) {
					t.Fatalf("Report of epoch %d over %s = %+v, %v; a state that cannot be read is a store fault, not a conflict", prev, c.name, snap, err)
				}
				wantMalformed(t, fmt.Sprintf("Report of epoch %d", prev), err, c.bad)
				putItem(t, api, table, item)
			}

			// Transition from epoch 3 (the value written, when it is a
			// valid number) or from 0: either is refused by the condition
			// or applies; it must never return a snapshot decoded from
			// garbage nor an ErrConflict with garbage.
			for _, prev := range []uint64{0, 3} {
				snap, err := st.Transition(storeCtx(t), name, prev, breaker.Snapshot{State: breaker.HalfOpen, Epoch: prev + 1})
				if err == nil {
					// The condition held (epoch was 3, or absent and
					// prev 0): the state was repaired.
					if snap.State != breaker.HalfOpen || snap.Epoch != prev+1 {
						t.Fatalf("Transition from %d over %s = %+v, want the half-open epoch %d it wrote", prev, c.name, snap, prev+1)
					}
					putItem(t, api, table, item) // break it again for the next round
					continue
				}
				if errors.Is(err, breaker.ErrConflict) {
					t.Fatalf("Transition from %d over %s = %+v, %v; a state that cannot be read is a store fault, not a conflict", prev, c.name, snap, err)
				}
				wantMalformed(t, fmt.Sprintf("Transition from %d", prev), err, c.bad)
			}
		})
	}

	overrides := []struct {
		name  string
		attrs map[string]types.AttributeValue
		bad   string
	}{
		{"override-number", map[string]types.AttributeValue{"override": avN("1")}, "override"},
		{"override-unknown", map[string]types.AttributeValue{"override": avS("sideways")}, "override"},
		{"override-missing", map[string]types.AttributeValue{"until": avN("1")}, "override"},
		{"until-string", map[string]types.AttributeValue{"override": avS("force-open"), "until": avS("tomorrow")}, "until"},
		{"until-negative", map[string]types.AttributeValue{"override": avS("force-open"), "until": avN("-1")}, "until"},
	}
	for _, c := range overrides {
		t.Run("override/"+c.name, func(t *testing.T) {
			name := "bad.override." + c.name
			item := map[string]types.AttributeValue{"pk": avS("c#" + name + "#override")}
			for k, v := range c.attrs {
				item[k] = v
			}
			putItem(t, api, table, item)
			_, err := st.Load(storeCtx(t), name)
			wantMalformed(t, "Load", err, c.bad)
			// A transition succeeds: the override is neither part of it
			// nor read by it (its answer carries no override).
			snap, err := st.Transition(storeCtx(t), name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
			if err != nil || snap.Epoch != 1 || snap.Override != breaker.NoOverride {
				t.Fatalf("Transition beside a malformed override = %+v, %v; want epoch 1, no override, no error", snap, err)
			}
			// Writing a valid override repairs the item.
			if err := st.SetOverride(storeCtx(t), name, breaker.NoOverride, time.Time{}); err != nil {
				t.Fatalf("SetOverride: %v", err)
			}
			if snap, err := st.Load(storeCtx(t), name); err != nil || snap.Override != breaker.NoOverride || snap.Epoch != 1 {
				t.Fatalf("Load after repairing the override = %+v, %v; want epoch 1 and no override", snap, err)
			}
		})
	}

	// Fleet counts live in the state item, slot i holding bucket b<i> and
	// its counts r<i>, s<i>, f<i>, n<i>. A Report into a malformed slot
	// fails its condition or decodes the answer, and says which attribute
	// is wrong; a malformed slot elsewhere in the item is found when the
	// answer is decoded. A Transition, which empties every slot, repairs
	// them.
	n := now.Unix() // a bucket of the 1 s buckets of a 10 s Window
	si := n % breaker.FleetSlots
	slotAttr := func(a string, i int64) string { return fmt.Sprintf("%s%d", a, i) }
	bucket := func(i, num int64, counts ...string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{slotAttr("b", i): avN(fmt.Sprint(num))}
		for j, a := range []string{"r", "s", "f", "n"} {
			m[slotAttr(a, i)] = avN(counts[j])
		}
		return m
	}
	with := func(m map[string]types.AttributeValue, attr string, v types.AttributeValue) map[string]types.AttributeValue {
		if v == nil {
			delete(m, attr)
		} else {
			m[attr] = v
		}
		return m
	}
	other := (si + 3) % breaker.FleetSlots // a slot the Report does not write
	// What the Report does: refused by its condition (nothing written),
	// applied and its answer found malformed, or applied over the bad
	// slot, which it replaces (an older bucket's slot is reset).
	const (
		refused = iota
		decoded
		repaired
	)
	slotCases := []struct {
		name   string
		attrs  map[string]types.AttributeValue
		bad    string
		report int
	}{
		{"bucket-string", with(bucket(si, n, "1", "1", "0", "1"), slotAttr("b", si), avS(fmt.Sprint(n))), slotAttr("b", si), refused},
		{"bucket-in-another-slot", bucket(si, n+1, "1", "1", "0", "1"), slotAttr("b", si), refused},
		{"bucket-zero", bucket(si, 0, "1", "1", "0", "1"), slotAttr("b", si), repaired},
		{"requests-string", with(bucket(si, n, "1", "1", "0", "1"), slotAttr("r", si), avS("1")), slotAttr("r", si), refused},
		{"requests-missing", with(bucket(si, n, "1", "1", "0", "1"), slotAttr("r", si), nil), slotAttr("r", si), refused},
		{"successes-set", with(bucket(si, n, "1", "1", "0", "1"), slotAttr("s", si), &types.AttributeValueMemberNS{Value: []string{"1"}}), slotAttr("s", si), refused},
		{"failures-negative", bucket(si, n, "1", "1", "-10", "1"), slotAttr("f", si), refused},
		{"samples-huge", bucket(si, n, "1", "1", "0", "1e25"), slotAttr("n", si), refused},
		{"older-bucket-fraction", bucket(si, n-10, "1.5", "1", "0", "1"), slotAttr("r", si), repaired},
		{"other-slot-string", with(bucket(other, n, "1", "1", "0", "1"), slotAttr("b", other), avS("x")), slotAttr("b", other), decoded},
		{"watch-until-string", map[string]types.AttributeValue{"watch_until": avS("later")}, "watch_until", decoded},
	}
	for _, c := range slotCases {
		t.Run("slot/"+c.name, func(t *testing.T) {
			name := "bad.slot." + c.name
			item := map[string]types.AttributeValue{"pk": avS("c#" + name), "state": avS("closed"), "epoch": avN("3"), "reopens": avN("0")}
			for k, v := range c.attrs {
				item[k] = v
			}
			putItem(t, api, table, item)
			_, err := st.Load(storeCtx(t), name)
			wantMalformed(t, "Load", err, c.bad)
			snap, err := st.Report(storeCtx(t), name, breaker.Report{Epoch: 3, Bucket: n, Requests: 2, Failures: 2, Samples: 2})
			switch c.report {
			case repaired:
				if err != nil || snap.Buckets[si] != (breaker.Bucket{Num: n, Requests: 2, Failures: 2, Samples: 2}) {
					t.Fatalf("Report over %s = %+v, %v; want its counts alone in the slot", c.name, snap, err)
				}
			case refused:
				wantMalformed(t, "Report", err, c.bad)
				if got := getItem(t, api, table, "c#"+name); !sameItem(got, item) {
					t.Fatalf("Report over %s changed the item to %v", c.name, got)
				}
			default:
				if errors.Is(err, breaker.ErrConflict) {
					t.Fatalf("Report over %s = %v; an item that cannot be read is a store fault, not a conflict", c.name, err)
				}
				wantMalformed(t, "Report", err, c.bad)
			}
			// A transition empties every slot (a malformed watch stays).
			snap, err = st.Transition(storeCtx(t), name, 3, breaker.Snapshot{State: breaker.Open, Epoch: 4})
			if c.bad == "watch_until" {
				wantMalformed(t, "Transition", err, c.bad)
				return
			}
			if err != nil || snap.Epoch != 4 || snap.Buckets != [breaker.FleetSlots]breaker.Bucket{} {
				t.Fatalf("Transition over %s = %+v, %v; want epoch 4 with every slot empty", c.name, snap, err)
			}
		})
	}

	// A probe slot that does not hold a well-formed lease of the epoch is
	// free: AcquireProbe overwrites it instead of wedging the breaker.
	slots := []struct {
		name  string
		attrs map[string]types.AttributeValue
	}{
		{"empty", map[string]types.AttributeValue{}},
		{"epoch-string", map[string]types.AttributeValue{"epoch": avS("1"), "lease_until": avN(fmt.Sprint(now.Add(time.Hour).UnixMilli()))}},
		{"lease-missing", map[string]types.AttributeValue{"epoch": avN("1")}},
		{"lease-string", map[string]types.AttributeValue{"epoch": avN("1"), "lease_until": avS("later")}},
	}
	for _, c := range slots {
		t.Run("probe/"+c.name, func(t *testing.T) {
			name := "bad.probe." + c.name
			item := map[string]types.AttributeValue{"pk": avS("c#" + name + "#p#0")}
			for k, v := range c.attrs {
				item[k] = v
			}
			putItem(t, api, table, item)
			slot, err := st.AcquireProbe(storeCtx(t), name, 1, 1, now, now.Add(5*time.Second))
			if err != nil || slot != 0 {
				t.Fatalf("AcquireProbe over a slot %s = %d, %v; want slot 0", c.name, slot, err)
			}
			got := getItem(t, api, table, "c#"+name+"#p#0")
			if e, ok := got["epoch"].(*types.AttributeValueMemberN); !ok || e.Value != "1" {
				t.Fatalf("slot item after AcquireProbe = %v, want epoch N 1", got)
			}
			// ... and the lease it wrote now holds.
			if _, err := st.AcquireProbe(storeCtx(t), name, 1, 1, now, now.Add(5*time.Second)); !errors.Is(err, breaker.ErrProbeDenied) {
				t.Fatalf("second AcquireProbe = %v, want ErrProbeDenied", err)
			}
		})
	}
}

// farWindow is the window of the tests that check items written with
// fixed times: far in the future, because DynamoDB Local deletes items
// whose expires has passed (time to live) at a moment of its own, and a
// test that wrote expired items raced that sweep (an item written a moment
// before was gone when read back, on a loaded machine).
var farWindow = time.UnixMilli(4_100_000_000_000)

// TestDynamoItemLayout checks the items the stores write against the layout
// documented in package dynamo (and docs/ARCHITECTURE.md), attribute by
// attribute, so that an operator's put-item and the code agree.
// sameItem reports whether two items hold the same attributes, numbers
// compared by value (DynamoDB answers 1e25 as 10000000000000000000000000).
func sameItem(a, b map[string]types.AttributeValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		x, okX := v.(*types.AttributeValueMemberN)
		y, okY := b[k].(*types.AttributeValueMemberN)
		if okX && okY {
			fx, _, errX := big.ParseFloat(x.Value, 10, 256, big.ToNearestEven)
			fy, _, errY := big.ParseFloat(y.Value, 10, 256, big.ToNearestEven)
			if errX != nil || errY != nil || fx.Cmp(fy) != 0 {
				return false
			}
			continue
		}
		if fmt.Sprint(v) != fmt.Sprint(b[k]) {
			return false
		}
	}
	return true
}

func TestDynamoItemLayout(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	bs := newBudgetStore(t, api, table)
	cs := newBreakerStore(t, api, table)
	ctx := storeCtx(t)
	w := farWindow

	if _, err := bs.Apply(ctx, budget.Key{Name: "payments", Shard: 2, Window: w}, budget.Update{Floor: 3, Deposit: 4, Take: 1, Expires: w.Add(20*time.Second + time.Millisecond)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if _, err := cs.Transition(ctx, "payments", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: w.Add(30 * time.Second), Reopens: 2}); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	if err := cs.SetOverride(ctx, "payments", breaker.ForcedOpen, w.Add(time.Hour)); err != nil {
		t.Fatalf("SetOverride: %v", err)
	}
	// 1 s buckets: bucket 4,100,000,003 goes to slot 3.
	if _, err := cs.Report(ctx, "payments", breaker.Report{Epoch: 1, Bucket: 4_100_000_003, Requests: 8, Successes: 2, Failures: 3, Samples: 4, WatchUntil: w.Add(20 * time.Second)}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	if _, err := cs.Report(ctx, "payments", breaker.Report{Epoch: 1, Bucket: 4_100_000_003, Requests: 1, Failures: 1, Samples: 1}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	// A breaker first written by a Report is created closed at epoch 0.
	if _, err := cs.Report(ctx, "fresh", breaker.Report{Bucket: 4_100_000_011, Requests: 1, Successes: 1, Samples: 1}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	// A transition empties the slots and keeps the watch.
	if _, err := cs.Report(ctx, "moved", breaker.Report{Bucket: 4_100_000_005, Requests: 1, Failures: 1, Samples: 1, WatchUntil: w.Add(time.Minute)}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	if _, err := cs.Transition(ctx, "moved", 0, breaker.Snapshot{State: breaker.Closed, Epoch: 1}); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	slot, err := cs.AcquireProbe(ctx, "payments", 1, 1, w, w.Add(5*time.Second))
	if err != nil {
		t.Fatalf("AcquireProbe: %v", err)
	}

	want := map[string]map[string]types.AttributeValue{
		"b#payments#2#4100000000000": {"allowance": avN("6"), "expires": avN("4100000021")},
		"c#payments": {"state": avS("open"), "epoch": avN("1"), "open_until": avN("4100000030000"), "reopens": avN("2"), "watch_until": avN("4100000020000"),
			"b3": avN("4100000003"), "r3": avN("9"), "s3": avN("2"), "f3": avN("4"), "n3": avN("5")},
		"c#fresh":                            {"state": avS("closed"), "epoch": avN("0"), "b1": avN("4100000011"), "r1": avN("1"), "s1": avN("1"), "f1": avN("0"), "n1": avN("1")},
		"c#moved":                            {"state": avS("closed"), "epoch": avN("1"), "reopens": avN("0"), "watch_until": avN("4100000060000")},
		"c#payments#override":                {"override": avS("force-open"), "until": avN("4100003600000"), "expires": avN("4100090000")},
		fmt.Sprintf("c#payments#p#%d", slot): {"epoch": avN("1"), "lease_until": avN("4100000005000"), "expires": avN("4100086405")},
	}
	for pk, attrs := range want {
		got := getItem(t, api, table, pk)
		if got == nil {
			t.Errorf("item %s missing", pk)
			continue
		}
		delete(got, "pk")
		if len(got) != len(attrs) {
			t.Errorf("item %s has attributes %v, want exactly %v", pk, keys(got), keys(attrs))
		}
		for name, w := range attrs {
			if g := got[name]; fmt.Sprint(g) != fmt.Sprint(w) {
				t.Errorf("item %s attribute %s = %v, want %v", pk, name, g, w)
			}
		}
	}
}

// TestDynamoSetOverrideReplacesEnd checks SetOverride's UpdateItem against
// DynamoDB Local: an override without an end removes the end and the time
// to live an earlier one left (else TTL would delete a permanent override a
// day after the old end), and it writes over an item an operator wrote with
// put-item, attributes of other types included.
func TestDynamoSetOverrideReplacesEnd(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	cs := newBreakerStore(t, api, table)
	w := farWindow
	const pk = "c#ends#override"

	steps := []struct {
		what  string
		o     breaker.Override
		until time.Time
		want  map[string]types.AttributeValue
	}{
		{"an override with an end", breaker.ForcedOpen, w.Add(time.Hour), map[string]types.AttributeValue{"override": avS("force-open"), "until": avN("4100003600000"), "expires": avN("4100090000")}},
		{"then one without", breaker.ForcedOpen, time.Time{}, map[string]types.AttributeValue{"override": avS("force-open")}},
		{"then another end", breaker.Disabled, w.Add(2 * time.Hour), map[string]types.AttributeValue{"override": avS("disabled"), "until": avN("4100007200000"), "expires": avN("4100093600")}},
		{"then none, which has no end", breaker.NoOverride, w.Add(3 * time.Hour), map[string]types.AttributeValue{"override": avS("none")}},
	}
	for _, s := range steps {
		if err := cs.SetOverride(storeCtx(t), "ends", s.o, s.until); err != nil {
			t.Fatalf("%s: SetOverride: %v", s.what, err)
		}
		got := getItem(t, api, table, pk)
		delete(got, "pk")
		if fmt.Sprint(keys(got)) != fmt.Sprint(keys(s.want)) {
			t.Errorf("%s: item has attributes %v, want exactly %v", s.what, keys(got), keys(s.want))
		}
		for name, w := range s.want {
			if fmt.Sprint(got[name]) != fmt.Sprint(w) {
				t.Errorf("%s: attribute %s = %v, want %v", s.what, name, got[name], w)
			}
		}
	}

	// Over an operator's malformed item: the attributes SetOverride owns
	// are replaced whatever their type; others, which no store reads, stay.
	putItem(t, api, table, map[string]types.AttributeValue{"pk": avS(pk), "override": avN("1"), "until": avS("tomorrow"), "expires": avS("never"), "note": avS("by hand")})
	if err := cs.SetOverride(storeCtx(t), "ends", breaker.ForcedClosed, time.Time{}); err != nil {
		t.Fatalf("SetOverride over a malformed item: %v", err)
	}
	got := getItem(t, api, table, pk)
	if fmt.Sprint(got["override"]) != fmt.Sprint(avS("force-closed")) || got["until"] != nil || got["expires"] != nil || fmt.Sprint(got["note"]) != fmt.Sprint(avS("by hand")) {
		t.Errorf("item after SetOverride over a malformed one = %v", got)
	}
	if snap, err := cs.Load(storeCtx(t), "ends"); err != nil || snap.Override != breaker.ForcedClosed || !snap.OverrideUntil.IsZero() {
		t.Errorf("Load = %+v, %v; want force-closed without an end", snap, err)
	}
}

// keys returns the attribute names of an item, sorted.
func keys(m map[string]types.AttributeValue) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestDynamoStatsCount checks what each store operation costs in DynamoDB
// requests, as the stores count them and as package dynamo documents.
func TestDynamoStatsCount(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	bs := newBudgetStore(t, api, table)
	// Probe slots are tried from slot 0, so the cost of each AcquireProbe
	// below is known.
	cs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)

	step := func(what string, stats func() dynamo.Stats, call func() error, want dynamo.Stats) {
		t.Helper()
		before := stats()
		err := call()
		after := stats()
		d := dynamo.Stats{
			Reads:               after.Reads - before.Reads,
			Writes:              after.Writes - before.Writes,
			ConditionalFailures: after.ConditionalFailures - before.ConditionalFailures,
			Errors:              after.Errors - before.Errors,
			Malformed:           after.Malformed - before.Malformed,
		}
		if d != want {
			t.Errorf("%s (err %v) cost %+v, want %+v", what, err, d, want)
		}
	}
	k := budget.Key{Name: "stats", Window: now}
	u := func(deposit, take int64) budget.Update {
		return budget.Update{Floor: 1, Deposit: deposit, Take: take, Expires: now.Add(time.Minute)}
	}
	step("Apply granted", bs.Stats, func() error { _, err := bs.Apply(storeCtx(t), k, u(0, 1)); return err }, dynamo.Stats{Writes: 1})
	step("Apply refused", bs.Stats, func() error { _, err := bs.Apply(storeCtx(t), k, u(0, 1)); return err }, dynamo.Stats{Writes: 1, ConditionalFailures: 1})
	step("Apply with a canceled context", bs.Stats, func() error {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := bs.Apply(ctx, k, u(0, 1))
		return err
	}, dynamo.Stats{})

	step("Load", cs.Stats, func() error { _, err := cs.Load(storeCtx(t), "stats"); return err }, dynamo.Stats{Reads: 1})
	n := now.Unix()
	report := func(st *dynamo.BreakerStore, r breaker.Report) func() error {
		return func() error { _, err := st.Report(storeCtx(t), "stats", r); return err }
	}
	r := breaker.Report{Bucket: n, Requests: 1, Failures: 1, Samples: 1}
	step("Report starting a bucket", cs.Stats, report(cs, r), dynamo.Stats{Writes: 1})
	step("Report adding to it", cs.Stats, report(cs, r), dynamo.Stats{Writes: 1})
	// Another environment's store guesses that it starts the bucket: its
	// reset is refused, and it adds.
	cs2 := newBreakerStore(t, api, table)
	step("Report from another store", cs2.Stats, report(cs2, r), dynamo.Stats{Writes: 2, ConditionalFailures: 1})
	step("Report from it again", cs2.Stats, report(cs2, r), dynamo.Stats{Writes: 1})
	// A late report: the slot holds a newer bucket. Without a watch the
	// refusal is the answer; with one, known late, the watch is written.
	late := breaker.Report{Bucket: n - breaker.FleetSlots, Requests: 1, Failures: 1, Samples: 1}
	step("late Report", cs.Stats, report(cs, late), dynamo.Stats{Writes: 1, ConditionalFailures: 1})
	late.WatchUntil = now.Add(time.Minute)
	step("late Report with a watch", cs.Stats, report(cs, late), dynamo.Stats{Writes: 1})
	step("Transition", cs.Stats, func() error {
		_, err := cs.Transition(storeCtx(t), "stats", 0, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 1})
		return err
	}, dynamo.Stats{Writes: 1})
	step("Transition conflict", cs.Stats, func() error {
		_, err := cs.Transition(storeCtx(t), "stats", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
		if !errors.Is(err, breaker.ErrConflict) {
			t.Errorf("Transition from a stale epoch = %v, want ErrConflict", err)
		}
		return err
	}, dynamo.Stats{Writes: 1, ConditionalFailures: 1})
	step("Transition repeated (an SDK retry after a lost answer)", cs.Stats, func() error {
		snap, err := cs.Transition(storeCtx(t), "stats", 0, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 1})
		if err != nil || snap.State != breaker.HalfOpen || snap.Epoch != 1 {
			t.Errorf("repeating the transition that is stored = %+v, %v; want it reported as done", snap, err)
		}
		return err
	}, dynamo.Stats{Writes: 1, ConditionalFailures: 1})
	step("Report of the old epoch", cs.Stats, func() error {
		_, err := cs.Report(storeCtx(t), "stats", r)
		if !errors.Is(err, breaker.ErrConflict) {
			t.Errorf("Report of epoch 0 at epoch 1 = %v, want ErrConflict", err)
		}
		return err
	}, dynamo.Stats{Writes: 1, ConditionalFailures: 1})
	for i := range 3 {
		step("AcquireProbe granted", cs.Stats, func() error {
			_, err := cs.AcquireProbe(storeCtx(t), "stats", 1, 3, now, now.Add(time.Minute))
			return err
		}, dynamo.Stats{Writes: int64(i + 1), ConditionalFailures: int64(i)})
	}
	step("AcquireProbe denied", cs.Stats, func() error {
		_, err := cs.AcquireProbe(storeCtx(t), "stats", 1, 3, now, now.Add(time.Minute))
		return err
	}, dynamo.Stats{Writes: 3, ConditionalFailures: 3})
	step("SetOverride", cs.Stats, func() error {
		return cs.SetOverride(storeCtx(t), "stats", breaker.ForcedOpen, time.Time{})
	}, dynamo.Stats{Writes: 1})
	putItem(t, api, table, map[string]types.AttributeValue{"pk": avS("c#stats"), "state": avS("ajar"), "epoch": avN("1")})
	step("Load malformed", cs.Stats, func() error { _, err := cs.Load(storeCtx(t), "stats"); return err }, dynamo.Stats{Reads: 1, Malformed: 1})
}

// TestDynamoStoresOnRequest checks that the OnRequest hook sees every
// request with its operation, key and error.
func TestDynamoStoresOnRequest(t *testing.T) {
	api := newStoreClient(t)
	table := newTable(t)
	var (
		mu   sync.Mutex
		seen []dynamo.RequestInfo
	)
	hook := func(ri dynamo.RequestInfo) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ri)
	}
	bs, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{OnRequest: hook})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{OnRequest: hook})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)
	k := budget.Key{Name: "hook", Window: now}
	if _, err := bs.Apply(storeCtx(t), k, budget.Update{Take: 1, Expires: now.Add(time.Minute)}); !errors.Is(err, budget.ErrInsufficient) {
		t.Fatalf("Apply = %v, want ErrInsufficient", err)
	}
	if _, err := cs.Load(storeCtx(t), "hook"); err != nil {
		t.Fatal(err)
	}
	if err := cs.SetOverride(storeCtx(t), "hook", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatal(err)
	}
	want := []struct{ op, key string }{
		{"UpdateItem", fmt.Sprintf("b#hook#0#%d", now.UnixMilli())},
		{"BatchGetItem", "c#hook"},
		{"UpdateItem", "c#hook#override"},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("hook saw %d requests %+v, want %d", len(seen), seen, len(want))
	}
	for i, w := range want {
		if seen[i].Operation != w.op || seen[i].Key != w.key || seen[i].Duration <= 0 {
			t.Errorf("request %d = %+v, want %s on %s with a duration", i, seen[i], w.op, w.key)
		}
	}
	if !errors.As(seen[0].Err, new(*types.ConditionalCheckFailedException)) {
		t.Errorf("refused Apply's request error = %v, want a ConditionalCheckFailedException", seen[0].Err)
	}
	if seen[1].Err != nil || seen[2].Err != nil {
		t.Errorf("Load's and SetOverride's request errors = %v, %v; want nil", seen[1].Err, seen[2].Err)
	}
}

// TestDynamoBudgetShardsAndWindowsBound checks the property the global
// budget relies on against the real conditional writes: however many
// concurrent environments take from the shards of one window, the retries
// granted never exceed what was deposited plus the floors.
func TestDynamoBudgetShardsAndWindowsBound(t *testing.T) {
	const (
		shards    = 3
		floor     = 2  // per shard
		deposit   = 10 // per shard, made before the takes
		envs      = 6
		takesEach = 12
	)
	api := newStoreClient(t)
	table := newTable(t)
	st := newBudgetStore(t, api, table)
	now := time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)
	exp := now.Add(time.Minute)
	for s := range shards {
		if _, err := st.Apply(storeCtx(t), budget.Key{Name: "bound", Shard: s, Window: now}, budget.Update{Floor: floor, Deposit: deposit, Expires: exp}); err != nil {
			t.Fatalf("deposit to shard %d: %v", s, err)
		}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted int
		errs    []error
	)
	for e := range envs {
		wg.Go(func() {
			for i := range takesEach {
				k := budget.Key{Name: "bound", Shard: (e + i) % shards, Window: now}
				_, err := st.Apply(storeCtx(t), k, budget.Update{Floor: floor, Take: 1, Expires: exp})
				mu.Lock()
				switch {
				case err == nil:
					granted++
				case !errors.Is(err, budget.ErrInsufficient):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d takes failed, first: %v", len(errs), errs[0])
	}
	if want := shards * (floor + deposit); granted != want {
		t.Fatalf("granted %d of %d takes, want exactly the %d deposited plus floors", granted, envs*takesEach, want)
	}
	t.Logf("%d environments × %d takes over %d shards: %d granted = %d × (floor %d + deposit %d); store stats %+v",
		envs, takesEach, shards, granted, shards, floor, deposit, st.Stats())
}

// TestDynamoOperatorCommands runs the aws CLI commands that package
// dynamo's documentation gives operators (read from dynamo/doc.go, so the
// documentation cannot drift) against DynamoDB Local, through the SDK, and
// checks that BreakerStore.Load reads each override as the comment says.
func TestDynamoOperatorCommands(t *testing.T) {
	api := newAPI(t)
	table := newTable(t)
	st := newBreakerStore(t, newStoreClient(t), table)

	doc, err := os.ReadFile("../dynamo/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// '$(( ... ))' splices a shell computation into the JSON.
	shell := regexp.MustCompile(`'\$\(\(.*\)\)'`)
	const untilMs = 1_796_025_884_000
	cmd := regexp.MustCompile(`aws dynamodb (put-item|delete-item) --table-name herdguard --(item|key) '(.*)'$`)
	var puts, deletes int
	for _, line := range strings.Split(string(doc), "\n") {
		m := cmd.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		raw := shell.ReplaceAllString(m[3], strconv.Itoa(untilMs))
		var parsed map[string]map[string]string
		if err := json.Unmarshal([]byte(raw), &parsed); err != nil {
			t.Fatalf("documented command %q: its JSON does not parse: %v", line, err)
		}
		item := map[string]types.AttributeValue{}
		for name, typed := range parsed {
			for typ, v := range typed {
				switch typ {
				case "S":
					item[name] = avS(v)
				case "N":
					item[name] = avN(v)
				default:
					t.Fatalf("documented command %q: attribute %s has type %s", line, name, typ)
				}
			}
		}
		if pk := item["pk"]; fmt.Sprint(pk) != fmt.Sprint(avS("c#payments#override")) {
			t.Fatalf("documented command %q writes pk %v, not the override item of payments", line, pk)
		}
		if m[1] == "delete-item" {
			deletes++
			putItem(t, api, table, map[string]types.AttributeValue{"pk": avS("c#payments#override"), "override": avS("disabled")})
			if _, err := api.DeleteItem(callContext(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: item}); err != nil {
				t.Fatalf("documented command %q: %v", line, err)
			}
			if snap, err := st.Load(storeCtx(t), "payments"); err != nil || snap.Override != breaker.NoOverride {
				t.Fatalf("after %q Load = %+v, %v; want no override", line, snap, err)
			}
			continue
		}
		puts++
		putItem(t, api, table, item)
		want, err := layout.ParseOverride(parsed["override"]["S"])
		if err != nil {
			t.Fatalf("documented command %q: %v", line, err)
		}
		snap, err := st.Load(storeCtx(t), "payments")
		if err != nil || snap.Override != want {
			t.Fatalf("after %q Load = %+v, %v; want override %v", line, snap, err, want)
		}
		if _, ok := item["until"]; ok != !snap.OverrideUntil.IsZero() || (ok && snap.OverrideUntil.UnixMilli() != untilMs) {
			t.Fatalf("after %q Load's OverrideUntil = %v", line, snap.OverrideUntil)
		}
	}
	if puts != 5 || deletes != 1 {
		t.Fatalf("found %d put-item and %d delete-item commands in dynamo/doc.go, want 5 and 1", puts, deletes)
	}
}
