//go:build race

package budget_test

// raceEnabled is true when the race detector is on: the single-goroutine
// simulations then run fewer seeds (the detector makes them 30 times
// slower and finds nothing in one goroutine that two seeds would add).
const raceEnabled = true
