// Package fakeclock is the one hand-written clock of the tests that cannot
// run in a testing/synctest bubble (real DynamoDB or HTTP calls beside
// simulated time): a retry.Clock whose time moves only when Sleep or
// Advance moves it. Tests that can, use synctest instead.
package fakeclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a retry.Clock whose time moves only when Sleep or Advance moves
// it. It is safe for concurrent use.
type Clock struct {
	// OnSleep, if set, runs at the start of every Sleep (to cancel a
	// context mid-wait, for instance). Set it before the clock is shared.
	OnSleep func()

	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// New returns a clock at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep returns ctx.Err() if ctx has ended; otherwise it records d and
// moves the clock by it (a negative d moves nothing), at once.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if c.OnSleep != nil {
		c.OnSleep()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(max(d, 0))
	return nil
}

// Advance moves the clock by d (a negative d moves nothing).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(max(d, 0))
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Sleeps returns the waits Sleep was asked for, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}
