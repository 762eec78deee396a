package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Runner runs one strategy at a time against a fresh partner, over HTTP on
// loopback or in process (Config.Partner).
type Runner struct {
	Config  Config
	Backend Backend
	// Progress, if not nil, is called from the run's driver goroutine
	// with the fraction of new calls started so far, in [0, 1].
	Progress func(frac float64)

	// wrapTransport, if not nil, wraps the fleet's HTTP transport (tests).
	wrapTransport func(http.RoundTripper) http.RoundTripper
}

// Run runs one strategy: it starts a fresh partner and a fresh fleet,
// starts Rate new calls per simulated second for Duration, waits for every
// call to finish and returns what happened.
func (r *Runner) Run(ctx context.Context, info StrategyInfo) (*Result, error) {
	if r.Config.Partner == PartnerInproc {
		return r.runInproc(ctx, info)
	}
	return r.runHTTP(ctx, info)
}

// tailSeconds are counted past Duration for retries still in flight.
const tailSeconds = 60

// scaleBurstSeconds: Lambda adds at most 1,000 environments every 10
// seconds, refilled continuously: a burst of ten seconds' worth.
const scaleBurstSeconds = 10

// Phases of a run, by when a call was scheduled to start: before the
// outage, during it, after it.
const (
	phaseBefore = iota
	phaseOutage
	phaseAfter
	numPhases
)

type env struct {
	id     int
	caller Caller
	// firstOpen is the simulated time (since the run's epoch, +1 so that
	// 0 means never) this environment first saw its breaker open.
	firstOpen atomic.Int64
	// lastCall is the simulated time (since the epoch) its latest call
	// started.
	lastCall atomic.Int64
}

type tally struct {
	outcomes     [numPhases][numOutcomes]atomic.Int64 // [phase][outcome]
	blockedFirst [numPhases]atomic.Int64              // first attempts the breaker rejected, by phase
	firstSent    [numPhases]atomic.Int64              // first attempts sent, by the phase their call was scheduled in
	attempts     atomic.Int64                         // attempts sent by the clients
}

// run is one strategy's run, whichever the engine: the fleet, its calls
// and what they did.
type run struct {
	cfg      Config
	clock    TimeSource
	epoch    time.Time // simulated time elapsed times count from
	strategy Strategy
	partner  *Partner
	t0       time.Time // simulated time of second 0
	tally    tally

	// The engine's parts: go starts a call's goroutine, busy reports work
	// in transit to the clock's backpressure (HTTP only), attempt sends
	// one attempt due at due (simulated time) to the partner.
	goCall  func(f func())
	busy    func(delta int64)
	attempt func(ctx context.Context, n int, due time.Time) (*http.Response, error)
	wg      sync.WaitGroup // calls running

	// The driver's state (one goroutine: the driver, or the scheduler).
	pick    *rand.Rand
	usage   [3]StoreUsage // the stores' counters at the start of each phase's calls (usage[2]: at the end)
	snapped int

	mu     sync.Mutex // guards nextID, envs, free, newErr, scale
	nextID int
	envs   []*env
	// free holds the idle environments when they take one call at a time
	// (Config.OneAtATime): -fleet lambda takes one at random, so that each
	// of E environments makes about R/E calls per second at random
	// intervals; -scale-out alone the one that became idle last (Lambda's
	// warm pool).
	free    envPool
	newErr  error // first error building an environment
	envSeed uint64
	// scale limits how fast environments join (Config.ScaleRate).
	scale scaleBucket
}

// newRun returns a run of strategy on the partner, whose second 0 is t0.
func newRun(cfg Config, clock TimeSource, epoch time.Time, strategy Strategy, partner *Partner, t0 time.Time) *run {
	rn := &run{cfg: cfg, clock: clock, epoch: epoch, strategy: strategy, partner: partner, t0: t0,
		envSeed: cfg.Seed, pick: rand.New(rand.NewPCG(cfg.Seed, 0)), busy: func(int64) {}}
	if cfg.ScaleRate > 0 {
		rn.scale = scaleBucket{rate: float64(cfg.ScaleRate), burst: float64(cfg.ScaleRate) * scaleBurstSeconds}
		rn.scale.tokens = rn.scale.burst
	}
	return rn
}

// partnerConfig is the partner cfg describes, counting tail seconds past
// the run.
func partnerConfig(cfg Config) PartnerConfig {
	return PartnerConfig{
		Schedule:     cfg.Schedule(),
		Seconds:      cfg.Seconds() + tailSeconds,
		RejectStatus: cfg.RejectStatus,
		RetryAfter:   cfg.RetryAfter,
		Latency:      cfg.Latency,
		Slowdown:     cfg.Slowdown,
	}
}

// startFleet adds the environments the run starts with.
func (rn *run) startFleet() error {
	for i := 0; i < rn.cfg.Envs; i++ {
		e, err := rn.newEnv()
		if err != nil {
			return err
		}
		rn.free.push(e)
	}
	return nil
}

// elapsed returns the simulated time since the epoch.
func (rn *run) elapsed() time.Duration { return rn.clock.Now().Sub(rn.epoch) }

// callTime returns when call k is due: t0 + k/Rate.
func (rn *run) callTime(k int64) time.Time {
	return rn.t0.Add(time.Duration(float64(k) / float64(rn.cfg.Rate) * float64(time.Second)))
}

// snapUsage records the stores' counters when the calls of the next phase
// start.
func (rn *run) snapUsage() {
	rn.usage[rn.snapped], _ = rn.strategy.StoreUsage()
	rn.snapped++
}

// startCall starts call k (the driver calls it in order, k from 0).
func (rn *run) startCall(ctx context.Context, k int64) {
	cfg := rn.cfg
	rate := int64(cfg.Rate)
	outageFrom := rate * int64(cfg.OutageStart/time.Second)
	outageTo := outageFrom + rate*int64(cfg.OutageLength/time.Second)
	if rn.snapped == 0 && k >= outageFrom || rn.snapped == 1 && k >= outageTo {
		rn.snapUsage()
	}
	phase := phaseBefore
	switch {
	case k >= outageTo:
		phase = phaseAfter
	case k >= outageFrom:
		phase = phaseOutage
	}
	var e *env
	if cfg.OneAtATime() {
		if e = rn.acquire(); e == nil {
			rn.tally.outcomes[phase][FailedThrottled].Add(1)
			return
		}
	} else {
		e = rn.envs[rn.pick.IntN(len(rn.envs))]
	}
	rn.wg.Add(1)
	rn.busy(+1) // until the call sends its first attempt or ends
	due := rn.callTime(k)
	rn.goCall(func() { rn.call(ctx, e, phase, due) })
}

// finishUsage takes the stores' counters at the end of the run, after
// every environment flushed.
func (rn *run) finishUsage() (hasStore bool) {
	for rn.snapped < 2 {
		rn.snapUsage()
	}
	rn.usage[2], hasStore = rn.strategy.StoreUsage()
	return hasStore
}

// call runs one call scheduled at due (simulated time) in environment e.
func (rn *run) call(ctx context.Context, e *env, phase int, due time.Time) {
	defer rn.wg.Done()
	e.lastCall.Store(int64(rn.elapsed()))
	if rn.cfg.OneAtATime() {
		defer rn.release(e)
	}
	var sent atomic.Int32
	send := func(ctx context.Context, n int) (*http.Response, error) {
		at := due // a first attempt is due when its call was scheduled
		if sent.Add(1) == 1 {
			rn.busy(-1)
			rn.tally.firstSent[phase].Add(1)
		} else {
			at = rn.clock.Now() // a retry when its backoff ended
		}
		rn.tally.attempts.Add(1)
		return rn.attempt(ctx, n, at)
	}
	out, _ := e.caller.Call(ctx, send)
	if sent.Load() == 0 {
		rn.busy(-1)
	}
	if out >= numOutcomes {
		out = FailedOther
	}
	rn.tally.outcomes[phase][out].Add(1)
	if out == FailedBreaker && sent.Load() == 0 {
		rn.tally.blockedFirst[phase].Add(1)
	}
}

// finish assembles the result once every call ended: it flushes what the
// environments hold (a store fault there is reported, it does not void
// the run), reads the counters and judges whether the machine kept up.
// stats are the clock's; the run started at wallStart and its calls took
// driveWall, both real time.
func (rn *run) finish(ctx context.Context, info StrategyInfo, stats ClockStats, wallStart time.Time, driveWall time.Duration) (*Result, error) {
	if err := rn.newErr; err != nil {
		return nil, err
	}
	closeErr := rn.strategy.Close(ctx)
	hasStore := rn.finishUsage()
	res := rn.result(info, hasStore)
	if closeErr != nil {
		res.FlushError = closeErr.Error()
	}
	simEnd := rn.clock.Now()
	res.Wall = Duration(time.Since(wallStart))
	res.SimulatedTail = Duration(simEnd.Sub(rn.t0.Add(rn.cfg.Duration)))
	res.Clock = stats
	res.Clock.EffectiveSpeed = simEnd.Sub(rn.t0).Seconds() / driveWall.Seconds()
	res.KeepUp = judgeKeepUp(rn.cfg, res)
	return res, nil
}

// envPool holds idle environments.
type envPool struct{ items []*env }

func (q *envPool) len() int { return len(q.items) }

func (q *envPool) push(e *env) { q.items = append(q.items, e) }

// take removes and returns the idle environment at i.
func (q *envPool) take(i int) *env {
	n := len(q.items) - 1
	e := q.items[i]
	q.items[i] = q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	return e
}

// last removes and returns the environment that became idle last.
func (q *envPool) last() *env { return q.take(len(q.items) - 1) }

// scaleBucket is Lambda's scaling limit: rate new environments per
// simulated second, at most burst at once, refilled continuously.
type scaleBucket struct {
	rate, burst float64 // rate 0: unlimited
	tokens      float64
	last        time.Time
}

// take reports whether a new environment may join at now.
func (b *scaleBucket) take(now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// newEnv adds an execution environment to the fleet.
func (rn *run) newEnv() (*env, error) {
	rn.mu.Lock()
	id := rn.nextID
	rn.nextID++
	rn.mu.Unlock()
	e := &env{id: id}
	src := rand.New(rand.NewPCG(rn.envSeed, uint64(id)+1))
	var srcMu sync.Mutex
	caller, err := rn.strategy.NewEnv(EnvSpec{
		ID:            id,
		Name:          envName(id),
		Clock:         rn.clock,
		FlushEachCall: rn.cfg.Fleet == FleetLambda,
		Rand: func() float64 {
			srcMu.Lock()
			defer srcMu.Unlock()
			return src.Float64()
		},
		BreakerOpen: func() {
			if e.firstOpen.Load() == 0 {
				e.firstOpen.CompareAndSwap(0, int64(rn.elapsed())+1)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("environment %d: %w", id, err)
	}
	e.caller = caller
	rn.mu.Lock()
	rn.envs = append(rn.envs, e)
	rn.mu.Unlock()
	return e, nil
}

// envName names environment id as the breaker's default names one: "env-"
// and 16 hex digits, so that the fleet window items, which list their
// reporters, have the size they have in production.
func envName(id int) string { return fmt.Sprintf("env-%016x", id) }

// acquire returns an idle environment (OneAtATime), starting a new one
// when none is idle and ScaleOut, the cap and the scaling rate allow; nil
// means the call is throttled.
func (rn *run) acquire() *env {
	rn.mu.Lock()
	if rn.free.len() > 0 {
		var e *env
		if rn.cfg.Fleet == FleetLambda {
			e = rn.free.take(rn.pick.IntN(rn.free.len()))
		} else {
			e = rn.free.last()
		}
		rn.mu.Unlock()
		return e
	}
	full := !rn.cfg.ScaleOut || len(rn.envs) >= rn.cfg.MaxEnvs || rn.newErr != nil || !rn.scale.take(rn.clock.Now())
	rn.mu.Unlock()
	if full {
		return nil
	}
	e, err := rn.newEnv()
	if err != nil {
		rn.mu.Lock()
		if rn.newErr == nil {
			rn.newErr = err
		}
		rn.mu.Unlock()
		return nil
	}
	return e
}

func (rn *run) release(e *env) {
	rn.mu.Lock()
	rn.free.push(e)
	rn.mu.Unlock()
}
