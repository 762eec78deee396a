package retry

import (
	"context"
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
