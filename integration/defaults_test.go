package integration

import "time"

// Library defaults the tests reason with, as the packages document them.
const (
	defaultCacheTTL      = time.Second // breaker.Settings.CacheTTL
	defaultFaultCooldown = time.Second // budget.GlobalConfig.FaultCooldown
	defaultGlobalFloor   = 3           // budget.GlobalConfig.Floor
	defaultGlobalRatio   = 0.1         // budget.GlobalConfig.Ratio
	defaultGlobalWindow  = 10 * time.Second
)
