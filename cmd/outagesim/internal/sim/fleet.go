package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Runner runs one strategy at a time against a fresh partner.
type Runner struct {
	Config  Config
	Backend Backend
	// Progress, if not nil, is called from the run's driver goroutine
	// with the fraction of new calls started so far, in [0, 1].
	Progress func(frac float64)
}

// tailSeconds are counted past Duration for retries still in flight.
const tailSeconds = 60

// maxConns bounds the fleet's connections to the partner.
const maxConns = 512

// scaleBurstSeconds: Lambda adds at most 1,000 environments every 10
// seconds, refilled continuously: a burst of ten seconds' worth.
const scaleBurstSeconds = 10

// Clock backpressure (see Clock): simulated time stops while more than
// busyHigh requests, responses and not-yet-sent calls are in transit, and
// starts again at busyLow; it advances by at most maxStep of real time
// between two steps, taken every clockTick. maxPause is the watchdog's
// limit.
const (
	busyHigh  = 64
	busyLow   = 16
	clockTick = time.Millisecond
	maxStep   = 5 * time.Millisecond
	maxPause  = 2 * time.Second
	// driverTick is how often the driver starts the calls that are due.
	driverTick = 500 * time.Microsecond
)

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
	// firstOpen is the simulated time (Clock.Elapsed, +1 so that 0 means
	// never) this environment first saw its breaker open.
	firstOpen atomic.Int64
	// lastCall is the simulated time (Clock.Elapsed) its latest call
	// started.
	lastCall atomic.Int64
}

type tally struct {
	outcomes     [numPhases][numOutcomes]atomic.Int64 // [phase][outcome]
	blockedFirst [numPhases]atomic.Int64              // first attempts the breaker rejected, by phase
	firstSent    [numPhases]atomic.Int64              // first attempts sent, by the phase their call was scheduled in
	attempts     atomic.Int64                         // attempts sent by the clients
}

type run struct {
	cfg      Config
	clock    *Clock
	strategy Strategy
	client   *http.Client
	url      string
	t0       time.Time // simulated time of second 0
	tally    tally
	wg       sync.WaitGroup

	mu     sync.Mutex // guards nextID, envs, free, newErr, scale
	nextID int
	envs   []*env
	// free holds the idle environments when they take one call at a time
	// (Config.OneAtATime), oldest release first: -fleet lambda takes the
	// least recently used (the front), -scale-out alone the most recently
	// used (the back, like Lambda's warm pool).
	free    envQueue
	newErr  error // first error building an environment
	envSeed uint64
	// scale limits how fast environments join (Config.ScaleRate).
	scale scaleBucket
}

// envQueue is a double-ended queue of idle environments.
type envQueue struct {
	items []*env
	head  int
}

func (q *envQueue) len() int { return len(q.items) - q.head }

func (q *envQueue) push(e *env) { q.items = append(q.items, e) }

func (q *envQueue) popFront() *env {
	e := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head > 1024 && q.head*2 > len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return e
}

func (q *envQueue) popBack() *env {
	n := len(q.items) - 1
	e := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	return e
}

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

var attemptValues = func() []string {
	v := make([]string, 101)
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

// Run runs one strategy: it starts a fresh partner and a fresh fleet,
// starts Rate new calls per simulated second for Duration, waits for every
// call to finish and returns what happened.
func (r *Runner) Run(ctx context.Context, info StrategyInfo) (*Result, error) {
	cfg := r.Config
	wallStart := time.Now()
	clock, err := NewClock(time.Now().Truncate(time.Minute), cfg.Speed)
	if err != nil {
		return nil, err
	}
	clock.SetBackpressure(busyHigh, busyLow)
	clock.SetMaxStep(maxStep)
	clockCtx, stopClock := context.WithCancel(ctx)
	defer stopClock()
	go clock.Run(clockCtx, clockTick, maxPause)
	// Shared budgets and breakers are named per strategy and per run, so
	// that runs sharing a DynamoDB table (-dynamodb-table) never meet.
	deps := Deps{Config: cfg, Clock: clock, Backend: r.Backend,
		Name: "outagesim-" + info.Key + "-" + strconv.FormatInt(wallStart.UnixMilli(), 36)}
	strategy, err := info.Build(ctx, deps)
	if err != nil {
		return nil, fmt.Errorf("strategy %s: %w", info.Key, err)
	}
	defer func() { _ = strategy.Close(context.WithoutCancel(ctx)) }()

	// Second 0 starts on the first whole simulated second at least 100 ms
	// of real time from now, which leaves time to set the fleet up.
	t0 := clock.Now().Add(time.Duration(float64(100*time.Millisecond) * cfg.Speed)).Truncate(time.Second).Add(time.Second)
	partner, err := NewPartner(clock, t0, PartnerConfig{
		Schedule:     cfg.Schedule(),
		Seconds:      cfg.Seconds() + tailSeconds,
		RejectStatus: cfg.RejectStatus,
		RetryAfter:   cfg.RetryAfter,
		Latency:      cfg.Latency,
		Slowdown:     cfg.Slowdown,
	})
	if err != nil {
		return nil, err
	}
	srv, err := Serve(partner)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	// One connection pool for the fleet, bounded so that a burst of retries
	// on a busy machine cannot open thousands of connections and run out of
	// file descriptors. A request holds its connection while the partner
	// serves it (Latency and Slowdown, in simulated time), so the bound is
	// also the most calls the partner serves at once; beyond it requests
	// wait for a connection in real time.
	transport := &http.Transport{
		MaxConnsPerHost:     maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()

	rn := &run{
		cfg:      cfg,
		clock:    clock,
		strategy: strategy,
		client:   &http.Client{Transport: transport},
		url:      srv.URL,
		t0:       t0,
		envSeed:  cfg.Seed,
	}
	if cfg.ScaleRate > 0 {
		rn.scale = scaleBucket{rate: float64(cfg.ScaleRate), burst: float64(cfg.ScaleRate) * scaleBurstSeconds}
		rn.scale.tokens = rn.scale.burst
	}
	for i := 0; i < cfg.Envs; i++ {
		e, err := rn.newEnv()
		if err != nil {
			return nil, err
		}
		rn.free.push(e)
	}
	if err := clock.SleepUntil(ctx, t0); err != nil {
		return nil, err
	}

	driveStart := time.Now()
	usage := rn.drive(ctx, r.Progress)
	rn.wg.Wait()
	driveWall := time.Since(driveStart)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := rn.newErr; err != nil {
		return nil, err
	}
	// Flush what the environments hold (a store fault here is reported, it
	// does not void the run).
	closeErr := strategy.Close(ctx)
	final, hasStore := strategy.StoreUsage()
	usage[2] = final
	simEnd := clock.Now()
	res := rn.result(info, partner, usage, hasStore)
	if closeErr != nil {
		res.FlushError = closeErr.Error()
	}
	res.Wall = Duration(time.Since(wallStart))
	res.SimulatedTail = Duration(simEnd.Sub(t0.Add(cfg.Duration)))
	res.Clock = clock.Stats()
	res.Clock.EffectiveSpeed = simEnd.Sub(t0).Seconds() / driveWall.Seconds()
	res.KeepUp = judgeKeepUp(cfg, res)
	return res, nil
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
		Name:          "env-" + strconv.Itoa(id),
		Clock:         rn.clock,
		FlushEachCall: rn.cfg.Fleet == FleetLambda,
		Rand: func() float64 {
			srcMu.Lock()
			defer srcMu.Unlock()
			return src.Float64()
		},
		BreakerOpen: func() {
			if e.firstOpen.Load() == 0 {
				e.firstOpen.CompareAndSwap(0, int64(rn.clock.Elapsed())+1)
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

// acquire returns an idle environment (OneAtATime), starting a new one
// when none is idle and ScaleOut, the cap and the scaling rate allow; nil
// means the call is throttled.
func (rn *run) acquire() *env {
	rn.mu.Lock()
	if rn.free.len() > 0 {
		var e *env
		if rn.cfg.Fleet == FleetLambda {
			e = rn.free.popFront()
		} else {
			e = rn.free.popBack()
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

// drive starts the new calls on schedule (call k at t0 + k/Rate) and
// returns the shared stores' usage when the first call of the outage and
// the first call after it are due (usage[2] is left for the caller).
func (rn *run) drive(ctx context.Context, progress func(float64)) (usage [3]StoreUsage) {
	cfg := rn.cfg
	total := cfg.TotalCalls()
	rate := int64(cfg.Rate)
	outageFrom := rate * int64(cfg.OutageStart/time.Second)
	outageTo := outageFrom + rate*int64(cfg.OutageLength/time.Second)
	pick := rand.New(rand.NewPCG(cfg.Seed, 0))
	snapped := 0
	var lastProgress time.Time
	tick := time.NewTicker(driverTick)
	defer tick.Stop()
	// Simulated time may run at most slack ahead of the next call to start:
	// a driver that is not scheduled holds the clock back.
	slack := max(20*time.Millisecond, time.Duration(4*float64(driverTick)*cfg.Speed))
	callTime := func(k int64) time.Time {
		return rn.t0.Add(time.Duration(float64(k) / float64(rate) * float64(time.Second)))
	}
	rn.clock.SetHorizon(callTime(0).Add(slack))
	defer rn.clock.ClearHorizon()
	for k := int64(0); k < total; {
		el := rn.clock.Now().Sub(rn.t0)
		due := min(total, int64(el.Seconds()*float64(rate))+1)
		for ; k < due; k++ {
			if snapped == 0 && k >= outageFrom || snapped == 1 && k >= outageTo {
				usage[snapped], _ = rn.strategy.StoreUsage()
				snapped++
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
					continue
				}
			} else {
				e = rn.envs[pick.IntN(len(rn.envs))]
			}
			rn.wg.Add(1)
			rn.clock.Busy(+1) // until the call sends its first attempt or ends
			go rn.call(ctx, e, phase, callTime(k))
		}
		rn.clock.SetHorizon(callTime(k).Add(slack))
		if progress != nil && time.Since(lastProgress) > 100*time.Millisecond {
			lastProgress = time.Now()
			progress(float64(k) / float64(total))
		}
		select {
		case <-ctx.Done():
			return usage
		case <-tick.C:
		}
	}
	for ; snapped < 2; snapped++ {
		usage[snapped], _ = rn.strategy.StoreUsage()
	}
	if progress != nil {
		progress(1)
	}
	return usage
}

// call runs one call scheduled at due (simulated time) in environment e.
func (rn *run) call(ctx context.Context, e *env, phase int, due time.Time) {
	defer rn.wg.Done()
	e.lastCall.Store(int64(rn.clock.Elapsed()))
	if rn.cfg.OneAtATime() {
		defer rn.release(e)
	}
	var sent atomic.Int32
	send := func(ctx context.Context, n int) (*http.Response, error) {
		at := due // a first attempt is due when its call was scheduled
		if sent.Add(1) == 1 {
			rn.clock.Busy(-1)
			rn.tally.firstSent[phase].Add(1)
		} else {
			at = rn.clock.Now() // a retry when its backoff ended
		}
		rn.tally.attempts.Add(1)
		return rn.send(ctx, n, at)
	}
	out, _ := e.caller.Call(ctx, send)
	if sent.Load() == 0 {
		rn.clock.Busy(-1)
	}
	if out >= numOutcomes {
		out = FailedOther
	}
	rn.tally.outcomes[phase][out].Add(1)
	if out == FailedBreaker && sent.Load() == 0 {
		rn.tally.blockedFirst[phase].Add(1)
	}
}

// send makes one HTTP attempt and returns the response with its body read
// and closed, so the connection goes back to the pool.
//
// From the moment it has a connection until the partner admits it, and
// from the partner's answer until Do returns, the attempt is work in
// transit for the clock's backpressure. Waiting for a free connection is
// not: the requests holding the connections may be in service, sleeping on
// the clock, and counting the waiters would stop the clock for good.
func (rn *run) send(ctx context.Context, n int, due time.Time) (*http.Response, error) {
	var counted atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		if counted.CompareAndSwap(false, true) {
			rn.clock.Busy(+1)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, rn.url, nil)
	if err != nil {
		return nil, err
	}
	if n >= 0 && n < len(attemptValues) {
		req.Header[AttemptHeader] = []string{attemptValues[n]}
	} else {
		req.Header.Set(AttemptHeader, strconv.Itoa(n))
	}
	req.Header[DueHeader] = []string{strconv.FormatInt(int64(due.Sub(rn.clock.Epoch())), 10)}
	resp, err := rn.client.Do(req)
	if counted.Load() {
		rn.clock.Busy(-1)
	}
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp, nil
}
