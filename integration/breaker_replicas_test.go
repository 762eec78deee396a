package integration

import (
	"context"
	"errors"
	"slices"
	"strconv"
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
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/readspread"
)

// throttleStateReads is an API that answers DynamoDB's throttling error to
// every BatchGetItem of the state item key while on is set, as DynamoDB
// does past the item's 3,000 read units a second.
type throttleStateReads struct {
	dynamo.API
	key string
	on  atomic.Bool
}

func (a *throttleStateReads) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for _, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			if pk, _ := k[layout.AttrPK].(*types.AttributeValueMemberS); a.on.Load() && pk != nil && pk.Value == a.key {
				return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("throttled by the test")}
			}
		}
	}
	return a.API.BatchGetItem(ctx, in, opts...)
}

// requestLog records the requests a store makes (OnRequest).
type requestLog struct {
	mu  sync.Mutex
	log []dynamo.RequestInfo
}

func (l *requestLog) add(r dynamo.RequestInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, r)
}

// take returns the requests since the last take, as "Op key".
func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.log {
		out = append(out, r.Operation+" "+r.Key)
	}
	l.log = nil
	return out
}

// TestBreakerReadReplicas runs the read spreading of a dynamo.BreakerStore
// against DynamoDB Local: a store whose read of the state item was
// throttled reads the read replicas in turn, writes each one it finds
// missing or stale from the items themselves, answers from a fresh one
// with one request, never answers an epoch older than one it has seen,
// carries the override, and goes back to the items themselves once the
// spread has lapsed. A store that was never throttled reads the items.
func TestBreakerReadReplicas(t *testing.T) {
	table := newTable(t)
	client := newStoreClient(t)
	const name = "replicas"
	t0 := time.UnixMilli(time.Now().UnixMilli())
	var now atomic.Int64
	now.Store(t0.UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	at := func(d time.Duration) { now.Store(t0.Add(d).UnixMilli()) }

	api := &throttleStateReads{API: client, key: layout.StateKey(name)}
	var log requestLog
	a, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{Now: clock, Rand: func() float64 { return 0 }, OnRequest: log.add})
	if err != nil {
		t.Fatal(err)
	}
	b := newBreakerStore(t, client, table)

	items := "BatchGetItem " + layout.StateKey(name) // the request's first key
	replica := func(i int) string { return layout.ReplicaKey(name, i) }
	load := func(what string, wantEpoch uint64, wantRequests ...string) breaker.Snapshot {
		t.Helper()
		snap, err := a.Load(callContext(t), name)
		if err != nil {
			t.Fatalf("%s: Load: %v", what, err)
		}
		if snap.Epoch != wantEpoch {
			t.Errorf("%s: Load answered epoch %d, want %d", what, snap.Epoch, wantEpoch)
		}
		if got := log.take(); !slices.Equal(got, wantRequests) {
			t.Errorf("%s: requests %q, want %q", what, got, wantRequests)
		}
		return snap
	}
	readThrough := func(i int) []string {
		return []string{"BatchGetItem " + replica(i), items, "UpdateItem " + replica(i)}
	}

	openUntil := t0.Add(30 * time.Second)
	if _, err := b.Transition(callContext(t), name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: openUntil, Reopens: 1}); err != nil {
		t.Fatalf("Transition to open: %v", err)
	}
	load("before any throttle", 1, items)

	api.on.Store(true)
	if _, err := a.Load(callContext(t), name); !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
		t.Fatalf("throttled Load: err = %v, want budget.ErrThrottled and breaker.ErrStore", err)
	}
	log.take()
	api.on.Store(false)

	for i := range readspread.MinReplicas {
		load("first read of each replica", 1, readThrough(i)...)
	}
	rep := getItem(t, client, table, replica(3))
	if got, ok := rep[layout.AttrCopiedAt].(*types.AttributeValueMemberN); !ok || got.Value != formatMilli(t0) {
		t.Errorf("replica 3's copied_at = %v, want %s", rep[layout.AttrCopiedAt], formatMilli(t0))
	}
	if st, _ := rep[layout.AttrState].(*types.AttributeValueMemberS); st == nil || st.Value != breaker.Open.String() {
		t.Errorf("replica 3's state = %v, want open", rep[layout.AttrState])
	}

	// Another store's write is seen within readspread.MaxAge: replica 0
	// is 100 ms old and answers alone.
	if _, err := b.Transition(callContext(t), name, 1, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 2, OpenUntil: openUntil, Reopens: 1}); err != nil {
		t.Fatalf("Transition to half-open: %v", err)
	}
	at(100 * time.Millisecond)
	load("a fresh replica", 1, "BatchGetItem "+replica(0))

	// This store's own write is never undone by a replica: replica 1 is
	// fresh by age but holds epoch 1, older than the 3 it wrote.
	if _, err := a.Transition(callContext(t), name, 2, breaker.Snapshot{State: breaker.Closed, Epoch: 3}); err != nil {
		t.Fatalf("Transition to closed: %v", err)
	}
	log.take()
	at(200 * time.Millisecond)
	load("a replica older than the store's own write", 3, readThrough(1)...)

	if err := b.SetOverride(callContext(t), name, breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatalf("SetOverride: %v", err)
	}
	at(readspread.MaxAge + 200*time.Millisecond)
	if snap := load("a replica past MaxAge", 3, readThrough(2)...); snap.Override != breaker.ForcedOpen {
		t.Errorf("read through: override %v, want %v", snap.Override, breaker.ForcedOpen)
	}
	at(readspread.MaxAge + 300*time.Millisecond)
	for i := 3; i < readspread.MinReplicas+2; i++ {
		load("second round", 3, readThrough(i%readspread.MinReplicas)...)
	}
	if snap := load("the replica copied with the override", 3, "BatchGetItem "+replica(2)); snap.Override != breaker.ForcedOpen || snap.State != breaker.Closed {
		t.Errorf("from the replica: state %v, override %v; want closed, %v", snap.State, snap.Override, breaker.ForcedOpen)
	}

	// Every slot of counts is copied: another store reports, a round of
	// read-throughs copies the counts into every replica, and a fresh one
	// answers them as the state item holds them.
	for i := range breaker.FleetSlots {
		r := breaker.Report{Epoch: 3, Bucket: t0.UnixMilli()/1000 + int64(i), Requests: 40 + int64(i), Successes: 30, Failures: 10 + int64(i), Samples: 10}
		if _, err := b.Report(callContext(t), name, r); err != nil {
			t.Fatalf("Report: %v", err)
		}
	}
	want, err := b.Load(callContext(t), name)
	if err != nil {
		t.Fatal(err)
	}
	round := 2*readspread.MaxAge + 400*time.Millisecond
	at(round)
	for i := range readspread.MinReplicas {
		load("third round", 3, readThrough((3+i)%readspread.MinReplicas)...)
	}
	at(round + 100*time.Millisecond)
	if snap := load("a replica with every slot", 3, "BatchGetItem "+replica(3)); snap.Buckets != want.Buckets || snap.Override != breaker.ForcedOpen {
		t.Errorf("from the replica: buckets %+v, override %v; want %+v, %v", snap.Buckets, snap.Override, want.Buckets, breaker.ForcedOpen)
	}

	// A replica dated ahead by a clock running fast answers nobody and is
	// replaced: store c, 10 s ahead, rewrites replica 0 (to it, copied 10 s
	// ago), and a has it read through again.
	var cnow atomic.Int64
	cnow.Store(t0.Add(round + 10*time.Second).UnixMilli())
	c, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{Now: func() time.Time { return time.UnixMilli(cnow.Load()) }, Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	api.on.Store(true)
	if _, err := c.Load(callContext(t), name); !errors.Is(err, budget.ErrThrottled) {
		t.Fatalf("throttled Load of store c: %v", err)
	}
	api.on.Store(false)
	if _, err := c.Load(callContext(t), name); err != nil {
		t.Fatalf("store c: %v", err)
	}
	if got := getItem(t, client, table, replica(0))[layout.AttrCopiedAt]; got.(*types.AttributeValueMemberN).Value != formatMilli(time.UnixMilli(cnow.Load())) {
		t.Fatalf("store c did not rewrite replica 0: copied_at %v", got)
	}
	for i := 4; i < readspread.MinReplicas; i++ {
		load("fresh replicas", 3, "BatchGetItem "+replica(i))
	}
	load("a replica dated ahead", 3, readThrough(0)...)
	if got := getItem(t, client, table, replica(0))[layout.AttrCopiedAt]; got.(*types.AttributeValueMemberN).Value != formatMilli(clock()) {
		t.Errorf("replica 0 dated ahead was not replaced: copied_at %v, want %s", got, formatMilli(clock()))
	}

	at(readspread.Hold + time.Second)
	load("after the spread lapsed", 3, items)

	// A store that was never throttled reads the items themselves, and
	// answers the same.
	if snap, err := b.Load(callContext(t), name); err != nil || snap.Epoch != 3 || snap.Override != breaker.ForcedOpen {
		t.Errorf("unthrottled store: Load = %+v, %v; want epoch 3 with %v", snap, err, breaker.ForcedOpen)
	}
}

func formatMilli(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
