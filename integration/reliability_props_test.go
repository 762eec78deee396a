package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
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
	"github.com/herdguard/herdguard/integration/internal/faultproxy"
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
	// carried is, per window, the requests of the window before that the
	// documented bound lets the environments carry into it (see
	// relEnvStore).
	carried map[int64]int64
	held    [][]relGrant   // per environment, grants not released yet
	envLog  []*relEnvStore // per environment, the store it writes through
	total   int64          // requests recorded
}

// relEnvStore is the store one environment's Global writes through. It
// follows the environment (whose calls the model makes one at a time) to
// count the requests the documented bound lets it carry: a store call in
// window w that was not refused nor throttled (applied, or of unknown
// fate) deposits every request of w it holds and, if the environment was
// engaged in w-1 (asked for a retry in w-1 or w-2), every request of w-1
// recorded since its last such call in w-1: those are carried into w.
type relEnvStore struct {
	budget.Store
	m       *relGlobalModel
	asked   map[int64]bool  // window start -> AcquireRetry called in it
	pending map[int64]int64 // window start -> requests since the last such call in it
}

func (e *relEnvStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	a, err := e.Store.Apply(ctx, k, u)
	if errors.Is(err, budget.ErrInsufficient) || errors.Is(err, budget.ErrThrottled) {
		return a, err // nothing applied: what it carried is still pending
	}
	w, win := k.Window.UnixMilli(), e.m.cfg.Window.Milliseconds()
	e.pending[w] = 0
	if e.asked[w-win] || e.asked[w-2*win] {
		e.m.carried[w] += e.pending[w-win]
		e.pending[w-win] = 0
	}
	return a, err
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
		Shards:        rapid.IntRange(0, 3).Draw(t, "shards"), // 0: the spread sizes itself
		LeaseSize:     rapid.IntRange(1, 4).Draw(t, "leaseSize"),
		FaultCooldown: rapid.SampledFrom([]time.Duration{-1, 200 * time.Millisecond}).Draw(t, "cooldown"),
		FailOpen:      rapid.Bool().Draw(t, "failOpen"),
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
		carried:    map[int64]int64{},
	}
	switch {
	case floorCfg == 0:
		m.floor = defaultGlobalFloor
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
		es := &relEnvStore{Store: m.store, m: m, asked: map[int64]bool{}, pending: map[int64]int64{}}
		g, err := budget.NewGlobal(es, name, c)
		if err != nil {
			t.Fatalf("NewGlobal(%+v): %v", c, err)
		}
		m.envs = append(m.envs, g)
		m.envLog = append(m.envLog, es)
		m.held = append(m.held, nil)
	}
	return m
}

func (m *relGlobalModel) window() int64 {
	return m.envs[0].WindowStart(m.now).UnixMilli()
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
			m.envLog[i].pending[m.window()] += int64(n)
			m.total += int64(n)
		},
		"acquire": func(t *rapid.T) {
			i := env(t)
			kind := rapid.SampledFrom([]budget.Kind{budget.Transient, budget.Throttling}).Draw(t, "kind")
			m.envLog[i].asked[m.window()] = true
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
			_ = m.envs[env(t)].Flush(m.ctx, m.now)
		},
		"advance": func(t *rapid.T) {
			m.now = m.now.Add(time.Duration(rapid.Int64Range(0, int64(600*time.Millisecond)).Draw(t, "d")))
		},
		"": func(t *rapid.T) { m.check(t) },
	}
}

// check asserts, for every window, the documented bound
// G(w) <= Ratio × (R(w) + C(w)) + Floor on grants not given back, C(w)
// the requests of w-1 carried into w (counted by relEnvStore), with the
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
		earned := m.requests[w] + m.carried[w]
		limit := float64(m.perRequest*earned+slack)/float64(budget.AllowancePerRetry) + float64(m.floor)
		if float64(used) > limit+1e-9 {
			t.Fatalf("window %d: %d retries granted and not given back, %d requests, %d carried: above the bound Ratio × (R + C) + Floor + replayed deposits = %v × %d + %d + %.3f = %.3f",
				w, used, m.requests[w], m.carried[w], m.cfg.Ratio, earned, m.floor, float64(slack)/float64(budget.AllowancePerRetry), limit)
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
		if limit := m.perRequest*(m.requests[w]+m.carried[w]) + m.store.dupSlack[w]; d > limit {
			t.Fatalf("window %d: the store received deposits of %d for %d requests and %d carried (at most %d, replayed deposits %d included): requests counted twice",
				w, d, m.requests[w], m.carried[w], limit, m.store.dupSlack[w])
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
	return c, func() { closeIdle(c) }
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
			st, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{})
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
		cfg := budget.GlobalConfig{Ratio: ratio, Window: window, Floor: int(floor), Shards: rapid.IntRange(0, 2).Draw(rt, "shards"),
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
					w := g.WindowStart(now).UnixMilli()
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
						_ = g.Flush(context.Background(), now)
					}
				}
			})
		}
		wg.Wait()
		if time.Since(base) > time.Minute {
			rt.Fatalf("a case took %v", time.Since(base))
		}
		// The documented bound: G(w) <= Ratio × (R(w) + C(w)) + Floor,
		// where C(w) <= R(w-1) are requests of w-1 carried into w; each
		// request is deposited at most once, in its window or the next.
		prev := func(w int64) int64 { return w - window.Milliseconds() }
		for w, g := range granted {
			limit := float64(perRequest*(requests[w]+requests[prev(w)]))/float64(budget.AllowancePerRetry) + float64(floor)
			if float64(g) > limit+1e-9 {
				rt.Fatalf("window %d: %d retries granted for %d requests (%d in the window before); bound %.3f", w, g, requests[w], requests[prev(w)], limit)
			}
		}
		store.mu.Lock()
		defer store.mu.Unlock()
		seen := maps.Clone(requests)
		maps.Copy(seen, store.deposits)
		maps.Copy(seen, granted)
		windows := slices.Sorted(maps.Keys(seen))
		var deposited, recorded, grants int64
		for i, w := range windows {
			d := store.deposits[w]
			if d > perRequest*(requests[w]+requests[prev(w)]) {
				rt.Fatalf("window %d: deposits %d for %d requests and %d in the window before: counted twice", w, d, requests[w], requests[prev(w)])
			}
			deposited, recorded, grants = deposited+d, recorded+requests[w], grants+granted[w]
			if deposited > perRequest*recorded {
				rt.Fatalf("windows up to %d: deposits %d for %d requests recorded so far: counted twice", w, deposited, recorded)
			}
			if limit := float64(perRequest*recorded)/float64(budget.AllowancePerRetry) + float64(floor)*float64(i+1); float64(grants) > limit+1e-9 {
				rt.Fatalf("windows up to %d: %d retries granted for %d requests; bound %.3f", w, grants, recorded, limit)
			}
		}
	})
}

// relFleetCounts are the four counts of a Report, or of a fleet bucket.
type relFleetCounts struct{ r, s, f, n int64 }

func relReportFleetCounts(r breaker.Report) relFleetCounts {
	return relFleetCounts{r.Requests, r.Successes, r.Failures, r.Samples}
}

func relBucketCounts(b breaker.Bucket) relFleetCounts {
	return relFleetCounts{b.Requests, b.Successes, b.Failures, b.Samples}
}

func (a relFleetCounts) plus(b relFleetCounts, k int64) relFleetCounts {
	return relFleetCounts{a.r + k*b.r, a.s + k*b.s, a.f + k*b.f, a.n + k*b.n}
}
func (a relFleetCounts) minus(b relFleetCounts) relFleetCounts { return a.plus(b, -1) }
func (a relFleetCounts) le(b relFleetCounts) bool {
	return a.r <= b.r && a.s <= b.s && a.f <= b.f && a.n <= b.n
}
func (a relFleetCounts) zero() bool { return a == relFleetCounts{} }
func (a relFleetCounts) String() string {
	return fmt.Sprintf("%d requests, %d successes, %d failures, %d samples", a.r, a.s, a.f, a.n)
}

// multiple returns k if d is k times c (k ≥ 0, c not zero).
func (d relFleetCounts) multiple(c relFleetCounts) (int64, bool) {
	var k int64
	switch {
	case c.r != 0:
		k = d.r / c.r
	case c.s != 0:
		k = d.s / c.s
	case c.f != 0:
		k = d.f / c.f
	default:
		k = d.n / c.n
	}
	return k, k >= 0 && c.plus(c, k-1) == d
}

// relBucket names the fleet bucket a Report names: its epoch and number.
type relBucket struct {
	epoch uint64
	num   int64
}

// relFaultyBreakerStore wraps a breaker.Store, injects faults, and keeps
// the accounts of the fleet's counts: what the breakers handed to Report,
// by the bucket each names and by environment, and what each Report did
// to the stored state, read (with peek, without faults) before and after
// it: which of its counts the store applied, how many times, and which it
// dropped by design (a Report of another epoch, or a late one: its slot
// holds a newer bucket).
type relFaultyBreakerStore struct {
	inner breaker.Store
	inj   relInjector
	// peek reads the stored state without faults and without touching
	// what the store under test has learnt (another client).
	peek func(ctx context.Context) (breaker.Snapshot, error)
	// env is the environment of the action under way (the models are
	// sequential).
	env string
	// loaded, if set, is called after a Load that succeeded; answered,
	// after every snapshot handed back to a breaker without an error.
	loaded   func()
	answered func(breaker.Snapshot)
	// reported, if set, is called with every Report a breaker makes.
	reported func(breaker.Report)
	// trace, if set, is told of every Load and Report, for a failure's
	// message.
	trace  func(format string, args ...any)
	writes int64

	handed   map[relBucket]relFleetCounts // counts of every Report made
	handedBy map[string]relFleetCounts    // the same, by environment
	applied  map[relBucket]relFleetCounts // counts the bucket gained, each application counted
	// lostBefore holds the counts of Reports that failed before they were
	// applied (the documented loss), dup those re-sent by SDK retries of
	// an applied Report (the documented slack), dropped those the store
	// dropped by design.
	lostBefore, dup, dropped map[relBucket]relFleetCounts
	// violation is the first Report whose effect broke the Store
	// contract.
	violation error
}

func newRelFaultyBreakerStore(inner breaker.Store, peek func(context.Context) (breaker.Snapshot, error), next func() relFault, proxy *faultproxy.Proxy) *relFaultyBreakerStore {
	return &relFaultyBreakerStore{
		inner: inner, peek: peek, inj: relInjector{next: next, proxy: proxy},
		handed: map[relBucket]relFleetCounts{}, handedBy: map[string]relFleetCounts{}, applied: map[relBucket]relFleetCounts{},
		lostBefore: map[relBucket]relFleetCounts{}, dup: map[relBucket]relFleetCounts{}, dropped: map[relBucket]relFleetCounts{},
	}
}

// storeErr makes an injected fault a breaker store error.
func (s *relFaultyBreakerStore) storeErr(r relCallResult, err error) error {
	if err != nil && (r.fault == relFaultBefore || r.fault == relFaultAfter) {
		return fmt.Errorf("%w: %w", breaker.ErrStore, err)
	}
	return err
}

// fail records the first violation of the Store contract.
func (s *relFaultyBreakerStore) fail(format string, args ...any) {
	if s.violation == nil {
		s.violation = fmt.Errorf(format, args...)
	}
}

// answer passes a snapshot the store answered to a breaker.
func (s *relFaultyBreakerStore) answer(snap breaker.Snapshot) {
	if s.answered != nil {
		s.answered(snap)
	}
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
	s.answer(snap)
	return snap, nil
}

func (s *relFaultyBreakerStore) Report(ctx context.Context, name string, rep breaker.Report) (breaker.Snapshot, error) {
	s.writes++
	if s.reported != nil {
		s.reported(rep)
	}
	before, perr := s.peek(ctx)
	if perr != nil {
		s.fail("reading the state before a Report: %v", perr)
	}
	var snap breaker.Snapshot
	r, err := s.inj.do(func() error {
		var err error
		snap, err = s.inner.Report(ctx, name, rep)
		return err
	})
	after, perr := s.peek(ctx)
	if perr != nil {
		s.fail("reading the state after a Report: %v", perr)
	}
	key, c := relBucket{rep.Epoch, rep.Bucket}, relReportFleetCounts(rep)
	s.handed[key] = s.handed[key].plus(c, 1)
	s.handedBy[s.env] = s.handedBy[s.env].plus(c, 1)
	k, droppedBy := s.account(rep, r, err, snap, before, after)

	s.applied[key] = s.applied[key].plus(c, k)
	s.dup[key] = s.dup[key].plus(c, r.replays)
	switch {
	case droppedBy != "":
		s.dropped[key] = s.dropped[key].plus(c, 1)
	case k == 0:
		s.lostBefore[key] = s.lostBefore[key].plus(c, 1)
	}
	if s.trace != nil {
		s.trace("Report epoch %d bucket %d (%v, watch %d): fault %d, applied %d times, %d calls applied, %d replays, dropped %q, err %v",
			rep.Epoch, rep.Bucket%1000, c, rep.WatchUntil.UnixMilli()%100_000, r.fault, k, r.applied, r.replays, droppedBy, err)
	}
	if err != nil {
		return breaker.Snapshot{}, s.storeErr(r, err)
	}
	s.answer(snap)
	return snap, nil
}

// account checks what one Report did to the stored state (before and
// after it) against the Store contract, and returns how many times its
// counts were applied, or why the store dropped them by design.
func (s *relFaultyBreakerStore) account(rep breaker.Report, r relCallResult, err error, answer, before, after breaker.Snapshot) (k int64, droppedBy string) {
	c := relReportFleetCounts(rep)
	i := rep.Bucket % breaker.FleetSlots
	b, a := before.Buckets[i], after.Buckets[i]
	for j := range before.Buckets {
		if int64(j) != i && before.Buckets[j] != after.Buckets[j] {
			s.fail("a Report of bucket %d changed slot %d from %+v to %+v", rep.Bucket, j, before.Buckets[j], after.Buckets[j])
		}
	}
	if after.Epoch != before.Epoch || after.State != before.State {
		s.fail("a Report moved the state from %v at epoch %d to %v at %d", before.State, before.Epoch, after.State, after.Epoch)
	}
	switch {
	case before.Epoch != rep.Epoch:
		droppedBy = "another epoch"
		if a != b || !after.WatchUntil.Equal(before.WatchUntil) {
			s.fail("a Report of epoch %d at epoch %d changed the state: slot %+v -> %+v, watch %v -> %v", rep.Epoch, before.Epoch, b, a, before.WatchUntil, after.WatchUntil)
		}
		if r.fault == relFaultNone && err != nil && !errors.Is(err, breaker.ErrConflict) {
			s.fail("a Report of epoch %d at epoch %d failed with %v, want ErrConflict", rep.Epoch, before.Epoch, err)
		}
	case b.Num > rep.Bucket:
		droppedBy = "late"
		if a != b {
			s.fail("a late Report of bucket %d changed slot %d holding bucket %d: %+v -> %+v", rep.Bucket, i, b.Num, b, a)
		}
	case c.zero():
		// Nothing to count; the slot may have been reset to the bucket.
		if a != b && a != (breaker.Bucket{Num: rep.Bucket}) {
			s.fail("a Report of no counts for bucket %d made slot %d %+v, from %+v", rep.Bucket, i, a, b)
		}
	case a == b:
		// Not applied.
	case a.Num != rep.Bucket:
		s.fail("a Report of bucket %d left slot %d holding %+v, from %+v", rep.Bucket, i, a, b)
	default:
		gained := relBucketCounts(a)
		if b.Num == rep.Bucket {
			gained = gained.minus(relBucketCounts(b))
		}
		var ok bool
		if k, ok = gained.multiple(c); !ok || k == 0 {
			s.fail("a Report of %v to bucket %d changed its slot from %+v to %+v: not a whole number of applications", c, rep.Bucket, b, a)
		}
	}
	if errors.Is(err, breaker.ErrConflict) && droppedBy != "another epoch" {
		s.fail("a Report of epoch %d at epoch %d answered ErrConflict", rep.Epoch, before.Epoch)
	}
	if droppedBy != "another epoch" && !rep.WatchUntil.IsZero() && (k > 0 || (err == nil && r.fault == relFaultNone)) &&
		after.WatchUntil.UnixMilli() != rep.WatchUntil.UnixMilli() {
		s.fail("a Report with watch %v applied left the watch at %v", rep.WatchUntil, after.WatchUntil)
	}
	if droppedBy != "" || c.zero() {
		return 0, droppedBy
	}
	switch {
	case r.fault == relFaultBefore && k != 0:
		s.fail("a Report that failed before reaching the store applied its counts %d times", k)
	case k > 1+r.replays:
		s.fail("a Report applied its counts %d times with %d SDK retries of an applied write: beyond the documented slack", k, r.replays)
	case s.inj.proxy == nil && k != r.applied:
		s.fail("the in-memory store answered a Report %v but applied its counts %d times", err, k)
	case s.inj.proxy != nil && k > r.applied:
		s.fail("a Report applied its counts %d times in %d successful writes", k, r.applied)
	case err == nil && r.fault == relFaultNone && k == 0:
		s.fail("a Report of %v to bucket %d answered success but applied nothing (slot %+v -> %+v)", c, rep.Bucket, b, a)
	}
	if err == nil && r.fault == relFaultNone && (answer.Buckets != after.Buckets || answer.Epoch != after.Epoch || answer.Override != breaker.NoOverride) {
		s.fail("a Report answered %+v; the store holds %+v (and the answer carries no override)", answer, after)
	}
	return k, ""
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
	if err == nil || errors.Is(err, breaker.ErrConflict) {
		s.answer(snap)
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

// checkCounts asserts that every Report did what the Store contract says
// (see account), that no breaker handed Report more samples than outcomes
// its environment saw (seen, by environment: a report whose answer was
// lost is not sent again), and, for every bucket, that it gained what the
// breakers handed to Report, less the Reports the store dropped by design
// and those that failed before they were applied, plus at most the
// documented slack: the counts of each Report an SDK retry re-sent after
// it had been applied.
func (s *relFaultyBreakerStore) checkCounts(t *rapid.T, seen map[string]int64) {
	if s.violation != nil {
		t.Fatal(s.violation)
	}
	for env, h := range s.handedBy {
		if h.n > seen[env] {
			t.Fatalf("%s handed %d samples to Reports but saw %d outcomes: counts sent twice", env, h.n, seen[env])
		}
	}
	for key, h := range s.handed {
		a, sent := s.applied[key], h.minus(s.dropped[key])
		if !a.le(sent.plus(s.dup[key], 1)) {
			t.Fatalf("bucket %d of epoch %d gained %v; the breakers reported %v to it (%v dropped by design), and SDK retries of applied Reports re-sent %v: counted twice beyond the documented bound",
				key.num, key.epoch, a, h, s.dropped[key], s.dup[key])
		}
		if !sent.minus(s.lostBefore[key]).le(a) {
			t.Fatalf("bucket %d of epoch %d gained %v; the breakers reported %v to it (%v dropped by design), of which %v in Reports that failed before they were applied: counts lost",
				key.num, key.epoch, a, h, s.dropped[key], s.lostBefore[key])
		}
	}
}

// checkTable reads the state item back through api (not through the
// proxy, nor through the store) and checks that every slot holding a
// bucket of the current epoch holds what the Reports applied to it.
func (s *relFaultyBreakerStore) checkTable(t *rapid.T, ctx context.Context, api *dynamodb.Client, table, name string) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": relS("c#" + name)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("reading c#%s: %v", name, err)
	}
	num := func(attr string) int64 {
		n, ok := out.Item[attr].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			t.Fatalf("c#%s attribute %s = %q: %v", name, attr, n.Value, err)
		}
		return v
	}
	epoch := uint64(num("epoch"))
	for i := range breaker.FleetSlots {
		b := num(fmt.Sprint("b", i))
		if b == 0 {
			continue
		}
		got := relFleetCounts{num(fmt.Sprint("r", i)), num(fmt.Sprint("s", i)), num(fmt.Sprint("f", i)), num(fmt.Sprint("n", i))}
		if want := s.applied[relBucket{epoch, b}]; got != want {
			t.Fatalf("c#%s slot %d holds bucket %d with %v; the Reports applied %v to it", name, i, b, got, want)
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
	// seen counts the successes and failures passed to Done (and not
	// dropped as stale), by environment.
	seen map[string]int64
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
// one breaker over store (peek reads its state without faults). With
// faults, store calls fail at random; with proxy (store is over DynamoDB
// Local behind it) the faults include the proxy's.
func newRelBreakerModel(t *rapid.T, ctx context.Context, store breaker.Store, peek func(context.Context) (breaker.Snapshot, error), name string, faults bool, proxy *faultproxy.Proxy) *relBreakerModel {
	m := &relBreakerModel{
		ctx:    ctx,
		window: time.Second,
		now:    relPropStart(t),
		seen:   map[string]int64{},
	}
	var next func() relFault
	if faults {
		gen := relFaultGen
		if proxy != nil {
			gen = relProxyFaultGen
		}
		next = func() relFault { return gen.Draw(t, "fault") }
	}
	m.store = newRelFaultyBreakerStore(store, peek, next, proxy)
	s := breaker.Settings{
		Store:          m.store,
		MinRequests:    int64(rapid.IntRange(1, 6).Draw(t, "minRequests")),
		FailureRatio:   rapid.SampledFrom([]float64{0.3, 0.5, 1}).Draw(t, "failureRatio"),
		Window:         m.window,
		OpenDuration:   time.Duration(rapid.IntRange(1, 5).Draw(t, "openTenths")) * 100 * time.Millisecond,
		Jitter:         -1,
		HalfOpenProbes: rapid.IntRange(1, 2).Draw(t, "probes"),
		ProbeLease:     300 * time.Millisecond,
		CacheTTL:       time.Duration(rapid.IntRange(1, 3).Draw(t, "cacheTenths")) * 100 * time.Millisecond,
		StoreTimeout:   5 * time.Second, // faults are injected, not timed
	}
	s.ReportInterval = 50 * time.Millisecond
	n := rapid.IntRange(2, 5).Draw(t, "envs")
	seed := rapid.Uint64().Draw(t, "seed") // the breakers' sampling and probe delays, so that a case replays
	for i := range n {
		e := &relBreakerEnv{name: fmt.Sprintf("env-%d", i)}
		si := s
		si.Rand = rand.New(rand.NewPCG(seed, uint64(i))).Float64
		si.OnStateChange = func(c breaker.StateChange) {
			from, to := c.From, c.To
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

// saw counts an outcome of environment e.
func (m *relBreakerModel) saw(e *relBreakerEnv, o breaker.Outcome) {
	if o == breaker.Success || o == breaker.Failure {
		m.seen[e.name]++
	}
}

func (m *relBreakerModel) actions() map[string]func(*rapid.T) {
	env := func(t *rapid.T) (int, *relBreakerEnv) {
		i := rapid.IntRange(0, len(m.envs)-1).Draw(t, "env")
		m.store.env = m.envs[i].name
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
			_ = e.b.Flush(m.ctx, m.now)
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
		m.store.env = e.name
		_ = e.b.Flush(m.ctx, m.now)
	}
	m.store.checkCounts(t, m.seen)
}

// TestReliabilityBreakerProperty checks, under random interleavings of 2-5
// environments sharing one breaker and random store faults, that no
// environment goes from open (or half-open) to closed unless a probe
// succeeded somewhere in the fleet since it opened, that a result from
// before a state change is dropped (no count, no transition, no store
// write), and that the fleet's counts are neither lost nor counted twice
// beyond the documented bound. The stored state is read (without faults)
// before and after every Report, and each Report must have done what the
// Store contract says: its counts added to its bucket's slot (or the
// slot reset to them) a whole number of times, once if it succeeded, at
// most once more per SDK retry of an applied write (counted at the fault
// proxy), never if it failed before reaching the store; nothing applied
// but the watch if its slot holds a newer bucket; nothing at all, and
// ErrConflict, if the epoch moved; no other slot, the state or the epoch
// touched; the answer is the state as stored, without the override. So
// each bucket holds what the environments' Reports applied, less the
// Reports that failed before they were applied, plus at most one
// report's counts per SDK retry after a lost answer; and no breaker hands
// Report more samples than outcomes its environment saw (a report whose
// answer was lost is not sent again). Against the in-memory store with
// and without faults, and against DynamoDB Local behind the fault proxy,
// with its faults, in fewer cases; at the end of each DynamoDB case the
// state item is read back and every slot must hold what the Reports
// applied to it. TestReliabilityBreakerReportsProperty checks that
// outcomes are not lost before they reach Report.
func TestReliabilityBreakerProperty(t *testing.T) {
	relNoLeaks(t)
	for _, faults := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-memory", true: "in-memory with faults"}[faults], func(t *testing.T) {
			relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
				st := memstore.NewBreakerStore(memstore.Options{})
				peek := func(ctx context.Context) (breaker.Snapshot, error) { return st.Client().Load(ctx, "prop") }
				m := newRelBreakerModel(rt, context.Background(), st, peek, "prop", faults, nil)
				rt.Repeat(m.actions())
				m.finish(rt)
			})
		})
	}
	t.Run("dynamodb with faults", func(t *testing.T) {
		proxy, direct := relPropProxy(t)
		table := newTable(t)
		peekStore := newBreakerStore(t, direct, table)
		var n atomic.Int64
		var sum relPropSummary
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			api, closeIdle := relCaseClient(rt, proxy)
			defer closeIdle()
			st, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
			if err != nil {
				rt.Fatal(err)
			}
			name := fmt.Sprintf("prop-%d", n.Add(1))
			peek := func(ctx context.Context) (breaker.Snapshot, error) { return peekStore.Load(ctx, name) }
			p0 := proxy.Stats()
			m := newRelBreakerModel(rt, context.Background(), st, peek, name, true, proxy)
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
// that never trips and samples every call it may (Settings.Rand always
// 0), so that every outcome stays in one generation and what each
// environment owes the fleet follows from what it was told by the store.
type relReportsModel struct {
	store  *relFaultyBreakerStore
	envs   []*relReportsEnv
	cur    *relReportsEnv // the environment of the action under way
	now    time.Time
	window time.Duration
	ctx    context.Context
	cfg    breaker.Settings
	// reportInterval is the breakers' shortest time between two reports.
	reportInterval time.Duration
	// seen counts the successes and failures of each environment.
	seen map[string]int64
	// log is what happened, for a failure's message.
	log []string
}

// relReportsEnv is one environment of a relReportsModel, and what the
// model knows of its sampled counts not yet reported: owed, the samples
// it must hand to its next Report that carries counts, and may, those it
// may hand (owed included; samples whose fate the model cannot tell from
// outside, see done).
type relReportsEnv struct {
	name     string
	b        *breaker.Breaker
	degraded bool      // a store fault since its last successful Load
	watch    time.Time // the latest WatchUntil the store answered it
	faults   int       // store faults so far
	lastNow  time.Time // the latest time it was given
	owed     int64
	may      int64
	// lastFail is when its latest failing call ended; sampling, whether
	// its calls are sampled since an earlier call; skipUntil, the start of
	// the bucket after the first of those if it may have begun sampling
	// there (see call).
	lastFail, skipUntil time.Time
	sampling            bool
	// snap is the latest fleet state the store answered it (a Load or a
	// Report), which the breaker holds.
	snap breaker.Snapshot
	// first and firstMaybe are the bucket of the oldest count pending
	// (0: none), as known for sure, and as may be.
	first, firstMaybe int64
}

// logf notes an event of the case at the model's time.
func (m *relReportsModel) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("  %s @%d: ", m.cur.name, m.now.UnixMilli()%100_000)+fmt.Sprintf(format, args...))
}

func newRelReportsModel(t *rapid.T, ctx context.Context, store breaker.Store, peek func(context.Context) (breaker.Snapshot, error), name string, proxy *faultproxy.Proxy) *relReportsModel {
	m := &relReportsModel{
		ctx:    ctx,
		window: time.Second,
		now:    relPropStart(t),
		seen:   map[string]int64{},
	}
	gen := relFaultGen
	if proxy != nil {
		gen = relProxyFaultGen
	}
	m.store = newRelFaultyBreakerStore(store, peek, func() relFault { return gen.Draw(t, "fault") }, proxy)
	m.store.loaded = func() { m.cur.degraded = false }
	m.store.answered = func(s breaker.Snapshot) {
		m.cur.snap = s
		if s.WatchUntil.After(m.cur.watch) {
			m.cur.watch = s.WatchUntil
		}
	}
	m.store.reported = func(r breaker.Report) { m.reported(t, r) }
	m.store.trace = m.logf
	m.cfg = breaker.Settings{
		Store: m.store,
		// Never trips, neither the fleet nor an environment on its local
		// state machine: no state change, one generation.
		MinRequests:  1 << 40,
		FailureRatio: 1,
		Window:       m.window,
		CacheTTL:     time.Duration(rapid.IntRange(1, 3).Draw(t, "cacheTenths")) * 100 * time.Millisecond,
		StoreTimeout: 5 * time.Second, // faults are injected, not timed
		// Every call the breaker may sample is sampled.
		Rand: func() float64 { return 0 },
	}
	m.reportInterval = time.Duration(rapid.IntRange(1, 4).Draw(t, "reportIntervalTwentieths")) * 50 * time.Millisecond
	m.cfg.ReportInterval = m.reportInterval
	for i := range rapid.IntRange(2, 5).Draw(t, "envs") {
		e := &relReportsEnv{name: fmt.Sprintf("env-%d", i)}
		si := m.cfg
		si.OnStoreError = func(string, error) { m.faulted(e) }
		si.OnStateChange = func(c breaker.StateChange) {
			t.Fatalf("%s went %v -> %v: this breaker cannot trip", e.name, c.From, c.To)
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

// bucket returns the fleet bucket of t.
func (m *relReportsModel) bucket(t time.Time) int64 {
	return t.UnixMilli() / (m.window.Milliseconds() / breaker.FleetSlots)
}

// faulted applies what a store fault does to e: it switches to its local
// state machine, writing nothing until a Load succeeds, and drops the
// sampled counts it had not yet handed to Report.
func (m *relReportsModel) faulted(e *relReportsEnv) {
	m.logf("store fault: degraded, pending samples dropped (owed %d, may %d)", e.owed, e.may)
	e.degraded = true
	e.faults++
	e.owed, e.may, e.first, e.firstMaybe = 0, 0, 0, 0
}

// pend notes a count pending at t; sure says whether it certainly is.
func (m *relReportsModel) pend(e *relReportsEnv, t time.Time, sure bool) {
	if e.firstMaybe == 0 {
		e.firstMaybe = m.bucket(t)
	}
	if sure && e.first == 0 {
		e.first = m.bucket(t)
	}
}

// take is the breaker's look at its pending counts at t, before it
// decides whether a report is due: counts from before the rolling window
// (an environment that was idle) are dropped. sure says whether the look
// certainly happens.
func (m *relReportsModel) take(e *relReportsEnv, t time.Time, sure bool) {
	old := m.bucket(t) - breaker.FleetSlots
	switch {
	case sure && e.first != 0 && e.first <= old:
		m.logf("pending samples older than the window dropped (owed %d, may %d)", e.owed, e.may)
		e.owed, e.may, e.first, e.firstMaybe = 0, 0, 0, 0
	case e.firstMaybe != 0 && e.firstMaybe <= old:
		// They may have been dropped.
		e.owed = 0
	}
}

// reported checks a Report of the environment under way against what the
// model says it holds: a Report that carries counts hands every sample
// owed and none beyond those it may hand, and empties its pending counts.
// (A Report without counts only extends the fleet's watch, from an
// environment with nothing pending, or from an alarm, which leaves the
// pending counts alone.)
func (m *relReportsModel) reported(t *rapid.T, r breaker.Report) {
	e := m.cur
	if r.Requests == 0 && r.Samples == 0 && r.Successes == 0 && r.Failures == 0 {
		return
	}
	if r.Samples < e.owed || r.Samples > e.may {
		t.Fatalf("%s reported %d samples; it owed %d and may have had %d: counts lost or invented; what happened (times in ms modulo 100 s):\n%s",
			e.name, r.Samples, e.owed, e.may, m.history(e.name))
	}
	if r.Successes+r.Failures == 0 && r.Samples != 0 || r.Requests < r.Successes+r.Failures && r.Samples == 0 {
		t.Fatalf("%s reported %+v: samples without outcomes", e.name, r)
	}
	e.owed, e.may, e.first, e.firstMaybe = 0, 0, 0, 0
}

// countedBefore reports whether a bucket of the rolling window before
// now's has counts in the state e holds.
func (m *relReportsModel) countedBefore(e *relReportsEnv) bool {
	cur := m.bucket(m.now)
	for _, bk := range e.snap.Buckets {
		if bk.Num > cur-breaker.FleetSlots && bk.Num < cur && bk.Requests > 0 {
			return true
		}
	}
	return false
}

// call is one call of environment e with outcome o. What the breaker does
// with it, as far as its samples go:
//
//   - Allow samples the call if e follows the fleet (no store fault since
//     its last successful Load) and the fleet watches (now is before the
//     latest WatchUntil the store answered e); a sampled call's request
//     is pending from then on.
//   - Done of a failure, back in the fleet, adds its sample if the call
//     was sampled, then looks at the pending counts if the fleet watches
//     (else it raises the alarm). Done of a success does the same if e
//     still samples; after the watch ended, whether it does depends on
//     when the breaker last looked at the watch: its sample may count.
//   - Samples of calls whose Allow came before a store fault may count
//     (their pending counts were dropped, theirs come after) and are not
//     owed.
func (m *relReportsModel) call(t *rapid.T, e *relReportsEnv, o breaker.Outcome) {
	m.cur = e
	m.store.env = e.name
	e.lastNow = later(e.lastNow, m.now)
	faults := e.faults
	held := e.watch // the watch e held before this call's reads
	p, err := e.b.Allow(m.ctx, m.now)
	if err != nil {
		t.Fatalf("%s: Allow: %v; this breaker cannot open", e.name, err)
	}
	sampled := !e.degraded && m.now.Before(e.watch)
	// A sparse environment (under a call per report interval) that
	// begins sampling within a bucket width of a failure of its own, or
	// in the watch's first bucket (no earlier bucket of the window has
	// counts in the state it holds), samples from the next bucket on: the
	// calls before that may not be sampled. The model does not tell its
	// rate, so those calls are never owed.
	w := m.window / breaker.FleetSlots
	if !m.now.Before(held) {
		// The watch e held had ended: if this call's read found a new
		// one, e learns of it now (and may begin in the next bucket).
		e.sampling = false
	}
	switch {
	case !sampled:
		e.sampling, e.skipUntil = false, time.Time{}
	case !e.sampling:
		e.sampling, e.skipUntil = true, time.Time{}
		if !e.lastFail.IsZero() && m.now.Sub(e.lastFail) < w || !m.countedBefore(e) {
			e.skipUntil = time.UnixMilli((m.bucket(m.now) + 1) * w.Milliseconds())
		}
	}
	skip := sampled && m.now.Before(e.skipUntil)
	if sampled {
		m.pend(e, m.now, !skip)
	}
	m.logf("%v (degraded: %v, sampled: %v, may skip: %v, watch %d)", o, e.degraded, sampled, skip, e.watch.UnixMilli()%100_000)
	m.seen[e.name]++
	faults = e.faults - faults // during Allow
	watching := m.now.Before(e.watch)
	sure := o == breaker.Failure || watching
	if !e.degraded && sampled {
		// Before it adds a sample, the breaker drops pending counts from
		// before the rolling window (an environment that was idle); one
		// that may not sample this call does at its Done.
		m.take(e, m.now, true)
		e.may++
		if sure && !skip && faults == 0 {
			e.owed++
		}
		m.pend(e, m.now, sure && !skip)
	}
	if o == breaker.Failure {
		e.lastFail = m.now
	}
	if !e.degraded && (o == breaker.Failure && watching || o == breaker.Success) {
		m.take(e, m.now, sure && watching)
	}
	e.b.Done(m.ctx, m.now, p, o) // a fault in its Report calls faulted
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *relReportsModel) flush(e *relReportsEnv) {
	m.cur = e
	m.store.env = e.name
	m.logf("Flush")
	if !e.degraded {
		m.take(e, e.lastNow, true)
	}
	_ = e.b.Flush(m.ctx, e.lastNow)
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
			// ReportInterval and across bucket boundaries.
			e := env(t)
			for range rapid.IntRange(1, 8).Draw(t, "n") {
				o := rapid.SampledFrom([]breaker.Outcome{breaker.Success, breaker.Failure}).Draw(t, "outcome")
				m.call(t, e, o)
				m.now = m.now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "gapMs")) * time.Millisecond)
			}
		},
		"flush": func(t *rapid.T) { m.flush(env(t)) },
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

// finish turns the faults off, flushes every environment, then moves past
// CacheTTL and ReportInterval (less than a window: nothing pending grows
// too old), where each environment makes one failing call (which reloads
// the fleet state, ending degraded mode) and flushes again, and once more
// a ReportInterval and a bucket later. Then every
// environment has handed Report every sample it owed (checked at each
// Report), and every bucket holds what the Reports applied (checkCounts).
func (m *relReportsModel) finish(t *rapid.T) {
	m.store.inj.next = nil
	for _, e := range m.envs {
		m.flush(e)
	}
	m.now = m.now.Add(max(m.cfg.CacheTTL, m.reportInterval) + time.Millisecond)
	for _, e := range m.envs {
		m.call(t, e, breaker.Failure)
		m.flush(e)
	}
	// An environment that started sampling at one of those calls reports
	// its first ReportInterval whole (its start may wait up to a bucket):
	// its next Flush after that hands the counts over. Still within the
	// window.
	m.now = m.now.Add(m.reportInterval + m.window/breaker.FleetSlots + time.Millisecond)
	for _, e := range m.envs {
		e.lastNow = later(e.lastNow, m.now)
		m.flush(e)
	}
	m.store.checkCounts(t, m.seen)
	for _, e := range m.envs {
		if e.owed > 0 {
			t.Fatalf("%s still owes %d samples after its last Flush: counts lost; what happened (times in ms modulo 100 s):\n%s", e.name, e.owed, m.history(e.name))
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
// sampled counts are not lost, nor invented, on their way to Report,
// under random interleavings of 2-5 environments whose breaker never trips
// and samples every call it may, and random store faults (in memory; and
// against DynamoDB Local behind the fault proxy, with requests dropped and
// writes applied whose answer was lost, in fewer cases). What an
// environment owes follows the documentation: while it follows the fleet
// and the fleet watches (a WatchUntil the store answered it is ahead),
// every outcome of a call it admitted (but a sparse environment that
// learnt of the watch by failing, or in the watch's first bucket, may
// start at the next bucket, see
// relReportsModel.call); a store fault drops what was pending, and so
// does an idle longer than the rolling window. Every Report that carries
// counts must hand every sample owed and no more than those pending; after a final flush with faults off nothing owed is left;
// and every bucket holds what the Reports applied (as in
// TestReliabilityBreakerProperty).
func TestReliabilityBreakerReportsProperty(t *testing.T) {
	relNoLeaks(t)
	t.Run("in-memory with faults", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			st := memstore.NewBreakerStore(memstore.Options{})
			peek := func(ctx context.Context) (breaker.Snapshot, error) { return st.Client().Load(ctx, "prop") }
			m := newRelReportsModel(rt, context.Background(), st, peek, "prop", nil)
			rt.Repeat(m.actions())
			m.finish(rt)
		})
	})
	t.Run("dynamodb with faults", func(t *testing.T) {
		proxy, direct := relPropProxy(t)
		table := newTable(t)
		peekStore := newBreakerStore(t, direct, table)
		var n atomic.Int64
		var sum relPropSummary
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			api, closeIdle := relCaseClient(rt, proxy)
			defer closeIdle()
			st, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
			if err != nil {
				rt.Fatal(err)
			}
			name := fmt.Sprintf("reports-%d", n.Add(1))
			peek := func(ctx context.Context) (breaker.Snapshot, error) { return peekStore.Load(ctx, name) }
			p0 := proxy.Stats()
			m := newRelReportsModel(rt, context.Background(), st, peek, name, proxy)
			rt.Repeat(m.actions())
			m.finish(rt)
			m.store.checkTable(rt, m.ctx, direct, table, name)
			sum.add(proxy.Stats().Sub(p0), m.store.inj.faults.Load())
		})
		t.Logf("DynamoDB cases: %v", &sum)
	})
}
