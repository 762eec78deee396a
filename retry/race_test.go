//go:build race

package retry_test

// raceEnabled is true when the race detector is on: it changes allocation
// counts, so allocation tests skip.
const raceEnabled = true
