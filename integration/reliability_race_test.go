//go:build race

package integration

import "time"

// Bounds of the reliability tests under the race detector, which slows
// the code it instruments several times over and, on a busy two-core
// machine, delays goroutines by tens of milliseconds more. Each test
// prints the bound it applied beside what it measured; see
// reliability_norace_test.go for the bounds the README promises.
const (
	// relRaceEnabled reports whether the race detector is on.
	relRaceEnabled = true
	// relOverrunBound is how long past its context's deadline an Executor
	// call may return.
	relOverrunBound = 150 * time.Millisecond
	// relResumeTolerance is the scheduling tolerance added to CacheTTL
	// (or FaultCooldown) for the first store request a layer attempts
	// after DynamoDB returns.
	relResumeTolerance = 250 * time.Millisecond
)
