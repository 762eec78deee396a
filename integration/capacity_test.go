package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/integration/internal/faultproxy"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/memstore"
)

// newCapacityProxy starts a fault proxy in front of DynamoDB Local that
// bills every item request with meter at now (DynamoDB's capacity model:
// faultproxy.Capacity), and closes it when the test ends.
func newCapacityProxy(t testing.TB, meter *capacity.Meter, now func() time.Time) *faultproxy.Proxy {
	t.Helper()
	requireDynamoDB(t)
	p, err := faultproxy.New(dynamoEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.SetCapacity(faultproxy.Capacity{Meter: meter, Now: now})
	return p
}

// newStoreClientAt is newStoreClient for another endpoint, such as a proxy.
// A request may take up to callTimeout, as the harness's other clients
// allow, rather than dynamo.NewClient's 5 s: DynamoDB Local on an
// overloaded two-core machine has answered slower than that, and these
// tests assert what the stores do, not how fast.
func newStoreClientAt(t testing.TB, endpoint string) *dynamodb.Client {
	t.Helper()
	c, err := dynamo.NewClient(callContext(t), dynamo.ClientOptions{
		Config:         &aws.Config{},
		Region:         "us-east-1",
		Endpoint:       endpoint,
		Credentials:    credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
		RequestTimeout: callTimeout,
	})
	if err != nil {
		t.Fatalf("dynamo.NewClient: %v", err)
	}
	t.Cleanup(func() { closeIdle(c) })
	return c
}

// logCapacity prints what a capacity model measured over a run.
func logCapacity(t testing.TB, what string, m *capacity.Meter, p *faultproxy.Proxy) {
	t.Helper()
	s := m.Stats()
	t.Logf("%s: DynamoDB capacity model: hottest item %.1f write units/s (%s), %.1f read units/s (%s); %d writes = %.1f WCU, %d reads = %.1f RCU; throttled requests %d (%d writes, %d reads)",
		what, s.PeakItemWriteUnits, s.HottestWriteItem, s.PeakItemReadUnits, s.HottestReadItem,
		s.Writes, s.WriteUnits, s.Reads, s.ReadUnits, s.Throttled(), s.ThrottledWrites, s.ThrottledReads)
	if p != nil {
		ps := p.Stats()
		t.Logf("%s: proxy: %d requests throttled, %d BatchGetItem keys unprocessed; units of %d requests checked against DynamoDB Local's ConsumedCapacity, %d disagreed",
			what, ps.Throttled, ps.Unprocessed, ps.Checked, ps.Disagreed)
	}
}

// The same operations, on the in-memory stores with a Meter and on the
// dynamo stores through the capacity proxy, are billed the same units: the
// in-memory model bills what DynamoDB (Local) bills for the items the dynamo
// stores write, and the proxy's sizes agree with DynamoDB Local's
// ConsumedCapacity wherever it can compare them.
func TestCapacityModelMatchesDynamoDBLocal(t *testing.T) {
	table := newTable(t)
	clock := time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)
	now := func() time.Time { return clock } // one second for both meters: no throttle, peaks comparable
	proxyMeter := capacity.NewMeter(capacity.Config{})
	proxy := newCapacityProxy(t, proxyMeter, now)
	api := newStoreClientAt(t, proxy.URL())
	dbs := newBudgetStore(t, api, table)
	dcs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{Rand: func() float64 { return 0 }}) // slots from 0, as memstore
	if err != nil {
		t.Fatal(err)
	}
	dcs2 := newBreakerStore(t, api, table) // another environment's store
	memMeter := capacity.NewMeter(capacity.Config{})
	mbs := memstore.NewBudgetStore(memstore.Options{Meter: memMeter, Now: now})
	mcs := memstore.NewBreakerStore(memstore.Options{Meter: memMeter, Now: now})

	ctx := context.Background()
	k := budget.Key{Name: "capacity", Shard: 1, Window: clock}
	exp := clock.Add(time.Minute)
	run := func(bs budget.Store, cs, cs2 breaker.Store) error {
		for _, u := range []budget.Update{
			{Floor: 3_000_000, Deposit: 100_000, Take: 1_000_000, Expires: exp},
			{Floor: 3_000_000, Deposit: 200_000, Take: 1_000_000, Expires: exp},
			{Floor: 3_000_000, Take: 5_000_000, Expires: exp}, // refused
			{Floor: 3_000_000, Deposit: 7_000_000, Expires: exp},
		} {
			if _, err := bs.Apply(ctx, k, u); err != nil && !errors.Is(err, budget.ErrInsufficient) {
				return err
			}
		}
		if _, err := bs.Apply(ctx, budget.Key{Name: "capacity", Shard: 2, Window: clock}, budget.Update{Take: 1, Expires: exp}); !errors.Is(err, budget.ErrInsufficient) {
			return fmt.Errorf("a take from a missing shard with no floor: %v", err)
		}
		if _, err := cs.Load(ctx, "capacity"); err != nil {
			return err
		}
		// 60 Reports of two environments into four buckets of the state
		// item: the first of a bucket resets its slot, the others add to
		// it, and an environment that guessed the slot wrong pays a
		// refused write first. Then a late one, refused.
		n := clock.Unix()
		for i := range 60 {
			r := breaker.Report{Bucket: n + int64(i/15), Requests: 3, Successes: int64(i % 3), Failures: 1, Samples: 2}
			if i%7 == 0 {
				r.WatchUntil = clock.Add(20 * time.Second)
			}
			if _, err := []breaker.Store{cs, cs2}[i%2].Report(ctx, "capacity", r); err != nil {
				return err
			}
		}
		if _, err := cs2.Report(ctx, "capacity", breaker.Report{Bucket: n - breaker.FleetSlots, Requests: 1, Failures: 1, Samples: 1}); err != nil {
			return err
		}
		if _, err := cs.Transition(ctx, "capacity", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, Reopens: 1, OpenUntil: clock.Add(30 * time.Second)}); err != nil {
			return err
		}
		if _, err := cs.Transition(ctx, "capacity", 0, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 1}); !errors.Is(err, breaker.ErrConflict) {
			return fmt.Errorf("a stale transition: %v", err)
		}
		if err := cs.SetOverride(ctx, "capacity", breaker.ForcedOpen, clock.Add(5*time.Second)); err != nil {
			return err
		}
		if _, err := cs.Load(ctx, "capacity"); err != nil {
			return err
		}
		for range 4 { // three slots taken, then denied
			if _, err := cs.AcquireProbe(ctx, "capacity", 1, 3, clock, clock.Add(time.Second)); err != nil && !errors.Is(err, breaker.ErrProbeDenied) {
				return err
			}
		}
		return nil
	}
	if err := run(mbs, mcs, mcs.Client()); err != nil {
		t.Fatalf("in memory: %v", err)
	}
	if err := run(dbs, dcs, dcs2); err != nil {
		t.Fatalf("on DynamoDB Local: %v", err)
	}
	mem, dyn := memMeter.Stats(), proxyMeter.Stats()
	logCapacity(t, "in memory", memMeter, nil)
	logCapacity(t, "DynamoDB Local", proxyMeter, proxy)
	if mem.Writes != dyn.Writes || mem.Reads != dyn.Reads || mem.WriteUnits != dyn.WriteUnits || mem.ReadUnits != dyn.ReadUnits ||
		mem.PeakItemWriteUnits != dyn.PeakItemWriteUnits || mem.PeakItemReadUnits != dyn.PeakItemReadUnits {
		t.Errorf("in memory %+v\non DynamoDB Local %+v\nwant the same requests and units", mem, dyn)
	}
	if want := table + "/" + layout.StateKey("capacity"); dyn.HottestWriteItem != want || mem.HottestWriteItem != layout.StateKey("capacity") {
		t.Errorf("hottest write items %q (memory), %q (DynamoDB Local); want the breaker state", mem.HottestWriteItem, dyn.HottestWriteItem)
	}
	ps := proxy.Stats()
	if ps.Checked < 60 || ps.Disagreed != 0 {
		t.Errorf("proxy compared %d requests' units with DynamoDB Local's, %d disagreed; want every Report compared, none disagreeing", ps.Checked, ps.Disagreed)
	}
	// What DynamoDB Local reported to the stores themselves, for writes
	// that succeeded (it reports nothing for refused ones).
	ds, bsStats := dcs.Stats(), dbs.Stats()
	t.Logf("dynamo stores' Stats: budget %+v; breaker %+v", bsStats, ds)
	if ds.WriteUnits == 0 || bsStats.WriteUnits == 0 {
		t.Errorf("the dynamo stores recorded no consumed capacity: budget %+v, breaker %+v", bsStats, ds)
	}
}

// The proxy throttles a hot item at the limit: past 1,000 write units in
// one second it answers ProvisionedThroughputExceededException without
// forwarding, the dynamo store's error satisfies budget.ErrThrottled, other
// items are served, and the next second the item is served again.
func TestCapacityProxyThrottlesHotItem(t *testing.T) {
	table := newTable(t)
	start := time.UnixMilli(time.Now().UnixMilli()).Truncate(time.Second)
	var offset atomic.Int64 // virtual time past start
	now := func() time.Time { return start.Add(time.Duration(offset.Load())) }
	meter := capacity.NewMeter(capacity.Config{Throttle: true})
	proxy := newCapacityProxy(t, meter, now)
	api := newStoreClientAt(t, proxy.URL())
	bs := newBudgetStore(t, api, table)
	ctx := context.Background()
	hot := budget.Key{Name: "hot", Window: start}
	exp := start.Add(time.Minute)

	// 1,000 one-unit deposits fit in the second; 8 at a time to be quick.
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < capacity.ItemWriteUnitsPerSecond; i += 8 {
				if _, err := bs.Apply(ctx, hot, budget.Update{Deposit: 1, Expires: exp}); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of 1,000 one-unit writes in one second failed (first: %v); want none", n, firstErr.Load())
	}
	before := bs.Stats()
	_, err := bs.Apply(ctx, hot, budget.Update{Deposit: 1, Expires: exp})
	if !errors.Is(err, budget.ErrThrottled) || errors.Is(err, budget.ErrInsufficient) {
		t.Fatalf("the 1,001st write in the second: %v; want an error satisfying budget.ErrThrottled", err)
	}
	var ptee *types.ProvisionedThroughputExceededException
	if !errors.As(err, &ptee) {
		t.Errorf("the throttle is not DynamoDB's ProvisionedThroughputExceededException: %v", err)
	}
	if d := bs.Stats().Throttled - before.Throttled; d != 1 {
		t.Errorf("the store counted %d throttled requests, want 1", d)
	}
	if got, err := bs.Apply(ctx, budget.Key{Name: "hot", Shard: 1, Window: start}, budget.Update{Deposit: 1, Expires: exp}); err != nil || got != 1 {
		t.Fatalf("another item in the hot second: %d, %v", got, err)
	}
	offset.Store(int64(time.Second))
	got, err := bs.Apply(ctx, hot, budget.Update{Deposit: 1, Expires: exp})
	if err != nil || got != capacity.ItemWriteUnitsPerSecond+1 {
		t.Fatalf("the next second: %d, %v; want %d (the throttled deposit never reached the table)", got, err, capacity.ItemWriteUnitsPerSecond+1)
	}
	s := meter.Stats()
	if s.PeakItemWriteUnits != capacity.ItemWriteUnitsPerSecond || s.ThrottledWrites < 1 {
		t.Errorf("meter %+v: want a peak of exactly 1,000 write units and the throttles counted", s)
	}
	// The SDK's one retry of a throttle is throttled too.
	if ps := proxy.Stats(); ps.Throttled != s.ThrottledWrites || ps.Throttled < 1 || ps.Throttled > 2 {
		t.Errorf("proxy throttled %d requests, meter %d; want the same, 1 or 2 (with the SDK's retry)", ps.Throttled, s.ThrottledWrites)
	}
	logCapacity(t, "hot budget item", meter, proxy)
}

// A breaker's Load reads two items: when only the state item is hot, the
// proxy forwards the read of the other and returns the state item's key
// unprocessed, as DynamoDB does; the breaker store reports a throttle.
func TestCapacityProxyThrottlesHalfABatch(t *testing.T) {
	table := newTable(t)
	start := time.UnixMilli(time.Now().UnixMilli()).Truncate(time.Second)
	meter := capacity.NewMeter(capacity.Config{Throttle: true, ReadUnitsPerSecond: 10})
	proxy := newCapacityProxy(t, meter, func() time.Time { return start })
	api := newStoreClientAt(t, proxy.URL())
	cs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.Transition(ctx, "half", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: start.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// Heat the state item alone (the Transition wrote it and read
	// nothing): ten strongly consistent reads, one unit each.
	for i := range 10 {
		_, err := api.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(table),
			Key:            map[string]types.AttributeValue{layout.AttrPK: &types.AttributeValueMemberS{Value: layout.StateKey("half")}},
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			t.Fatalf("GetItem %d: %v", i, err)
		}
	}
	_, err = cs.Load(ctx, "half")
	if !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("Load with a hot state item: %v; want a store error satisfying budget.ErrThrottled", err)
	}
	ps := proxy.Stats()
	if ps.Unprocessed < 1 {
		t.Errorf("proxy %+v: want the state item's key returned unprocessed", ps)
	}
	if st := cs.Stats(); st.Throttled != 1 || st.Errors != 0 {
		t.Errorf("breaker store %+v: want 1 throttled Load (unprocessed keys are an answer, not an error)", st)
	}
	logCapacity(t, "hot state item", meter, proxy)
}
