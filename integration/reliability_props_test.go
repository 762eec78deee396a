package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"pgregory.net/rapid"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/integration/faultproxy"
	"github.com/herdguard/herdguard/internal/memstore"
	"github.com/herdguard/herdguard/local"
)

// Property tests: random interleavings of many environments sharing one
// store, with store faults injected, checked after every step against the
// guarantees the documentation gives. Each property runs against the
// in-memory stores (relRapidCases cases) and against DynamoDB Local behind
// the fault proxy (relDynamoCases cases, each a fresh name in one table),
// where the faults include writes applied whose answer was lost, so that
// the DynamoDB client's one SDK retry applies a write twice: the proxy
// counts those retries, and the documented slack is checked against them.
// -rapid.checks and -rapid.steps override the numbers of cases and steps.

// relDynamoCases is the number of rapid cases run against DynamoDB Local.
const relDynamoCases = 25

// relRapidCheck runs prop with checks cases of steps actions on average
// (rapid's defaults are 100 and 30), unless -rapid.checks or -rapid.steps
// was given on the command line, which then wins, and without writing a
// fail file (unless -rapid.nofailfile was given). rapid takes both from
// flags only, which this sets for the duration of the check; the tests of
// this package do not run in parallel. Zero leaves a flag alone.
func relRapidCheck(t *testing.T, checks, steps int, prop func(*rapid.T)) {
	t.Helper()
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	set := func(name, v string) {
		f := flag.Lookup(name)
		if f == nil || v == "0" || explicit[name] {
			return
		}
		old := f.Value.String()
		if err := f.Value.Set(v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Value.Set(old) })
	}
	set("rapid.checks", strconv.Itoa(checks))
	set("rapid.steps", strconv.Itoa(steps))
	// A failure prints the seed that reproduces it (-rapid.seed); no fail
	// file is written into the source tree.
	set("rapid.nofailfile", "true")
	rapid.Check(t, prop)
}

// Cases and average actions per case against the in-memory stores and
// against DynamoDB Local.
const (
	relRapidCases  = 300
	relRapidSteps  = 200
	relDynamoSteps = 200
)

var errRelInjected = errors.New("injected store fault")

// relPropStart draws the time a property case starts at: up to 100 s past
// a multiple of 100 s a day ahead of the real clock. The items the stores
// write expire (TTL) a minute or two after their window, reckoned from
// these times: in the future, DynamoDB Local never deletes them during the
// case, which would make a window start again from its floor. Windows are
// aligned to the epoch and the base to 100 s, so a case's windows fall the
// same way whenever it is replayed.
func relPropStart(t *rapid.T) time.Time {
	const base = 100_000 // ms
	day := (time.Now().Add(24*time.Hour).UnixMilli()/base + 1) * base
	return time.UnixMilli(day + rapid.Int64Range(0, base).Draw(t, "startMs"))
}

// relFault is what a faulty store does to one call.
type relFault uint8

const (
	relFaultNone   relFault = iota
	relFaultBefore          // fail without reaching the store
	relFaultAfter           // reach the store, then lose the answer (a write that timed out after it was applied)
	// Faults injected by the fault proxy between the DynamoDB client and
	// DynamoDB Local, with the client's one SDK retry at work:
	relFaultProxyDrop          // every attempt dropped before DynamoDB: nothing applied
	relFaultProxyApplyDrop     // every attempt applied, its answer lost: applied up to twice, the call fails
	relFaultProxyApplyDropOnce // the first attempt applied and its answer lost, the SDK's retry answered: applied twice (or refused the second time), the call may succeed
)

// proxyFault returns the fault proxy's setting for f, if f is one.
func (f relFault) proxyFault() (faultproxy.Fault, bool) {
	switch f {
	case relFaultProxyDrop:
		return faultproxy.Fault{Kind: faultproxy.Drop}, true
	case relFaultProxyApplyDrop:
		return faultproxy.Fault{Kind: faultproxy.ApplyThenDrop}, true
	case relFaultProxyApplyDropOnce:
		return faultproxy.Fault{Kind: faultproxy.ApplyThenDrop, Attempts: 1}, true
	}
	return faultproxy.Fault{}, false
}

// Fault generators: three calls in five, or in eight, go through untouched.
var (
	relFaultGen      = rapid.SampledFrom([]relFault{relFaultNone, relFaultNone, relFaultNone, relFaultBefore, relFaultAfter})
	relProxyFaultGen = rapid.SampledFrom([]relFault{relFaultNone, relFaultNone, relFaultNone, relFaultBefore, relFaultAfter,
		relFaultProxyDrop, relFaultProxyApplyDrop, relFaultProxyApplyDropOnce})
)

// relInjector injects one fault per store call and measures what the call
// did to the table. With a proxy (the store is over DynamoDB Local behind
// it) the applications and the SDK's replays of applied writes are counted
// by the proxy: the property models are sequential, so the proxy's counters
// move only for the call under way. Without one, the inner store (in
// memory) applies a call exactly when it answers without error.
type relInjector struct {
	next   func() relFault   // nil: no faults; must be safe for concurrent use if the store is used so
	proxy  *faultproxy.Proxy // nil: an in-memory store
	faults atomic.Int64      // calls that failed because of an injected fault
}

// relCallResult is what one store call did.
type relCallResult struct {
	fault   relFault
	applied int64 // times the inner store applied it
	replays int64 // SDK retries that re-sent it after it had been applied
}

// do runs op, the inner store call, under the next fault.
func (in *relInjector) do(op func() error) (relCallResult, error) {
	r := relCallResult{fault: relFaultNone}
	if in.next != nil {
		r.fault = in.next()
	}
	if r.fault == relFaultBefore {
		in.faults.Add(1)
		return r, errRelInjected
	}
	var before faultproxy.Stats
	if in.proxy != nil {
		before = in.proxy.Stats()
		if pf, ok := r.fault.proxyFault(); ok {
			in.proxy.Set(pf)
		}
	}
	err := op()
	switch {
	case in.proxy != nil:
		in.proxy.Set(faultproxy.Fault{})
		d := in.proxy.Stats().Sub(before)
		r.applied, r.replays = d.Succeeded, d.Replays
		if _, ok := r.fault.proxyFault(); ok && err != nil {
			in.faults.Add(1)
		}
	case err == nil:
		r.applied = 1
	}
	if r.fault == relFaultAfter {
		in.faults.Add(1)
		err = fmt.Errorf("%w (after the store answered %v)", errRelInjected, err)
	}
	return r, err
}

// relFaultyBudgetStore wraps a budget.Store, injects faults and records
// what was really applied, window by window.
type relFaultyBudgetStore struct {
	inner      budget.Store
	perRequest int64
	inj        relInjector

	mu       sync.Mutex
	deposits map[int64]int64 // window start (Unix ms) -> allowance deposited, each application counted
	takes    map[int64]int64 // window start -> allowance taken, each application counted
	// believedTakes is the allowance taken by calls whose success reached
	// the Global: the most it may hand out.
	believedTakes map[int64]int64
	// dupSlack is the documented slack: one call's Deposit for every SDK
	// retry that re-sent a write already applied.
	dupSlack map[int64]int64
	// unbelieved is the allowance deposited by applications the Global
	// was not told of (a failed call that was applied, an SDK retry that
	// applied a write again).
	unbelieved int64
	shards     map[relShardKey]*relShard
}

type relShardKey struct {
	window int64
	shard  int
}

// relShard is what the table must hold for one shard item.
type relShard struct {
	key   budget.Key
	floor int64 // the floor the item was created with
	net   int64 // deposits - takes applied
}

func newRelFaultyBudgetStore(inner budget.Store, perRequest int64, next func() relFault, proxy *faultproxy.Proxy) *relFaultyBudgetStore {
	return &relFaultyBudgetStore{inner: inner, perRequest: perRequest, inj: relInjector{next: next, proxy: proxy},
		deposits: map[int64]int64{}, takes: map[int64]int64{}, believedTakes: map[int64]int64{}, dupSlack: map[int64]int64{},
		shards: map[relShardKey]*relShard{}}
}

func (s *relFaultyBudgetStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	var a int64
	r, err := s.inj.do(func() error {
		var err error
		a, err = s.inner.Apply(ctx, k, u)
		return err
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	w := k.Window.UnixMilli()
	believed := int64(0)
	if err == nil {
		believed = 1
		s.believedTakes[w] += u.Take
	}
	if r.applied < believed {
		return 0, fmt.Errorf("the store answered success for an update of %s that the table never applied (%+v)", k, r)
	}
	s.deposits[w] += u.Deposit * r.applied
	s.takes[w] += u.Take * r.applied
	s.dupSlack[w] += u.Deposit * r.replays
	s.unbelieved += u.Deposit * (r.applied - believed)
	if r.applied > 0 {
		sk := relShardKey{w, k.Shard}
		sh := s.shards[sk]
		if sh == nil {
			sh = &relShard{key: k, floor: u.Floor}
			s.shards[sk] = sh
		}
		sh.net += (u.Deposit - u.Take) * r.applied
	}
	if r.fault == relFaultAfter {
		return 0, err
	}
	return a, err
}

// relGlobalModel is the state of one Global property case.
type relGlobalModel struct {
	cfg        budget.GlobalConfig
	floor      int64 // effective floor, whole retries
	perRequest int64
	store      *relFaultyBudgetStore
	envs       []*budget.Global
	now        time.Time
	ctx        context.Context

	requests map[int64]int64 // window start (Unix ms) -> requests recorded
	granted  map[int64]int64 // window start -> grants
	returned map[int64]int64 // window start -> grants given back
	held     [][]relGrant    // per environment, grants not released yet
	total    int64           // requests recorded
}

type relGrant struct {
	rel    budget.Release
	window int64
}

// newRelGlobalModel draws a configuration and 2-8 environments over store.
// With proxy (store is over DynamoDB Local behind it) the faults include
// the proxy's, and the SDK's retries of writes applied whose answer was
// lost.
func newRelGlobalModel(t *rapid.T, ctx context.Context, store budget.Store, name string, proxy *faultproxy.Proxy) *relGlobalModel {
	ratio := rapid.SampledFrom([]float64{0.05, 0.1, 0.5, 1}).Draw(t, "ratio")
	floorCfg := rapid.IntRange(-1, 5).Draw(t, "floor")
	cfg := budget.GlobalConfig{
		Ratio:         ratio,
		Window:        time.Second,
		Floor:         floorCfg,
		Shards:        rapid.IntRange(1, 3).Draw(t, "shards"),
		LeaseSize:     rapid.IntRange(1, 4).Draw(t, "leaseSize"),
		FaultCooldown: rapid.SampledFrom([]time.Duration{-1, 200 * time.Millisecond}).Draw(t, "cooldown"),
		FailClosed:    rapid.Bool().Draw(t, "failClosed"),
		StoreTimeout:  5 * time.Second, // generous: DynamoDB Local under -race; faults are injected, not timed
	}
	m := &relGlobalModel{
		cfg:        cfg,
		perRequest: max(int64(math.Floor(ratio*float64(budget.AllowancePerRetry)+1e-6)), 1),
		ctx:        ctx,
		now:        relPropStart(t),
		requests:   map[int64]int64{},
		granted:    map[int64]int64{},
		returned:   map[int64]int64{},
	}
	switch {
	case floorCfg == 0:
		m.floor = budget.DefaultGlobalFloor
	case floorCfg > 0:
		m.floor = int64(floorCfg)
	}
	gen := relFaultGen
	if proxy != nil {
		gen = relProxyFaultGen
	}
	m.store = newRelFaultyBudgetStore(store, m.perRequest, func() relFault { return gen.Draw(t, "fault") }, proxy)
	envs := rapid.IntRange(2, 8).Draw(t, "envs")
	seed := rapid.Uint64().Draw(t, "seed")
	for i := range envs {
		c := cfg
		c.Rand = rand.New(rand.NewPCG(seed, uint64(i))).Float64
		c.Now = func() time.Time { return m.now }
		g, err := budget.NewGlobal(m.store, name, c)
		if err != nil {
			t.Fatalf("NewGlobal(%+v): %v", c, err)
		}
		m.envs = append(m.envs, g)
		m.held = append(m.held, nil)
	}
	return m
}

func (m *relGlobalModel) window() int64 {
	return m.envs[0].WindowOf(m.now).UnixMilli()
}

func (m *relGlobalModel) actions() map[string]func(*rapid.T) {
	env := func(t *rapid.T) int { return rapid.IntRange(0, len(m.envs)-1).Draw(t, "env") }
	return map[string]func(*rapid.T){
		"request": func(t *rapid.T) {
			i := env(t)
			n := rapid.IntRange(1, 30).Draw(t, "n")
			for range n {
				m.envs[i].RecordRequest(m.now)
			}
			m.requests[m.window()] += int64(n)
			m.total += int64(n)
		},
		"acquire": func(t *rapid.T) {
			i := env(t)
			kind := rapid.SampledFrom([]budget.Kind{budget.Transient, budget.Throttling}).Draw(t, "kind")
			rel, err := m.envs[i].AcquireRetry(m.ctx, m.now, kind)
			switch {
			case err == nil:
				w := m.window()
				m.granted[w]++
				m.held[i] = append(m.held[i], relGrant{rel, w})
			case errors.Is(err, budget.ErrExhausted), errors.Is(err, budget.ErrUnavailable):
				if rel != nil {
					t.Fatalf("AcquireRetry returned a Release with the error %v", err)
				}
			default:
				t.Fatalf("AcquireRetry: unexpected error %v", err)
			}
		},
		"release": func(t *rapid.T) {
			i := env(t)
			if len(m.held[i]) == 0 {
				t.Skip("nothing held")
			}
			j := rapid.IntRange(0, len(m.held[i])-1).Draw(t, "grant")
			g := m.held[i][j]
			m.held[i] = append(m.held[i][:j], m.held[i][j+1:]...)
			o := rapid.SampledFrom([]budget.Outcome{budget.RetryFailed, budget.RetrySucceeded, budget.RetryNotUsed}).Draw(t, "outcome")
			g.rel.Done(o)
			g.rel.Done(o) // a second call must change nothing
			if o == budget.RetryNotUsed {
				m.returned[g.window]++
			}
		},
		"flush": func(t *rapid.T) {
			_ = m.envs[env(t)].FlushAt(m.ctx, m.now)
		},
		"advance": func(t *rapid.T) {
			m.now = m.now.Add(time.Duration(rapid.Int64Range(0, int64(600*time.Millisecond)).Draw(t, "d")))
		},
		"": func(t *rapid.T) { m.check(t) },
	}
}

// check asserts, for every window, the documented bound
// G(w) <= Ratio × R(w) + Floor on grants not given back, with the
// documented slack of one Deposit for every SDK retry that re-sent a write
// already applied; that the allowance the store really received is never
// more than the requests earned plus that slack; that no retry was granted
// that the store did not give; and that the Global's accounting of what it
// reported agrees with what was applied.
func (m *relGlobalModel) check(t *rapid.T) {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	for w, g := range m.granted {
		used := g - m.returned[w]
		slack := m.store.dupSlack[w]
		limit := float64(m.perRequest*m.requests[w]+slack)/float64(budget.AllowancePerRetry) + float64(m.floor)
		if float64(used) > limit+1e-9 {
			t.Fatalf("window %d: %d retries granted and not given back, %d requests: above the bound Ratio × R + Floor + replayed deposits = %v × %d + %d + %.3f = %.3f",
				w, used, m.requests[w], m.cfg.Ratio, m.requests[w], m.floor, float64(slack)/float64(budget.AllowancePerRetry), limit)
		}
		// No grant the store did not give: every retry handed out came
		// from a take whose success the Global was told of.
		if used*budget.AllowancePerRetry > m.store.believedTakes[w] {
			t.Fatalf("window %d: %d retries granted and not given back, but the store's answers gave only %d millionths", w, used, m.store.believedTakes[w])
		}
	}
	var deposited int64
	for w, d := range m.store.deposits {
		deposited += d
		if limit := m.perRequest*m.requests[w] + m.store.dupSlack[w]; d > limit {
			t.Fatalf("window %d: the store received deposits of %d for %d requests (at most %d, replayed deposits %d included): requests counted twice",
				w, d, m.requests[w], limit, m.store.dupSlack[w])
		}
		if take := m.store.takes[w]; take > d+m.floor*budget.AllowancePerRetry {
			t.Fatalf("window %d: %d taken from the store, above deposits %d + floor", w, take, d)
		}
	}
	var reported, lost, granted, returned, leased int64
	for _, g := range m.envs {
		s := g.Stats()
		reported += s.ReportedRequests
		lost += s.LostRequests
		granted, returned, leased = s.Granted, s.Returned, s.LeasedRetries
		if granted-returned > leased {
			t.Fatalf("an environment handed out %d retries (granted %d, returned %d) but withdrew only %d from the store", granted-returned, granted, returned, leased)
		}
	}
	// Every request is deposited by the Global at most once, and only
	// lost with a store call that failed: what the store holds is exactly
	// the requests reported plus the deposits the Global was not told of
	// (failed calls that were applied, and SDK retries that applied a
	// write again).
	if want := m.perRequest*reported + m.store.unbelieved; deposited != want {
		t.Fatalf("the store holds deposits of %d; the environments reported %d requests (%d) and %d was applied unbeknown to them: the counts disagree",
			deposited, reported, m.perRequest*reported, m.store.unbelieved)
	}
	if reported+lost > m.total {
		t.Fatalf("%d requests reported and %d lost, but only %d recorded: some were counted twice", reported, lost, m.total)
	}
	if m.store.inj.faults.Load() == 0 && lost != 0 {
		t.Fatalf("%d requests lost without any store fault", lost)
	}
}

// checkTable compares what the model says each shard item must hold with
// what DynamoDB holds, read by api (not through the proxy): the proxy's
// accounting of applications is what the bounds above rest on.
func (m *relGlobalModel) checkTable(t *rapid.T, api *dynamodb.Client, table string) {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	for _, sh := range m.store.shards {
		pk := fmt.Sprintf("b#%s#%d#%d", sh.key.Name, sh.key.Shard, sh.key.Window.UnixMilli())
		got, ok, err := relReadNumber(m.ctx, api, table, pk, "allowance")
		if err != nil {
			t.Fatalf("reading %s: %v", pk, err)
		}
		if want := sh.floor + sh.net; !ok || got != want {
			t.Fatalf("item %s holds allowance %d (present: %v); the calls applied make it %d (floor %d + %d)", pk, got, ok, want, sh.floor, sh.net)
		}
	}
}

// relReadNumber reads a number attribute of the item pk with a strongly
// consistent GetItem.
func relReadNumber(ctx context.Context, api *dynamodb.Client, table, pk, attr string) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, false, err
	}
	n, ok := out.Item[attr].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, true, err
}

// relCaseClient returns a store client (dynamo.NewClient: one SDK retry, a
// retry quota of its own) through proxy for one rapid case, and a function
// that closes its idle connections. Each case gets its own, so that the
// SDK's retry quota, spent by the injected faults, starts full.
func relCaseClient(t *rapid.T, proxy *faultproxy.Proxy) (*dynamodb.Client, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c, err := dynamo.NewClient(ctx, dynamo.ClientOptions{
		Config:      &aws.Config{},
		Region:      "us-east-1",
		Endpoint:    proxy.URL(),
		Credentials: credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
	})
	if err != nil {
		t.Fatalf("dynamo.NewClient: %v", err)
	}
	return c, func() { dynamo.CloseIdleConnections(c) }
}

// relPropProxy starts a fault proxy in front of the shared DynamoDB Local
// for a property test, and a harness client that reads the table directly.
func relPropProxy(t *testing.T) (*faultproxy.Proxy, *dynamodb.Client) {
	t.Helper()
	proxy, err := faultproxy.New(dynamoEndpointOrSkip(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	t.Cleanup(proxy.CloseIdleConnections)
	return proxy, newAPI(t)
}

// TestReliabilityGlobalBoundProperty checks the fleet-wide bound of
// budget.Global under random interleavings of 2-8 environments, random
// configurations and store faults, against the in-memory store (faults
// before the store, and writes applied whose answer was lost) and, with
// fewer cases, DynamoDB Local behind the fault proxy (those faults plus the
// proxy's: requests dropped, and writes applied whose answer was lost on
// every attempt or on the first only, so that the DynamoDB client's one SDK
// retry applies a write a second time). The bound is checked with the
// documented slack, counted at the proxy: one Deposit per SDK retry of an
// applied write. At the end of each DynamoDB case every shard item is read
// back and must hold what the calls applied.
func TestReliabilityGlobalBoundProperty(t *testing.T) {
	relNoLeaks(t)
	t.Run("in-memory", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelGlobalModel(rt, context.Background(), local.NewBudgetStore(), "prop", nil)
			rt.Repeat(m.actions())
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		proxy, direct := relPropProxy(t)
		table := newTable(t)
		var n atomic.Int64
		var sum relPropSummary
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			api, closeIdle := relCaseClient(rt, proxy)
			defer closeIdle()
			st, err := dynamo.NewBudgetStore(api, table, dynamo.BudgetStoreConfig{})
			if err != nil {
				rt.Fatal(err)
			}
			p0 := proxy.Stats()
			m := newRelGlobalModel(rt, context.Background(), st, fmt.Sprintf("prop-%d", n.Add(1)), proxy)
			rt.Repeat(m.actions())
			m.checkTable(rt, direct, table)
			sum.add(proxy.Stats().Sub(p0), m.store.inj.faults.Load())
		})
		t.Logf("DynamoDB cases: %v", &sum)
	})
}

// relPropSummary totals what the fault proxy saw over the cases of a
// property test, to show that the faults were exercised.
type relPropSummary struct {
	mu     sync.Mutex
	cases  int
	faults int64
	stats  faultproxy.Stats
}

func (s *relPropSummary) add(d faultproxy.Stats, faults int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cases++
	s.faults += faults
	s.stats.Requests += d.Requests
	s.stats.Succeeded += d.Succeeded
	s.stats.Injected += d.Injected
	s.stats.Discarded += d.Discarded
	s.stats.DiscardedSucceeded += d.DiscardedSucceeded
	s.stats.Replays += d.Replays
}

func (s *relPropSummary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d cases (failing ones included, as rapid shrinks them), %d store calls failed by a fault; %d DynamoDB requests, %d applied, %d answered by a fault, %d applied with the answer lost, %d SDK retries of an applied write",
		s.cases, s.faults, s.stats.Requests, s.stats.Succeeded, s.stats.Injected, s.stats.DiscardedSucceeded, s.stats.Replays)
}

// dynamoEndpointOrSkip returns the shared DynamoDB Local's endpoint (the
// test is skipped under -short, and fails without one).
func dynamoEndpointOrSkip(t *testing.T) string {
	t.Helper()
	requireDynamoDB(t)
	return dynamoEndpoint
}

// TestReliabilityGlobalBoundConcurrent runs environments in real goroutines
// against one store with injected latency and faults: whatever the
// scheduler does, grants per window stay within the bound. The plan of
// each environment is drawn by rapid; its interleaving is the scheduler's.
func TestReliabilityGlobalBoundConcurrent(t *testing.T) {
	relNoLeaks(t)
	relRapidCheck(t, 30, 0, func(rt *rapid.T) {
		const window = 200 * time.Millisecond
		ratio := rapid.SampledFrom([]float64{0.1, 0.5}).Draw(rt, "ratio")
		floor := int64(rapid.IntRange(1, 4).Draw(rt, "floor"))
		perRequest := max(int64(math.Floor(ratio*float64(budget.AllowancePerRetry)+1e-6)), 1)
		var faults atomic.Uint64
		faults.Store(rapid.Uint64().Draw(rt, "faultSeed"))
		inner := memstore.NewBudgetStore(memstore.Options{Fault: func(ctx context.Context, _ string) error {
			// Short waits widen the races between environments.
			time.Sleep(time.Duration(faults.Add(7919)%200) * time.Microsecond)
			return nil
		}})
		store := newRelFaultyBudgetStore(inner, perRequest, func() relFault {
			return relFault(faults.Add(104729) % 7 % 3) // mostly none, some before, some after
		}, nil)
		envs := rapid.IntRange(2, 8).Draw(rt, "envs")
		cfg := budget.GlobalConfig{Ratio: ratio, Window: window, Floor: int(floor), Shards: rapid.IntRange(1, 2).Draw(rt, "shards"),
			LeaseSize: rapid.IntRange(1, 4).Draw(rt, "lease"), FaultCooldown: -1, StoreTimeout: time.Second}
		type op struct {
			kind int // 0 request, 1 acquire, 2 flush
			n    int
		}
		plans := make([][]op, envs)
		for i := range plans {
			plans[i] = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) op {
				return op{kind: rapid.IntRange(0, 2).Draw(t, "kind"), n: rapid.IntRange(1, 20).Draw(t, "n")}
			}), 5, 40).Draw(rt, fmt.Sprintf("plan%d", i))
		}
		var (
			mu       sync.Mutex
			requests = map[int64]int64{}
			granted  = map[int64]int64{}
			wg       sync.WaitGroup
		)
		base := time.Now()
		for i := range envs {
			g, err := budget.NewGlobal(store, "concurrent", cfg)
			if err != nil {
				rt.Fatal(err)
			}
			wg.Go(func() {
				for _, o := range plans[i] {
					// Real time, so that environments meet in the same
					// windows in whatever order the scheduler picks.
					now := time.Now()
					w := g.WindowOf(now).UnixMilli()
					switch o.kind {
					case 0:
						for range o.n {
							g.RecordRequest(now)
						}
						mu.Lock()
						requests[w] += int64(o.n)
						mu.Unlock()
					case 1:
						if rel, err := g.AcquireRetry(context.Background(), now, budget.Transient); err == nil {
							mu.Lock()
							granted[w]++
							mu.Unlock()
							rel.Done(budget.RetryFailed)
						}
					case 2:
						_ = g.FlushAt(context.Background(), now)
					}
				}
			})
		}
		wg.Wait()
		if time.Since(base) > time.Minute {
			rt.Fatalf("a case took %v", time.Since(base))
		}
		for w, g := range granted {
			limit := float64(perRequest*requests[w])/float64(budget.AllowancePerRetry) + float64(floor)
			if float64(g) > limit+1e-9 {
				rt.Fatalf("window %d: %d retries granted for %d requests; bound %.3f", w, g, requests[w], limit)
			}
		}
		store.mu.Lock()
		defer store.mu.Unlock()
		for w, d := range store.deposits {
			if d > perRequest*requests[w] {
				rt.Fatalf("window %d: deposits %d for %d requests: counted twice", w, d, requests[w])
			}
		}
	})
}

// relTally is a pair of fleet-window counts.
type relTally struct{ s, f int64 }

func (a relTally) plus(b relTally, k int64) relTally { return relTally{a.s + k*b.s, a.f + k*b.f} }
func (a relTally) minus(b relTally) relTally         { return relTally{a.s - b.s, a.f - b.f} }
func (a relTally) le(b relTally) bool                { return a.s <= b.s && a.f <= b.f }
func (a relTally) String() string                    { return fmt.Sprintf("%d successes, %d failures", a.s, a.f) }

// relEnvWindow names one environment's counts in one fleet window.
type relEnvWindow struct {
	env    string
	window int64
}

// relFaultyBreakerStore wraps a breaker.Store, injects faults, and records
// what the breakers handed to Report and what was really added to each
// fleet window (by window start, Unix ms), and every write made.
type relFaultyBreakerStore struct {
	inner breaker.Store
	inj   relInjector
	// loaded, if set, is called after a Load that succeeded (the models
	// are sequential: it is the environment of the action under way).
	loaded func()
	// trace, if set, is told of every Load and Report, for a failure's
	// message.
	trace  func(format string, args ...any)
	writes int64

	handed   map[int64]relTally        // counts of every Report made
	handedBy map[relEnvWindow]relTally // the same, by environment
	applied  map[int64]relTally        // counts added to the table, each application counted
	// lostBefore holds the counts of Reports that failed before they were
	// applied (the documented loss), dup those re-sent by SDK retries of
	// an applied Report (the documented slack).
	lostBefore, dup map[int64]relTally
	// windows are the fleet windows written, for reading them back.
	windows map[int64]time.Time
}

func newRelFaultyBreakerStore(inner breaker.Store, next func() relFault, proxy *faultproxy.Proxy) *relFaultyBreakerStore {
	return &relFaultyBreakerStore{
		inner: inner, inj: relInjector{next: next, proxy: proxy},
		handed: map[int64]relTally{}, handedBy: map[relEnvWindow]relTally{}, applied: map[int64]relTally{},
		lostBefore: map[int64]relTally{}, dup: map[int64]relTally{}, windows: map[int64]time.Time{},
	}
}

// storeErr makes an injected fault a breaker store error.
func (s *relFaultyBreakerStore) storeErr(r relCallResult, err error) error {
	if err != nil && (r.fault == relFaultBefore || r.fault == relFaultAfter) {
		return fmt.Errorf("%w: %w", breaker.ErrStore, err)
	}
	return err
}

func (s *relFaultyBreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	var snap breaker.Snapshot
	r, err := s.inj.do(func() error {
		var err error
		snap, err = s.inner.Load(ctx, name)
		return err
	})
	if s.trace != nil {
		s.trace("Load: fault %d, err %v", r.fault, err)
	}
	if err != nil {
		return breaker.Snapshot{}, s.storeErr(r, err)
	}
	if s.loaded != nil {
		s.loaded()
	}
	return snap, nil
}

func (s *relFaultyBreakerStore) Report(ctx context.Context, name string, window time.Time, env string, succ, fail int64, expires time.Time) (breaker.Tally, error) {
	s.writes++
	var tally breaker.Tally
	r, err := s.inj.do(func() error {
		var err error
		tally, err = s.inner.Report(ctx, name, window, env, succ, fail, expires)
		return err
	})
	w, c := window.UnixMilli(), relTally{succ, fail}
	s.windows[w] = window
	s.handed[w] = s.handed[w].plus(c, 1)
	s.handedBy[relEnvWindow{env, w}] = s.handedBy[relEnvWindow{env, w}].plus(c, 1)
	s.applied[w] = s.applied[w].plus(c, r.applied)
	s.dup[w] = s.dup[w].plus(c, r.replays)
	if r.applied == 0 {
		s.lostBefore[w] = s.lostBefore[w].plus(c, 1)
	}
	if s.trace != nil {
		s.trace("Report %s window %d: %v, fault %d, applied %d times, %d replays, err %v", env, w, c, r.fault, r.applied, r.replays, err)
	}
	if err != nil {
		return breaker.Tally{}, s.storeErr(r, err)
	}
	return tally, nil
}

func (s *relFaultyBreakerStore) Transition(ctx context.Context, name string, prev uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	s.writes++
	var snap breaker.Snapshot
	r, err := s.inj.do(func() error {
		var err error
		snap, err = s.inner.Transition(ctx, name, prev, next)
		return err
	})
	if r.fault == relFaultAfter || r.fault == relFaultBefore {
		return breaker.Snapshot{}, s.storeErr(r, err)
	}
	return snap, err
}

func (s *relFaultyBreakerStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	s.writes++
	var slot int
	r, err := s.inj.do(func() error {
		var err error
		slot, err = s.inner.AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
		return err
	})
	if r.fault == relFaultAfter || r.fault == relFaultBefore {
		return 0, s.storeErr(r, err)
	}
	return slot, err
}

func (s *relFaultyBreakerStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	s.writes++
	return s.inner.SetOverride(ctx, name, o, until)
}

// checkCounts asserts, for every fleet window, that what the table
// received is what the breakers handed to Report, less the Reports that
// failed before they were applied, plus at most the documented slack (the
// counts of each Report an SDK retry re-sent after it had been applied),
// and that no breaker handed more than its environment saw (seen, by
// environment and window).
func (s *relFaultyBreakerStore) checkCounts(t *rapid.T, seen map[relEnvWindow]relTally) {
	for ew, h := range s.handedBy {
		if !h.le(seen[ew]) {
			t.Fatalf("%s handed %v to Reports for fleet window %d, but saw %v in it: counts sent twice", ew.env, h, ew.window, seen[ew])
		}
	}
	for w, a := range s.applied {
		h := s.handed[w]
		if !a.le(h.plus(s.dup[w], 1)) {
			t.Fatalf("fleet window %d holds %v; the breakers reported %v, and SDK retries of applied Reports re-sent %v: counted twice beyond the documented bound", w, a, h, s.dup[w])
		}
		if !h.minus(s.lostBefore[w]).le(a) {
			t.Fatalf("fleet window %d holds %v; the breakers reported %v, of which %v in Reports that failed before they were applied: counts lost", w, a, h, s.lostBefore[w])
		}
	}
}

// checkTable compares every fleet window written with what DynamoDB holds,
// read by api (not through the proxy).
func (s *relFaultyBreakerStore) checkTable(t *rapid.T, ctx context.Context, api *dynamodb.Client, table, name string) {
	for w := range s.windows {
		a := s.applied[w]
		pk := fmt.Sprintf("c#%s#w#%d", name, w)
		succ, okS, err := relReadNumber(ctx, api, table, pk, "successes")
		if err != nil {
			t.Fatalf("reading %s: %v", pk, err)
		}
		fail, okF, err := relReadNumber(ctx, api, table, pk, "failures")
		if err != nil {
			t.Fatalf("reading %s: %v", pk, err)
		}
		if (relTally{succ, fail}) != a {
			t.Fatalf("item %s holds %d successes and %d failures (present: %v, %v); the Reports applied make it %v", pk, succ, fail, okS, okF, a)
		}
	}
}

// relBreakerModel is the state of one breaker property case.
type relBreakerModel struct {
	store  *relFaultyBreakerStore
	envs   []*relBreakerEnv
	now    time.Time
	window time.Duration
	ctx    context.Context
	// probeSuccesses counts successful probes fleet-wide (a Done with
	// Success on a permit for which Probe() was true, not yet stale).
	probeSuccesses int
	// seen counts the outcomes passed to Done (and not dropped as stale),
	// by environment and fleet window.
	seen map[relEnvWindow]relTally
}

type relBreakerEnv struct {
	name   string
	b      *breaker.Breaker
	events []relStateEvent
	// openMark is probeSuccesses when this environment last entered Open.
	openMark int
	permits  []relPermit
}

type relStateEvent struct{ from, to breaker.State }

type relPermit struct {
	p      breaker.Permit
	events int // len(events) when the permit was issued
}

// newRelBreakerModel draws a configuration and 2-5 environments sharing
// one breaker over store. With faults, store calls fail at random; with
// proxy (store is over DynamoDB Local behind it) the faults include the
// proxy's.
func newRelBreakerModel(t *rapid.T, ctx context.Context, store breaker.Store, name string, faults bool, proxy *faultproxy.Proxy) *relBreakerModel {
	m := &relBreakerModel{
		ctx:    ctx,
		window: time.Second,
		now:    relPropStart(t),
		seen:   map[relEnvWindow]relTally{},
	}
	var next func() relFault
	if faults {
		gen := relFaultGen
		if proxy != nil {
			gen = relProxyFaultGen
		}
		next = func() relFault { return gen.Draw(t, "fault") }
	}
	m.store = newRelFaultyBreakerStore(store, next, proxy)
	s := breaker.Settings{
		Store:          m.store,
		MinRequests:    int64(rapid.IntRange(1, 6).Draw(t, "minRequests")),
		FailureRatio:   rapid.SampledFrom([]float64{0.3, 0.5, 1}).Draw(t, "failureRatio"),
		MinReporters:   rapid.IntRange(1, 3).Draw(t, "minReporters"),
		Window:         m.window,
		WindowSlots:    10,
		OpenDuration:   time.Duration(rapid.IntRange(1, 5).Draw(t, "openTenths")) * 100 * time.Millisecond,
		Jitter:         breaker.NoJitter,
		HalfOpenProbes: rapid.IntRange(1, 2).Draw(t, "probes"),
		ProbeLease:     300 * time.Millisecond,
		CacheTTL:       time.Duration(rapid.IntRange(1, 3).Draw(t, "cacheTenths")) * 100 * time.Millisecond,
		ReportInterval: 50 * time.Millisecond,
		StoreTimeout:   5 * time.Second, // faults are injected, not timed
	}
	n := rapid.IntRange(2, 5).Draw(t, "envs")
	for i := range n {
		e := &relBreakerEnv{name: fmt.Sprintf("env-%d", i)}
		si := s
		si.Env = e.name
		si.OnStateChange = func(_ string, from, to breaker.State, _ breaker.Counts) {
			e.events = append(e.events, relStateEvent{from, to})
			if to == breaker.Open {
				e.openMark = m.probeSuccesses
			}
			if to == breaker.Closed && (from == breaker.Open || from == breaker.HalfOpen) && m.probeSuccesses <= e.openMark {
				t.Fatalf("env %d went %v -> closed without a successful probe since it opened (probe successes: %d then, %d now); its states: %v",
					i, from, e.openMark, m.probeSuccesses, e.events)
			}
		}
		b, err := breaker.New(name, si)
		if err != nil {
			t.Fatalf("breaker.New: %v", err)
		}
		e.b = b
		m.envs = append(m.envs, e)
	}
	return m
}

func (m *relBreakerModel) fleetWindow() int64 {
	return m.now.UnixMilli() / m.window.Milliseconds() * m.window.Milliseconds()
}

// saw counts an outcome of environment e in the current fleet window.
func (m *relBreakerModel) saw(e *relBreakerEnv, o breaker.Outcome) {
	k := relEnvWindow{e.name, m.fleetWindow()}
	switch o {
	case breaker.Success:
		m.seen[k] = m.seen[k].plus(relTally{s: 1}, 1)
	case breaker.Failure:
		m.seen[k] = m.seen[k].plus(relTally{f: 1}, 1)
	}
}

func (m *relBreakerModel) actions() map[string]func(*rapid.T) {
	env := func(t *rapid.T) (int, *relBreakerEnv) {
		i := rapid.IntRange(0, len(m.envs)-1).Draw(t, "env")
		return i, m.envs[i]
	}
	return map[string]func(*rapid.T){
		"allow": func(t *rapid.T) {
			_, e := env(t)
			p, err := e.b.Allow(m.ctx, m.now)
			if err != nil {
				if !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("Allow: %v, want nil or ErrOpen", err)
				}
				return
			}
			e.permits = append(e.permits, relPermit{p, len(e.events)})
		},
		"done": func(t *rapid.T) {
			i, e := env(t)
			if len(e.permits) == 0 {
				t.Skip("no permit")
			}
			j := rapid.IntRange(0, len(e.permits)-1).Draw(t, "permit")
			p := e.permits[j]
			e.permits = append(e.permits[:j], e.permits[j+1:]...)
			o := rapid.SampledFrom([]breaker.Outcome{breaker.Success, breaker.Failure, breaker.Excluded}).Draw(t, "outcome")
			stale := p.events < len(e.events)
			before, events, writes := e.b.Counts(), len(e.events), m.store.writes
			if p.p.Probe() && o == breaker.Success && !stale {
				m.probeSuccesses++
			}
			if !stale {
				m.saw(e, o)
			}
			e.b.Done(m.ctx, m.now, p.p, o)
			if stale {
				// A result from before a state change is dropped: no
				// count, no transition, no store write.
				if after := e.b.Counts(); after != before || len(e.events) != events || m.store.writes != writes {
					t.Fatalf("env %d: Done(%v) of a permit issued before a state change changed counts %+v -> %+v, events %d -> %d, store writes %d -> %d",
						i, o, before, after, events, len(e.events), writes, m.store.writes)
				}
			}
		},
		"burst": func(t *rapid.T) {
			// Calls allowed and finished at once, mostly failing, so that
			// the fleet trips, probes and recovers often.
			_, e := env(t)
			n := rapid.IntRange(1, 10).Draw(t, "n")
			failPct := rapid.SampledFrom([]int{0, 50, 100}).Draw(t, "failPct")
			for range n {
				p, err := e.b.Allow(m.ctx, m.now)
				if err != nil {
					if !errors.Is(err, breaker.ErrOpen) {
						t.Fatalf("Allow: %v, want nil or ErrOpen", err)
					}
					continue
				}
				o := breaker.Success
				if rapid.IntRange(0, 99).Draw(t, "roll") < failPct {
					o = breaker.Failure
				}
				if p.Probe() && o == breaker.Success {
					m.probeSuccesses++
				}
				m.saw(e, o)
				e.b.Done(m.ctx, m.now, p, o)
				m.now = m.now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "gapMs")) * time.Millisecond)
			}
		},
		"state": func(t *rapid.T) {
			_, e := env(t)
			_ = e.b.State(m.now)
		},
		"flush": func(t *rapid.T) {
			_, e := env(t)
			_ = e.b.Flush(m.ctx)
		},
		"advance": func(t *rapid.T) {
			m.now = m.now.Add(time.Duration(rapid.Int64Range(0, int64(400*time.Millisecond)).Draw(t, "d")))
		},
		"": func(t *rapid.T) { m.store.checkCounts(t, m.seen) },
	}
}

// finish flushes every environment with the store's faults off and checks
// the counts once more: nothing a breaker handed to Report is missing from
// the table unless its Report failed before it was applied.
func (m *relBreakerModel) finish(t *rapid.T) {
	m.store.inj.next = nil
	for _, e := range m.envs {
		_ = e.b.Flush(m.ctx)
	}
	m.store.checkCounts(t, m.seen)
}

// TestReliabilityBreakerProperty checks, under random interleavings of 2-5
// environments sharing one breaker and random store faults, that no
// environment goes from open (or half-open) to closed unless a probe
// succeeded somewhere in the fleet since it opened, that a result from
// before a state change is dropped (no count, no transition, no store
// write), and that the counts of the fleet windows are neither lost nor
// counted twice beyond the documented bound: no breaker hands Report more
// than its environment saw in a window (a report whose answer was lost is
// not sent again), and each window holds what was handed to Report, less
// the Reports that failed before they were applied, plus at most the
// counts of each Report an SDK retry re-sent after it had been applied
// (counted at the fault proxy). Against the in-memory store with and
// without faults, and against DynamoDB Local behind the fault proxy, with
// its faults, in fewer cases; at the end of each DynamoDB case every
// fleet window is read back and must hold what the Reports applied.
// TestReliabilityBreakerReportsProperty checks that outcomes are not lost
// before they reach Report.
func TestReliabilityBreakerProperty(t *testing.T) {
	relNoLeaks(t)
	t.Run("in-memory", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelBreakerModel(rt, context.Background(), local.NewBreakerStore(), "prop", false, nil)
			rt.Repeat(m.actions())
			m.finish(rt)
		})
	})
	t.Run("in-memory with faults", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelBreakerModel(rt, context.Background(), local.NewBreakerStore(), "prop", true, nil)
			rt.Repeat(m.actions())
			m.finish(rt)
		})
	})
	t.Run("dynamodb with faults", func(t *testing.T) {
		proxy, direct := relPropProxy(t)
		table := newTable(t)
		var n atomic.Int64
		var sum relPropSummary
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			api, closeIdle := relCaseClient(rt, proxy)
			defer closeIdle()
			st, err := dynamo.NewBreakerStore(api, table, dynamo.BreakerStoreConfig{})
			if err != nil {
				rt.Fatal(err)
			}
			name := fmt.Sprintf("prop-%d", n.Add(1))
			p0 := proxy.Stats()
			m := newRelBreakerModel(rt, context.Background(), st, name, true, proxy)
			rt.Repeat(m.actions())
			m.finish(rt)
			m.store.checkTable(rt, m.ctx, direct, table, name)
			sum.add(proxy.Stats().Sub(p0), m.store.inj.faults.Load())
		})
		t.Logf("DynamoDB cases: %v", &sum)
	})
}

// relReportsModel is the state of one case of
// TestReliabilityBreakerReportsProperty: environments sharing a breaker
// that never trips, so that every outcome stays in one generation and what
// each environment owes its fleet windows follows from the documentation
// alone.
type relReportsModel struct {
	store  *relFaultyBreakerStore
	envs   []*relReportsEnv
	cur    *relReportsEnv // the environment of the action under way
	now    time.Time
	window time.Duration
	ctx    context.Context
	cfg    breaker.Settings
	// seen counts the outcomes of each environment by fleet window, and
	// owed those the breaker must hand to Report (see call).
	seen, owed map[relEnvWindow]relTally
	// log is what happened, for a failure's message.
	log []string
}

type relReportsEnv struct {
	name     string
	b        *breaker.Breaker
	degraded bool // a store fault since its last successful Load
}

// logf notes an event of the case at the model's time.
func (m *relReportsModel) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("  %s @%d: ", m.cur.name, m.now.UnixMilli()%100_000)+fmt.Sprintf(format, args...))
}

func newRelReportsModel(t *rapid.T, ctx context.Context, store breaker.Store, name string, proxy *faultproxy.Proxy) *relReportsModel {
	m := &relReportsModel{
		ctx:    ctx,
		window: time.Second,
		now:    relPropStart(t),
		seen:   map[relEnvWindow]relTally{},
		owed:   map[relEnvWindow]relTally{},
	}
	gen := relFaultGen
	if proxy != nil {
		gen = relProxyFaultGen
	}
	m.store = newRelFaultyBreakerStore(store, func() relFault { return gen.Draw(t, "fault") }, proxy)
	m.store.loaded = func() { m.cur.degraded = false }
	m.store.trace = m.logf
	m.cfg = breaker.Settings{
		Store: m.store,
		// Never trips, neither the fleet nor an environment on its local
		// state machine: no state change, one generation.
		MinRequests:    1 << 40,
		FailureRatio:   1,
		MinReporters:   1,
		Window:         m.window,
		WindowSlots:    10,
		CacheTTL:       time.Duration(rapid.IntRange(1, 3).Draw(t, "cacheTenths")) * 100 * time.Millisecond,
		ReportInterval: time.Duration(rapid.IntRange(1, 4).Draw(t, "reportIntervalTwentieths")) * 50 * time.Millisecond,
		StoreTimeout:   5 * time.Second, // faults are injected, not timed
	}
	for i := range rapid.IntRange(2, 5).Draw(t, "envs") {
		e := &relReportsEnv{name: fmt.Sprintf("env-%d", i)}
		si := m.cfg
		si.Env = e.name
		si.OnStoreError = func(string, error) { m.faulted(e) }
		si.OnStateChange = func(_ string, from, to breaker.State, _ breaker.Counts) {
			t.Fatalf("%s went %v -> %v: this breaker cannot trip", e.name, from, to)
		}
		b, err := breaker.New(name, si)
		if err != nil {
			t.Fatalf("breaker.New: %v", err)
		}
		e.b = b
		m.envs = append(m.envs, e)
	}
	return m
}

func (m *relReportsModel) fleetWindow() int64 {
	return m.now.UnixMilli() / m.window.Milliseconds() * m.window.Milliseconds()
}

// faulted applies what a store fault does to e: it switches to its local
// state machine, writing nothing until a Load succeeds, and drops the
// counts it had gathered and not yet handed to Report. Those it owes from
// then on are those it has handed (until a later failure, back in the
// fleet, gathers the window's counts again).
func (m *relReportsModel) faulted(e *relReportsEnv) {
	m.logf("store fault: degraded, owes only what it handed")
	e.degraded = true
	for k := range m.owed {
		if k.env == e.name {
			m.owed[k] = m.store.handedBy[k]
		}
	}
}

// call is one call of environment e with outcome o. A failure that an
// environment in the fleet (not degraded) sees makes it owe its fleet
// window every outcome of the window so far: gathering starts at a
// window's first failure with the counts of the window before it (from
// the rolling window, less what was handed to Report already), and goes
// on until the window ends; a Report goes out at most once per
// ReportInterval, or at Flush; the counts gathered for an ended window are
// reported first. Outcomes after an environment's last such failure in a
// window are not owed: a batch without failures is never reported.
func (m *relReportsModel) call(t *rapid.T, e *relReportsEnv, o breaker.Outcome) {
	m.cur = e
	p, err := e.b.Allow(m.ctx, m.now)
	if err != nil {
		t.Fatalf("%s: Allow: %v; this breaker cannot open", e.name, err)
	}
	k := relEnvWindow{e.name, m.fleetWindow()}
	m.logf("%v (degraded: %v)", o, e.degraded)
	if o == breaker.Success {
		m.seen[k] = m.seen[k].plus(relTally{s: 1}, 1)
	} else {
		m.seen[k] = m.seen[k].plus(relTally{f: 1}, 1)
		if !e.degraded {
			m.owed[k] = m.seen[k]
		}
	}
	e.b.Done(m.ctx, m.now, p, o) // a fault in its Report calls faulted
}

func (m *relReportsModel) actions() map[string]func(*rapid.T) {
	env := func(t *rapid.T) *relReportsEnv {
		return m.envs[rapid.IntRange(0, len(m.envs)-1).Draw(t, "env")]
	}
	return map[string]func(*rapid.T){
		"call": func(t *rapid.T) {
			o := rapid.SampledFrom([]breaker.Outcome{breaker.Success, breaker.Success, breaker.Failure}).Draw(t, "outcome")
			m.call(t, env(t), o)
		},
		"burst": func(t *rapid.T) {
			// Calls of one environment a few milliseconds apart, within a
			// ReportInterval and across window boundaries.
			e := env(t)
			for range rapid.IntRange(1, 8).Draw(t, "n") {
				o := rapid.SampledFrom([]breaker.Outcome{breaker.Success, breaker.Failure}).Draw(t, "outcome")
				m.call(t, e, o)
				m.now = m.now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "gapMs")) * time.Millisecond)
			}
		},
		"flush": func(t *rapid.T) {
			e := env(t)
			m.cur = e
			m.logf("Flush")
			_ = e.b.Flush(m.ctx)
		},
		"advance": func(t *rapid.T) {
			m.now = m.now.Add(time.Duration(rapid.Int64Range(0, int64(400*time.Millisecond)).Draw(t, "d")))
		},
		"idle": func(t *rapid.T) {
			// The fleet idle for one to three windows, as Lambda
			// environments are between bursts of invocations.
			m.now = m.now.Add(time.Duration(rapid.Int64Range(int64(time.Second), int64(3*time.Second)).Draw(t, "d")))
		},
		"": func(t *rapid.T) { m.store.checkCounts(t, m.seen) },
	}
}

// finish turns the faults off, flushes every environment, then moves to a
// new fleet window past CacheTTL and ReportInterval, where each
// environment makes one failing call (which reloads the fleet state,
// ending degraded mode, and reports the counts gathered for the last
// window) and flushes again. Then, for every earlier window, each
// environment must have handed Report at least what it owed and no more
// than it saw, and the table must hold at least what was owed, less the
// Reports that failed before they were applied.
func (m *relReportsModel) finish(t *rapid.T) {
	m.store.inj.next = nil
	for _, e := range m.envs {
		m.cur = e
		_ = e.b.Flush(m.ctx)
	}
	settle := time.UnixMilli(m.fleetWindow()).Add(m.window + max(m.cfg.CacheTTL, m.cfg.ReportInterval) + time.Millisecond)
	m.now = settle
	last := m.fleetWindow()
	for _, e := range m.envs {
		m.call(t, e, breaker.Failure)
		_ = e.b.Flush(m.ctx)
	}
	m.store.checkCounts(t, m.seen)
	owed := map[int64]relTally{}
	for k, o := range m.owed {
		if k.window >= last {
			continue
		}
		if h := m.store.handedBy[k]; !o.le(h) {
			t.Fatalf("%s owed fleet window %d %v (it saw %v) but handed %v to Report: counts lost; what happened (times in ms modulo 100 s):\n%s",
				k.env, k.window%100_000, o, m.seen[k], h, m.history(k.env))
		}
		owed[k.window] = owed[k.window].plus(o, 1)
	}
	for w, o := range owed {
		if a, lost := m.store.applied[w], m.store.lostBefore[w]; !o.minus(lost).le(a) {
			t.Fatalf("fleet window %d holds %v; the environments owed it %v, of which %v went in Reports that failed before they were applied: counts lost", w, a, o, lost)
		}
	}
}

// history returns the log lines of environment env.
func (m *relReportsModel) history(env string) string {
	var b strings.Builder
	for _, l := range m.log {
		if strings.HasPrefix(l, "  "+env+" @") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestReliabilityBreakerReportsProperty checks that a shared breaker's
// fleet-window counts are not lost beyond the documented bound, under
// random interleavings of 2-5 environments whose breaker never trips and
// random store faults (in memory; and against DynamoDB Local behind the
// fault proxy, with requests dropped and writes applied whose answer was
// lost, in fewer cases). What an environment owes a window follows the
// documentation: once it sees a failure in the fleet, the window's counts
// so far; a store fault drops what was gathered and not handed to Report,
// and a later failure back in the fleet gathers it again. After a final
// flush with faults off, every environment has handed Report at least what
// it owed (and, at every step, no more than it saw), and every window
// holds at least that, less the Reports that failed before they were
// applied, and at most what was handed plus what SDK retries re-sent.
func TestReliabilityBreakerReportsProperty(t *testing.T) {
	relNoLeaks(t)
	t.Run("in-memory with faults", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelReportsModel(rt, context.Background(), local.NewBreakerStore(), "prop", nil)
			rt.Repeat(m.actions())
			m.finish(rt)
		})
	})
	t.Run("dynamodb with faults", func(t *testing.T) {
		proxy, direct := relPropProxy(t)
		table := newTable(t)
		var n atomic.Int64
		var sum relPropSummary
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			api, closeIdle := relCaseClient(rt, proxy)
			defer closeIdle()
			st, err := dynamo.NewBreakerStore(api, table, dynamo.BreakerStoreConfig{})
			if err != nil {
				rt.Fatal(err)
			}
			name := fmt.Sprintf("reports-%d", n.Add(1))
			p0 := proxy.Stats()
			m := newRelReportsModel(rt, context.Background(), st, name, proxy)
			rt.Repeat(m.actions())
			m.finish(rt)
			m.store.checkTable(rt, m.ctx, direct, table, name)
			sum.add(proxy.Stats().Sub(p0), m.store.inj.faults.Load())
		})
		t.Logf("DynamoDB cases: %v", &sum)
	})
}

// TestReliabilityBreakerEndedWindowRemainder is the smallest case of
// TestReliabilityBreakerReportsProperty's "counts lost" found so far, with
// no store fault at all: a failure reported at 980 ms into a fleet window,
// a second one at 990 ms (gathered: ReportInterval has not passed), a
// third at 10 ms into the next window (the first window's remainder is set
// aside for its own Report; still within ReportInterval, so nothing is
// sent), and then the environment idle until the middle of the window
// after. Its next call, and a Flush, must still send the first window's
// remainder: the failure at 990 ms is owed to it.
func TestReliabilityBreakerEndedWindowRemainder(t *testing.T) {
	store := newRelFaultyBreakerStore(local.NewBreakerStore(), nil, nil)
	b, err := breaker.New("remainder", breaker.Settings{
		Store: store, Env: "env-0",
		MinRequests: 1 << 40, FailureRatio: 1, // never trips
		Window: time.Second, WindowSlots: 10,
		ReportInterval: 50 * time.Millisecond,
		CacheTTL:       100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	w0 := time.UnixMilli((time.Now().Add(24*time.Hour).UnixMilli()/1000 + 1) * 1000)
	ctx := context.Background()
	for _, at := range []time.Duration{980 * time.Millisecond, 990 * time.Millisecond, 1010 * time.Millisecond, 2500 * time.Millisecond} {
		now := w0.Add(at)
		p, err := b.Allow(ctx, now)
		if err != nil {
			t.Fatalf("Allow at %v: %v", at, err)
		}
		b.Done(ctx, now, p, breaker.Failure)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i, want := range []int64{2, 1} {
		w := w0.Add(time.Duration(i) * time.Second).UnixMilli()
		got := store.handedBy[relEnvWindow{"env-0", w}]
		t.Logf("fleet window %d: saw %d failures, handed %v to Report", i, want, got)
		if got.f != want {
			t.Errorf("fleet window %d: %d failures handed to Report, want the %d the environment saw", i, got.f, want)
		}
	}
}
