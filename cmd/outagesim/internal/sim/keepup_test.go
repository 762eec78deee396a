package sim

import (
	"strings"
	"testing"
	"time"
)

func TestJudgeKeepUp(t *testing.T) {
	cfg := DefaultConfig()
	ok := func() *Result {
		return &Result{
			FirstAttemptsInOutage: 19_990,
			Clock:                 ClockStats{EffectiveSpeed: 9.5},
			KeepUp: KeepUp{Lag: Lag{Measured: 100_000, FirstMeasured: 60_000, Late: 1000, Max: Duration(time.Second)},
				FirstAttemptsScheduledInOutage: 20_000},
		}
	}
	if k := judgeKeepUp(cfg, ok()); k.Behind() || !k.OK || len(k.Notes) != 0 {
		t.Errorf("1%% late, 0.05%% of the outage's first attempts elsewhere: %+v, want kept up", k)
	}
	for name, tc := range map[string]struct {
		mut  func(*Result)
		want string
	}{
		"late":    {func(r *Result) { r.KeepUp.Lag.Late, r.KeepUp.Lag.LateFirst = 1001, 900 }, "1001 of 100000 attempts (900 of 60000 first attempts) reached the partner more than 100ms after they were due (up to 1s late)"},
		"missing": {func(r *Result) { r.FirstAttemptsInOutage = 10_000 }, "10000 of the 20000 first attempts of calls scheduled in the outage did not reach the partner during it"},
		"forced":  {func(r *Result) { r.Clock.Forced = 2 }, "the clock's watchdog restarted simulated time 2 times"},
		"sleeps": {func(r *Result) {
			r.Clock.Sleeps, r.Clock.LateSleeps, r.Clock.MaxOvershoot = 1000, 11, Duration(time.Second)
		},
			"11 of 1000 sleeps (backoffs, Retry-After waits, the partner's service time) ended more than 100ms late (up to 1s)"},
	} {
		r := ok()
		tc.mut(r)
		k := judgeKeepUp(cfg, r)
		if !k.Behind() || k.OK || len(k.Problems) != 1 || !strings.Contains(k.Problems[0], tc.want) {
			t.Errorf("%s: %+v, want the problem %q", name, k, tc.want)
		}
	}
	// Small delays on average matter where environments take one call at
	// a time (how long a call holds one decides throttling), not in a busy
	// fleet.
	slow := func() *Result {
		r := ok()
		r.KeepUp.Lag.Mean, r.Clock.Sleeps, r.Clock.MeanOvershoot = Duration(12*time.Millisecond), 1000, Duration(6*time.Millisecond)
		return r
	}
	if k := judgeKeepUp(cfg, slow()); k.Behind() {
		t.Errorf("busy fleet, means of 12 and 6 ms: %+v, want kept up", k)
	}
	lambda := LambdaConfig()
	lambda.Partner = PartnerHTTP
	k := judgeKeepUp(lambda, slow())
	if len(k.Problems) != 2 || !strings.Contains(k.Problems[0], "attempts reached the partner 12.0ms after they were due on average") ||
		!strings.Contains(k.Problems[1], "sleeps ended 6.0ms late on average") {
		t.Errorf("Lambda-shaped fleet, means of 12 and 6 ms: %+v, want both reported", k)
	}

	// A slow run is noted, not condemned: the clock stopped for it.
	r := ok()
	r.Clock.EffectiveSpeed = 2
	if k := judgeKeepUp(cfg, r); k.Behind() || len(k.Notes) != 1 || !strings.Contains(k.Notes[0], "x2.0, under a quarter of the nominal x10") {
		t.Errorf("x2 of x10: %+v, want a note only", k)
	}
	cfg.Partner = PartnerInproc
	if k := judgeKeepUp(cfg, r); k.Behind() || len(k.Notes) != 0 {
		t.Errorf("in process: %+v, want nothing (no nominal speed)", k)
	}
}

// The advice names a speed at which the attempts per real second stay a
// fifth under what the slowest run behind carried.
func TestKeepUpAdvice(t *testing.T) {
	r := Report{Config: ReportConfig{Speed: 10, Rate: 5000, Duration: Duration(time.Minute)}, Results: []*Result{
		{AttemptsSent: 330_000, SimulatedTail: Duration(6 * time.Second), Wall: Duration(33 * time.Second), // 10,000/s carried, 5,000/s needed
			KeepUp: KeepUp{Problems: []string{"late"}}},
		{AttemptsSent: 1, Wall: Duration(time.Nanosecond)}, // kept up: not counted
	}}
	if got := keepUpAdvice(r); !strings.Contains(got, "-partner inproc") || !strings.Contains(got, "about -speed 1.6,") ||
		!strings.Contains(got, "at x10 with at most about -rate 800") {
		t.Errorf("advice %q, want -partner inproc, -speed 1.6 and -rate 800", got)
	}
}
