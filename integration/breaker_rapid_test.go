package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/herdguard/herdguard/breaker"
)

// rpPermit is a permit the property test holds, with what it knew when the
// permit was issued.
type rpPermit struct {
	p      breaker.Permit
	events int       // state changes announced before it was issued
	at     time.Time // when it was issued
}

// TestRapidLocalBreaker (breaker's property test, here with the module's
// other rapid tests) drives one in-memory breaker (no Store) with random
// settings through random sequences of calls, outcomes, clock moves and
// operator actions, and checks after every step:
//
//   - it never goes from open or half-open to closed unless a probe
//     succeeded since it last opened, or an operator closed it (ForcedClosed,
//     Disable, Reset);
//   - a permit issued before the latest state change is dropped by Done: no
//     count, no state change;
//   - a half-open breaker never has more than HalfOpenProbes probes out
//     whose lease has not lapsed;
//   - an open breaker admits nothing before its open duration has passed
//     (jitter included).
func TestRapidLocalBreaker(t *testing.T) {
	relRapidCheck(t, 300, 150, func(rt *rapid.T) {
		probes := rapid.IntRange(1, 3).Draw(rt, "probes")
		lease := time.Duration(rapid.IntRange(1, 5).Draw(rt, "leaseTenths")) * 100 * time.Millisecond
		openFor := time.Duration(rapid.IntRange(1, 5).Draw(rt, "openTenths")) * 100 * time.Millisecond
		var (
			events        []breaker.State
			probeOK       int  // successful probes so far
			openMark      int  // probeOK when it last opened
			operatorClose bool // an operator closed it since it last opened
			openedAt      time.Time
			now           = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		)
		s := breaker.Settings{
			MinRequests:         int64(rapid.IntRange(1, 5).Draw(rt, "minRequests")),
			FailureRatio:        rapid.SampledFrom([]float64{0.2, 0.5, 1}).Draw(rt, "ratio"),
			ConsecutiveFailures: int64(rapid.IntRange(0, 3).Draw(rt, "consecutive")),
			Window:              time.Second,
			OpenDuration:        openFor,
			MaxOpenDuration:     4 * openFor,
			Jitter:              rapid.SampledFrom([]float64{-1, 0.2}).Draw(rt, "jitter"),
			Rand:                rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1)).Float64,
			HalfOpenProbes:      probes,
			ProbeLease:          lease,
			OnStateChange: func(c breaker.StateChange) {
				from, to := c.From, c.To
				events = append(events, to)
				switch {
				case to == breaker.Open:
					openMark, operatorClose, openedAt = probeOK, false, now
				case to == breaker.Closed && from != breaker.Closed && probeOK <= openMark && !operatorClose:
					rt.Fatalf("%v -> closed without a successful probe since it opened (states %v)", from, events)
				}
			},
		}
		b, err := breaker.New("rapid", s)
		if err != nil {
			rt.Fatalf("New: %v", err)
		}
		var held []rpPermit
		ctx := context.Background()
		rt.Repeat(map[string]func(*rapid.T){
			"allow": func(rt *rapid.T) {
				before := b.State(now)
				p, err := b.Allow(ctx, now)
				if err != nil {
					if !errors.Is(err, breaker.ErrOpen) {
						rt.Fatalf("Allow: %v", err)
					}
					return
				}
				if before == breaker.Open {
					// State(now) says what an Allow at now starts from: an
					// open breaker whose open duration has passed reads as
					// half-open.
					rt.Fatalf("admitted a call at %v after opening while State said open", now.Sub(openedAt))
				}
				if len(events) > 0 && events[len(events)-1] == breaker.HalfOpen && now.Sub(openedAt) < openFor*4/5-time.Millisecond {
					// Jitter shortens an open period by at most 20%.
					rt.Fatalf("half-open %v after opening; the open duration is %v (at least %v with jitter)", now.Sub(openedAt), openFor, openFor*4/5)
				}
				held = append(held, rpPermit{p, len(events), now})
			},
			"done": func(rt *rapid.T) {
				if len(held) == 0 {
					rt.Skip("no permit")
				}
				i := rapid.IntRange(0, len(held)-1).Draw(rt, "permit")
				h := held[i]
				held = append(held[:i], held[i+1:]...)
				o := rapid.SampledFrom([]breaker.Outcome{breaker.Success, breaker.Failure, breaker.Excluded}).Draw(rt, "outcome")
				stale := h.events < len(events)
				counts, n := b.Counts(), len(events)
				if h.p.Probe() && o == breaker.Success && !stale {
					probeOK++
				}
				b.Done(ctx, now, h.p, o)
				if stale && (b.Counts() != counts || len(events) != n) {
					rt.Fatalf("Done(%v) of a permit from before a state change: counts %+v -> %+v, state changes %d -> %d", o, counts, b.Counts(), n, len(events))
				}
			},
			"burst": func(rt *rapid.T) {
				// Calls allowed and finished at once, mostly failing, so
				// that the breaker trips, probes and recovers often.
				n := rapid.IntRange(1, 20).Draw(rt, "n")
				failPct := rapid.SampledFrom([]int{0, 50, 90, 100}).Draw(rt, "failPct")
				for range n {
					before := b.State(now)
					p, err := b.Allow(ctx, now)
					if err != nil {
						if !errors.Is(err, breaker.ErrOpen) {
							rt.Fatalf("Allow: %v", err)
						}
						continue
					}
					if before == breaker.Open {
						rt.Fatalf("admitted a call at %v after opening while State said open", now.Sub(openedAt))
					}
					o := breaker.Success
					if rapid.IntRange(0, 99).Draw(rt, "roll") < failPct {
						o = breaker.Failure
					}
					if p.Probe() && o == breaker.Success {
						probeOK++
					}
					b.Done(ctx, now, p, o)
					now = now.Add(time.Duration(rapid.IntRange(0, 20).Draw(rt, "gapMs")) * time.Millisecond)
				}
			},
			"advance": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(2*openFor)).Draw(rt, "d")))
			},
			"operator": func(rt *rapid.T) {
				switch rapid.IntRange(0, 3).Draw(rt, "action") {
				case 0:
					b.Override(breaker.ForcedOpen)
				case 1:
					operatorClose = true
					b.Override(breaker.ForcedClosed)
				case 2:
					operatorClose = true
					b.Override(breaker.Disabled)
				case 3:
					operatorClose = true
					b.Reset()
				}
			},
			"": func(rt *rapid.T) {
				if b.State(now) != breaker.HalfOpen {
					return
				}
				out := 0
				for _, h := range held {
					if h.p.Probe() && h.events == len(events) && now.Sub(h.at) < lease {
						out++
					}
				}
				if out > probes {
					rt.Fatalf("%d probes out with live leases; HalfOpenProbes is %d", out, probes)
				}
			},
		})
	})
}
