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

// Go runs f as a simulated goroutine until it parks in Sleep or ends. Call
// it from the scheduler only (an At callback).
func (c *Clock) Go(f func()) { c.spawn(nil, f) }

// RunUntil processes the events due up to and including simulated time t,
// in the calling goroutine, and reports whether events are left.
func (c *Clock) RunUntil(t time.Time) bool { return c.runUntil(t.UnixNano()) }

// Stop ends the run: every parked simulated goroutine is woken with Sleep
// returning an error, and the remaining callbacks are dropped.
func (c *Clock) Stop() { c.stop() }

// Events returns the number of events processed so far.
func (c *Clock) Events() int64 { return c.events }
