//go:build !race

package ratio_test

const raceEnabled = false
