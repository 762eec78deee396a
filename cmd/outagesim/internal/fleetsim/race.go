//go:build race

package fleetsim

// RaceEnabled reports whether the race detector is on: GridCells then
// returns the reduced grid.
const RaceEnabled = true
