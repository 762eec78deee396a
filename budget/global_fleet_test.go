package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
)

const testWindow = 10 * time.Second

// windowNo numbers test windows from t0.
func windowNo(now time.Time) int { return int(now.Sub(t0) / testWindow) }

// perRequest is the allowance one request earns at ratio, as Global
// computes it.
func perRequest(ratio float64) int64 {
	return int64(math.Floor(ratio*float64(unit) + 1e-6))
}

// ledger tallies, per test window, the requests recorded, the retries
// granted and not given back, and the requests the documented bound lets
// the Global carry into the window (its slack).
type ledger struct {
	requests []atomic.Int64
	net      []atomic.Int64
	carried  []atomic.Int64
}

func newLedger(windows int) *ledger {
	return &ledger{requests: make([]atomic.Int64, windows), net: make([]atomic.Int64, windows), carried: make([]atomic.Int64, windows)}
}

// check fails t unless, in every window,
//
//	net retries × unit <= perReq × (requests + carried) + floor × unit
//
// and over the run net retries × unit <= perReq × requests + floor × unit ×
// windows (no request is deposited twice, and none before the first
// window was made).
func (l *ledger) check(t testing.TB, perReq int64, floor int) (granted, bound float64) {
	t.Helper()
	var totalNet, totalReq int64
	for w := range l.net {
		n, r, c := l.net[w].Load(), l.requests[w].Load(), l.carried[w].Load()
		if n*unit > perReq*(r+c)+int64(floor)*unit {
			t.Errorf("window %d: %d retries granted for %d requests and %d carried: more than %v × %d + %d",
				w, n, r, c, float64(perReq)/float64(unit), r+c, floor)
		}
		totalNet += n
		totalReq += r
	}
	limit := perReq*totalReq + int64(floor*len(l.net))*unit
	if totalNet*unit > limit {
		t.Errorf("run: %d retries granted, bound %v", totalNet, float64(limit)/float64(unit))
	}
	return float64(totalNet), float64(limit) / float64(unit)
}

// envLedger follows one environment, whose calls are sequential, to count
// the requests the documented bound lets it carry: a store call in window
// w that was not refused (applied, or of unknown fate) deposits every
// request of w it holds and, if the environment was engaged in w-1 (asked
// for a retry in w-1 or w-2), every request of w-1 recorded since its last
// such call in w-1. Those are the carried requests of w. It is the Store
// the environment's Global writes to.
//
// The Global calls Apply in a goroutine of its own (internal/storecall),
// which may still run when a timed-out AcquireRetry has returned: mu
// guards asked and pending.
type envLedger struct {
	budget.Store
	l       *ledger
	mu      sync.Mutex
	asked   []bool
	pending []int64 // requests of each window recorded since the last such call in it
}

func newEnvLedger(l *ledger, s budget.Store) *envLedger {
	return &envLedger{Store: s, l: l, asked: make([]bool, len(l.net)), pending: make([]int64, len(l.net))}
}

// request records a request at now.
func (e *envLedger) request(now time.Time) {
	w := windowNo(now)
	e.l.requests[w].Add(1)
	e.mu.Lock()
	e.pending[w]++
	e.mu.Unlock()
}

// ask records an AcquireRetry at now, before it is made.
func (e *envLedger) ask(now time.Time) {
	e.mu.Lock()
	e.asked[windowNo(now)] = true
	e.mu.Unlock()
}

func (e *envLedger) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	// What the call carries is what was recorded before it started (the
	// environment is sequential): a call that comes back after its
	// AcquireRetry timed out must not take requests recorded since.
	w := windowNo(k.Window)
	in := w >= 0 && w < len(e.pending)
	var cur, prev int64
	var engaged bool
	if in {
		e.mu.Lock()
		cur = e.pending[w]
		if w > 0 {
			prev = e.pending[w-1]
			engaged = e.asked[w-1] || w > 1 && e.asked[w-2]
		}
		e.mu.Unlock()
	}
	a, err := e.Store.Apply(ctx, k, u)
	if errors.Is(err, budget.ErrInsufficient) || errors.Is(err, budget.ErrThrottled) || !in {
		return a, err // nothing applied: what it carried is still pending
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending[w] -= cur
	if engaged {
		e.l.carried[w].Add(prev)
		e.pending[w-1] -= prev
	}
	return a, err
}

type outstanding struct {
	rel    budget.Release
	window int
}

type fleetCase struct {
	name  string
	cfg   budget.GlobalConfig
	fault float64 // probability of each fault mode per store call
}

// TestGlobalFleetBound runs 20 environments as goroutines over several
// windows, in whatever interleaving the scheduler picks, with requests,
// retries, releases of every outcome, flushes, callers whose clock is a
// window behind, and (in some cases) store calls that fail before or after
// applying. Granted retries never exceed Ratio × requests + Floor in any
// window.
func TestGlobalFleetBound(t *testing.T) {
	cases := []fleetCase{
		{name: "defaults", cfg: budget.GlobalConfig{}},
		{name: "leases+shards", cfg: budget.GlobalConfig{LeaseSize: 8, Shards: 3, Floor: 5, Ratio: 0.2}},
		{name: "faults", cfg: budget.GlobalConfig{LeaseSize: 4, Shards: 2, FaultCooldown: -1}, fault: 0.05},
		{name: "no-floor", cfg: budget.GlobalConfig{Floor: -1, Ratio: 0.05}},
	}
	for _, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, newStore func() budget.Store) {
				runFleet(t, newStore(), fc, 20, 6, 400)
			})
		})
	}
}

func runFleet(t *testing.T, inner budget.Store, fc fleetCase, envs, windows, opsPerWindow int) {
	s := newRecStore(inner)
	if fc.fault > 0 {
		var mu sync.Mutex
		r := rand.New(rand.NewPCG(7, 7))
		s.setFault(func(budget.Key, budget.Update) faultMode {
			mu.Lock()
			defer mu.Unlock()
			switch x := r.Float64(); {
			case x < fc.fault:
				return failBefore
			case x < 2*fc.fault:
				return failAfterApply
			}
			return pass
		})
	}
	led := newLedger(windows)
	globals := make([]*budget.Global, envs)
	barriers := make([]sync.WaitGroup, windows)
	for i := range barriers {
		barriers[i].Add(envs)
	}
	var wg sync.WaitGroup
	for e := range envs {
		r := rand.New(rand.NewPCG(uint64(e), 42))
		cfg := fc.cfg
		cfg.Rand = rand.New(rand.NewPCG(uint64(e), 43)).Float64
		el := newEnvLedger(led, s)
		g := newGlobal(t, el, cfg)
		globals[e] = g
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var out []outstanding
			release := func(i int) {
				o := budget.Outcome(r.IntN(3))
				if o == budget.RetryNotUsed {
					led.net[out[i].window].Add(-1)
				}
				out[i].rel(o)
				out[i] = out[len(out)-1]
				out = out[:len(out)-1]
			}
			for w := range windows {
				for range opsPerWindow {
					if r.IntN(8) == 0 {
						runtime.Gosched() // more interleavings
					}
					now := t0.Add(time.Duration(w)*testWindow + time.Duration(r.Int64N(int64(testWindow))))
					if w > 0 && r.Float64() < 0.03 {
						now = now.Add(-testWindow) // a caller whose clock is behind
					}
					switch x := r.Float64(); {
					case x < 0.7:
						g.RecordRequest(now)
						g.RecordSuccess(now)
						el.request(now)
					case x < 0.9:
						el.ask(now)
						rel, err := g.AcquireRetry(ctx, now, budget.Kind(r.IntN(2)))
						if err == nil {
							led.net[windowNo(now)].Add(1)
							out = append(out, outstanding{rel, windowNo(now)})
						} else if !errors.Is(err, budget.ErrExhausted) && !errors.Is(err, budget.ErrUnavailable) {
							t.Errorf("AcquireRetry: %v", err)
						}
					case x < 0.98:
						if len(out) > 0 {
							release(r.IntN(len(out)))
						}
					default:
						_ = g.Flush(ctx, now)
					}
				}
				barriers[w].Done()
				barriers[w].Wait()
			}
			for len(out) > 0 {
				release(len(out) - 1)
			}
		}()
	}
	wg.Wait()

	cfg := globals[0].Config()
	granted, bound := led.check(t, perRequest(cfg.Ratio), cfg.Floor)
	s.checkItems(t)
	var st budget.GlobalStats
	for _, g := range globals {
		gs := g.Stats()
		if gs.Granted-gs.Returned > gs.LeasedRetries {
			t.Errorf("an environment used %d retries but leased %d", gs.Granted-gs.Returned, gs.LeasedRetries)
		}
		st.Granted += gs.Granted
		st.Refused += gs.Refused
		st.CachedRefusals += gs.CachedRefusals
		st.StoreCalls += gs.StoreCalls
		st.Faults += gs.Faults
		st.LostRequests += gs.LostRequests
		st.ReportedRequests += gs.ReportedRequests
	}
	if st.Granted == 0 || st.Refused == 0 {
		t.Errorf("vacuous run: %+v", st)
	}
	if fc.fault > 0 && (st.Faults == 0 || st.LostRequests == 0) {
		t.Errorf("no faults injected: %+v", st)
	}
	t.Logf("granted %v of bound %v (%.0f%%); store calls %d, refusals %d (cached %d), faults %d, requests reported %d lost %d",
		granted, bound, 100*granted/bound, st.StoreCalls, st.Refused, st.CachedRefusals, st.Faults, st.ReportedRequests, st.LostRequests)
}

// TestGlobalBoundProperty checks the bound over random sequential
// interleavings of a few environments, with arbitrary times (late,
// repeated, out of order), random release outcomes and store calls that
// fail before or after applying or are throttled: 100 cases, each drawn
// from its seed
// (the failing case names it: go test -run 'TestGlobalBoundProperty/seed=N').
func TestGlobalBoundProperty(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { globalBoundCase(t, seed) })
	}
}

func globalBoundCase(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	intRange := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	const windows = 4
	cfg := budget.GlobalConfig{
		Ratio:         []float64{0.1, 0.25, 0.5, 1}[r.IntN(4)],
		Floor:         intRange(-1, 4),
		Shards:        intRange(0, 3), // 0: the spread sizes itself, on throttles
		LeaseSize:     intRange(1, 5),
		FaultCooldown: []time.Duration{-1, 0}[r.IntN(2)],
	}
	s := newRecStore(newMapStore())
	if r.IntN(2) == 1 {
		// Store calls run in a goroutine of the Global's (internal/storecall),
		// which may outlive a timed-out call: faults draw from their own
		// generator, under a lock.
		var mu sync.Mutex
		fr := rand.New(rand.NewPCG(seed, 1))
		s.setFault(func(budget.Key, budget.Update) faultMode {
			mu.Lock()
			defer mu.Unlock()
			return faultMode(fr.IntN(4))
		})
	}
	led := newLedger(windows)
	envs := make([]*budget.Global, intRange(1, 5))
	els := make([]*envLedger, len(envs))
	for i := range envs {
		c := cfg
		c.Rand = rand.New(rand.NewPCG(uint64(i), 1)).Float64
		els[i] = newEnvLedger(led, s)
		envs[i] = newGlobal(t, els[i], c)
	}
	var out []outstanding
	for range intRange(20, 400) {
		i := r.IntN(len(envs))
		g, el := envs[i], els[i]
		now := t0.Add(time.Duration(r.IntN(windows))*testWindow + time.Duration(r.IntN(10_000))*time.Millisecond)
		switch r.IntN(5) {
		case 0, 1:
			g.RecordRequest(now)
			el.request(now)
		case 2:
			el.ask(now)
			rel, err := g.AcquireRetry(context.Background(), now, budget.Transient)
			if err == nil {
				led.net[windowNo(now)].Add(1)
				out = append(out, outstanding{rel, windowNo(now)})
			}
		case 3:
			if len(out) == 0 {
				continue
			}
			i := r.IntN(len(out))
			o := budget.Outcome(r.IntN(3))
			if o == budget.RetryNotUsed {
				led.net[out[i].window].Add(-1)
			}
			out[i].rel(o)
			out = append(out[:i], out[i+1:]...)
		case 4:
			_ = g.Flush(context.Background(), now)
		}
	}
	c := envs[0].Config()
	led.check(t, perRequest(c.Ratio), c.Floor)
	for _, w := range s.windowTotals() {
		if w.taken > w.floor+w.deposited || w.floor > int64(c.Floor)*unit {
			t.Fatalf("window totals %+v (Floor %d)", w, c.Floor)
		}
	}
	for _, g := range envs {
		if st := g.Stats(); st.Granted-st.Returned > st.LeasedRetries {
			t.Fatalf("stats %+v", st)
		}
	}
}
