package retry

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/internal/sleep"
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

// systemClock is the real clock: time.Now and a timer, the default of
// Config.Clock.
//
// An Executor on the system clock reads time.Now() when a call starts and
// after each wait, and times an attempt with the monotonic clock from
// there (time.Since): a healthy call reads the wall clock once. Every time
// it hands to the budgets and the breaker is therefore read fresh: across
// a Lambda freeze or a SnapStart restore, an earlier reading plus the
// monotonic time elapsed could be off.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// Sleep waits on a timer and on ctx.Done(), whichever fires first, and
// stops the timer when ctx wins.
func (systemClock) Sleep(ctx context.Context, d time.Duration) error { return sleep.For(ctx, d) }
