package sim

import (
	"bytes"
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// shortConfig is the default scenario scaled down to run in a couple of
// seconds: a fifth of the rate and capacities (a major outage, the partner
// keeping a fifth of its capacity), a shorter run and outage.
func shortConfig() Config {
	cfg := DefaultConfig()
	cfg.Envs = 20
	cfg.Rate = 200
	cfg.Duration = 15 * time.Second
	cfg.Capacity = 300
	cfg.OutageCapacity = 60
	cfg.OutageStart = 3 * time.Second
	cfg.OutageLength = 8 * time.Second
	cfg.BucketCapacity = 100
	cfg.Speed = 10
	return cfg
}

func runStrategies(t *testing.T, runner *Runner) map[string]*Result {
	t.Helper()
	if err := runner.Config.Validate(); err != nil {
		t.Fatal(err)
	}
	infos, err := LookupStrategies(runner.Config.Strategies)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Result{}
	for _, info := range infos {
		res, err := runner.Run(context.Background(), info)
		if err != nil {
			t.Fatalf("%s: %v", info.Key, err)
		}
		t.Logf("%-15s load %.2fx, failed %d, %d envs, wall %v, clock %+v, keep-up %+v", info.Key, res.LoadFactor, res.FailedForGood,
			res.Envs, time.Duration(res.Wall), res.Clock, res.KeepUp)
		out[info.Key] = res
	}
	return out
}

func runConfig(t *testing.T, cfg Config) map[string]*Result {
	t.Helper()
	return runStrategies(t, &Runner{Config: cfg, Backend: MemoryBackend{}})
}

// checkAccounting checks what holds for any run, however fast or slow the
// machine: every call is counted once, in the phase it was scheduled in,
// and every attempt sent reached the partner and was counted once.
func checkAccounting(t *testing.T, cfg Config, res map[string]*Result) {
	t.Helper()
	rate := int64(cfg.Rate)
	want := [3]int64{rate * int64(cfg.OutageStart/time.Second), rate * int64(cfg.OutageLength/time.Second), 0}
	want[2] = cfg.TotalCalls() - want[0] - want[1]
	for key, r := range res {
		if got := [3]int64{r.Before.Calls, r.Outage.Calls, r.After.Calls}; got != want {
			t.Errorf("%s: %v calls before/during/after the outage, want %v", key, got, want)
		}
		var arrivals, first int64
		for _, s := range r.Seconds {
			arrivals += s.Arrivals
			first += s.FirstAttempts
		}
		if arrivals != r.AttemptsSent {
			t.Errorf("%s: partner counted %d arrivals, fleet sent %d attempts", key, arrivals, r.AttemptsSent)
		}
		if r.KeepUp.Lag.Measured != arrivals || r.KeepUp.Lag.FirstMeasured != first {
			t.Errorf("%s: lag measured for %d attempts (%d first), want all %d (%d first)", key,
				r.KeepUp.Lag.Measured, r.KeepUp.Lag.FirstMeasured, arrivals, first)
		}
	}
}

// In process, the same seed gives the same run, and the strategies keep
// their order: without a budget the partner gets the most load during the
// outage, per-environment token buckets less, the global ratio the least,
// bounded by its ratio.
func TestInprocOrdersStrategies(t *testing.T) {
	cfg := shortConfig()
	cfg.Partner = PartnerInproc
	cfg.Strategies = []string{"none", "bucket", "ratio", "global", "global-breaker", "global-adaptive"}
	res := runConfig(t, cfg)
	checkAccounting(t, cfg, res)
	none, bucket, global := res["none"], res["bucket"], res["global"]
	if !(none.LoadFactor > bucket.LoadFactor && bucket.LoadFactor > global.LoadFactor) {
		t.Errorf("load factors none %.3f, bucket %.3f, global %.3f: want none > bucket > global",
			none.LoadFactor, bucket.LoadFactor, global.LoadFactor)
	}
	if none.LoadFactor < 2 {
		t.Errorf("no budget: load factor %.3f, want at least 2 with 3 attempts in a major outage", none.LoadFactor)
	}
	// The ratio's bound over the outage: 10% of its 1,600 calls plus the
	// floor (3) in each of the two windows it overlaps at most, on top of
	// the first attempts, plus retries funded just before the outage.
	for _, key := range []string{"ratio", "global"} {
		if lf := res[key].LoadFactor; lf > 1.15 {
			t.Errorf("%s: load factor %.3f, want at most 1.15", key, lf)
		}
	}
	if g := global.GlobalRatio; g == nil || g.Granted == 0 || float64(g.Granted) > g.Bound {
		t.Errorf("global: grants over the outage's windows %+v, want some, within the bound", g)
	}
	if global.Before.Store == nil || global.Before.Store.Writes != 0 || global.Outage.Store.Writes == 0 {
		t.Errorf("global store usage before %+v, during %+v the outage: want no writes while healthy, writes in the outage",
			global.Before.Store, global.Outage.Store)
	}
	// A major outage opens the breaker, at a true failure ratio that is
	// measured, and then blocks first attempts.
	br := res["global-breaker"]
	if br.BreakerFirstOpen == nil || br.BreakerFirstOpenFailureRatio == nil || br.LoadFactor >= global.LoadFactor {
		t.Errorf("global-breaker: first open %v at a failure ratio of %v, load %.3f: want it open, with a ratio, under the global ratio's %.3f",
			br.BreakerFirstOpen, br.BreakerFirstOpenFailureRatio, br.LoadFactor, global.LoadFactor)
	}
	// Adaptive throttling rejects calls, and keeps the partner's load
	// under the global ratio's.
	if ad := res["global-adaptive"]; ad.LoadFactor >= global.LoadFactor || ad.Outage.Failed.Breaker == 0 {
		t.Errorf("global-adaptive: load %.3f, %d calls rejected in the outage: want calls throttled, under the global ratio's %.3f",
			ad.LoadFactor, ad.Outage.Failed.Breaker, global.LoadFactor)
	}
	for key, r := range res {
		if r.KeepUp.Behind() || r.KeepUp.Lag.Late != 0 {
			t.Errorf("%s: in process, yet keep-up problems %v (lag %+v)", key, r.KeepUp.Problems, r.KeepUp.Lag)
		}
		if r.Capacity == nil != (key != "global" && key != "global-breaker" && key != "global-adaptive") {
			t.Errorf("%s: capacity %+v: want it for the strategies with shared stores only", key, r.Capacity)
		}
	}

	// Deterministic: the same seed, the same figures.
	again := runConfig(t, cfg)
	for key, a := range res {
		if x, y := comparable(a), comparable(again[key]); !reflect.DeepEqual(x, y) {
			t.Errorf("%s: two runs with seed %d differ:\n%+v\n%+v", key, cfg.Seed, x, y)
		}
	}
}

// comparable returns r without the machine's figures.
func comparable(r *Result) Result {
	c := *r
	c.Wall, c.Clock = 0, ClockStats{}
	return c
}

// The Lambda-shaped fleet: one call at a time per environment, spread over
// all of them; throttled when none is idle; with scale-out, new
// environments join at the scaling rate, up to the cap.
func TestInprocLambdaFleet(t *testing.T) {
	cfg := shortConfig()
	cfg.Partner = PartnerInproc
	cfg.Fleet = FleetLambda
	cfg.Envs = 200 // one call per second each
	cfg.Strategies = []string{"none", "global"}
	res := runConfig(t, cfg)
	checkAccounting(t, cfg, res)
	none, global := res["none"], res["global"]
	// Healthy, a call takes 20 ms: 4 environments busy on average, never
	// all 200, so nothing is throttled before the outage. In the outage
	// calls without a budget wait out two Retry-Afters (2 s and more) and
	// pile up past 200 at once: the fleet at its cap throttles.
	if none.Before.Failed.Throttled != 0 || none.Outage.Failed.Throttled == 0 || none.Envs != 200 {
		t.Errorf("no budget: %d throttled before, %d in the outage, %d envs; want 0, some, 200",
			none.Before.Failed.Throttled, none.Outage.Failed.Throttled, none.Envs)
	}
	// The global ratio refuses most retries: calls end fast, none is
	// throttled, and every environment flushed after its calls (the
	// healthy phase still costs no store call).
	if n := global.Before.Failed.Throttled + global.Outage.Failed.Throttled + global.After.Failed.Throttled; n != 0 {
		t.Errorf("global: %d calls throttled", n)
	}
	if global.Before.Store.Reads+global.Before.Store.Writes != 0 {
		t.Errorf("global: healthy store usage %+v, want none", global.Before.Store)
	}

	cfg.ScaleOut = true
	cfg.MaxEnvs = 1000
	cfg.ScaleRate = 50 // at most 50 new environments per second, 500 at once
	cfg.Strategies = []string{"none"}
	scaled := runConfig(t, cfg)["none"]
	checkAccounting(t, cfg, map[string]*Result{"none": scaled})
	// The outage's backlog is met by new environments, 500 at once, then
	// 50 per second; past that, calls are throttled.
	if scaled.Envs <= 200 || scaled.Envs > 200+500+50*int(cfg.Duration/time.Second) {
		t.Errorf("scale-out: %d environments, want more than 200, at most the scaling rate allows", scaled.Envs)
	}
	if thr := scaled.Outage.Failed.Throttled; thr >= none.Outage.Failed.Throttled {
		t.Errorf("scale-out: %d calls throttled in the outage, want fewer than the fixed fleet's %d", thr, none.Outage.Failed.Throttled)
	}
}

// -scale-out alone (the busy fleet): environments join while calls are
// slow, up to the cap, beyond which calls are throttled without reaching
// the partner.
func TestInprocScaleOut(t *testing.T) {
	cfg := shortConfig()
	cfg.Partner = PartnerInproc
	cfg.Duration = 8 * time.Second
	cfg.OutageStart = 2 * time.Second
	cfg.OutageLength = 4 * time.Second
	cfg.Envs = 2
	cfg.ScaleOut = true
	cfg.MaxEnvs = 2000
	cfg.Latency = 100 * time.Millisecond // 200 calls/s × 0.1 s: about 20 busy environments when healthy
	cfg.Strategies = []string{"ratio"}
	r := runConfig(t, cfg)["ratio"]
	checkAccounting(t, cfg, map[string]*Result{"ratio": r})
	// In the outage calls take longer (backoffs of a second and more), so
	// more environments join than the healthy phase needs.
	if r.Envs <= 40 || r.Envs > cfg.MaxEnvs {
		t.Errorf("%d environments at the end, want more than 40 (scale-out) and at most %d", r.Envs, cfg.MaxEnvs)
	}
	if n := r.Before.Failed.Throttled + r.Outage.Failed.Throttled + r.After.Failed.Throttled; n != 0 {
		t.Errorf("%d calls throttled below the cap", n)
	}

	cfg.MaxEnvs = 5
	r = runConfig(t, cfg)["ratio"]
	checkAccounting(t, cfg, map[string]*Result{"ratio": r})
	if r.Envs != 5 {
		t.Errorf("%d environments, want the cap (5)", r.Envs)
	}
	if throttled := r.Before.Failed.Throttled + r.Outage.Failed.Throttled + r.After.Failed.Throttled; throttled == 0 {
		t.Error("no call throttled at the cap")
	}
}

// Over real HTTP only what holds however slow the machine is can be
// asserted: the accounting, and that a run which reports keeping up has
// its first attempts where they belong. Machine figures are logged.
func TestHTTPRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulation over loopback HTTP for a few seconds")
	}
	cfg := shortConfig()
	cfg.Strategies = []string{"none", "global"}
	res := runConfig(t, cfg)
	checkAccounting(t, cfg, res)
	for key, r := range res {
		if !r.KeepUp.Behind() && float64(r.FirstAttemptsInOutage) < (1-maxMissingShare)*float64(r.Outage.Calls) {
			t.Errorf("%s: reports keeping up, yet only %d of the outage's %d first attempts reached the partner during it",
				key, r.FirstAttemptsInOutage, r.Outage.Calls)
		}
	}
}

// A run whose attempts reach the partner late is reported, whatever the
// machine: here every attempt waits 30 ms of real time, unseen by the
// clock's backpressure, before it is sent (as it would waiting for one of
// the fleet's connections), which is 300 ms of simulated time at x10.
func TestHTTPRunReportsLag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulation over loopback HTTP for a few seconds")
	}
	cfg := shortConfig()
	cfg.Rate = 50
	cfg.Strategies = []string{"none"}
	runner := &Runner{Config: cfg, Backend: MemoryBackend{}, wrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			time.Sleep(30 * time.Millisecond)
			return rt.RoundTrip(req)
		})
	}}
	r := runStrategies(t, runner)["none"]
	if !r.KeepUp.Behind() || r.KeepUp.Lag.Late < r.KeepUp.Lag.Measured/2 {
		t.Errorf("every attempt 300 ms late, yet keep-up %+v", r.KeepUp)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, NewReport(cfg, []*Result{r})); err != nil {
		t.Fatal(err)
	}
	assertContains(t, buf.String(), "THE MACHINE DID NOT KEEP UP", "reached the partner more than 100ms after they were due", "-partner inproc")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
