package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// The herdguard strategies: one retry.Executor per environment, on the
// simulation's clock, with the same retry loop settings for all of them;
// only the budgets and the breaker differ.
//
//	none            no budget, MaxAttempts only
//	bucket          local.TokenBucket per environment
//	ratio           local.Ratio per environment
//	global          budget.Global per environment over one shared budget.Store
//	global-breaker  as global, plus a breaker.Breaker per environment over one
//	                shared breaker.Store
//	global-adaptive as global, plus a breaker.Breaker with Settings.Adaptive:
//	                fleet-wide adaptive throttling instead of a hard stop
//
// The global strategies use the global layer alone by default, so that the
// table shows what the fleet-wide ratio does by itself. -global-with-local
// puts a local ratio in front of it, as the library recommends for
// production: the local layer is then what limits retries while the store
// fails (the global layer abstains unless -fail-closed).

// herdguardStrategy builds an Executor per environment with
// fleetsim.Herdguard.Executor, the builder the virtual-time fleets use:
// stack gives the environment's layers and the stores and hooks they use.
type herdguardStrategy struct {
	cfg   Config
	stack func(spec EnvSpec) (fleetsim.Herdguard, fleetsim.StackSpec)
	usage func() StoreUsage  // nil without shared stores
	ratio *RatioUse          // the global budget's requests and grants; nil without one
	meter func() CapacityUse // nil when the stores are not metered

	mu    sync.Mutex                        // guards flush
	flush []func(ctx context.Context) error // every environment's Executor.Flush
}

func (s *herdguardStrategy) NewEnv(spec EnvSpec) (Caller, error) {
	h, st := fleetsim.Herdguard{}, fleetsim.StackSpec{}
	if s.stack != nil {
		h, st = s.stack(spec)
	}
	h.Retry = retry.Config{
		MaxAttempts:    s.cfg.Attempts,
		TransientBase:  s.cfg.TransientBase,
		ThrottlingBase: s.cfg.ThrottlingBase,
		MaxDelay:       s.cfg.MaxDelay,
		Idempotent:     true,
		Rand:           spec.Rand,
	}
	st.Clock, st.Rand = spec.Clock, spec.Rand
	ex, err := h.Executor(st)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.flush = append(s.flush, ex.Flush)
	s.mu.Unlock()
	return &herdguardCaller{ex: ex, clock: spec.Clock, breakerOpen: spec.BreakerOpen, flush: spec.FlushEachCall}, nil
}

// CapacityUse returns what the capacity model billed the shared stores;
// nil when they are not metered.
func (s *herdguardStrategy) CapacityUse() *CapacityUse {
	if s.meter == nil {
		return nil
	}
	u := s.meter()
	return &u
}

// GlobalRatioUse returns the global budget's requests and grants per
// window; nil when the strategy has no global budget.
func (s *herdguardStrategy) GlobalRatioUse() *RatioUse { return s.ratio }

func (s *herdguardStrategy) StoreUsage() (StoreUsage, bool) {
	if s.usage == nil {
		return StoreUsage{}, false
	}
	return s.usage(), true
}

// Close flushes every environment's pending counts, as a Lambda handler
// does before it returns.
func (s *herdguardStrategy) Close(ctx context.Context) error {
	s.mu.Lock()
	flush := s.flush
	s.flush = nil
	s.mu.Unlock()
	var errs []error
	for _, f := range flush {
		if err := f(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type herdguardCaller struct {
	ex          *retry.Executor
	clock       TimeSource
	breakerOpen func()
	flush       bool // after every call (EnvSpec.FlushEachCall)
}

func (c *herdguardCaller) Call(ctx context.Context, send Send) (Outcome, error) {
	err := c.ex.Do(ctx, func(ctx context.Context, attempt int) error {
		resp, err := send(ctx, attempt)
		if err != nil {
			return err
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil
		}
		return retry.NewStatusError(resp, c.clock.Now())
	})
	if c.flush {
		// A store fault is counted by the stores; the call's outcome stands.
		_ = c.ex.Flush(ctx)
	}
	return classifyHerdguard(ctx, err, c.breakerOpen)
}

// classifyHerdguard maps an Executor's error to an Outcome.
func classifyHerdguard(ctx context.Context, err error, breakerOpen func()) (Outcome, error) {
	var se *retry.StatusError
	switch {
	case err == nil:
		return Succeeded, nil
	case errors.Is(err, breaker.ErrOpen):
		if breakerOpen != nil {
			breakerOpen()
		}
		return FailedBreaker, err
	case errors.Is(err, budget.ErrExhausted):
		return FailedBudget, err
	case ctx.Err() != nil:
		return FailedOther, err
	case errors.As(err, &se) && se.StatusCode != http.StatusOK:
		return FailedPartner, err
	default:
		return FailedOther, err
	}
}

func newNoBudget(_ context.Context, d Deps) (Strategy, error) {
	return &herdguardStrategy{cfg: d.Config}, nil // no budget at all, not the Executor's default
}

func newLocalBucket(_ context.Context, d Deps) (Strategy, error) {
	c := d.Config
	cfg := local.TokenBucketConfig{
		Capacity:       c.BucketCapacity,
		TransientCost:  c.TransientCost,
		ThrottlingCost: c.ThrottlingCost,
	}
	if _, err := local.NewTokenBucket(cfg); err != nil {
		return nil, err
	}
	h := fleetsim.Herdguard{Local: func() (budget.Budget, error) { return local.NewTokenBucket(cfg) }}
	return &herdguardStrategy{cfg: c, stack: func(EnvSpec) (fleetsim.Herdguard, fleetsim.StackSpec) { return h, fleetsim.StackSpec{} }}, nil
}

func newLocalRatio(_ context.Context, d Deps) (Strategy, error) {
	c := d.Config
	cfg := local.RatioConfig{Ratio: c.Ratio, Window: c.Window, MinRetries: c.MinRetries}
	if _, err := local.NewRatio(cfg); err != nil {
		return nil, err
	}
	h := fleetsim.Herdguard{Local: func() (budget.Budget, error) { return local.NewRatio(cfg) }}
	return &herdguardStrategy{cfg: c, stack: func(EnvSpec) (fleetsim.Herdguard, fleetsim.StackSpec) { return h, fleetsim.StackSpec{} }}, nil
}

func newGlobal(ctx context.Context, d Deps) (Strategy, error) {
	return newGlobalStrategy(ctx, d, noBreaker)
}

func newGlobalBreaker(ctx context.Context, d Deps) (Strategy, error) {
	return newGlobalStrategy(ctx, d, hardStop)
}

func newGlobalAdaptive(ctx context.Context, d Deps) (Strategy, error) {
	return newGlobalStrategy(ctx, d, adaptive)
}

// breakerKind is the shared breaker a global strategy adds, if any.
type breakerKind uint8

const (
	noBreaker breakerKind = iota
	hardStop              // breaker.Settings{}: opens fleet-wide
	adaptive              // breaker.Settings{Adaptive: true}: throttles fleet-wide
)

func newGlobalStrategy(ctx context.Context, d Deps, kind breakerKind) (Strategy, error) {
	if d.Backend == nil {
		return nil, errors.New("no shared-store backend")
	}
	stores, err := d.Backend.Stores(ctx, d.Clock.Now)
	if err != nil {
		return nil, err
	}
	c := d.Config
	gcfg := budget.GlobalConfig{
		Ratio:        c.Ratio,
		Window:       c.Window,
		Floor:        c.GlobalFloor,
		Shards:       c.GlobalShards,
		LeaseSize:    c.LeaseSize,
		FailOpen:     !c.FailClosed, // the simulator keeps its -fail-closed flag and fail-open default
		StoreTimeout: c.StoreTimeout,
	}
	lcfg := local.RatioConfig{Ratio: c.Ratio, Window: c.Window, MinRetries: c.MinRetries}
	g0, err := budget.NewGlobal(stores.Budget, d.Name, gcfg)
	if err != nil {
		return nil, fmt.Errorf("global budget: %w", err)
	}
	bset := breakerSettings(c)
	use := newRatioUse(g0.Config())
	return &herdguardStrategy{cfg: c, usage: stores.Usage, ratio: use, meter: stores.Capacity,
		stack: func(spec EnvSpec) (fleetsim.Herdguard, fleetsim.StackSpec) {
			h := fleetsim.Herdguard{Name: d.Name, Global: &gcfg}
			st := fleetsim.StackSpec{BudgetStore: stores.Budget, BreakerStore: stores.Breaker,
				WrapGlobal: func(g *budget.Global) budget.Budget { return countedGlobal{g, use} }}
			if c.LocalUnder {
				// The local ratio first, and the global one as it is.
				h.Local = func() (budget.Budget, error) { return local.NewRatio(lcfg) }
				st.WrapGlobal = nil
			}
			if kind == noBreaker {
				return h, st
			}
			if stores.BreakerFor != nil {
				st.BreakerStore = stores.BreakerFor()
			}
			s := bset
			s.StoreTimeout = c.StoreTimeout
			if kind == adaptive {
				s.Adaptive = true
				// A random stream of its own (one breaker's draws are
				// made under its lock): the retry loop and the global
				// budget draw what they draw in the global strategy's
				// run, so that the two differ by what throttling does,
				// not by another draw of the same noise.
				s.Rand = rand.New(rand.NewPCG(c.Seed, uint64(spec.ID)<<1|1)).Float64
			}
			open := spec.BreakerOpen
			s.OnStateChange = func(c breaker.StateChange) {
				if c.To == breaker.Open {
					open()
				}
			}
			h.Breaker = &s
			return h, st
		}}, nil
}

// breakerCacheTTL is how stale an environment's view of the shared breaker
// may be: Settings.CacheTTL (the library's default).
const breakerCacheTTL = time.Second

// breakerWindow is the window the breaker's failure ratio is counted over:
// Settings.Window (the library's default).
func breakerWindow(Config) time.Duration { return 10 * time.Second }

// breakerSettings maps the flags onto breaker.Settings; zero keeps the
// library's defaults.
func breakerSettings(c Config) breaker.Settings {
	return breaker.Settings{
		FailureRatio: c.BreakerFailureRatio,
		MinRequests:  int64(c.BreakerMinRequests),
		OpenDuration: c.BreakerOpen,
		Window:       breakerWindow(c),
		CacheTTL:     breakerCacheTTL,
	}
}
