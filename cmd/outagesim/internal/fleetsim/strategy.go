package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// Strategy builds the retry logic of each execution environment of a run.
// NewEnv is called by the scheduler, one environment at a time, when the
// environment joins the fleet (at the start, or on scale-out); it must not
// sleep.
type Strategy interface {
	NewEnv(spec EnvSpec) (Env, error)
}

// StrategyFunc adapts a function to Strategy.
type StrategyFunc func(spec EnvSpec) (Env, error)

// NewEnv calls f.
func (f StrategyFunc) NewEnv(spec EnvSpec) (Env, error) { return f(spec) }

// Env is the retry logic of one execution environment: everything it
// keeps in memory lives behind it. One invocation of the environment's
// handler is Call (one logical partner call), then Flush, as
// examples/bikes does before it returns. Calls run on simulated
// goroutines: they may sleep only through EnvSpec.Clock.
type Env interface {
	// Call makes one logical call; op is one attempt at the partner
	// (attempt counts from 1).
	Call(ctx context.Context, op func(ctx context.Context, attempt int) error) error
	// Flush sends what the environment must send before it is frozen.
	Flush(ctx context.Context) error
}

// EnvSpec describes a new execution environment to a Strategy.
type EnvSpec struct {
	// ID numbers environments from 0 in the order they joined; Name is
	// unique in the run ("env-17").
	ID   int
	Name string
	// Clock is the simulation's clock: the retry.Clock of the environment's
	// Executor and the Now of every layer.
	Clock *Clock
	// Rand returns numbers in [0, 1), seeded from the run's seed and ID.
	// It is not safe for concurrent use, which the simulation never needs:
	// one simulated goroutine runs at a time.
	Rand func() float64
	// Stores are the fleet's shared in-memory stores, counted for the
	// results (and billed by the capacity model when it is on).
	Stores Stores

	rec *recorder
	env *env
}

// ObserveRetry chains the simulator's hooks into cfg (before the ones cfg
// already has): retries wanted and granted, and store faults. A Strategy
// that builds a retry.Executor calls it so that the results count retries.
func (s EnvSpec) ObserveRetry(cfg *retry.Config) {
	rec := s.rec
	onRetry, onGiveUp, onStoreError := cfg.OnRetry, cfg.OnGiveUp, cfg.OnStoreError
	cfg.OnRetry = func(ev retry.RetryEvent) {
		w := rec.now()
		w.RetriesWanted++
		w.RetriesGranted++
		if onRetry != nil {
			onRetry(ev)
		}
	}
	cfg.OnGiveUp = func(gu *retry.GiveUpError) {
		if gu.Reason == retry.BudgetExhausted {
			rec.now().RetriesWanted++
		}
		if onGiveUp != nil {
			onGiveUp(gu)
		}
	}
	cfg.OnStoreError = func(layer int, err error) {
		rec.storeError(err)
		if onStoreError != nil {
			onStoreError(layer, err)
		}
	}
}

// ObserveGlobal wraps the environment's fleet-wide budget layer so that
// the results count its requests, grants, refusals and the writes they
// cost, per window. The first *budget.Global observed sets the bound
// Ratio × requests + Floor; its Window must be the run's Window.
func (s EnvSpec) ObserveGlobal(b budget.Budget) budget.Budget {
	rec := s.rec
	if g, ok := b.(*budget.Global); ok && !rec.hasGlobal {
		cfg := g.Config()
		if cfg.Window != rec.window {
			rec.fail(fmt.Errorf("fleetsim: the global budget's Window (%v) is not the run's Window (%v)", cfg.Window, rec.window))
		}
		rec.hasGlobal = true
		rec.perRequest = math.Max(math.Floor(cfg.Ratio*float64(budget.AllowancePerRetry)+1e-6), 1) / float64(budget.AllowancePerRetry)
		rec.floor = float64(max(cfg.Floor, 0))
	}
	ob := &observedBudget{b: b, rec: rec, env: s.env}
	if f, ok := b.(flusher); ok {
		ob.flush = f
	}
	ob.global, _ = b.(*budget.Global)
	return ob
}

// ObserveBreaker sets the environment's Rand in st (when unset) and
// chains the simulator's hooks into it (before st's own): the
// environment's state changes and store faults.
func (s EnvSpec) ObserveBreaker(st *breaker.Settings) {
	rec, e := s.rec, s.env
	if st.Rand == nil {
		st.Rand = s.Rand
	}
	onChange, onStoreError := st.OnStateChange, st.OnStoreError
	st.OnStateChange = func(c breaker.StateChange) {
		rec.stateChange(e, c.To)
		if onChange != nil {
			onChange(c)
		}
	}
	st.OnStoreError = func(op string, err error) {
		rec.storeError(err)
		if onStoreError != nil {
			onStoreError(op, err)
		}
	}
}

// observedBudget counts a budget layer's traffic at its interface.
type observedBudget struct {
	b      budget.Budget
	flush  flusher
	global *budget.Global // b, if it is one
	rec    *recorder
	env    *env
}

// carried returns the layer's requests carried so far (0 if it is not a
// *budget.Global).
func (o *observedBudget) carried() int64 {
	if o.global == nil {
		return 0
	}
	return o.global.Stats().CarriedRequests
}

func (o *observedBudget) RecordRequest(now time.Time) {
	o.rec.now().Global.Requests++
	o.b.RecordRequest(now)
}

func (o *observedBudget) RecordSuccess(now time.Time) { o.b.RecordSuccess(now) }

func (o *observedBudget) AcquireRetry(ctx context.Context, now time.Time, kind budget.Kind) (budget.Release, error) {
	writes, carried := o.rec.budgetWrites, o.carried()
	rel, err := o.b.AcquireRetry(ctx, now, kind)
	w := o.rec.now()
	w.Global.Asked++
	w.Global.Carried += o.carried() - carried
	switch {
	case err == nil:
		w.Global.Granted++
		return o.release(w.Start, rel), nil
	case errors.Is(err, budget.ErrExhausted):
		cost := o.rec.budgetWrites - writes
		w.Global.Refused++
		w.Global.RefusalWrites += cost
		if cost > 0 {
			w.Global.StoreRefusals++
			w.Global.MaxRefusalWrites = max(w.Global.MaxRefusalWrites, cost)
		}
		o.env.res.GlobalRefusals++
		o.env.res.RefusalWrites += cost
	case errors.Is(err, budget.ErrUnavailable):
		w.Global.Abstained++
	}
	return rel, err
}

// release counts a grant of the window starting at start given back.
func (o *observedBudget) release(start time.Duration, rel budget.Release) budget.Release {
	return func(out budget.Outcome) {
		if out == budget.RetryNotUsed {
			o.rec.win(start).Global.Returned++
		}
		rel.Done(out)
	}
}

// flusher is a budget that reports counts in batches, as budget.Global
// does; retry.Executor.Flush calls it.
type flusher interface {
	Flush(ctx context.Context, now time.Time) error
}

func (o *observedBudget) Flush(ctx context.Context, now time.Time) error {
	if o.flush == nil {
		return nil
	}
	carried := o.carried()
	err := o.flush.Flush(ctx, now)
	o.rec.now().Global.Carried += o.carried() - carried
	return err
}

// SimStoreTimeout is the real-time StoreTimeout Herdguard gives the layers
// when their configuration leaves it at zero. The in-memory stores answer
// at once, so this real-time bound never decides anything in simulated
// time; the library's 50 ms default could fire on a machine that starves a
// goroutine (a loaded CI runner under the race detector) and make a run
// irreproducible. Result.StoreWaitTimeouts counts the waits that fired.
const SimStoreTimeout = 10 * time.Second

// DefaultName names the global budget and the breaker of Herdguard.
const DefaultName = "partner"

// Herdguard is the Strategy that gives every environment a retry.Executor
// over the library's layers: an optional local budget, an optional
// budget.Global and an optional breaker.Breaker over the shared stores,
// with the simulator's observers chained in.
type Herdguard struct {
	// Name names the global budget and the breaker (DefaultName if empty).
	Name string
	// Retry is the template of every environment's retry.Config.
	// Executor sets Clock, Rand (when nil), Budgets and Breaker; NewEnv
	// chains the simulator's hooks before Retry's own.
	Retry retry.Config
	// Local, if not nil, makes the environment's in-memory budget, asked
	// before the global one (e.g. local.NewRatio with MinRetries 1).
	Local func() (budget.Budget, error)
	// Global, if not nil, adds a budget.Global over the shared budget
	// store. Rand is set per environment; NewEnv makes a zero
	// StoreTimeout SimStoreTimeout.
	Global *budget.GlobalConfig
	// Breaker, if not nil, adds a breaker.Breaker over the shared breaker
	// store. Store and Rand (when nil) are set per environment; NewEnv
	// makes a zero StoreTimeout SimStoreTimeout.
	Breaker *breaker.Settings
}

// NewEnv builds the environment's Executor over the fleet's shared
// stores, with the simulator's observers chained in.
func (h Herdguard) NewEnv(spec EnvSpec) (Env, error) {
	if h.Global != nil && h.Global.StoreTimeout == 0 {
		gc := *h.Global
		gc.StoreTimeout = SimStoreTimeout
		h.Global = &gc
	}
	if h.Breaker != nil && h.Breaker.StoreTimeout == 0 {
		st := *h.Breaker
		st.StoreTimeout = SimStoreTimeout
		h.Breaker = &st
	}
	ex, err := h.Executor(StackSpec{
		Clock:          spec.Clock,
		Rand:           spec.Rand,
		BudgetStore:    spec.Stores.Budget,
		BreakerStore:   spec.Stores.Breaker,
		WrapGlobal:     func(g *budget.Global) budget.Budget { return spec.ObserveGlobal(g) },
		ObserveBreaker: spec.ObserveBreaker,
		ObserveRetry:   spec.ObserveRetry,
	})
	if err != nil {
		return nil, err
	}
	return executorEnv{ex}, nil
}

// StackSpec is what Herdguard.Executor builds one environment's Executor
// from: the environment's clock and random numbers, the fleet's shared
// stores, and optional hooks of the caller's.
type StackSpec struct {
	Clock        retry.Clock
	Rand         func() float64
	BudgetStore  budget.Store
	BreakerStore breaker.Store
	// WrapGlobal, if not nil, wraps the environment's budget.Global (to
	// count its traffic); ObserveBreaker and ObserveRetry, if not nil,
	// see the breaker's Settings and the retry.Config before they are
	// used.
	WrapGlobal     func(*budget.Global) budget.Budget
	ObserveBreaker func(*breaker.Settings)
	ObserveRetry   func(*retry.Config)
}

// Executor builds one environment's retry.Executor over h's layers: the
// one builder of every herdguard strategy, in this package's fleets and
// in cmd/outagesim's runner. The budgets are h.Local's, then the
// budget.Global over spec.BudgetStore, and no others (not the Executor's
// default local ratio); the breaker is over spec.BreakerStore; every
// layer draws from spec.Rand where h does not give a Rand of its own.
func (h Herdguard) Executor(spec StackSpec) (*retry.Executor, error) {
	name := h.Name
	if name == "" {
		name = DefaultName
	}
	cfg := h.Retry
	cfg.Budgets = []budget.Budget{}
	if h.Local != nil {
		l, err := h.Local()
		if err != nil {
			return nil, fmt.Errorf("fleetsim: local budget: %w", err)
		}
		cfg.Budgets = append(cfg.Budgets, l)
	}
	if h.Global != nil {
		gc := *h.Global
		gc.Rand = spec.Rand
		g, err := budget.NewGlobal(spec.BudgetStore, name, gc)
		if err != nil {
			return nil, fmt.Errorf("fleetsim: %w", err)
		}
		var b budget.Budget = g
		if spec.WrapGlobal != nil {
			b = spec.WrapGlobal(g)
		}
		cfg.Budgets = append(cfg.Budgets, b)
	}
	if h.Breaker != nil {
		st := *h.Breaker
		st.Store = spec.BreakerStore
		if st.Rand == nil {
			st.Rand = spec.Rand
		}
		if spec.ObserveBreaker != nil {
			spec.ObserveBreaker(&st)
		}
		br, err := breaker.New(name, st)
		if err != nil {
			return nil, fmt.Errorf("fleetsim: %w", err)
		}
		cfg.Breaker = br
	}
	cfg.Clock = spec.Clock
	if cfg.Rand == nil {
		cfg.Rand = spec.Rand
	}
	if spec.ObserveRetry != nil {
		spec.ObserveRetry(&cfg)
	}
	ex, err := retry.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("fleetsim: %w", err)
	}
	return ex, nil
}

type executorEnv struct{ ex *retry.Executor }

// Call makes the call as an idempotent one (a GET, as examples/bikes
// makes): the partner's 500s and 503s are retried.
func (e executorEnv) Call(ctx context.Context, op func(ctx context.Context, attempt int) error) error {
	return e.ex.DoIdempotent(ctx, true, op)
}

func (e executorEnv) Flush(ctx context.Context) error { return e.ex.Flush(ctx) }

// NoBudget is the strategy without budgets or breaker: MaxAttempts only
// (retry's defaults: 3 attempts).
func NoBudget() Herdguard { return Herdguard{} }

// GlobalRatio is the global ratio alone, with the library's defaults (10%
// over 10 s, floor 3), as cmd/outagesim's "global" strategy.
func GlobalRatio() Herdguard { return Herdguard{Global: &budget.GlobalConfig{}} }

// GlobalBreaker is the global ratio and the shared breaker, with the
// library's defaults, as cmd/outagesim's "global-breaker" strategy.
func GlobalBreaker() Herdguard {
	return Herdguard{Global: &budget.GlobalConfig{}, Breaker: &breaker.Settings{}}
}
