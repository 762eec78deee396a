package fleetsim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/herdguard/herdguard/retry"
)

// DefaultLatency is the partner's default service time per attempt.
const DefaultLatency = 20 * time.Millisecond

// DefaultRetryAfter is the Retry-After the partner sends with a rejection
// past its capacity (as cmd/outagesim's partner does).
const DefaultRetryAfter = time.Second

// Partner is the in-process partner API every environment calls. Each
// attempt takes Latency of simulated time and then succeeds or fails as the
// phase in force when it arrived says.
type Partner struct {
	// Phases is the partner's behaviour over time, in increasing From
	// order. Before the first phase, and with no phases, the partner is
	// healthy.
	Phases []Phase
	// Latency is the service time of every attempt, slept in simulated
	// time (0: DefaultLatency; negative: none).
	Latency time.Duration
	// RetryAfter is sent with every rejection past Capacity, which is a
	// 503 (a throttling failure for the retry loop); 0: DefaultRetryAfter;
	// negative: none (the 503 is then a transient failure).
	RetryAfter time.Duration
}

// Phase is how the partner behaves from From (since the start of the run)
// until the next phase.
type Phase struct {
	From time.Duration
	// FailureRatio is the probability that an attempt fails with a 500,
	// drawn per attempt from the run's seed, in [0, 1].
	FailureRatio float64
	// Capacity, if positive, is the number of attempts served per
	// simulated second, first come first served; later arrivals in that
	// second are rejected with 503 and Retry-After. 0: no limit.
	Capacity int
	// Slot, if positive, spreads Capacity over slots of this length, at
	// most a second: Capacity × Slot / 1 s attempts (rounded; at least
	// one) are served per slot, first come first served, and later
	// arrivals in that slot rejected as above: a smoother limit than a
	// whole second's, which turns calls away when they bunch up within a
	// second that stays under Capacity. 0: a second.
	Slot time.Duration
}

// Healthy reports whether the phase fails nothing by itself: no failure
// probability and no capacity limit.
func (p Phase) Healthy() bool { return p.FailureRatio == 0 && p.Capacity == 0 }

// Failing returns a partner that fails a random share ratio of attempts
// from from to to (to <= from: until the end of the run) and is healthy
// before and after.
func Failing(ratio float64, from, to time.Duration) Partner {
	ph := []Phase{{From: from, FailureRatio: ratio}}
	if to > from {
		ph = append(ph, Phase{From: to})
	}
	return Partner{Phases: ph}
}

// Limited returns a partner that serves normal attempts per second, and
// outage attempts per second from from to to (to <= from: until the end of
// the run), as cmd/outagesim's partner does.
func Limited(normal, outage int, from, to time.Duration) Partner {
	ph := []Phase{{Capacity: normal}, {From: from, Capacity: outage}}
	if to > from {
		ph = append(ph, Phase{From: to, Capacity: normal})
	}
	return Partner{Phases: ph}
}

func (p Partner) validate() error {
	for i, ph := range p.Phases {
		switch {
		case math.IsNaN(ph.FailureRatio) || ph.FailureRatio < 0 || ph.FailureRatio > 1:
			return fmt.Errorf("Partner.Phases[%d].FailureRatio is %v; want a probability in [0, 1]", i, ph.FailureRatio)
		case ph.Capacity < 0:
			return fmt.Errorf("Partner.Phases[%d].Capacity is %d; want at least 0 (0: no limit)", i, ph.Capacity)
		case ph.Slot < 0 || ph.Slot > time.Second:
			return fmt.Errorf("Partner.Phases[%d].Slot is %v; want 0 (a second) up to a second", i, ph.Slot)
		case ph.Slot > 0 && ph.Capacity > 0 && math.Round(float64(ph.Capacity)*ph.Slot.Seconds()) < 1:
			return fmt.Errorf("Partner.Phases[%d]: Capacity × Slot (%d/s × %v) is under one attempt per slot", i, ph.Capacity, ph.Slot)
		case ph.From < 0:
			return fmt.Errorf("Partner.Phases[%d].From is %v; want at least 0", i, ph.From)
		case i > 0 && ph.From < p.Phases[i-1].From:
			return fmt.Errorf("Partner.Phases[%d].From (%v) is before Phases[%d].From (%v)", i, ph.From, i-1, p.Phases[i-1].From)
		}
	}
	return nil
}

// phaseAt returns the phase in force at elapsed time t.
func (p Partner) phaseAt(t time.Duration) Phase {
	var cur Phase
	for _, ph := range p.Phases {
		if ph.From > t {
			break
		}
		cur = ph
	}
	return cur
}

// healthyDuring reports whether the partner is healthy throughout [from,
// to).
func (p Partner) healthyDuring(from, to time.Duration) bool {
	if !p.phaseAt(from).Healthy() {
		return false
	}
	for _, ph := range p.Phases {
		if ph.From > from && ph.From < to && !ph.Healthy() {
			return false
		}
	}
	return true
}

// HealAt returns when the partner healed for good: the start of the last
// phase if that phase is healthy and an earlier one was not, else -1 (it
// never failed, or it is failing at the end).
func (p Partner) HealAt() time.Duration {
	n := len(p.Phases)
	if n == 0 || !p.Phases[n-1].Healthy() {
		return Never
	}
	for _, ph := range p.Phases[:n-1] {
		if !ph.Healthy() {
			return p.Phases[n-1].From
		}
	}
	return Never
}

// Errors the partner answers with. They are shared and never modified.
var (
	errFailed = &retry.StatusError{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error"}
)

// partner is a Partner during a run.
type partner struct {
	cfg        Partner
	latency    time.Duration
	rejected   error // the 503 past capacity
	rng        *rand.Rand
	clock      *Clock
	rec        *recorder
	slotLen    time.Duration // the length of the capacity's slots (a second unless Phase.Slot)
	slotOf     int64         // the number of the slot whose arrivals inSlot counts
	inSlot     int           // arrivals in that slot
	healAt     time.Duration
	phaseIndex int // index of the phase in force, moving forward only
}

func newPartner(cfg Partner, seed uint64, clock *Clock, rec *recorder) *partner {
	p := &partner{cfg: cfg, latency: cfg.Latency, rng: rand.New(rand.NewPCG(seed, streamPartner)),
		clock: clock, rec: rec, slotOf: -1, healAt: cfg.HealAt(), phaseIndex: -1}
	if p.latency == 0 {
		p.latency = DefaultLatency
	}
	ra := cfg.RetryAfter
	if ra == 0 {
		ra = DefaultRetryAfter
	}
	se := &retry.StatusError{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable"}
	if ra > 0 {
		se.RetryAfter = ra
	}
	p.rejected = se
	return p
}

// phase returns the phase in force at elapsed time t, which never goes
// back.
func (p *partner) phase(t time.Duration) Phase {
	for p.phaseIndex+1 < len(p.cfg.Phases) && p.cfg.Phases[p.phaseIndex+1].From <= t {
		p.phaseIndex++
	}
	if p.phaseIndex < 0 {
		return Phase{}
	}
	return p.cfg.Phases[p.phaseIndex]
}

// attempt is one attempt of e's call: decided when it arrives, answered
// after the latency.
func (p *partner) attempt(ctx context.Context, e *env, n int) error {
	t := p.clock.Elapsed()
	ph := p.phase(t)
	var err error
	if ph.Capacity > 0 {
		slot, limit := time.Second, ph.Capacity
		if ph.Slot > 0 {
			slot = ph.Slot
			limit = int(math.Round(float64(ph.Capacity) * slot.Seconds()))
		}
		if n := int64(t / slot); n != p.slotOf || slot != p.slotLen {
			p.slotLen, p.slotOf, p.inSlot = slot, n, 0
		}
		p.inSlot++
		if p.inSlot > limit {
			err = p.rejected
		}
	}
	if err == nil && ph.FailureRatio > 0 && (ph.FailureRatio >= 1 || p.rng.Float64() < ph.FailureRatio) {
		err = errFailed
	}
	p.rec.attempt(e, t, n == 1, err != nil, p.healAt)
	if p.latency > 0 {
		if serr := p.clock.Sleep(ctx, p.latency); serr != nil {
			return serr
		}
	}
	return err
}
