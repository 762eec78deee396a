package breaker_test

import "time"

// The defaults of breaker.Settings, as its documentation states them.
const (
	defaultFailureRatio    = 0.5
	defaultMinRequests     = 20
	defaultWindow          = 10 * time.Second
	defaultOpenDuration    = 30 * time.Second
	defaultMaxOpenDuration = 5 * time.Minute
	defaultJitter          = 0.2
	defaultHalfOpenProbes  = 1
	defaultProbeLease      = 10 * time.Second
	defaultCacheTTL        = time.Second
	defaultReportInterval  = time.Second // the shortest time between two reports
)
