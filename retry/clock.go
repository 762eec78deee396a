package retry

import (
	"context"
	"sync/atomic"
	"time"
)

// Clock is the executor's source of time. Every layer (budgets, breaker,
// deadline checks) is driven from it, so a test or a simulation injects one
// clock and controls them all.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx ends, whichever comes first. It
	// returns ctx.Err() when ctx ended first (even for d <= 0), else nil.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the real clock: time.Now and a timer. Its zero value is
// ready to use, and it is the default of Config.Clock.
//
// An Executor given SystemClock reads it at the cost of one monotonic
// clock read per timestamp instead of time.Now's two clock reads: it
// adds the monotonic time elapsed to an earlier time.Now reading, which
// gives time.Now's result (to within a millisecond, monotonic reading
// included) because the wall clock advances with the monotonic one. The
// wall clock itself is read at least every 100 ms, so a step of it (set by
// hand or by NTP) reaches the executor at most 100 ms late. A healthy call
// reads the clock twice, when the attempt starts and when it ends.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits on a timer and on ctx.Done(), whichever fires first, and
// stops the timer when ctx wins.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reading the system clock for SystemClock executors. time.Now reads two
// clocks, the wall clock and the monotonic one; the executor needs a wall
// time (budgets and breakers count calls in slots of Unix time, and a
// shared breaker compares times with other processes) but can have it for
// the price of a monotonic read alone, because the two clocks advance at
// the same rate: an NTP slew adjusts both, and only a step (the clock set
// by hand or by NTP, a leap second) moves one against the other.
const (
	// wallCheckInterval is the longest a sysClock goes without reading
	// the wall clock: a step of the wall clock is seen at most this late.
	wallCheckInterval = 100 * time.Millisecond
	// wallStepTolerance is the largest difference between the two clocks'
	// advance since the base that is not taken for a step. It is far above
	// the jitter of reading the two clocks one after the other and far
	// below the resolution of anything the executor times (slots of
	// budgets and breakers, backoff waits).
	wallStepTolerance = time.Millisecond
)

// sysClock is the executor's reading of the system clock: a time is a
// time.Now() reading taken earlier (the base) plus the monotonic time
// elapsed since, one monotonic clock read. Such a time is time.Now() up to
// wallStepTolerance, monotonic reading included, except for a step of the
// wall clock not yet seen: at least every wallCheckInterval the clock reads
// time.Now(), returns it, and takes it as the new base if the wall clock
// stepped. Only a new base allocates (a few bytes per wall-clock step).
//
// Inside a testing/synctest bubble time.Now() is the bubble's fake time,
// without a monotonic reading; a base of the other kind is replaced at the
// next read, so the clock follows the bubble's time in and the real time
// out.
type sysClock struct {
	base atomic.Pointer[clockBase]
}

// clockBase is one base of a sysClock. It fills a cache line of its own:
// every call reads it, and check is written at most every
// wallCheckInterval.
type clockBase struct {
	t time.Time // immutable
	// check is the monotonic time since t after which the wall clock is
	// read again.
	check atomic.Int64
	_     [64 - 24 - 8]byte
}

func newSysClock() *sysClock {
	c := new(sysClock)
	b := &clockBase{t: time.Now()}
	b.check.Store(int64(wallCheckInterval))
	c.base.Store(b)
	return c
}

// now returns the current time.
func (c *sysClock) now() time.Time {
	b := c.base.Load()
	if d := time.Since(b.t); d >= 0 && d < time.Duration(b.check.Load()) {
		return b.t.Add(d)
	}
	return c.resync(b)
}

// resync reads time.Now(), makes it the new base if the wall clock has
// stepped since the base b (or the kind of time changed), and returns it.
func (c *sysClock) resync(b *clockBase) time.Time {
	t := time.Now()
	elapsed := t.Sub(b.t) // monotonic when both have a monotonic reading
	wall := time.Duration(t.UnixNano() - b.t.UnixNano())
	if !wallSteady(elapsed, wall) || hasMonotonic(t) != hasMonotonic(b.t) {
		nb := &clockBase{t: t}
		nb.check.Store(int64(wallCheckInterval))
		c.base.Store(nb)
		return t
	}
	if next := elapsed + wallCheckInterval; next > time.Duration(b.check.Load()) {
		b.check.Store(int64(next))
	}
	return t
}

// wallSteady reports whether the wall clock advanced like the monotonic
// clock (up to wallStepTolerance) over a period in which they advanced by
// wall and elapsed, and the period went forward.
func wallSteady(elapsed, wall time.Duration) bool {
	drift := wall - elapsed
	return elapsed >= 0 && drift <= wallStepTolerance && drift >= -wallStepTolerance
}

// hasMonotonic reports whether t carries a monotonic clock reading (Round(0)
// strips it, and it is the only field it changes).
func hasMonotonic(t time.Time) bool { return t != t.Round(0) }
