package fleetsim

import "time"

// The scheduler, for a driver of its own: cmd/outagesim's in-process mode
// runs its own fleet and partner on a Clock, so that its figures come from
// the same code as over HTTP, in virtual time.

// NewClock returns a clock at start, with nothing scheduled.
func NewClock(start time.Time) *Clock { return newClock(start) }

// At schedules fn to run in the scheduler at simulated time t (ties in
// scheduling order). fn must not park; it may call At and Go.
func (c *Clock) At(t time.Time, fn func()) { c.at(t.UnixNano(), fn) }

// Go runs f as a simulated goroutine, starting at the current simulated
// time after the events already due then, until it parks in Sleep or ends.
// Call it from the scheduler only (an At callback).
func (c *Clock) Go(f func()) { c.spawn(f) }

// RunUntil processes the events due up to and including simulated time t
// and reports whether events are left. Call it from one goroutine, the
// driver's; it returns when no event up to t is left.
func (c *Clock) RunUntil(t time.Time) bool {
	c.runUntil(t.UnixNano())
	return len(c.q) > 0
}

// Stop ends the run: every parked simulated goroutine is woken with Sleep
// returning an error and runs to its end, the remaining callbacks are
// dropped, and the goroutines of the simulation end. Call it from the
// driver's goroutine, after RunUntil; a second call does nothing.
func (c *Clock) Stop() { c.stop() }

// Events returns the number of events processed so far.
func (c *Clock) Events() int64 { return c.events }
