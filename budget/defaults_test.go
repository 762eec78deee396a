package budget_test

import "time"

// The defaults and limits of budget.GlobalConfig, as its documentation
// states them.
const (
	defaultGlobalRatio      = 0.1
	defaultGlobalWindow     = 10 * time.Second
	defaultGlobalFloor      = 3
	defaultGlobalShards     = 0 // the spread sizes itself
	defaultLeaseSize        = 1
	defaultDepositIntervals = 4 // DepositInterval = Window / 4
	defaultStoreTimeout     = 50 * time.Millisecond
	defaultFaultCooldown    = time.Second
	maxGlobalFloor          = 1_000_000
	maxGlobalShards         = 1000
	maxLeaseSize            = 1000
)
