//go:build !race

package integration

import "time"

// Bounds of the reliability tests without the race detector: what
// README's "Reliability" section promises. reliability_race_test.go widens
// them for a race-instrumented binary. Each test prints the bound it
// applied beside what it measured.
const (
	// relRaceEnabled reports whether the race detector is on.
	relRaceEnabled = false
	// relOverrunBound is how long past its context's deadline an Executor
	// call may return, whatever DynamoDB does: the time to notice the
	// deadline and unwind on a busy two-core machine. herdguard itself
	// never waits past a deadline: every store call runs under the
	// caller's context.
	relOverrunBound = 50 * time.Millisecond
	// relResumeTolerance is the scheduling tolerance added to CacheTTL
	// (or FaultCooldown) for the first store request a layer attempts
	// after DynamoDB returns: the test asks each layer every
	// relProbeInterval (5 ms), and a goroutine of a busy two-core machine
	// may wait tens of milliseconds for a CPU.
	relResumeTolerance = 100 * time.Millisecond
)
