// Package globalcfg reads what a budget.Global runs with, for the tests
// and the simulators: its configuration (defaults filled in) and its
// windows.
package globalcfg

import (
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/knobs"
)

// Of returns the configuration g runs with, defaults filled in.
func Of(g *budget.Global) budget.GlobalConfig {
	return knobs.GlobalConfig(g).(budget.GlobalConfig)
}

// WindowOf returns the start of g's window that now falls in: windows are
// aligned to the Unix epoch.
func WindowOf(g *budget.Global, now time.Time) time.Time {
	w, ms := Of(g).Window.Milliseconds(), now.UnixMilli()
	n := ms / w
	if ms%w < 0 {
		n--
	}
	return time.UnixMilli(n * w)
}
