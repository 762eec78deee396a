package sim

import (
	"context"
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

func runStrategies(t *testing.T, cfg Config) map[string]*Result {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	infos, err := LookupStrategies(cfg.Strategies)
	if err != nil {
		t.Fatal(err)
	}
	runner := &Runner{Config: cfg, Backend: MemoryBackend{}}
	out := map[string]*Result{}
	for _, info := range infos {
		res, err := runner.Run(context.Background(), info)
		if err != nil {
			t.Fatalf("%s: %v", info.Key, err)
		}
		t.Logf("%-15s load %.2fx, failed %d, wall %v, clock %+v", info.Key, res.LoadFactor, res.FailedForGood, time.Duration(res.Wall), res.Clock)
		out[info.Key] = res
	}
	return out
}

// A short run of the real thing (loopback HTTP, real fleet): without a
// budget the partner gets the most load during the outage, per-environment
// token buckets less, the global ratio the least.
func TestShortRunOrdersStrategies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulation for a few seconds")
	}
	cfg := shortConfig()
	cfg.Strategies = []string{"none", "bucket", "global"}
	res := runStrategies(t, cfg)
	none, bucket, global := res["none"], res["bucket"], res["global"]
	if !(none.LoadFactor > bucket.LoadFactor && bucket.LoadFactor > global.LoadFactor) {
		t.Errorf("load factors none %.2f, bucket %.2f, global %.2f: want none > bucket > global",
			none.LoadFactor, bucket.LoadFactor, global.LoadFactor)
	}
	if none.LoadFactor < 1.5 {
		t.Errorf("no budget: load factor %.2f, want at least 1.5 with 3 attempts", none.LoadFactor)
	}
	if global.LoadFactor > 1.2 {
		t.Errorf("global 10%% ratio: load factor %.2f, want at most 1.2", global.LoadFactor)
	}
	for key, r := range res {
		// Every call is accounted for, in the phase it was scheduled in.
		if r.Before.Calls != 600 || r.Outage.Calls != 1600 || r.After.Calls != 800 {
			t.Errorf("%s: %d/%d/%d calls before/during/after the outage, want 600/1600/800", key, r.Before.Calls, r.Outage.Calls, r.After.Calls)
		}
		// Every attempt sent reached the partner and was counted once.
		var arrivals int64
		for _, s := range r.Seconds {
			arrivals += s.Arrivals
		}
		if arrivals != r.AttemptsSent {
			t.Errorf("%s: partner counted %d arrivals, fleet sent %d attempts", key, arrivals, r.AttemptsSent)
		}
		if r.Clock.Forced != 0 {
			t.Errorf("%s: the clock watchdog had to restart the clock %d times", key, r.Clock.Forced)
		}
	}
	if global.Before.Store == nil || global.Outage.Store == nil || global.Before.Store.Writes != 0 || global.Outage.Store.Writes == 0 {
		t.Errorf("global store usage before %+v, during %+v the outage: want no writes while healthy, writes in the outage",
			global.Before.Store, global.Outage.Store)
	}
}

// Lambda-like scale-out: environments join while calls are slow, up to the
// cap, beyond which calls are throttled without reaching the partner.
func TestShortRunScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulation for a few seconds")
	}
	cfg := shortConfig()
	cfg.Duration = 8 * time.Second
	cfg.OutageStart = 2 * time.Second
	cfg.OutageLength = 4 * time.Second
	cfg.Envs = 2
	cfg.ScaleOut = true
	cfg.MaxEnvs = 2000
	cfg.Latency = 100 * time.Millisecond // 200 calls/s × 0.1 s: about 20 busy environments when healthy
	cfg.Strategies = []string{"ratio"}
	r := runStrategies(t, cfg)["ratio"]
	// In the outage calls take longer (backoffs of a second and more), so
	// more environments join than the healthy phase needs.
	if r.Envs <= 40 || r.Envs > cfg.MaxEnvs {
		t.Errorf("%d environments at the end, want more than 40 (scale-out) and at most %d", r.Envs, cfg.MaxEnvs)
	}
	if n := r.Before.Failed.Throttled + r.Outage.Failed.Throttled + r.After.Failed.Throttled; n != 0 {
		t.Errorf("%d calls throttled below the cap", n)
	}

	cfg.MaxEnvs = 5
	r = runStrategies(t, cfg)["ratio"]
	if r.Envs != 5 {
		t.Errorf("%d environments, want the cap (5)", r.Envs)
	}
	throttled := r.Before.Failed.Throttled + r.Outage.Failed.Throttled + r.After.Failed.Throttled
	if throttled == 0 {
		t.Error("no call throttled at the cap")
	}
	var arrivals int64
	for _, s := range r.Seconds {
		arrivals += s.Arrivals
	}
	if arrivals != r.AttemptsSent {
		t.Errorf("partner counted %d arrivals, fleet sent %d attempts", arrivals, r.AttemptsSent)
	}
}
