package sim

import (
	"time"

	"github.com/herdguard/herdguard/internal/fakeclock"
)

// manualClock is a TimeSource for tests: Sleep advances it at once.
type manualClock = fakeclock.Clock

func newManualClock() *manualClock { return fakeclock.New(testStart) }

// slept returns the positive waits c was asked for.
func slept(c *manualClock) []time.Duration {
	var out []time.Duration
	for _, d := range c.Sleeps() {
		if d > 0 {
			out = append(out, d)
		}
	}
	return out
}
