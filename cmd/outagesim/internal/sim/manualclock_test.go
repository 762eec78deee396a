package sim

import (
	"context"
	"sync"
	"time"
)

// manualClock is a TimeSource for tests: Sleep advances it at once.
type manualClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newManualClock() *manualClock { return &manualClock{now: testStart} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
		c.slept = append(c.slept, d)
	}
	return nil
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *manualClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}
