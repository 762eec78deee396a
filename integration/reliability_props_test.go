package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/local"
)

// Property tests: random interleavings of many environments sharing one
// store, with store faults injected, checked after every step against the
// guarantees the documentation gives. Each property runs against the
// in-memory stores (rapid's default number of cases, 100) and against
// DynamoDB Local (relDynamoCases cases, each a fresh name in one table).
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

// relFault is what a faulty store does to one call.
type relFault uint8

const (
	relFaultNone   relFault = iota
	relFaultBefore          // fail without reaching the store
	relFaultAfter           // reach the store, then lose the answer (a write that timed out after it was applied)
)

var relFaultGen = rapid.SampledFrom([]relFault{relFaultNone, relFaultNone, relFaultNone, relFaultBefore, relFaultAfter})

// relFaultyBudgetStore wraps a budget.Store, injects faults and records
// what was really applied, window by window.
type relFaultyBudgetStore struct {
	inner      budget.Store
	perRequest int64
	next       func() relFault // nil: no faults

	mu             sync.Mutex
	deposits       map[int64]int64 // window start (Unix ms) -> allowance deposited and applied
	takes          map[int64]int64 // window start -> allowance taken and applied
	lostButApplied int64           // requests deposited by calls whose answer was lost
	faults         int64
}

func newRelFaultyBudgetStore(inner budget.Store, perRequest int64, next func() relFault) *relFaultyBudgetStore {
	return &relFaultyBudgetStore{inner: inner, perRequest: perRequest, next: next, deposits: map[int64]int64{}, takes: map[int64]int64{}}
}

func (s *relFaultyBudgetStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	f := relFaultNone
	if s.next != nil {
		f = s.next()
	}
	if f == relFaultBefore {
		s.mu.Lock()
		s.faults++
		s.mu.Unlock()
		return 0, errRelInjected
	}
	a, err := s.inner.Apply(ctx, k, u)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		w := k.Window.UnixMilli()
		s.deposits[w] += u.Deposit
		s.takes[w] += u.Take
	}
	if f == relFaultAfter {
		s.faults++
		if err == nil {
			s.lostButApplied += u.Deposit / s.perRequest
		}
		return 0, fmt.Errorf("%w (after the store answered %v)", errRelInjected, err)
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

func newRelGlobalModel(t *rapid.T, ctx context.Context, store budget.Store, name string) *relGlobalModel {
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
		now:        time.UnixMilli(rapid.Int64Range(1_700_000_000_000, 1_700_000_100_000).Draw(t, "start")),
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
	m.store = newRelFaultyBudgetStore(store, m.perRequest, func() relFault { return relFaultGen.Draw(t, "fault") })
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
// G(w) <= Ratio × R(w) + Floor on grants not given back, and that the
// allowance the store really received was never counted twice.
func (m *relGlobalModel) check(t *rapid.T) {
	for w, g := range m.granted {
		used := g - m.returned[w]
		limit := float64(m.perRequest*m.requests[w])/float64(budget.AllowancePerRetry) + float64(m.floor)
		if float64(used) > limit+1e-9 {
			t.Fatalf("window %d: %d retries granted and not given back, %d requests: above the bound Ratio × R + Floor = %v × %d + %d = %.3f",
				w, used, m.requests[w], m.cfg.Ratio, m.requests[w], m.floor, limit)
		}
	}
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	var deposited int64
	for w, d := range m.store.deposits {
		deposited += d
		if d > m.perRequest*m.requests[w] {
			t.Fatalf("window %d: the store received a deposit of %d for %d requests (at most %d): requests counted twice", w, d, m.requests[w], m.perRequest*m.requests[w])
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
	// Every request is deposited at most once, and only lost with a store
	// call that failed: what the store holds is exactly the requests
	// reported plus those in failed calls that had in fact been applied.
	if want := m.perRequest * (reported + m.store.lostButApplied); deposited != want {
		t.Fatalf("the store holds deposits of %d; the environments reported %d requests and lost %d in failed calls that were applied (%d): the counts disagree",
			deposited, reported, m.store.lostButApplied, want)
	}
	if reported+lost > m.total {
		t.Fatalf("%d requests reported and %d lost, but only %d recorded: some were counted twice", reported, lost, m.total)
	}
	if m.store.faults == 0 && lost != 0 {
		t.Fatalf("%d requests lost without any store fault", lost)
	}
}

// TestReliabilityGlobalBoundProperty checks the fleet-wide bound of
// budget.Global under random interleavings of 2-8 environments, random
// configurations and store faults (failures before the store, and writes
// applied whose answer was lost), against the in-memory store and, with
// fewer cases, DynamoDB Local.
func TestReliabilityGlobalBoundProperty(t *testing.T) {
	relNoLeaks(t)
	t.Run("in-memory", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelGlobalModel(rt, context.Background(), local.NewBudgetStore(), "prop")
			rt.Repeat(m.actions())
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		api := relStoreClient(t, dynamoEndpointOrSkip(t))
		table := newTable(t)
		st, err := dynamo.NewBudgetStore(api, table, dynamo.BudgetStoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int64
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			m := newRelGlobalModel(rt, context.Background(), st, fmt.Sprintf("prop-%d", n.Add(1)))
			rt.Repeat(m.actions())
		})
	})
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
		inner := local.NewBudgetStoreWithOptions(local.StoreOptions{Fault: func(ctx context.Context, _ string) error {
			// Short waits widen the races between environments.
			time.Sleep(time.Duration(faults.Add(7919)%200) * time.Microsecond)
			return nil
		}})
		store := newRelFaultyBudgetStore(inner, perRequest, func() relFault {
			return relFault(faults.Add(104729) % 7 % 3) // mostly none, some before, some after
		})
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

// relFaultyBreakerStore wraps a breaker.Store, injects faults, and records
// the counts really added to each fleet window and every write made.
type relFaultyBreakerStore struct {
	inner  breaker.Store
	next   func() relFault
	writes int64
	faults int64
	// applied fleet-window totals by window start (Unix ms).
	successes, failures map[int64]int64
}

func (s *relFaultyBreakerStore) fault() relFault {
	if s.next == nil {
		return relFaultNone
	}
	return s.next()
}

func (s *relFaultyBreakerStore) wrap(f relFault, err error) error {
	if f == relFaultAfter {
		s.faults++
		return fmt.Errorf("%w: %w (after the store answered %v)", breaker.ErrStore, errRelInjected, err)
	}
	return err
}

func (s *relFaultyBreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	f := s.fault()
	if f == relFaultBefore {
		s.faults++
		return breaker.Snapshot{}, fmt.Errorf("%w: %w", breaker.ErrStore, errRelInjected)
	}
	snap, err := s.inner.Load(ctx, name)
	if f == relFaultAfter {
		return breaker.Snapshot{}, s.wrap(f, err)
	}
	return snap, err
}

func (s *relFaultyBreakerStore) Report(ctx context.Context, name string, window time.Time, env string, succ, fail int64, expires time.Time) (breaker.Tally, error) {
	s.writes++
	f := s.fault()
	if f == relFaultBefore {
		s.faults++
		return breaker.Tally{}, fmt.Errorf("%w: %w", breaker.ErrStore, errRelInjected)
	}
	tally, err := s.inner.Report(ctx, name, window, env, succ, fail, expires)
	if err == nil {
		s.successes[window.UnixMilli()] += succ
		s.failures[window.UnixMilli()] += fail
	}
	if f == relFaultAfter {
		return breaker.Tally{}, s.wrap(f, err)
	}
	return tally, err
}

func (s *relFaultyBreakerStore) Transition(ctx context.Context, name string, prev uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	s.writes++
	f := s.fault()
	if f == relFaultBefore {
		s.faults++
		return breaker.Snapshot{}, fmt.Errorf("%w: %w", breaker.ErrStore, errRelInjected)
	}
	snap, err := s.inner.Transition(ctx, name, prev, next)
	if f == relFaultAfter {
		return breaker.Snapshot{}, s.wrap(f, err)
	}
	return snap, err
}

func (s *relFaultyBreakerStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	s.writes++
	f := s.fault()
	if f == relFaultBefore {
		s.faults++
		return 0, fmt.Errorf("%w: %w", breaker.ErrStore, errRelInjected)
	}
	slot, err := s.inner.AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
	if f == relFaultAfter {
		return 0, s.wrap(f, err)
	}
	return slot, err
}

func (s *relFaultyBreakerStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	s.writes++
	return s.inner.SetOverride(ctx, name, o, until)
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
	// outcomes counts the outcomes passed to Done, per fleet window.
	doneSucc, doneFail map[int64]int64
}

type relBreakerEnv struct {
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

func newRelBreakerModel(t *rapid.T, ctx context.Context, store breaker.Store, name string, faults bool) *relBreakerModel {
	m := &relBreakerModel{
		ctx:      ctx,
		window:   time.Second,
		now:      time.UnixMilli(rapid.Int64Range(1_700_000_000_000, 1_700_000_100_000).Draw(t, "start")),
		doneSucc: map[int64]int64{},
		doneFail: map[int64]int64{},
	}
	m.store = &relFaultyBreakerStore{inner: store, successes: map[int64]int64{}, failures: map[int64]int64{}}
	if faults {
		m.store.next = func() relFault { return relFaultGen.Draw(t, "fault") }
	}
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
		e := &relBreakerEnv{}
		si := s
		si.Env = fmt.Sprintf("env-%d", i)
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

func (m *relBreakerModel) actions() map[string]func(*rapid.T) {
	env := func(t *rapid.T) (int, *relBreakerEnv) {
		i := rapid.IntRange(0, len(m.envs)-1).Draw(t, "env")
		return i, m.envs[i]
	}
	fleetWindow := func() int64 { return m.now.UnixMilli() / m.window.Milliseconds() * m.window.Milliseconds() }
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
			e.b.Done(m.ctx, m.now, p.p, o)
			if stale {
				// A result from before a state change is dropped: no
				// count, no transition, no store write.
				if after := e.b.Counts(); after != before || len(e.events) != events || m.store.writes != writes {
					t.Fatalf("env %d: Done(%v) of a permit issued before a state change changed counts %+v -> %+v, events %d -> %d, store writes %d -> %d",
						i, o, before, after, events, len(e.events), writes, m.store.writes)
				}
				return
			}
			switch o {
			case breaker.Success:
				m.doneSucc[fleetWindow()]++
			case breaker.Failure:
				m.doneFail[fleetWindow()]++
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
				w := fleetWindow()
				e.b.Done(m.ctx, m.now, p, o)
				if o == breaker.Success {
					m.doneSucc[w]++
				} else {
					m.doneFail[w]++
				}
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
		"": func(t *rapid.T) {
			// Counts added to a fleet window are never counted twice: the
			// window holds no more than the environments saw in it.
			for w, s := range m.store.successes {
				if s > m.doneSucc[w] {
					t.Fatalf("fleet window %d holds %d successes; the environments saw %d", w, s, m.doneSucc[w])
				}
			}
			for w, f := range m.store.failures {
				if f > m.doneFail[w] {
					t.Fatalf("fleet window %d holds %d failures; the environments saw %d", w, f, m.doneFail[w])
				}
			}
		},
	}
}

// TestReliabilityBreakerProperty checks, under random interleavings of 2-5
// environments sharing one breaker and random store faults, that no
// environment goes from open (or half-open) to closed unless a probe
// succeeded somewhere in the fleet since it opened, that a result from
// before a state change is dropped (no count, no transition, no store
// write), and that a fleet window never holds more outcomes than the
// environments saw in it (a report whose answer was lost is not sent
// again). Against the in-memory store with and without faults, and against
// DynamoDB Local with fewer cases.
func TestReliabilityBreakerProperty(t *testing.T) {
	relNoLeaks(t)
	t.Run("in-memory", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelBreakerModel(rt, context.Background(), local.NewBreakerStore(), "prop", false)
			rt.Repeat(m.actions())
		})
	})
	t.Run("in-memory with faults", func(t *testing.T) {
		relRapidCheck(t, relRapidCases, relRapidSteps, func(rt *rapid.T) {
			m := newRelBreakerModel(rt, context.Background(), local.NewBreakerStore(), "prop", true)
			rt.Repeat(m.actions())
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		api := relStoreClient(t, dynamoEndpointOrSkip(t))
		table := newTable(t)
		st, err := dynamo.NewBreakerStore(api, table, dynamo.BreakerStoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int64
		relRapidCheck(t, relDynamoCases, relDynamoSteps, func(rt *rapid.T) {
			m := newRelBreakerModel(rt, context.Background(), st, fmt.Sprintf("prop-%d", n.Add(1)), false)
			rt.Repeat(m.actions())
		})
	})
}
