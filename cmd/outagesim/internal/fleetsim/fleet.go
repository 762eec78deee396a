package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Defaults of Config.
const (
	DefaultWindow   = 10 * time.Second
	DefaultDuration = 60 * time.Second
	DefaultDrain    = 5 * time.Minute
	DefaultMaxEnvs  = 1000
)

// DefaultStart is the default simulated time zero: 2026-01-01 00:00 UTC,
// a whole number of minutes since the Unix epoch, so that every window the
// library aligns to the epoch (10 s, 1 min) starts with the run.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Random streams: each environment's generators are seeded with (Seed,
// ID<<streamBits | stream), the partner's and the fleet's Poisson
// arrivals' with (Seed, streamPartner) and (Seed, streamFleet).
const (
	streamBits    = 4
	streamArrival = 1
	streamLayers  = 2
	streamPartner = 1<<64 - 1
	streamFleet   = 1<<64 - 2
)

// Config is one run.
type Config struct {
	// Seed seeds every random choice of the run (arrivals, the partner,
	// jitter, shard picks): a seed reproduces a run exactly.
	Seed uint64
	// Strategy builds each environment's retry logic (required).
	Strategy Strategy
	// Partner is the partner's behaviour over time.
	Partner Partner

	// The fleet: either Envs fixed environments, each with its own
	// arrival process of CallsPerWindow calls per Window, or (Rate > 0) a
	// fleet-wide arrival process of Rate calls per simulated second with
	// Lambda-like scale-out.
	//
	// Fixed environments (Envs > 0): calls arrive at each environment as a
	// Poisson process (Periodic: one every Window/CallsPerWindow, starting
	// at a random phase; this serves tests of a caller with a fixed gap). An environment runs at most Concurrency calls at
	// once (default 1, one invocation at a time as in Lambda; negative: no
	// limit); a call that arrives while it is busy waits in a FIFO queue.
	Envs           int
	CallsPerWindow float64
	Periodic       bool
	Concurrency    int
	// Scale-out (Rate > 0): calls arrive fleet-wide as a Poisson process.
	// A call goes to the idle environment that finished last (LIFO, like
	// Lambda's warm pool); if none is idle a new environment joins, with
	// fresh in-memory state, after ColdStart of initialisation, up to
	// MaxEnvs (default DefaultMaxEnvs); past that the call is throttled
	// (Counts.Throttled). Each environment runs one call at a time.
	Rate      float64
	MaxEnvs   int
	ColdStart time.Duration

	// Window is the length of the result windows (DefaultWindow); it must
	// be the global budget's and breaker's Window, so that the results'
	// windows are the library's.
	Window time.Duration
	// Duration is how long new calls arrive (DefaultDuration); calls in
	// flight then run to completion for up to Drain (DefaultDrain).
	Duration time.Duration
	Drain    time.Duration
	// Start is simulated time zero (DefaultStart); it must be a whole
	// number of Windows since the Unix epoch.
	Start time.Time

	// NoCapacityModel turns DynamoDB's capacity model off: by default the
	// shared stores are billed by item size and throttled at 1,000 WCU/s
	// and 3,000 RCU/s per item (internal/capacity).
	NoCapacityModel bool
}

func (c *Config) withDefaults() error {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.MaxEnvs == 0 {
		c.MaxEnvs = DefaultMaxEnvs
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.Start.IsZero() {
		c.Start = DefaultStart
	}
	switch {
	case c.Strategy == nil:
		return errors.New("fleetsim: Config.Strategy is nil")
	case c.Window < time.Millisecond:
		return fmt.Errorf("fleetsim: Config.Window is %v; want at least 1ms", c.Window)
	case c.Duration < 0 || c.Drain < 0 || c.ColdStart < 0:
		return errors.New("fleetsim: Config.Duration, Drain and ColdStart must not be negative")
	case c.Start.UnixNano()%int64(c.Window) != 0:
		return fmt.Errorf("fleetsim: Config.Start (%v) is not a whole number of Windows (%v) since the Unix epoch", c.Start, c.Window)
	case (c.Envs > 0) == (c.Rate > 0):
		return fmt.Errorf("fleetsim: set exactly one of Config.Envs (fixed fleet, %d) and Config.Rate (scale-out, %v)", c.Envs, c.Rate)
	case c.Envs < 0 || c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("fleetsim: Config.Envs (%d) and Config.Rate (%v) must not be negative", c.Envs, c.Rate)
	case c.Envs > 0 && !(c.CallsPerWindow > 0 && !math.IsInf(c.CallsPerWindow, 0)):
		return fmt.Errorf("fleetsim: Config.CallsPerWindow is %v; want a positive rate with Envs", c.CallsPerWindow)
	case c.Rate > 0 && c.MaxEnvs < 1:
		return fmt.Errorf("fleetsim: Config.MaxEnvs is %d; want at least 1", c.MaxEnvs)
	}
	return c.Partner.validate()
}

// env is one execution environment during a run.
type env struct {
	id   int
	impl Env
	op   func(ctx context.Context, attempt int) error
	res  EnvResult
	rng  *rand.Rand // periodic arrivals' phase
	busy int
	// queue holds the arrival times of calls waiting for a free slot;
	// starts those of calls whose proc is spawned but not started yet.
	queue  []time.Duration
	starts []time.Duration
	work   func() // runs f.work(e)
	warm   bool   // it has started a call (after its cold start)
	open   bool   // its breaker was last seen open or half-open
}

func (e *env) name() string { return e.res.Name }

// fleet is a run in progress.
type fleet struct {
	cfg     Config
	ctx     context.Context
	clock   *Clock
	rec     *recorder
	partner *partner
	stores  *shared
	idle    []*env // scale-out: idle environments, most recently used last
	busy    int
	arrRng  *rand.Rand // Poisson arrivals
	end     int64      // Unix nanoseconds at which arrivals stop
	lastEnd time.Duration
	err     error
}

// Run simulates cfg and returns what it measured. It takes no real time
// beyond the computation: every wait is simulated.
func Run(cfg Config) (*Result, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	wallStart := time.Now()
	clock := newClock(cfg.Start)
	stores := newShared(clock, !cfg.NoCapacityModel)
	rec := newRecorder(clock, cfg.Window, stores.meters)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fleet{
		cfg: cfg, ctx: ctx, clock: clock, rec: rec, stores: stores,
		partner: newPartner(cfg.Partner, cfg.Seed, clock, rec),
		end:     clock.now + int64(cfg.Duration),
	}
	f.arrRng = rand.New(rand.NewPCG(cfg.Seed, streamFleet))
	switch {
	case cfg.Envs > 0:
		envs := make([]*env, cfg.Envs)
		for i := range envs {
			e, err := f.newEnv()
			if err != nil {
				return nil, err
			}
			envs[i] = e
			if cfg.Periodic {
				f.schedulePeriodic(e)
			}
		}
		if !cfg.Periodic {
			perSecond := float64(cfg.Envs) * cfg.CallsPerWindow * float64(time.Second) / float64(cfg.Window)
			f.schedulePoisson(perSecond, func() { f.dispatch(envs[f.arrRng.IntN(len(envs))]) })
		}
	default:
		f.schedulePoisson(cfg.Rate, f.arriveFleet)
	}
	clock.runUntil(clock.now + int64(cfg.Duration+cfg.Drain))
	res := f.result()
	cancel()
	clock.stop()
	if f.err != nil {
		return nil, f.err
	}
	if rec.err != nil {
		return nil, rec.err
	}
	res.Events = clock.events
	res.Wall = time.Since(wallStart)
	return res, nil
}

// newEnv adds an environment to the fleet.
func (f *fleet) newEnv() (*env, error) {
	id := len(f.rec.envs)
	e := &env{id: id}
	e.res = EnvResult{ID: id, Name: "env-" + strconv.Itoa(id), Joined: f.clock.Elapsed(),
		FirstOpen: Never, Closed: Never, FirstAttemptAfterHeal: Never}
	e.rng = rand.New(rand.NewPCG(f.cfg.Seed, uint64(id)<<streamBits|streamArrival))
	layers := rand.New(rand.NewPCG(f.cfg.Seed, uint64(id)<<streamBits|streamLayers))
	e.op = func(ctx context.Context, attempt int) error { return f.partner.attempt(ctx, e, attempt) }
	e.work = func() { f.work(e) }
	f.rec.envs = append(f.rec.envs, e)
	spec := EnvSpec{ID: id, Name: e.res.Name, Clock: f.clock, Rand: layers.Float64,
		Stores: f.stores.forEnv(f.rec, e), rec: f.rec, env: e}
	impl, err := f.cfg.Strategy.NewEnv(spec)
	if err != nil {
		return nil, fmt.Errorf("fleetsim: environment %d: %w", id, err)
	}
	if impl == nil {
		return nil, fmt.Errorf("fleetsim: environment %d: the Strategy returned a nil Env", id)
	}
	e.impl = impl
	return e, nil
}

// schedulePeriodic schedules e's calls, one every Window/CallsPerWindow
// from a random phase.
func (f *fleet) schedulePeriodic(e *env) {
	gap := int64(float64(f.cfg.Window) / f.cfg.CallsPerWindow)
	var arrive func()
	arrive = func() {
		f.dispatch(e)
		if next := f.clock.now + max(gap, 1); next < f.end {
			f.clock.at(next, arrive)
		}
	}
	if t := f.clock.now + int64(e.rng.Float64()*float64(gap)); t < f.end {
		f.clock.at(t, arrive)
	}
}

// schedulePoisson schedules a Poisson process of rate calls per simulated
// second until the end of the arrivals, each arrival calling fn. For a
// fixed fleet it is the superposition of the environments' processes
// (rate = Envs × their rate, each arrival at an environment drawn
// uniformly), which is the same in distribution as one process per
// environment and keeps the event queue small.
func (f *fleet) schedulePoisson(rate float64, fn func()) {
	mean := float64(time.Second) / rate
	var arrive func()
	arrive = func() {
		fn()
		if next := f.clock.now + max(int64(f.arrRng.ExpFloat64()*mean), 1); next < f.end {
			f.clock.at(next, arrive)
		}
	}
	if t := f.clock.now + int64(f.arrRng.ExpFloat64()*mean); t < f.end {
		f.clock.at(t, arrive)
	}
}

// arriveFleet routes a fleet-wide arrival: to the most recently idle
// environment, else a new one, else throttled.
func (f *fleet) arriveFleet() {
	if n := len(f.idle); n > 0 {
		e := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.dispatch(e)
		return
	}
	if len(f.rec.envs) >= f.cfg.MaxEnvs || f.err != nil {
		w, s := f.rec.now(), f.rec.second(f.clock.Elapsed())
		w.Calls++
		w.Throttled++
		s.Calls++
		s.Throttled++
		return
	}
	e, err := f.newEnv()
	if err != nil {
		f.err = err
		return
	}
	f.dispatch(e)
}

// dispatch hands a call arriving now to e: it starts at once if e has a
// free slot and waits in e's queue otherwise.
func (f *fleet) dispatch(e *env) {
	t := f.clock.Elapsed()
	f.rec.win(t).Calls++
	f.rec.second(t).Calls++
	e.res.Calls++
	limit := f.cfg.Concurrency
	if f.cfg.Rate > 0 {
		limit = 1
	}
	if limit > 0 && e.busy >= limit {
		e.queue = append(e.queue, t)
		return
	}
	e.busy++
	f.busy++
	f.rec.peakBusy = max(f.rec.peakBusy, f.busy)
	e.starts = append(e.starts, t)
	f.clock.spawn(e.work)
}

// work runs invocations on e, starting with the call it was spawned for,
// then those queued behind it. It runs on a proc.
func (f *fleet) work(e *env) {
	t := e.starts[0]
	e.starts = e.starts[1:]
	if !e.warm {
		e.warm = true
		if f.cfg.Rate > 0 && f.cfg.ColdStart > 0 {
			_ = f.clock.Sleep(f.ctx, f.cfg.ColdStart)
		}
	}
	for {
		err := e.impl.Call(f.ctx, e.op)
		if f.clock.stopped {
			// Torn down: the results are taken; let the proc end.
			e.queue = nil
			break
		}
		_ = e.impl.Flush(context.Background()) // store faults reach the results through the layers' hooks
		f.rec.outcome(t, err)
		f.lastEnd = f.clock.Elapsed()
		if len(e.queue) == 0 {
			break
		}
		t = e.queue[0]
		e.queue = e.queue[1:]
	}
	e.busy--
	f.busy--
	if f.cfg.Rate > 0 {
		f.idle = append(f.idle, e)
	}
}

// result assembles the measurements, before the run is torn down.
func (f *fleet) result() *Result {
	rec := f.rec
	r := &Result{
		Seed: f.cfg.Seed, Window: f.cfg.Window, Duration: f.cfg.Duration, End: f.lastEnd,
		PeakBusy:          rec.peakBusy,
		StoreWaitTimeouts: rec.storeWaitTimeouts,
		StoreFaults:       rec.storeFaults,
	}
	r.Seconds = slices.Clone(rec.seconds)
	r.Windows = make([]Window, len(rec.windows))
	for i, w := range rec.windows {
		if rec.hasGlobal {
			w.Bound = rec.perRequest*float64(w.Global.Requests) + rec.floor
			w.CarryBound = rec.perRequest*float64(w.Global.Requests+w.Global.Carried) + rec.floor
		}
		w.Healthy = w.FailedAttempts == 0 && f.cfg.Partner.healthyDuring(w.Start, w.Start+f.cfg.Window)
		r.Windows[i] = w
		r.Totals.add(&w.Counts)
	}

	b := &r.Breaker
	b.FleetOpen, b.FirstEnvOpen, b.HealAt, b.LastClosed = rec.fleetOpen, Never, f.partner.healAt, Never
	b.TrueFailureRatio = -1
	if b.FleetOpen != Never {
		b.TrueFailureRatio, b.TrueAttempts = rec.trueFailureRatio(b.FleetOpen)
	}
	b.Transitions = append([]Transition(nil), rec.transitions...)
	r.Envs = make([]EnvResult, len(rec.envs))
	for i, e := range rec.envs {
		er := e.res
		er.OpenAtEnd = e.open
		r.Envs[i] = er
		r.Unfinished += int64(e.busy + len(e.queue))
		if er.FirstOpen == Never {
			continue
		}
		b.EnvsOpened++
		if b.FirstEnvOpen == Never || er.FirstOpen < b.FirstEnvOpen {
			b.FirstEnvOpen = er.FirstOpen
		}
		if b.HealAt == Never {
			continue
		}
		if er.OpenAtEnd {
			b.StillOpen++
			continue
		}
		b.LastClosed = max(b.LastClosed, er.Closed-b.HealAt, 0)
	}

	if f.stores.meters[budgetMeter] != nil {
		start := f.cfg.Start.Unix()
		r.Store.Metered = true
		for i, h := range []*HotItem{&r.Store.Budget, &r.Store.Breaker} {
			s := f.stores.meters[i].Stats()
			*h = HotItem{PeakWriteUnits: s.PeakItemWriteUnits, WriteItem: s.HottestWriteItem, PeakWriteAt: Never,
				PeakReadUnits: s.PeakItemReadUnits, ReadItem: s.HottestReadItem, PeakReadAt: Never}
			if s.HottestWriteItem != "" {
				h.PeakWriteAt = time.Duration(s.PeakWriteSecond-start) * time.Second
			}
			if s.HottestReadItem != "" {
				h.PeakReadAt = time.Duration(s.PeakReadSecond-start) * time.Second
			}
			r.Store.LargestItem = max(r.Store.LargestItem, s.LargestItem)
			r.Store.TooLarge += s.TooLarge
		}
	}
	return r
}
