package sim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is simulated time running Speed times faster than real time, and
// pausing while the machine falls behind.
//
// Simulated time advances by Speed simulated seconds per real second. Every
// duration the simulation asks for (a backoff, a Retry-After, the partner's
// service time) is slept in simulated time, that is for d/Speed of real time,
// and everything that reads the time (budget windows, breaker open
// durations, the partner's per-second capacity) reads Now, so the whole
// simulation agrees on one time line.
//
// Real work does not scale: an HTTP round trip on loopback, a goroutine
// waiting for a CPU, a DynamoDB call all take Speed times longer in
// simulated terms than they do in real life. To keep that from distorting
// the results when the machine is busy, the simulation reports the work
// that is in transit (requests and responses on the wire, calls started but
// not yet sent) through Busy, and the clock stops while more than High units
// are in transit, and starts again once they are down to Low. While it is
// stopped, Now does not move and sleeps do not end, so no new call starts
// and no retry fires until the backlog has drained. A watchdog (Run)
// restarts a clock that stayed stopped for maxPause of real time.
//
// The driver that starts new calls holds a horizon (SetHorizon) a little
// ahead of the next call it has to start: when it falls behind, simulated
// time waits for it instead of running ahead of the calls.
//
// Whole-process stalls (the process is not scheduled, a busy machine) are
// handled by stepping: Run moves the clock's base forward every Tick, and
// Now never advances more than MaxStep of real time (times Speed) past the
// base. When nothing in the process runs for a while, neither does
// simulated time; the real time skipped is reported by Stats.
//
// Clock implements the retry.Clock interface (Now and Sleep). It is safe
// for concurrent use; Now takes no lock.
type Clock struct {
	epoch time.Time
	speed float64
	// wall reads real time: time.Now, or a manual clock in tests.
	wall func() time.Time

	state atomic.Pointer[clockState]
	busy  atomic.Int64 // units of work in transit
	high  int64        // stop when busy > high (0: never stop)
	low   int64        // restart when busy <= low
	// maxStep caps the real time Now counts past the base (0: no cap);
	// Run moves the base forward every tick.
	maxStep time.Duration
	// horizon, if not zero, is 1 + the simulated time (since epoch) Now
	// never passes: the driver's pace (see SetHorizon).
	horizon atomic.Int64

	// Sleeps that ended: all, those that ended more than LateAfter past
	// their target (the goroutine ran late), and the largest overshoot.
	sleeps, lateSleeps, maxOvershoot, overshoot atomic.Int64

	mu      sync.Mutex    // serialises stops and restarts; guards the fields below
	paused  time.Duration // real time spent stopped, finished stops only
	stops   int
	forced  int           // stops ended by the watchdog
	skipped time.Duration // real time not counted because of maxStep
}

// clockState is immutable once published.
type clockState struct {
	sim     time.Time     // simulated time at real
	real    time.Time     // real time (with a monotonic reading) of the last stop or restart
	stopped bool          // Now is sim while stopped
	resumed chan struct{} // closed when a stopped clock restarts
}

// NewClock returns a running clock at epoch, speed times faster than real
// time, that never stops (see SetBackpressure).
func NewClock(epoch time.Time, speed float64) (*Clock, error) {
	return newClockWall(epoch, speed, time.Now)
}

// newClockWall is NewClock reading real time from wall (tests pass a
// manual one; sleeps and Run still use the runtime's timers).
func newClockWall(epoch time.Time, speed float64, wall func() time.Time) (*Clock, error) {
	if !(speed > 0) || speed > 1e6 {
		return nil, fmt.Errorf("sim: speed %v must be > 0 and at most 1e6", speed)
	}
	c := &Clock{epoch: epoch, speed: speed, wall: wall}
	c.state.Store(&clockState{sim: epoch, real: wall()})
	return c, nil
}

// SetBackpressure makes the clock stop while more than high units of work
// are in transit, until they are down to low. Call it before the clock is
// shared. high 0 turns it off.
func (c *Clock) SetBackpressure(high, low int64) {
	c.high, c.low = high, min(low, high)
}

// SetMaxStep caps the real time Now counts past the last step at max; Run
// must then be running to step the clock. Call it before the clock is
// shared. 0 turns the cap off.
func (c *Clock) SetMaxStep(max time.Duration) { c.maxStep = max }

// Epoch returns the simulated time the clock started at.
func (c *Clock) Epoch() time.Time { return c.epoch }

// Speed returns how many simulated seconds pass per real second while the
// clock runs.
func (c *Clock) Speed() float64 { return c.speed }

// Now returns the simulated time.
func (c *Clock) Now() time.Time { return c.now(c.state.Load()) }

func (c *Clock) now(st *clockState) time.Time {
	if st.stopped {
		return st.sim
	}
	el := c.wall().Sub(st.real)
	if c.maxStep > 0 && el > c.maxStep {
		el = c.maxStep
	}
	t := st.sim.Add(time.Duration(float64(el) * c.speed))
	if h := c.horizon.Load(); h != 0 {
		if ht := c.epoch.Add(time.Duration(h - 1)); t.After(ht) {
			return ht
		}
	}
	return t
}

// SetHorizon keeps Now from passing t until the horizon is moved on or
// cleared. A horizon is never set behind what Now may already have
// returned: the first one, or one lower than the last, is raised to at
// least a millisecond past Now, so that time never goes back. Horizons are
// meant to move forward, from one goroutine.
func (c *Clock) SetHorizon(t time.Time) {
	if h := c.horizon.Load(); h == 0 || t.Before(c.epoch.Add(time.Duration(h-1))) {
		if floor := c.Now().Add(time.Millisecond); t.Before(floor) {
			t = floor
		}
	}
	c.horizon.Store(int64(t.Sub(c.epoch)) + 1)
}

// ClearHorizon lets the clock run freely.
func (c *Clock) ClearHorizon() { c.horizon.Store(0) }

// Elapsed returns the simulated time since the epoch.
func (c *Clock) Elapsed() time.Duration { return c.Now().Sub(c.epoch) }

// Real converts a simulated duration into the real duration it takes while
// the clock runs.
func (c *Clock) Real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.speed)
}

// Sleep waits until d of simulated time has passed, or until ctx ends. It
// returns ctx.Err() when ctx ended first (even for d <= 0), else nil.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	target := c.Now().Add(d)
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		st := c.state.Load()
		if st.stopped {
			select {
			case <-st.resumed:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rem := target.Sub(c.now(st))
		if rem <= 0 {
			c.sleepEnded(-rem)
			return ctx.Err()
		}
		if t == nil {
			t = time.NewTimer(c.Real(rem))
		} else {
			t.Reset(c.Real(rem))
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sleepEnded counts a sleep that ended over past its target.
func (c *Clock) sleepEnded(over time.Duration) {
	c.sleeps.Add(1)
	c.overshoot.Add(int64(over))
	if over > LateAfter {
		c.lateSleeps.Add(1)
	}
	for {
		m := c.maxOvershoot.Load()
		if int64(over) <= m || c.maxOvershoot.CompareAndSwap(m, int64(over)) {
			return
		}
	}
}

// SleepUntil waits until the simulated time is at least at, or ctx ends.
func (c *Clock) SleepUntil(ctx context.Context, at time.Time) error {
	return c.Sleep(ctx, at.Sub(c.Now()))
}

// Busy adds delta units of work in transit (negative when work is done).
// Every Busy(+1) must be matched by a Busy(-1).
func (c *Clock) Busy(delta int64) {
	n := c.busy.Add(delta)
	if c.high == 0 {
		return
	}
	if stopped := c.state.Load().stopped; !stopped && n > c.high || stopped && n <= c.low {
		c.adjust(false)
	}
}

// InTransit returns the units of work in transit.
func (c *Clock) InTransit() int64 { return c.busy.Load() }

// adjust stops or restarts the clock as the work in transit requires; with
// force it restarts a stopped clock whatever the work.
func (c *Clock) adjust(force bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state.Load()
	n := c.busy.Load()
	switch {
	case !st.stopped && n > c.high && !force:
		stopped := &clockState{sim: c.now(st), real: c.wall(), stopped: true, resumed: make(chan struct{})}
		c.state.Store(stopped)
		// A Busy(-1) that read the state before this Store has already
		// subtracted (it adds before it reads), so this load sees it: if
		// the work drained meanwhile, nobody else will restart the clock.
		if c.busy.Load() <= c.low {
			c.state.Store(&clockState{sim: stopped.sim, real: c.wall()})
			close(stopped.resumed)
			return
		}
		c.stops++
	case st.stopped && (n <= c.low || force):
		now := c.wall()
		c.paused += now.Sub(st.real)
		if force {
			c.forced++
		}
		c.state.Store(&clockState{sim: st.sim, real: now})
		close(st.resumed)
	}
}

// Run steps the clock every tick (see SetMaxStep) and restarts it
// whenever it has been stopped for maxPause of real time, until ctx ends.
// The watchdog guards against work that never reports itself done.
func (c *Clock) Run(ctx context.Context, tick, maxPause time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := c.state.Load()
		if st.stopped {
			if c.wall().Sub(st.real) >= maxPause {
				c.adjust(true)
			}
			continue
		}
		c.mu.Lock()
		if st = c.state.Load(); !st.stopped {
			now := c.wall()
			if el := now.Sub(st.real); c.maxStep > 0 && el > c.maxStep {
				c.skipped += el - c.maxStep
			}
			c.state.Store(&clockState{sim: c.now(st), real: now})
		}
		c.mu.Unlock()
	}
}

// ClockStats tell how simulated time ran.
type ClockStats struct {
	// EffectiveSpeed is simulated time per real time over the measured
	// interval, stops and skips included (set by the caller).
	EffectiveSpeed float64 `json:"effective_speed"`
	// Paused is the real time the clock stood still waiting for work in
	// transit to drain; Stops counts the stops, Forced those the watchdog
	// ended (a sign of lost accounting; should be 0).
	Paused Duration `json:"paused_seconds"`
	Stops  int      `json:"stops"`
	Forced int      `json:"forced_restarts"`
	// Skipped is real time not counted as simulated time because the
	// process did not run (see SetMaxStep).
	Skipped Duration `json:"skipped_seconds"`
	// Sleeps counts the sleeps that ended (backoffs, Retry-After waits,
	// the partner's service time), LateSleeps those that ended more than
	// LateAfter of simulated time past their target because their
	// goroutine ran late, and MaxOvershoot is the latest one.
	Sleeps       int64    `json:"sleeps,omitempty"`
	LateSleeps   int64    `json:"late_sleeps,omitempty"`
	MaxOvershoot Duration `json:"max_sleep_overshoot_seconds,omitempty"`
	// MeanOvershoot is the mean of how late sleeps ended.
	MeanOvershoot Duration `json:"mean_sleep_overshoot_seconds,omitempty"`
}

// Stats returns the clock's stops and skips so far.
func (c *Clock) Stats() ClockStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	paused := c.paused
	if st := c.state.Load(); st.stopped {
		paused += c.wall().Sub(st.real)
	}
	return ClockStats{Paused: Duration(paused), Stops: c.stops, Forced: c.forced, Skipped: Duration(c.skipped),
		Sleeps: c.sleeps.Load(), LateSleeps: c.lateSleeps.Load(), MaxOvershoot: Duration(c.maxOvershoot.Load()),
		MeanOvershoot: Duration(c.overshoot.Load() / max(c.sleeps.Load(), 1))}
}
