// Package knobs holds the settings of library types that tests and the
// simulators change and users do not: each is a function the package that
// owns the type installs at initialisation, and nothing else writes.
package knobs

import "time"

// BreakerReportInterval sets, in a *breaker.Settings, the shortest time
// between two reports of a breaker's sampled fleet counts (1 s when not
// set).
var BreakerReportInterval func(settings any, d time.Duration)

// GlobalConfig returns the budget.GlobalConfig a *budget.Global runs with,
// defaults filled in, for the simulators' bound (Ratio × requests +
// Floor).
var GlobalConfig func(global any) any
