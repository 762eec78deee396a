//go:build race

package ratio_test

// raceEnabled is true when the race detector is on: it makes sync.Pool drop
// items at random, so allocation counts are not meaningful.
const raceEnabled = true
