package sim

import (
	"fmt"
	"time"
)

// KeepUp is the simulator's verdict on a run: whether the machine carried
// the scenario, or the figures are those of a slower, distorted one.
//
// The clock stops while work is in transit, so a slow machine should
// slow a run down, not distort it. It can fail to: requests that wait
// for one of the fleet's connections are not counted as in transit (the
// requests holding them may be in the partner's simulated service, which
// needs the clock to run), and the watchdog restarts a clock that stood
// still too long. And a goroutine whose sleep ended may run late on a busy
// machine, holding its environment and sending its retry late. Either way
// the partner sees another load than the one asked for. The partner
// measures how late attempts arrive (DueHeader), the clock how late sleeps
// end, and the fleet counts the first attempts it sent for the calls
// scheduled in the outage.
type KeepUp struct {
	// OK is false when any problem below was found.
	OK bool `json:"ok"`
	// Problems says, in words, what went wrong.
	Problems []string `json:"problems,omitempty"`
	// Notes says what slowed the run down without distorting it (the
	// clock stopped and skipped instead).
	Notes []string `json:"notes,omitempty"`
	// Lag is how late attempts reached the partner.
	Lag Lag `json:"lag"`
	// FirstAttemptsScheduledInOutage counts the first attempts the fleet
	// sent for calls scheduled in the outage; FirstAttemptsInOutage (in
	// Result) those that reached the partner in its seconds.
	FirstAttemptsScheduledInOutage int64 `json:"first_attempts_scheduled_in_outage"`
}

// Limits of a faithful run.
const (
	// maxLateShare is the share of attempts that may arrive more than
	// LateAfter after they were due.
	maxLateShare = 0.01
	// maxMissingShare is the share of the outage's first attempts that may
	// reach the partner outside the outage (calls scheduled in its last
	// instants arrive just after it: a few per thousand at most).
	maxMissingShare = 0.01
	// maxMeanDelay is the most simulated time by which attempts may
	// reach the partner late, and sleeps end late, on average, in a fleet
	// whose environments take one call at a time: a quarter of the
	// partner's default service time (20 ms). There, how long calls hold
	// their environments decides which calls are throttled or make the
	// fleet grow, and many small delays add up: at x10 on a loaded 2-core
	// machine a mean of 12 ms made the Lambda-shaped fleet throttle 35%
	// more calls than in process or at x3 (2 ms). A busy fleet's figures
	// did not move with such delays (the same load factors as in process
	// at means of 10-30 ms), so it is judged by the late arrivals alone.
	maxMeanDelay = 5 * time.Millisecond
	// minSpeedShare is the lowest effective speed, as a share of the
	// nominal one, that is not worth a note. A slower run is not
	// distorted by itself (the clock stops and skips for it); the lag and
	// the missing first attempts tell whether it was.
	minSpeedShare = 0.25
)

// judgeKeepUp returns res's verdict for cfg (res.KeepUp's counters set).
func judgeKeepUp(cfg Config, res *Result) KeepUp {
	k := res.KeepUp
	var problems []string
	if lag := k.Lag; lag.Measured > 0 && float64(lag.Late) > maxLateShare*float64(lag.Measured) {
		problems = append(problems, fmt.Sprintf("%d of %d attempts (%d of %d first attempts) reached the partner more than %v after they were due (up to %v late)",
			lag.Late, lag.Measured, lag.LateFirst, lag.FirstMeasured, LateAfter, fmtDur(time.Duration(lag.Max))))
	}
	if lag := k.Lag; cfg.OneAtATime() && lag.Measured > 0 && time.Duration(lag.Mean) > maxMeanDelay {
		problems = append(problems, fmt.Sprintf("attempts reached the partner %v after they were due on average (at most %v keeps one-call-at-a-time environments faithful)",
			fmtMs(time.Duration(lag.Mean)), maxMeanDelay))
	}
	if c := res.Clock; cfg.OneAtATime() && c.Sleeps > 0 && time.Duration(c.MeanOvershoot) > maxMeanDelay {
		problems = append(problems, fmt.Sprintf("sleeps ended %v late on average (at most %v keeps one-call-at-a-time environments faithful)",
			fmtMs(time.Duration(c.MeanOvershoot)), maxMeanDelay))
	}
	if want := k.FirstAttemptsScheduledInOutage; want > 0 {
		if missing := want - res.FirstAttemptsInOutage; float64(missing) > maxMissingShare*float64(want) {
			problems = append(problems, fmt.Sprintf("%d of the %d first attempts of calls scheduled in the outage did not reach the partner during it",
				missing, want))
		}
	}
	if c := res.Clock; c.Sleeps > 0 && float64(c.LateSleeps) > maxLateShare*float64(c.Sleeps) {
		problems = append(problems, fmt.Sprintf("%d of %d sleeps (backoffs, Retry-After waits, the partner's service time) ended more than %v late (up to %v): their goroutines ran late",
			c.LateSleeps, c.Sleeps, LateAfter, fmtDur(time.Duration(c.MaxOvershoot))))
	}
	if f := res.Clock.Forced; f > 0 {
		problems = append(problems, fmt.Sprintf("the clock's watchdog restarted simulated time %d times while work was still in transit", f))
	}
	k.Notes = nil
	if eff := res.Clock.EffectiveSpeed; cfg.Partner == PartnerHTTP && eff > 0 && eff < minSpeedShare*cfg.Speed {
		k.Notes = append(k.Notes, fmt.Sprintf("simulated time ran at x%.1f, under a quarter of the nominal x%g (the clock stood still %v for work in transit and skipped %v the process was not running)",
			eff, cfg.Speed, fmtDur(time.Duration(res.Clock.Paused)), fmtDur(time.Duration(res.Clock.Skipped))))
	}
	k.Problems = problems
	k.OK = len(problems) == 0
	return k
}

// fmtMs formats a short duration in milliseconds with one decimal.
func fmtMs(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// keepUpAdvice tells the user how to get a run the machine can carry:
// the speed at which the attempts per real second stay a fifth under what
// the machine carried in the slowest run behind, the rate that does the
// same at the nominal speed, or the in-process engine.
func keepUpAdvice(r Report) string {
	c := r.Config
	speed := c.Speed
	for _, res := range r.Results {
		if !res.KeepUp.Behind() || res.Wall <= 0 || res.AttemptsSent == 0 {
			continue
		}
		simulated := time.Duration(c.Duration + res.SimulatedTail).Seconds()
		carried := float64(res.AttemptsSent) / time.Duration(res.Wall).Seconds() // attempts per real second
		needed := float64(res.AttemptsSent) / simulated                          // attempts per simulated second
		speed = min(speed, 0.8*carried/needed)
	}
	return fmt.Sprintf("the loopback HTTP partner and the fleet share this machine's cores: at x%g this run needed more attempts per real second than they carried."+
		" Run with -partner %s (virtual time, any fleet size), or at about -speed %.2g, or at x%g with at most about -rate %d",
		c.Speed, PartnerInproc, speed, c.Speed, int(float64(c.Rate)*speed/c.Speed))
}

// Behind reports whether the machine did not keep up (some problem was
// found).
func (k KeepUp) Behind() bool { return len(k.Problems) > 0 }
