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
//
// An Executor given SystemClock reads time.Now() when a call starts and
// after each wait, and times an attempt with the monotonic clock from
// there (time.Since): a healthy call reads the wall clock once. Every time
// it hands to the budgets and the breaker is therefore read fresh: across
// a Lambda freeze or a SnapStart restore, an earlier reading plus the
// monotonic time elapsed could be off.
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
