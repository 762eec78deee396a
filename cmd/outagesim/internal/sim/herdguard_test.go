package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

type testEnvs struct {
	t     *testing.T
	st    Strategy
	clock *manualClock
	n     int
	opens []*atomic.Int32
}

func buildStrategy(t *testing.T, key string, mut func(*Config)) *testEnvs {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	infos, err := LookupStrategies([]string{key})
	if err != nil {
		t.Fatal(err)
	}
	clock := newManualClock()
	st, err := infos[0].Build(context.Background(), Deps{Config: cfg, Clock: clock, Backend: MemoryBackend{}, Name: "test-" + key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return &testEnvs{t: t, st: st, clock: clock}
}

// env adds an environment and returns its Caller; its breaker-open count
// is in opens[id].
func (e *testEnvs) env() Caller { return e.envFlushing(false) }

// envFlushing is env, flushing after every call when flush is set.
func (e *testEnvs) envFlushing(flush bool) Caller {
	e.t.Helper()
	var opened atomic.Int32
	c, err := e.st.NewEnv(EnvSpec{
		ID: e.n, Name: "env-" + string(rune('a'+e.n)), Clock: e.clock, FlushEachCall: flush,
		// A seeded source, not a constant: the breaker also draws its fleet
		// samples from it.
		Rand: rand.New(rand.NewPCG(uint64(e.n), 5)).Float64, BreakerOpen: func() { opened.Add(1) },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.n++
	e.opens = append(e.opens, &opened)
	return c
}

var always503 = []int{503}

func call(t *testing.T, c Caller, statuses ...int) (Outcome, []int, error) {
	t.Helper()
	s := &scripted{statuses: statuses}
	out, err := c.Call(context.Background(), s.send)
	return out, s.attempts, err
}

func TestNoBudgetStrategy(t *testing.T) {
	e := buildStrategy(t, "none", nil)
	c := e.env()
	for i := 0; i < 20; i++ {
		if out, attempts, _ := call(t, c, always503...); out != FailedPartner || len(attempts) != 3 {
			t.Fatalf("call %d: %v after %v, want FailedPartner after 3 attempts", i, out, attempts)
		}
	}
	if _, ok := e.st.StoreUsage(); ok {
		t.Error("no-budget strategy reports store usage")
	}
	if out, attempts, err := call(t, c, 503, 200); out != Succeeded || err != nil || len(attempts) != 2 {
		t.Errorf("503 then 200: %v %v after %v", out, err, attempts)
	}
	if out, attempts, _ := call(t, c, 400); out != FailedPartner || len(attempts) != 1 {
		t.Errorf("400: %v after %v attempts, want 1", out, attempts)
	}
}

// The seed article's case (3): a call always failing 503, bucket capacity
// 14, 5 attempts: tried exactly twice, then the budget is exhausted. Each
// environment has a bucket of its own.
func TestLocalBucketStrategy(t *testing.T) {
	e := buildStrategy(t, "bucket", func(c *Config) { c.BucketCapacity = 14; c.Attempts = 5 })
	a, b := e.env(), e.env()
	out, attempts, err := call(t, a, always503...)
	if out != FailedBudget || len(attempts) != 2 || !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("env a: %v %v after %v attempts, want FailedBudget after 2", out, err, attempts)
	}
	if out, attempts, _ := call(t, a, always503...); out != FailedBudget || len(attempts) != 1 {
		t.Errorf("env a again: %v after %v attempts, want FailedBudget after 1 (bucket empty)", out, attempts)
	}
	if out, attempts, _ := call(t, b, always503...); out != FailedBudget || len(attempts) != 2 {
		t.Errorf("env b: %v after %v attempts, want its own full bucket (2 attempts)", out, attempts)
	}
}

// Each environment's ratio starts with its own floor.
func TestLocalRatioStrategy(t *testing.T) {
	e := buildStrategy(t, "ratio", func(c *Config) { c.MinRetries = 2 })
	a, b := e.env(), e.env()
	var retries int
	for i := 0; i < 5; i++ {
		_, attempts, _ := call(t, a, always503...)
		retries += len(attempts) - 1
	}
	if retries != 2 {
		t.Errorf("env a: %d retries in 5 failing calls, want the floor (2)", retries)
	}
	if _, attempts, _ := call(t, b, always503...); len(attempts) != 3 {
		t.Errorf("env b: %d attempts, want 3 (its own floor)", len(attempts))
	}
	e.clock.Advance(11 * time.Second)
	if _, attempts, _ := call(t, a, always503...); len(attempts) != 3 {
		t.Errorf("env a after the window: %d attempts, want 3", len(attempts))
	}
}

// The global ratio is one budget for the whole fleet: the floor spent by one
// environment is gone for the others, and it costs store writes.
func TestGlobalStrategyIsShared(t *testing.T) {
	e := buildStrategy(t, "global", func(c *Config) { c.GlobalFloor = 2 })
	a, b := e.env(), e.env()
	if _, attempts, _ := call(t, a, always503...); len(attempts) != 3 {
		t.Fatalf("env a: %d attempts, want 3 (the fleet's floor of 2)", len(attempts))
	}
	out, attempts, err := call(t, b, always503...)
	if out != FailedBudget || len(attempts) != 1 || !errors.Is(err, budget.ErrExhausted) {
		t.Errorf("env b: %v %v after %v attempts, want FailedBudget after 1: env a used the fleet's floor", out, err, attempts)
	}
	u, ok := e.st.StoreUsage()
	if !ok || u.Writes == 0 {
		t.Errorf("store usage %+v, %v; want writes", u, ok)
	}
	// Healthy calls cost no store call.
	before := u
	for i := 0; i < 100; i++ {
		call(t, a, 200)
	}
	if u, _ := e.st.StoreUsage(); u != before {
		t.Errorf("healthy calls used the store: %+v -> %+v", before, u)
	}
}

// An environment of the Lambda-shaped fleet flushes after every call, as a
// handler does before it returns: once it has asked the global budget for
// a retry in the window, its requests are reported as soon as they earn a
// whole retry, instead of waiting for its next retry.
func TestFlushEachCall(t *testing.T) {
	writes := func(flush bool) int64 {
		e := buildStrategy(t, "global", nil)
		c := e.envFlushing(flush)
		call(t, c, 503, 200) // asks the global budget: one write; the environment is engaged
		for range 10 {       // 10 requests at 10%: one retry's worth
			call(t, c, 200)
		}
		// Past the environment's next contact (DepositInterval, 2.5 s ±
		// 50%), a Flush deposits what the requests earned.
		e.clock.Advance(4 * time.Second)
		call(t, c, 200)
		u, _ := e.st.StoreUsage()
		return u.Writes
	}
	if with, without := writes(true), writes(false); with != without+1 || without != 1 {
		t.Errorf("store writes: %d flushing after every call, %d without; want 2 and 1", with, without)
	}
}

// The shared breaker: once failures from two environments trip it, it
// blocks first attempts in every environment, one that joins later too,
// and each environment reports it open.
func TestGlobalBreakerStrategyBlocksEverywhere(t *testing.T) {
	e := buildStrategy(t, "global-breaker", func(c *Config) {
		c.Attempts = 1
		c.BreakerMinRequests = 4
	})
	a, b := e.env(), e.env()
	tripped := false
	for i := 0; i < 40 && !tripped; i++ {
		for _, c := range []Caller{a, b} {
			out, attempts, _ := call(t, c, always503...)
			if out == FailedBreaker {
				tripped = true
				if len(attempts) != 0 {
					t.Errorf("breaker rejection after %d attempts, want 0", len(attempts))
				}
			}
		}
		e.clock.Advance(500 * time.Millisecond)
	}
	if !tripped {
		t.Fatal("the breaker never opened")
	}
	e.clock.Advance(2 * time.Second) // past the fleet state cache
	late := e.env()
	out, attempts, err := call(t, late, 200)
	if out != FailedBreaker || len(attempts) != 0 || !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("new environment: %v %v after %v attempts, want a first attempt blocked by the shared breaker", out, err, attempts)
	}
	// The first environments too, whichever of them tripped it.
	for id, c := range []Caller{a, b} {
		if out, attempts, err := call(t, c, 200); out != FailedBreaker || len(attempts) != 0 {
			t.Errorf("env %d: %v %v after %v attempts, want a first attempt blocked by the shared breaker", id, out, err, attempts)
		}
	}
	for id, n := range e.opens {
		if n.Load() == 0 {
			t.Errorf("env %d never reported its breaker open", id)
		}
	}
	if u, ok := e.st.StoreUsage(); !ok || u.Reads == 0 || u.Writes == 0 {
		t.Errorf("store usage %+v, %v; want reads and writes", u, ok)
	}
}

func TestClassifyHerdguard(t *testing.T) {
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	var opened int
	open := func() { opened++ }
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want Outcome
	}{
		{ctx, nil, Succeeded},
		{ctx, &breaker.OpenError{Name: "x", State: breaker.Open}, FailedBreaker},
		{ctx, &budget.ExhaustedError{Budget: "local"}, FailedBudget},
		{ctx, &statusErr503, FailedPartner},
		{canceled, context.Canceled, FailedOther},
		{ctx, errors.New("dial tcp: refused"), FailedOther},
	} {
		if got, _ := classifyHerdguard(tc.ctx, tc.err, open); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
	if opened != 1 {
		t.Errorf("BreakerOpen called %d times, want once (for the breaker rejection)", opened)
	}
}

var statusErr503 = retryStatus(http.StatusServiceUnavailable)

func retryStatus(code int) retry.StatusError { return retry.StatusError{StatusCode: code} }
