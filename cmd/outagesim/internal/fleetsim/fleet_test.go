package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// run runs cfg or fails the test.
func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// comparable returns r without its machine figure.
func comparable(r *Result) Result {
	c := *r
	c.Wall = 0
	return c
}

func TestDeterministic(t *testing.T) {
	cfg := Config{
		Seed: 7, Strategy: GlobalBreaker(), Envs: 100, CallsPerWindow: 10,
		Partner:  Failing(0.6, 10*time.Second, 30*time.Second),
		Duration: 40 * time.Second,
	}
	a, b := run(t, cfg), run(t, cfg)
	if !reflect.DeepEqual(comparable(a), comparable(b)) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", comparable(a), comparable(b))
	}
	if a.Breaker.FleetOpen == Never || a.Totals.Global.Asked == 0 {
		t.Fatalf("the run did not exercise the layers (fleet open %v, global asked %d)", a.Breaker.FleetOpen, a.Totals.Global.Asked)
	}
	cfg.Seed = 8
	c := run(t, cfg)
	if reflect.DeepEqual(comparable(a), comparable(c)) {
		t.Fatal("seeds 7 and 8 gave identical results")
	}
}

func TestScaleOutDeterministic(t *testing.T) {
	cfg := Config{Seed: 3, Strategy: GlobalBreaker(), Rate: 300, MaxEnvs: 50, ColdStart: 200 * time.Millisecond,
		Partner: Failing(1, 5*time.Second, 15*time.Second), Duration: 30 * time.Second}
	a, b := run(t, cfg), run(t, cfg)
	if !reflect.DeepEqual(comparable(a), comparable(b)) {
		t.Fatal("same seed, different results with scale-out")
	}
}

// A run of simulated hours ends without real waiting: its wall time is a
// small fraction of the simulated time (the bound, a minute for an hour,
// only fails if the simulator really sleeps).
func TestVirtualTime(t *testing.T) {
	const simulated = time.Hour
	r := run(t, Config{Seed: 1, Strategy: GlobalBreaker(), Envs: 20, CallsPerWindow: 2,
		Partner: Failing(1, 10*time.Minute, 20*time.Minute), Duration: simulated})
	t.Logf("%v simulated in %v of wall time (%d events)", simulated, r.Wall, r.Events)
	if r.Wall >= time.Minute {
		t.Fatalf("%v simulated took %v of wall time", simulated, r.Wall)
	}
	if r.End < simulated-10*time.Minute || r.End > simulated+DefaultDrain {
		t.Fatalf("last call ended at %v; want it near %v", r.End, simulated)
	}
	if r.Breaker.FleetOpen < 10*time.Minute || r.Breaker.FleetOpen > 20*time.Minute {
		t.Fatalf("fleet opened at %v, outside the outage [10m, 20m)", r.Breaker.FleetOpen)
	}
}

// probeEnv makes one attempt per call and records what it saw.
type probeEnv struct {
	clock    *Clock
	inFlight *int
	peak     *int
	took     *[]time.Duration
}

func (p probeEnv) Call(ctx context.Context, op func(context.Context, int) error) error {
	*p.inFlight++
	*p.peak = max(*p.peak, *p.inFlight)
	start := p.clock.Elapsed()
	err := op(ctx, 1)
	*p.took = append(*p.took, p.clock.Elapsed()-start)
	*p.inFlight--
	return err
}

func (probeEnv) Flush(context.Context) error { return nil }

func TestPartnerLatencyAndConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name        string
		concurrency int
		wantPeak    func(int) bool
	}{
		{"one at a time", 1, func(p int) bool { return p == 1 }},
		{"unlimited", -1, func(p int) bool { return p > 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var peaks []*int
			var took []time.Duration
			st := StrategyFunc(func(spec EnvSpec) (Env, error) {
				peaks = append(peaks, new(int))
				return probeEnv{clock: spec.Clock, inFlight: new(int), peak: peaks[len(peaks)-1], took: &took}, nil
			})
			// 40 calls/s per environment, each taking 100 ms: busy.
			r := run(t, Config{Seed: 1, Strategy: st, Envs: 5, CallsPerWindow: 400, Concurrency: tc.concurrency,
				Partner: Partner{Latency: 100 * time.Millisecond}, Duration: 20 * time.Second})
			for i, p := range peaks {
				if !tc.wantPeak(*p) {
					t.Fatalf("environment %d ran at most %d calls at once", i, *p)
				}
			}
			for _, d := range took {
				if d != 100*time.Millisecond {
					t.Fatalf("an attempt took %v of simulated time; want the latency, 100ms", d)
				}
			}
			if int64(len(took)) != r.Totals.Calls || r.Totals.Succeeded != r.Totals.Calls || r.Unfinished != 0 {
				t.Fatalf("%d attempts, %d calls, %d succeeded, %d unfinished", len(took), r.Totals.Calls, r.Totals.Succeeded, r.Unfinished)
			}
		})
	}
}

func TestPartnerFailureRatio(t *testing.T) {
	const p = 0.3
	r := run(t, Config{Seed: 5, Strategy: Herdguard{Retry: retry.Config{MaxAttempts: 1}}, Envs: 50, CallsPerWindow: 100,
		Partner: Failing(p, 0, 0), Duration: 40 * time.Second})
	n := float64(r.Totals.Attempts)
	got := r.Totals.FailureRatio()
	sigma := math.Sqrt(p * (1 - p) / n)
	t.Logf("%d attempts, failure ratio %.4f (p = %v, σ = %.4f)", r.Totals.Attempts, got, p, sigma)
	if math.Abs(got-p) > 5*sigma {
		t.Fatalf("failure ratio %.4f over %v attempts; want %v ± 5σ (%.4f)", got, n, p, 5*sigma)
	}
	if r.Totals.FailedPartner != r.Totals.FailedAttempts || r.Totals.Attempts != r.Totals.Calls {
		t.Fatalf("with one attempt per call, %d calls, %d attempts, %d failed attempts, %d failed calls",
			r.Totals.Calls, r.Totals.Attempts, r.Totals.FailedAttempts, r.Totals.FailedPartner)
	}
}

// A partner with a capacity serves exactly that many attempts per second
// when more arrive, and rejects the rest with 503 and Retry-After, which the
// retry loop honours as throttling.
func TestPartnerCapacity(t *testing.T) {
	var hints, kinds []string
	st := Herdguard{Retry: retry.Config{MaxAttempts: 2, OnRetry: func(ev retry.RetryEvent) {
		if ev.RetryAfter != DefaultRetryAfter {
			hints = append(hints, ev.RetryAfter.String())
		}
		if ev.Kind != budget.Throttling {
			kinds = append(kinds, ev.Kind.String())
		}
	}}}
	// 300 calls/s against 100/s: every second is over capacity.
	r := run(t, Config{Seed: 2, Strategy: st, Envs: 30, CallsPerWindow: 100, Concurrency: -1,
		Partner: Partner{Phases: []Phase{{Capacity: 100}}}, Duration: 30 * time.Second})
	if len(hints) > 0 || len(kinds) > 0 {
		t.Fatalf("retries after a rejection had hints %v and kinds %v; want %v and throttling", hints, kinds, DefaultRetryAfter)
	}
	var attempts int64
	for i, s := range r.Seconds {
		attempts += s.Attempts
		if served := s.Attempts - s.FailedAttempts; i < 30 && served != 100 {
			t.Fatalf("second %d: %d of %d attempts served; want exactly the capacity, 100", i, served, s.Attempts)
		}
	}
	if attempts != r.Totals.Attempts {
		t.Fatalf("%d attempts over the seconds, %d in total", attempts, r.Totals.Attempts)
	}
}

// slotEnv makes one attempt per call and records, per slot of the
// partner's, how many it served.
type slotEnv struct {
	clock  *Clock
	slot   time.Duration
	served map[int64]int
}

func (e slotEnv) Call(ctx context.Context, op func(context.Context, int) error) error {
	at := e.clock.Elapsed()
	err := op(ctx, 1)
	if err == nil {
		e.served[int64(at/e.slot)]++
	}
	return err
}

func (slotEnv) Flush(context.Context) error { return nil }

// A partner with a Slot serves Capacity × Slot / 1 s attempts per slot, first
// come first served, so it turns calls away within a second that stays under
// Capacity when they bunch up.
func TestPartnerCapacitySlot(t *testing.T) {
	const slot = 100 * time.Millisecond
	served := map[int64]int{}
	st := StrategyFunc(func(spec EnvSpec) (Env, error) {
		return slotEnv{clock: spec.Clock, slot: slot, served: served}, nil
	})
	// 100 calls/s against 100/s, 10 per slot: the slots that get more than
	// 10 turn some away.
	r := run(t, Config{Seed: 3, Strategy: st, Envs: 10, CallsPerWindow: 100, Concurrency: -1,
		Partner: Partner{Phases: []Phase{{Capacity: 100, Slot: slot}}}, Duration: 30 * time.Second})
	full := 0
	for n, k := range served {
		if k > 10 {
			t.Fatalf("slot %d served %d attempts; want at most 10 (Capacity × Slot)", n, k)
		}
		if k == 10 {
			full++
		}
	}
	var turnedAway int64
	for i, s := range r.Seconds {
		if i < 30 && s.Attempts-s.FailedAttempts > 100 {
			t.Fatalf("second %d served %d attempts; want at most the capacity, 100", i, s.Attempts-s.FailedAttempts)
		}
		turnedAway += s.FailedAttempts
	}
	if full == 0 || turnedAway == 0 {
		t.Fatalf("%d slots served their 10, %d attempts turned away; want some of each at the capacity's mean rate", full, turnedAway)
	}
}

func TestPartnerHealAt(t *testing.T) {
	for _, tc := range []struct {
		p    Partner
		want time.Duration
	}{
		{Partner{}, Never},
		{Failing(1, 10*time.Second, 20*time.Second), 20 * time.Second},
		{Failing(1, 10*time.Second, 0), Never},
		{Limited(1000, 100, 5*time.Second, 25*time.Second), Never}, // capacity-limited, not unlimited, after
		{Partner{Phases: []Phase{{From: 0, FailureRatio: 0.5}, {From: time.Minute}}}, time.Minute},
	} {
		if got := tc.p.HealAt(); got != tc.want {
			t.Errorf("%+v: HealAt %v; want %v", tc.p, got, tc.want)
		}
	}
}

func TestScaleOut(t *testing.T) {
	t.Run("uncapped", func(t *testing.T) {
		r := run(t, Config{Seed: 1, Strategy: NoBudget(), Rate: 500, MaxEnvs: 10_000, Duration: 20 * time.Second})
		// A new environment joins only when all are busy, so the fleet is
		// as large as the most calls ever in flight at once.
		if len(r.Envs) != r.PeakBusy || r.Totals.Throttled != 0 {
			t.Fatalf("%d environments, peak busy %d, throttled %d", len(r.Envs), r.PeakBusy, r.Totals.Throttled)
		}
		// 500 calls/s × 20 ms latency: about 10 in flight.
		if r.PeakBusy < 10 || r.PeakBusy > 40 {
			t.Fatalf("peak busy %d; want about 10 (500/s × 20 ms)", r.PeakBusy)
		}
	})
	t.Run("capped", func(t *testing.T) {
		r := run(t, Config{Seed: 1, Strategy: NoBudget(), Rate: 500, MaxEnvs: 4, Duration: 20 * time.Second})
		if len(r.Envs) != 4 || r.PeakBusy != 4 || r.Totals.Throttled == 0 {
			t.Fatalf("%d environments, peak busy %d, throttled %d; want 4, 4, some", len(r.Envs), r.PeakBusy, r.Totals.Throttled)
		}
		if ran := r.Totals.Calls - r.Totals.Throttled; ran != r.Totals.Succeeded {
			t.Fatalf("%d calls ran, %d succeeded", ran, r.Totals.Succeeded)
		}
	})
	t.Run("fresh state", func(t *testing.T) {
		// Environments that join after the fleet opened learn it from the
		// store: they never send a first attempt while it is open.
		r := run(t, Config{Seed: 1, Strategy: GlobalBreaker(), Rate: 200, MaxEnvs: 1000,
			Partner: Failing(1, 0, 0), Duration: 20 * time.Second})
		if r.Breaker.FleetOpen == Never {
			t.Fatal("the fleet never opened in a total outage")
		}
		for _, e := range r.Envs {
			if e.Joined > r.Breaker.FleetOpen+time.Second && e.FirstOpen == Never && e.Calls > 0 {
				t.Fatalf("%s joined at %v, after the fleet opened at %v, and never saw it open", e.Name, e.Joined, r.Breaker.FleetOpen)
			}
		}
	})
}

// The library really runs: without budgets every call of a total outage
// makes exactly MaxAttempts attempts (3); with the global ratio each window
// grants at most Ratio × (requests + carried requests) + Floor.
func TestLibraryRuns(t *testing.T) {
	t.Run("no budget", func(t *testing.T) {
		r := run(t, Config{Seed: 1, Strategy: NoBudget(), Envs: 200, CallsPerWindow: 10,
			Partner: Failing(1, 0, 0), Duration: 30 * time.Second})
		if r.Totals.Attempts != 3*r.Totals.Calls || r.Totals.RetriesWanted != 2*r.Totals.Calls || r.Totals.FailedPartner != r.Totals.Calls {
			t.Fatalf("%d calls, %d attempts, %d retries wanted, %d failed; want 3 attempts and 2 retries per call, all failed",
				r.Totals.Calls, r.Totals.Attempts, r.Totals.RetriesWanted, r.Totals.FailedPartner)
		}
	})
	t.Run("global ratio", func(t *testing.T) {
		r := run(t, Config{Seed: 1, Strategy: GlobalRatio(), Envs: 200, CallsPerWindow: 10,
			Partner: Failing(1, 0, 0), Duration: 30 * time.Second})
		if r.Totals.Global.Used() == 0 || r.Totals.Global.Refused == 0 {
			t.Fatalf("global layer granted %d and refused %d", r.Totals.Global.Used(), r.Totals.Global.Refused)
		}
		for _, w := range r.Windows {
			if float64(w.Global.Used()) > w.CarryBound+1e-9 {
				t.Errorf("window %v: %d retries used; bound %.1f (%d requests carried)", w.Start, w.Global.Used(), w.CarryBound, w.Global.Carried)
			}
		}
	})
	t.Run("breaker", func(t *testing.T) {
		r := run(t, Config{Seed: 1, Strategy: GlobalBreaker(), Envs: 200, CallsPerWindow: 10,
			Partner: Failing(1, 10*time.Second, 30*time.Second), Duration: 60 * time.Second})
		b := r.Breaker
		if b.FleetOpen < 10*time.Second || b.EnvsOpened != 200 || len(b.Transitions) == 0 {
			t.Fatalf("fleet opened at %v, %d environments saw it open, %d transitions", b.FleetOpen, b.EnvsOpened, len(b.Transitions))
		}
		if b.HealAt != 30*time.Second || b.LastClosed == Never {
			t.Fatalf("healed at %v, last closed %v after", b.HealAt, b.LastClosed)
		}
		if r.Totals.BreakerRejected == 0 || r.Totals.Store.BreakerReads == 0 {
			t.Fatalf("%d calls rejected by the breaker, %d breaker reads", r.Totals.BreakerRejected, r.Totals.Store.BreakerReads)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Envs: 1, CallsPerWindow: 1}, "Strategy"},
		{Config{Strategy: NoBudget()}, "exactly one"},
		{Config{Strategy: NoBudget(), Envs: 1, Rate: 1, CallsPerWindow: 1}, "exactly one"},
		{Config{Strategy: NoBudget(), Envs: 1}, "CallsPerWindow"},
		{Config{Strategy: NoBudget(), Envs: 1, CallsPerWindow: 1, Start: DefaultStart.Add(time.Second)}, "Start"},
		{Config{Strategy: NoBudget(), Envs: 1, CallsPerWindow: 1, Partner: Failing(1.5, 0, 0)}, "FailureRatio"},
		{Config{Strategy: NoBudget(), Envs: 1, CallsPerWindow: 1, Partner: Partner{Phases: []Phase{{From: time.Second}, {From: 0}}}}, "before"},
		{Config{Strategy: NoBudget(), Envs: 1, CallsPerWindow: 1, Partner: Partner{Phases: []Phase{{Capacity: 100, Slot: -time.Second}}}}, "Slot"},
		{Config{Strategy: NoBudget(), Envs: 1, CallsPerWindow: 1, Partner: Partner{Phases: []Phase{{Capacity: 100, Slot: 2 * time.Second}}}}, "Slot"},
		{Config{Strategy: NoBudget(), Envs: 1, CallsPerWindow: 1, Partner: Partner{Phases: []Phase{{Capacity: 4, Slot: 100 * time.Millisecond}}}}, "Slot"},
		{Config{Strategy: Herdguard{Global: &budget.GlobalConfig{Window: time.Minute}}, Envs: 1, CallsPerWindow: 1}, "Window"},
	} {
		_, err := Run(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v; want one naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestSleepOutsideSimulation(t *testing.T) {
	c := newClock(DefaultStart)
	if err := c.Sleep(context.Background(), time.Second); err == nil {
		t.Fatal("Sleep outside a simulated goroutine returned nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with a done context: %v", err)
	}
}

// A driver of its own (cmd/outagesim's in-process mode) runs on the
// exported scheduler: At callbacks start simulated goroutines, RunUntil
// advances in steps, Stop ends what is still parked.
func TestDriver(t *testing.T) {
	c := NewClock(DefaultStart)
	var order []string
	var ended int
	for i, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		c.At(DefaultStart.Add(time.Duration(i)*time.Millisecond), func() {
			c.Go(func() {
				if err := c.Sleep(context.Background(), d); err != nil {
					order = append(order, "stopped")
					return
				}
				order = append(order, fmt.Sprintf("%d@%v", i, c.Elapsed()))
				ended++
			})
		})
	}
	if more := c.RunUntil(DefaultStart.Add(2500 * time.Millisecond)); !more {
		t.Fatal("RunUntil(2.5s) reports nothing left; one sleeper is due at 3s")
	}
	want := []string{"1@1.001s", "2@2.002s"}
	if !reflect.DeepEqual(order, want) || c.Elapsed() != 2002*time.Millisecond {
		t.Fatalf("after 2.5 s: %v at %v; want %v", order, c.Elapsed(), want)
	}
	c.Stop()
	c.Stop()
	if want = append(want, "stopped"); !reflect.DeepEqual(order, want) || ended != 2 {
		t.Fatalf("after Stop: %v", order)
	}
}
