package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/internal/sleep"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// This file holds what the reliability tests (reliability_*_test.go) and the
// soak (soak_test.go) share: a fleet of environments, each with its own
// Executor and its own local layers over shared DynamoDB stores, and the
// measurements they report.

// relNoLeaks registers, before any other clean-up of t, a check that runs
// after all of them (t.Cleanup runs last-registered first): no goroutine
// started during the test may outlive it. Goroutines that existed when the
// test began are ignored. goleak retries for a while, so goroutines of
// connections just closed have time to end.
func relNoLeaks(t testing.TB) {
	t.Helper()
	cur := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(cur); err != nil {
			t.Errorf("goroutines leaked by %s: %v", t.Name(), err)
		}
	})
}

// relStoreClient returns a DynamoDB client for the stores built the way an
// application builds it (dynamo.NewClient: one SDK retry, its own retry
// quota and pool), pointed at endpoint (DynamoDB Local, or a fault proxy in
// front of it). Its idle connections are closed when the test ends.
func relStoreClient(t testing.TB, endpoint string) *dynamodb.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c, err := dynamo.NewClient(ctx, dynamo.ClientOptions{
		Config:      &aws.Config{},
		Region:      "us-east-1",
		Endpoint:    endpoint,
		Credentials: credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
	})
	if err != nil {
		t.Fatalf("dynamo.NewClient(%s): %v", endpoint, err)
	}
	t.Cleanup(func() { closeIdle(c) })
	return c
}

// relCounting wraps a budget and counts what it decided. The fault tests put
// it around the local budget to prove that every retry the Executor made
// was granted by the local layer, also while the global layer abstained.
type relCounting struct {
	b                                             budget.Budget
	requests, granted, returned, refused, abstain atomic.Int64
}

func (c *relCounting) RecordRequest(now time.Time) { c.requests.Add(1); c.b.RecordRequest(now) }
func (c *relCounting) RecordSuccess(now time.Time) { c.b.RecordSuccess(now) }
func (c *relCounting) AcquireRetry(ctx context.Context, now time.Time, k budget.Kind) (budget.Release, error) {
	rel, err := c.b.AcquireRetry(ctx, now, k)
	switch {
	case err == nil:
		c.granted.Add(1)
		return func(o budget.Outcome) {
			if o == budget.RetryNotUsed {
				c.returned.Add(1)
			}
			rel.Done(o)
		}, nil
	case errors.Is(err, budget.ErrExhausted):
		c.refused.Add(1)
	default:
		c.abstain.Add(1)
	}
	return nil, err
}

// relCounts is a snapshot of a relCounting.
type relCounts struct{ requests, granted, returned, refused, abstain int64 }

func (c *relCounting) counts() relCounts {
	return relCounts{c.requests.Load(), c.granted.Load(), c.returned.Load(), c.refused.Load(), c.abstain.Load()}
}

func (a relCounts) sub(b relCounts) relCounts {
	return relCounts{a.requests - b.requests, a.granted - b.granted, a.returned - b.returned, a.refused - b.refused, a.abstain - b.abstain}
}

// relClock is the system clock, except that Sleep adds the time it slept to
// the call's accumulator (relSlept in ctx), so that a test can tell the
// backoff waits the Executor chose from the time herdguard itself took.
type relClock struct{}

type relSleptKey struct{}

func (relClock) Now() time.Time { return time.Now() }

func (relClock) Sleep(ctx context.Context, d time.Duration) error {
	start := time.Now()
	err := sleep.For(ctx, d)
	if acc, ok := ctx.Value(relSleptKey{}).(*time.Duration); ok {
		*acc += time.Since(start)
	}
	return err
}

// relCall is the measurement of one Executor call.
type relCall struct {
	env      int // the environment that made it
	start    time.Time
	elapsed  time.Duration // Do, end to end
	inOp     time.Duration // spent in the operation (the partner's time)
	slept    time.Duration // spent in backoff waits
	deadline time.Duration // the call's deadline, relative to its start
	attempts int
	err      error
}

// added is the time herdguard itself took: the call minus the partner's
// time and the backoff waits it chose to make.
func (c relCall) added() time.Duration { return max(c.elapsed-c.inOp-c.slept, 0) }

// reachedDeadline reports whether the call ran until its deadline.
func (c relCall) reachedDeadline() bool { return c.elapsed >= c.deadline }

// overrun is how long the call ran past its deadline (0 if it did not).
func (c relCall) overrun() time.Duration { return max(c.elapsed-c.deadline, 0) }

// relDo runs op through e under a deadline and measures it.
func relDo(ctx context.Context, e *retry.Executor, deadline time.Duration, idempotent bool, op func(ctx context.Context, attempt int) error) relCall {
	var c relCall
	ctx = context.WithValue(ctx, relSleptKey{}, &c.slept)
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	c.deadline = deadline
	c.start = time.Now()
	c.err = e.DoIdempotent(ctx, idempotent, func(ctx context.Context, attempt int) error {
		c.attempts = attempt
		s := time.Now()
		err := op(ctx, attempt)
		c.inOp += time.Since(s)
		return err
	})
	c.elapsed = time.Since(c.start)
	return c
}

// relPercentile returns the p-th percentile (0..100) of ds by the
// nearest-rank method, or 0 for none.
func relPercentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// relStoreWatch follows one environment's DynamoDB requests for one layer
// (through the store's OnRequest) so that a test can tell when the layer
// tried the table again after a fault, when it worked again, and how many
// requests the environment made.
type relStoreWatch struct {
	requests, failures atomic.Int64
	mark               atomic.Int64 // Unix ns; requests started at or after it count as resumption
	attempted          atomic.Int64 // Unix ns of the earliest request started at or after mark; 0 = none yet
	resumed            atomic.Int64 // Unix ns of the first success that ended at or after mark; 0 = none yet
	// due is the Unix ns at which the first probe that asked the layer with
	// a now at or after mark + its resumption bound returned (see
	// relProbe); 0 = none yet. By then the layer must have started a
	// request.
	due atomic.Int64
}

// onRequest is a dynamo OnRequest hook, called when a request ends. A
// write refused by its condition is a working table (a domain answer), not
// a failure.
func (w *relStoreWatch) onRequest(ri dynamo.RequestInfo) {
	w.requests.Add(1)
	end := time.Now()
	m := w.mark.Load()
	if start := end.Add(-ri.Duration).UnixNano(); m != 0 && start >= m {
		for {
			a := w.attempted.Load()
			if (a != 0 && a <= start) || w.attempted.CompareAndSwap(a, start) {
				break
			}
		}
	}
	var ccf *types.ConditionalCheckFailedException
	if ri.Err != nil && !errors.As(ri.Err, &ccf) {
		w.failures.Add(1)
		return
	}
	if m != 0 && end.UnixNano() >= m {
		w.resumed.CompareAndSwap(0, end.UnixNano())
	}
}

// watchFrom starts looking for the first request started, and the first
// success, at or after t.
func (w *relStoreWatch) watchFrom(t time.Time) {
	w.attempted.Store(0)
	w.resumed.Store(0)
	w.due.Store(0)
	w.mark.Store(t.UnixNano())
}

// attemptedAfter returns how long after t the layer first started a
// request, or false.
func (w *relStoreWatch) attemptedAfter(t time.Time) (time.Duration, bool) {
	a := w.attempted.Load()
	if a == 0 {
		return 0, false
	}
	return time.Unix(0, a).Sub(t), true
}

// resumedAfter returns how long after t the first success came, or false.
func (w *relStoreWatch) resumedAfter(t time.Time) (time.Duration, bool) {
	r := w.resumed.Load()
	if r == 0 {
		return 0, false
	}
	return time.Unix(0, r).Sub(t), true
}

// relProbeInterval is how often probeLayers asks each layer of each
// environment for a decision.
const relProbeInterval = 5 * time.Millisecond

// probeLayers makes sure that, from now on, a call needing each layer of
// each environment always exists: every relProbeInterval it asks each
// environment's Global for a retry (and gives it back unused) and its
// breaker for a permit (finished as Excluded, which counts nothing), until
// the layer's watch has seen a store request started since its mark. The
// fleet's own calls need the Global only when the local budget grants a
// retry first, and come every relPaceInterval at best; without the probes
// the time a layer takes to resume would include the wait for such a call,
// which herdguard does not control. The breaker is asked only while it
// reads Closed, so that no probe slot is taken. Each probe passes the
// layer the time it asks at, and the watch records when the first ask at
// or after the mark plus the layer's resumption bound (FaultCooldown or
// CacheTTL, + relResumeTolerance) returned: herdguard decides by the time
// it is given, so that ask, however late a loaded machine ran it, must
// have found the layer resumed (relCheckResume). It returns a function
// that stops the probes and reports the Global grants they received.
func (f *relFleet) probeLayers(ctx context.Context) (stop func() (grants int64)) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		grants atomic.Int64
	)
	budgetBound, breakerBound := f.resumeBounds()
	for _, e := range f.envs {
		wg.Go(func() {
			relProbe(ctx, &e.budgetW, budgetBound, func(now time.Time) bool {
				if rel, err := e.global.AcquireRetry(ctx, now, budget.Transient); err == nil {
					grants.Add(1)
					rel(budget.RetryNotUsed)
				}
				return true
			})
		})
		wg.Go(func() {
			relProbe(ctx, &e.brkW, breakerBound, func(now time.Time) bool {
				if e.brk.State(now) != breaker.Closed {
					return false
				}
				if p, err := e.brk.Allow(ctx, now); err == nil {
					e.brk.Done(ctx, now, p, breaker.Excluded)
				}
				return true
			})
		})
	}
	return func() int64 {
		cancel()
		wg.Wait()
		return grants.Load()
	}
}

// resumeBounds are the times after DynamoDB's return within which each
// environment's Global and breaker must start a store request when asked:
// FaultCooldown and CacheTTL, each + relResumeTolerance.
func (f *relFleet) resumeBounds() (budgetBound, breakerBound time.Duration) {
	return f.cfg.FaultCooldown + relResumeTolerance, f.cfg.CacheTTL + relResumeTolerance
}

// allResumed reports whether every layer of every environment has worked
// against the table since its watch's mark.
func (f *relFleet) allResumed() bool {
	for _, e := range f.envs {
		if e.budgetW.resumed.Load() == 0 || e.brkW.resumed.Load() == 0 {
			return false
		}
	}
	return true
}

// resumeWithin bounds the wait, after DynamoDB returns, until every layer
// has worked again (allResumed): each tries within its cooldown
// (resumeBounds; relCheckResume checks that), and a first request that
// still misses the store timeout on a busy machine costs the layer one
// more cooldown; two such misses are allowed for.
func (f *relFleet) resumeWithin() time.Duration {
	return 3*max(f.cfg.CacheTTL, f.cfg.FaultCooldown) + relResumeTolerance
}

// relProbe calls ask every relProbeInterval until w has seen a request
// started since its mark, or ctx ends. ask reports whether it asked the
// layer (with the now it is given); the first ask with a now at or after
// the mark + bound sets w.due when it returns.
func relProbe(ctx context.Context, w *relStoreWatch, bound time.Duration, ask func(now time.Time) bool) {
	tick := time.NewTicker(relProbeInterval)
	defer tick.Stop()
	for w.attempted.Load() == 0 {
		now := time.Now()
		if ask(now) && w.due.Load() == 0 && !now.Before(time.Unix(0, w.mark.Load()).Add(bound)) {
			w.due.Store(time.Now().UnixNano())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// relFleetConfig configures a relFleet.
type relFleetConfig struct {
	Envs          int
	Name          string        // budget and breaker name
	StoreTimeout  time.Duration // both layers
	CacheTTL      time.Duration // breaker; zero means defaultCacheTTL (1 s)
	FaultCooldown time.Duration // Global; zero means defaultFaultCooldown (1 s)
	GlobalWindow  time.Duration
	MaxAttempts   int
	// Breaker settings (zero = the defaults the tests use).
	MinRequests  int64
	OpenDuration time.Duration
	ProbeLease   time.Duration
	LocalRatio   local.RatioConfig
	Seed         uint64
}

func (c *relFleetConfig) fill() {
	if c.Envs == 0 {
		c.Envs = 4
	}
	if c.Name == "" {
		c.Name = "partner"
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = relStoreTimeout
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = defaultCacheTTL
	}
	if c.FaultCooldown == 0 {
		c.FaultCooldown = defaultFaultCooldown
	}
	if c.GlobalWindow == 0 {
		c.GlobalWindow = time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.MinRequests == 0 {
		c.MinRequests = 20
	}
	if c.OpenDuration == 0 {
		c.OpenDuration = 2 * time.Second
	}
	if c.ProbeLease == 0 {
		c.ProbeLease = time.Second
	}
	if c.LocalRatio == (local.RatioConfig{}) {
		// 10% of requests: well below the retries a partner failing 30% of
		// attempts asks for, so that the local budget visibly limits.
		c.LocalRatio = local.RatioConfig{Ratio: 0.1, Window: 2 * time.Second, Slots: 10, MinRetries: 3}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// relStoreTimeout is the store timeout of the reliability fleets that test
// store faults: the library's default (50 ms) doubled, because DynamoDB
// Local on a busy two-core machine under the race detector answers a
// healthy UpdateItem in more than 50 ms often enough to blur what the
// tests measure. The timeouts the tests assert are derived from it.
const relStoreTimeout = 100 * time.Millisecond

// relWorkingStoreTimeout is the store timeout of reliability fleets whose
// test needs a working table rather than testing its faults (the restart
// test's outages before and after the restart, which must open the breaker
// fleet-wide, in the table). DynamoDB Local on a two-core machine with a
// CPU hog on one core answered warm requests in up to 0.6 s (p90 0.1 s):
// with a 100 ms timeout every environment fell back to its local state
// machine and the table never opened, which is right for herdguard and
// says nothing about what the test asks. Like TestFleetSharedBudgetAndBreaker's
// 2 s, it keeps every store call bounded and rarely fires.
const relWorkingStoreTimeout = time.Second

// The breaker Window and ReportInterval of every relFleet environment.
const (
	relBreakerWindow  = 2 * time.Second
	relReportInterval = 200 * time.Millisecond
)

// relEnv is one execution environment: its own Executor, local budget,
// Global, Breaker and DynamoDB stores (sharing one client per fleet, as the
// environments of one process would; each Lambda environment has its own).
type relEnv struct {
	id      int
	local   *relCounting
	global  *budget.Global
	brk     *breaker.Breaker
	exec    *retry.Executor
	rng     *rand.Rand // used only by the environment's own goroutine
	budgetW relStoreWatch
	brkW    relStoreWatch

	retries       atomic.Int64 // OnRetry
	globalAbstain atomic.Int64 // OnStoreError for the global layer
	breakerFaults atomic.Int64 // breaker OnStoreError

	mu     sync.Mutex
	states []breaker.State // every state announced by OnStateChange, in order
}

// relFleet is a set of environments sharing one table.
type relFleet struct {
	cfg  relFleetConfig
	envs []*relEnv
}

// newRelFleet builds cfg.Envs environments over api and table.
func newRelFleet(t testing.TB, api dynamo.API, table string, cfg relFleetConfig) *relFleet {
	t.Helper()
	cfg.fill()
	f := &relFleet{cfg: cfg}
	for i := range cfg.Envs {
		e := &relEnv{id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		bs, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{OnRequest: e.budgetW.onRequest})
		if err != nil {
			t.Fatalf("dynamo.NewBudgetStore: %v", err)
		}
		cs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{OnRequest: e.brkW.onRequest})
		if err != nil {
			t.Fatalf("dynamo.NewBreakerStore: %v", err)
		}
		lr, err := local.NewRatio(cfg.LocalRatio)
		if err != nil {
			t.Fatalf("local.NewRatio: %v", err)
		}
		e.local = &relCounting{b: lr}
		e.global, err = budget.NewGlobal(bs, cfg.Name, budget.GlobalConfig{
			Window:        cfg.GlobalWindow,
			StoreTimeout:  cfg.StoreTimeout,
			FaultCooldown: cfg.FaultCooldown,
		})
		if err != nil {
			t.Fatalf("budget.NewGlobal: %v", err)
		}
		bset := breaker.Settings{
			Store:        cs,
			CacheTTL:     cfg.CacheTTL,
			StoreTimeout: cfg.StoreTimeout,
			MinRequests:  cfg.MinRequests,
			Window:       relBreakerWindow,
			OpenDuration: cfg.OpenDuration,
			ProbeLease:   cfg.ProbeLease,
			Rand:         rand.New(rand.NewPCG(cfg.Seed, 1000+uint64(i))).Float64,
			OnStoreError: func(string, error) { e.breakerFaults.Add(1) },
			OnStateChange: func(c breaker.StateChange) {
				e.mu.Lock()
				e.states = append(e.states, c.To)
				e.mu.Unlock()
			},
		}
		bset.ReportInterval = relReportInterval
		e.brk, err = breaker.New(cfg.Name, bset)
		if err != nil {
			t.Fatalf("breaker.New: %v", err)
		}
		e.exec, err = retry.New(retry.Config{
			MaxAttempts:   cfg.MaxAttempts,
			TransientBase: 5 * time.Millisecond,
			MaxDelay:      50 * time.Millisecond,
			Budgets:       []budget.Budget{e.local, e.global},
			Breaker:       e.brk,
			Clock:         relClock{},
			OnRetry:       func(retry.RetryEvent) { e.retries.Add(1) },
			OnStoreError: func(layer int, _ error) {
				if layer == 1 {
					e.globalAbstain.Add(1)
				}
			},
		})
		if err != nil {
			t.Fatalf("retry.New: %v", err)
		}
		f.envs = append(f.envs, e)
	}
	return f
}

// lastState returns the last state the environment's breaker announced
// (Closed if none).
func (e *relEnv) lastState() breaker.State {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.states) == 0 {
		return breaker.Closed
	}
	return e.states[len(e.states)-1]
}

// relEnvSnap is one environment's counters at one moment.
type relEnvSnap struct {
	local                                 relCounts
	global                                budget.GlobalStats
	retries, globalAbstain, breakerFaults int64
	budgetReqs, breakerReqs               int64
	budgetFails, breakerFails             int64
}

func (e *relEnv) snap() relEnvSnap {
	return relEnvSnap{
		local:         e.local.counts(),
		global:        e.global.Stats(),
		retries:       e.retries.Load(),
		globalAbstain: e.globalAbstain.Load(),
		breakerFaults: e.breakerFaults.Load(),
		budgetReqs:    e.budgetW.requests.Load(),
		breakerReqs:   e.brkW.requests.Load(),
		budgetFails:   e.budgetW.failures.Load(),
		breakerFails:  e.brkW.failures.Load(),
	}
}

// relPartner decides, per attempt, whether the simulated partner fails.
type relPartner struct {
	failPermille atomic.Int64 // probability of failure ×1000
}

func (p *relPartner) setFailure(prob float64) { p.failPermille.Store(int64(prob * 1000)) }

// op is the partner call: a 503 with the configured probability, drawn from
// the environment's own generator.
func (p *relPartner) op(rng *rand.Rand) func(ctx context.Context, attempt int) error {
	return func(ctx context.Context, _ int) error {
		if rng.Int64N(1000) < p.failPermille.Load() {
			return &retry.StatusError{StatusCode: 503, Status: "503 Service Unavailable"}
		}
		return ctx.Err()
	}
}

// relPhase is what a fleet did during one phase.
type relPhase struct {
	name     string
	duration time.Duration
	calls    []relCall
	before   []relEnvSnap
	after    []relEnvSnap
}

// run drives every environment for d: each makes sequential calls (one
// Lambda invocation at a time) paced every interval, with a deadline drawn
// from [minDeadline, maxDeadline).
func (f *relFleet) run(ctx context.Context, name string, d, interval, minDeadline, maxDeadline time.Duration, p *relPartner) relPhase {
	return f.runUntil(ctx, name, d, nil, interval, minDeadline, maxDeadline, p)
}

// runUntil is run that also ends when stop is closed (nil: never).
func (f *relFleet) runUntil(ctx context.Context, name string, d time.Duration, stop <-chan struct{}, interval, minDeadline, maxDeadline time.Duration, p *relPartner) relPhase {
	ph := relPhase{name: name}
	begin := time.Now()
	for _, e := range f.envs {
		ph.before = append(ph.before, e.snap())
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	end := time.Now().Add(d)
	for _, e := range f.envs {
		wg.Go(func() {
			var calls []relCall
			next := time.Now()
			stopped := func() bool {
				select {
				case <-stop:
					return true
				default:
					return ctx.Err() != nil || time.Now().After(end)
				}
			}
			for n := 0; n <= int(d/interval) && !stopped(); n++ {
				dl := minDeadline + time.Duration(e.rng.Int64N(int64(maxDeadline-minDeadline)+1))
				c := relDo(ctx, e.exec, dl, true, p.op(e.rng))
				c.env = e.id
				calls = append(calls, c)
				next = next.Add(interval)
				if w := time.Until(next); w > 0 {
					time.Sleep(w) // pacing only; nothing is asserted on it
				}
			}
			mu.Lock()
			ph.calls = append(ph.calls, calls...)
			mu.Unlock()
		})
	}
	wg.Wait()
	ph.duration = time.Since(begin)
	for _, e := range f.envs {
		ph.after = append(ph.after, e.snap())
	}
	return ph
}

// relTotals sums a phase's per-environment deltas.
type relTotals struct {
	calls, failedCalls                     int
	retries, globalAbstain, breakerFaults  int64
	local                                  relCounts
	globalGranted, globalLeases, globalRef int64
	budgetReqs, breakerReqs                int64
	budgetFails, breakerFails              int64
	worstAdded, p50Added, p99Added         time.Duration
	worstOverrun                           time.Duration
}

func (ph relPhase) totals() relTotals {
	var s relTotals
	s.calls = len(ph.calls)
	added := make([]time.Duration, 0, len(ph.calls))
	for _, c := range ph.calls {
		if c.err != nil {
			s.failedCalls++
		}
		added = append(added, c.added())
		s.worstOverrun = max(s.worstOverrun, c.overrun())
	}
	s.worstAdded = relPercentile(added, 100)
	s.p50Added = relPercentile(added, 50)
	s.p99Added = relPercentile(added, 99)
	for i := range ph.before {
		b, a := ph.before[i], ph.after[i]
		s.retries += a.retries - b.retries
		s.globalAbstain += a.globalAbstain - b.globalAbstain
		s.breakerFaults += a.breakerFaults - b.breakerFaults
		l := a.local.sub(b.local)
		s.local = relCounts{s.local.requests + l.requests, s.local.granted + l.granted, s.local.returned + l.returned, s.local.refused + l.refused, s.local.abstain + l.abstain}
		s.globalGranted += (a.global.Granted - a.global.Returned) - (b.global.Granted - b.global.Returned)
		s.globalLeases += a.global.Leases - b.global.Leases
		s.globalRef += a.global.Refused - b.global.Refused
		s.budgetReqs += a.budgetReqs - b.budgetReqs
		s.breakerReqs += a.breakerReqs - b.breakerReqs
		s.budgetFails += a.budgetFails - b.budgetFails
		s.breakerFails += a.breakerFails - b.breakerFails
	}
	return s
}

func (s relTotals) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "calls=%d failed=%d retries=%d (local granted %d, refused %d; global granted %d from %d leases, refused %d, abstained %d) ",
		s.calls, s.failedCalls, s.retries, s.local.granted-s.local.returned, s.local.refused, s.globalGranted, s.globalLeases, s.globalRef, s.globalAbstain)
	fmt.Fprintf(&b, "breaker store faults=%d; store requests budget=%d (failed %d) breaker=%d (failed %d); added latency p50=%v p99=%v worst=%v; worst deadline overrun=%v",
		s.breakerFaults, s.budgetReqs, s.budgetFails, s.breakerReqs, s.breakerFails,
		s.p50Added.Round(10*time.Microsecond), s.p99Added.Round(10*time.Microsecond), s.worstAdded.Round(10*time.Microsecond), s.worstOverrun.Round(10*time.Microsecond))
	return b.String()
}
