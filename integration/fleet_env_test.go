package integration

// Building blocks of TestFleetSharedBudgetAndBreaker (fleet_test.go): the
// virtual clock, the loopback partner, one execution environment, and a
// recorder of the breaker's fleet-wide transitions and probe grants.
// Identifiers start with "ft" (fleet test) so that they cannot collide with
// the Lambda fleet test's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// ftClock is the fleet's virtual clock, shared by every environment as
// retry.Config.Clock (and budget.GlobalConfig.Now). Time stands still
// during a tick and moves by ftTick between ticks, when no call is in
// flight; Sleep does not wait (backoff waits take no virtual time, so a
// retry happens at the instant of the attempt it follows). Every time the
// breakers and budgets see therefore comes from the test, while DynamoDB
// calls, their timeouts and the HTTP calls run in real time.
type ftClock struct {
	start time.Time
	tick  atomic.Int64
}

// Now returns the time of the current tick.
func (c *ftClock) Now() time.Time { return c.at(int(c.tick.Load())) }

// Sleep returns at once, or ctx's error if ctx has ended.
func (c *ftClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// at returns the time of tick i.
func (c *ftClock) at(i int) time.Time { return c.start.Add(time.Duration(i) * ftTick) }

// current returns the current tick.
func (c *ftClock) current() int { return int(c.tick.Load()) }

// advance moves to the next tick. Only the test goroutine calls it, between
// ticks.
func (c *ftClock) advance() { c.tick.Add(1) }

// ftPartner is the loopback HTTP partner: it answers 200, or 503 without
// Retry-After to failTenths of every ten requests (in arrival order: the
// first failTenths of each ten fail), and counts what arrives per tick,
// first attempts and retries apart, from the attempt header retry.Transport
// sets.
type ftPartner struct {
	srv        *httptest.Server
	clock      *ftClock
	failTenths atomic.Int64 // 0 healthy, 10 down
	seq        atomic.Int64 // arrivals so far

	firsts  []atomic.Int64 // per tick: arrivals with attempt 1
	retries []atomic.Int64 // per tick: arrivals with attempt >= 2
	bad     atomic.Int64   // arrivals without a valid attempt header, or past the last tick
}

func newFTPartner(t *testing.T, clock *ftClock, ticks int) *ftPartner {
	t.Helper()
	p := &ftPartner{clock: clock, firsts: make([]atomic.Int64, ticks), retries: make([]atomic.Int64, ticks)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *ftPartner) serve(w http.ResponseWriter, r *http.Request) {
	attempt, err := strconv.Atoi(r.Header.Get(retry.DefaultAttemptHeader))
	tick := p.clock.current()
	switch {
	case err != nil || attempt < 1 || tick >= len(p.firsts):
		p.bad.Add(1)
	case attempt == 1:
		p.firsts[tick].Add(1)
	default:
		p.retries[tick].Add(1)
	}
	if (p.seq.Add(1)-1)%10 < p.failTenths.Load() {
		http.Error(w, "partner down", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// arrivals sums the arrivals of ticks [from, to).
func (p *ftPartner) arrivals(from, to int) (firsts, retries int64) {
	for i := max(from, 0); i < min(to, len(p.firsts)); i++ {
		firsts += p.firsts[i].Load()
		retries += p.retries[i].Load()
	}
	return firsts, retries
}

// ftTransition is a fleet-wide breaker transition the Store accepted.
type ftTransition struct {
	tick      int
	epoch     uint64
	state     breaker.State
	openUntil time.Time // for Open: when probes may go
}

// ftBreakerLog records, across the fleet, the transitions and the probe
// slots the breaker Store granted, keyed by epoch. Its mutex is never held
// across a Store call.
type ftBreakerLog struct {
	clock *ftClock

	mu          sync.Mutex
	transitions map[uint64]ftTransition // epoch → the transition that created it (first report)
	probes      map[uint64][]int        // half-open epoch → ticks of the probe slots granted in it
}

func newFTBreakerLog(clock *ftClock) *ftBreakerLog {
	return &ftBreakerLog{clock: clock, transitions: map[uint64]ftTransition{}, probes: map[uint64][]int{}}
}

// timeline returns the transitions in epoch order.
func (l *ftBreakerLog) timeline() []ftTransition {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ftTransition, 0, len(l.transitions))
	for _, tr := range l.transitions {
		out = append(out, tr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].epoch < out[j].epoch })
	return out
}

// probeGrants returns a copy of the probe grants per epoch.
func (l *ftBreakerLog) probeGrants() map[uint64][]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[uint64][]int, len(l.probes))
	for e, ticks := range l.probes {
		out[e] = append([]int(nil), ticks...)
	}
	return out
}

// ftSpyStore is an environment's breaker.Store: its own dynamo.BreakerStore,
// observed. It passes every call through unchanged and records in the
// fleet's ftBreakerLog the transitions and probe slots the store granted,
// which is how the test knows the half-open epochs and their probes.
// (A grant whose answer reached the breaker after its StoreTimeout is
// recorded although the breaker dropped it: the log can over-count probes,
// never under-count them.)
type ftSpyStore struct {
	breaker.Store
	log *ftBreakerLog
}

func (s ftSpyStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	snap, err := s.Store.Transition(ctx, name, prevEpoch, next)
	if err == nil {
		tick := s.log.clock.current()
		s.log.mu.Lock()
		if _, ok := s.log.transitions[next.Epoch]; !ok {
			s.log.transitions[next.Epoch] = ftTransition{tick: tick, epoch: next.Epoch, state: next.State, openUntil: next.OpenUntil}
		}
		s.log.mu.Unlock()
	}
	return snap, err
}

func (s ftSpyStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	slot, err := s.Store.AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
	if err == nil {
		tick := s.log.clock.current()
		s.log.mu.Lock()
		s.log.probes[epoch] = append(s.log.probes[epoch], tick)
		s.log.mu.Unlock()
	}
	return slot, err
}

// ftOutcomes counts what the calls of a tick (or a phase) returned to their
// caller.
type ftOutcomes struct {
	calls      int64
	ok         int64 // 200
	failed     int64 // the partner's 503, retries used up
	rejected   int64 // breaker.ErrOpen on the first attempt, or the 503 before a retry the breaker rejected
	refused    int64 // the 503 before a retry a budget refused
	unexpected int64 // anything else (fails the test)
	flushErrs  int64 // Executor.Flush errors (store faults; fails the test)
	firstErr   error // the first unexpected or Flush error
}

func (o *ftOutcomes) add(p ftOutcomes) {
	o.calls += p.calls
	o.ok += p.ok
	o.failed += p.failed
	o.rejected += p.rejected
	o.refused += p.refused
	o.unexpected += p.unexpected
	o.flushErrs += p.flushErrs
	if o.firstErr == nil {
		o.firstErr = p.firstErr
	}
}

func (o ftOutcomes) String() string {
	return fmt.Sprintf("calls=%d ok=%d failed(503)=%d rejected(open)=%d refused(budget)=%d unexpected=%d flush-errors=%d",
		o.calls, o.ok, o.failed, o.rejected, o.refused, o.unexpected, o.flushErrs)
}

// ftUsage is DynamoDB traffic as the stores' Stats count it.
type ftUsage struct {
	breaker, budget dynamo.Stats
}

func (u ftUsage) reads() int64  { return u.breaker.Reads + u.budget.Reads }
func (u ftUsage) writes() int64 { return u.breaker.Writes + u.budget.Writes }

func (u ftUsage) minus(v ftUsage) ftUsage {
	sub := func(a, b dynamo.Stats) dynamo.Stats {
		return dynamo.Stats{
			Reads:               a.Reads - b.Reads,
			Writes:              a.Writes - b.Writes,
			ConditionalFailures: a.ConditionalFailures - b.ConditionalFailures,
			Errors:              a.Errors - b.Errors,
			Malformed:           a.Malformed - b.Malformed,
		}
	}
	return ftUsage{breaker: sub(u.breaker, v.breaker), budget: sub(u.budget, v.budget)}
}

func (u ftUsage) plus(v ftUsage) ftUsage {
	add := func(a, b dynamo.Stats) dynamo.Stats {
		return dynamo.Stats{
			Reads:               a.Reads + b.Reads,
			Writes:              a.Writes + b.Writes,
			ConditionalFailures: a.ConditionalFailures + b.ConditionalFailures,
			Errors:              a.Errors + b.Errors,
			Malformed:           a.Malformed + b.Malformed,
		}
	}
	return ftUsage{breaker: add(u.breaker, v.breaker), budget: add(u.budget, v.budget)}
}

// ftEnv is one execution environment: its own DynamoDB client and stores,
// its own local budget, Global budget, breaker and Executor, and its own
// HTTP connection pool, as a Lambda execution environment has.
type ftEnv struct {
	id       string
	budgets  *dynamo.BudgetStore
	breakers *dynamo.BreakerStore
	local    *local.Ratio
	global   *budget.Global
	breaker  *breaker.Breaker
	exec     *retry.Executor
	client   *http.Client

	// gaveUp is the Reason of the invocation's current call's give-up
	// (Executor.OnGiveUp, on the calling goroutine), -1 for none: the
	// Transport returns the partner's 503 when a budget or the breaker
	// refuses the retry after it, so the refusal is counted from here.
	gaveUp atomic.Int64

	budgetFaults  atomic.Int64 // Executor.OnStoreError: the Global abstained
	breakerFaults atomic.Int64 // breaker Settings.OnStoreError
	faultMu       sync.Mutex
	firstFault    error

	// Written and read by the test goroutine only, between ticks.
	sawOpenTick int    // first tick after which this environment had seen the breaker open; -1 before
	sawOpenHow  string // "state" or "ErrOpen"
}

func (e *ftEnv) noteFault(err error) {
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	if e.firstFault == nil {
		e.firstFault = err
	}
}

func (e *ftEnv) usage() ftUsage {
	return ftUsage{breaker: e.breakers.Stats(), budget: e.budgets.Stats()}
}

// newFTEnv builds environment i over table: the production layering of
// herdguard (local ratio budget first, then the fleet-wide Global; the
// shared breaker gating every attempt), every clock reading from clock.
func newFTEnv(t *testing.T, i int, table, endpoint string, clock *ftClock, log *ftBreakerLog) *ftEnv {
	t.Helper()
	e := &ftEnv{id: fmt.Sprintf("env-%02d", i), sawOpenTick: -1}

	api, err := dynamo.NewClient(t.Context(), dynamo.ClientOptions{
		Config:      &aws.Config{}, // nothing from the machine's AWS settings
		Region:      "us-east-1",
		Endpoint:    endpoint,
		Credentials: credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
	})
	if err != nil {
		t.Fatalf("%s: dynamo.NewClient: %v", e.id, err)
	}
	t.Cleanup(func() { closeIdle(api) })
	if e.budgets, err = dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{}); err != nil {
		t.Fatalf("%s: dynamo.NewBudgetStore: %v", e.id, err)
	}
	if e.breakers, err = dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{}); err != nil {
		t.Fatalf("%s: dynamo.NewBreakerStore: %v", e.id, err)
	}

	if e.local, err = local.NewRatio(local.RatioConfig{
		Ratio:      ftLocalRatio,
		Window:     ftGlobalWindow,
		Slots:      10,
		MinRetries: ftLocalMinRetries,
	}); err != nil {
		t.Fatalf("%s: local.NewRatio: %v", e.id, err)
	}
	if e.global, err = budget.NewGlobal(e.budgets, ftName, budget.GlobalConfig{
		Ratio:        ftGlobalRatio,
		Window:       ftGlobalWindow,
		Floor:        ftGlobalFloor,
		LeaseSize:    ftLeaseSize,
		StoreTimeout: ftStoreTimeout,
	}); err != nil {
		t.Fatalf("%s: budget.NewGlobal: %v", e.id, err)
	}
	if e.breaker, err = breaker.New(ftName, breaker.Settings{
		MinRequests:     ftMinRequests,
		Window:          ftBreakerWindow,
		OpenDuration:    ftOpenDuration,
		MaxOpenDuration: ftMaxOpenDuration,
		Jitter:          -1, // the fleet's open periods follow from the settings alone
		HalfOpenProbes:  ftHalfOpenProbes,
		Store:           ftSpyStore{Store: e.breakers, log: log},
		CacheTTL:        ftCacheTTL,
		StoreTimeout:    ftStoreTimeout,
		OnStoreError: func(op string, err error) {
			e.breakerFaults.Add(1)
			e.noteFault(fmt.Errorf("breaker store %s: %w", op, err))
		},
	}); err != nil {
		t.Fatalf("%s: breaker.New: %v", e.id, err)
	}
	if e.exec, err = retry.New(retry.Config{
		Budgets:        []budget.Budget{e.local, e.global},
		Breaker:        e.breaker,
		Clock:          clock,
		AttemptTimeout: ftAttemptTimeout,
		OnGiveUp:       func(gu *retry.GiveUpError) { e.gaveUp.Store(int64(gu.Reason)) },
		OnStoreError: func(layer int, err error) {
			e.budgetFaults.Add(1)
			e.noteFault(fmt.Errorf("budget layer %d: %w", layer, err))
		},
	}); err != nil {
		t.Fatalf("%s: retry.New: %v", e.id, err)
	}

	base := &http.Transport{
		Proxy:               nil, // loopback only
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
	}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := retry.NewTransport(e.exec, base, retry.TransportOptions{})
	if err != nil {
		t.Fatalf("%s: retry.NewTransport: %v", e.id, err)
	}
	e.client = &http.Client{Transport: tr}
	return e
}

// invoke is one Lambda-style invocation of the environment: a batch of
// ftCallsPerTick partner calls, one after the other, then Executor.Flush as
// a handler does before returning.
func (e *ftEnv) invoke(ctx context.Context, url string) ftOutcomes {
	var o ftOutcomes
	note := func(err error) {
		if o.firstErr == nil {
			o.firstErr = fmt.Errorf("%s: %w", e.id, err)
		}
	}
	for range ftCallsPerTick {
		o.calls++
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			o.unexpected++
			note(err)
			continue
		}
		e.gaveUp.Store(-1)
		resp, err := e.client.Do(req)
		switch {
		case err == nil:
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK:
				o.ok++
			case resp.StatusCode == http.StatusServiceUnavailable && e.gaveUp.Load() == int64(retry.BudgetExhausted):
				o.refused++
			case resp.StatusCode == http.StatusServiceUnavailable && e.gaveUp.Load() == int64(retry.BreakerOpen):
				o.rejected++
			case resp.StatusCode == http.StatusServiceUnavailable:
				o.failed++
			default:
				o.unexpected++
				note(fmt.Errorf("partner answered %s", resp.Status))
			}
		case errors.Is(err, breaker.ErrOpen):
			o.rejected++
		case errors.Is(err, budget.ErrExhausted):
			o.refused++
		default:
			o.unexpected++
			note(err)
		}
	}
	if err := e.exec.Flush(ctx); err != nil {
		o.flushErrs++
		note(fmt.Errorf("Flush: %w", err))
	}
	return o
}

// ftFleet is the whole fleet and what it shares.
type ftFleet struct {
	clock   *ftClock
	partner *ftPartner
	log     *ftBreakerLog
	envs    []*ftEnv
	// carriedFrom[w] is the fleet's Global CarriedRequests when the first
	// tick of global window w started (see ftCheckGlobalBound).
	carriedFrom []int64
}

// tick runs one invocation in every environment, all at once, and waits
// for them all: afterwards no call is in flight.
func (f *ftFleet) tick(ctx context.Context) (sum ftOutcomes, per []ftOutcomes) {
	for w := f.clock.current() / ftWindowTicks; len(f.carriedFrom) <= w; {
		f.carriedFrom = append(f.carriedFrom, f.globalStats().CarriedRequests)
	}
	per = make([]ftOutcomes, len(f.envs))
	var wg sync.WaitGroup
	for i, e := range f.envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per[i] = e.invoke(ctx, f.partner.srv.URL)
		}()
	}
	wg.Wait()
	for _, o := range per {
		sum.add(o)
	}
	return sum, per
}

// usage returns the DynamoDB traffic of every environment so far.
func (f *ftFleet) usage() []ftUsage {
	out := make([]ftUsage, len(f.envs))
	for i, e := range f.envs {
		out[i] = e.usage()
	}
	return out
}

// states returns every environment's breaker state at the current tick,
// and whether they all equal want.
func (f *ftFleet) states(want breaker.State) (all bool, desc string) {
	now := f.clock.Now()
	all = true
	var b strings.Builder
	for i, e := range f.envs {
		st := e.breaker.State(now)
		if st != want {
			all = false
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", e.id, st)
	}
	return all, b.String()
}

// faults returns the store faults the environments reported.
func (f *ftFleet) faults() (budgetFaults, breakerFaults int64, first error) {
	for _, e := range f.envs {
		budgetFaults += e.budgetFaults.Load()
		breakerFaults += e.breakerFaults.Load()
		e.faultMu.Lock()
		if first == nil {
			first = e.firstFault
		}
		e.faultMu.Unlock()
	}
	return budgetFaults, breakerFaults, first
}

// globalStats sums the environments' Global counters.
func (f *ftFleet) globalStats() budget.GlobalStats {
	var s budget.GlobalStats
	for _, e := range f.envs {
		g := e.global.Stats()
		s.Granted += g.Granted
		s.Returned += g.Returned
		s.Refused += g.Refused
		s.CachedRefusals += g.CachedRefusals
		s.Unavailable += g.Unavailable
		s.StoreCalls += g.StoreCalls
		s.Leases += g.Leases
		s.LeasedRetries += g.LeasedRetries
		s.Faults += g.Faults
		s.ReportedRequests += g.ReportedRequests
		s.CarriedRequests += g.CarriedRequests
		s.LostRequests += g.LostRequests
		s.Deposits += g.Deposits
		s.RefusalWrites += g.RefusalWrites
		s.Throttled += g.Throttled
	}
	return s
}
