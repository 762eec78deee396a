package fleetsim_test

import (
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
)

// The library's defaults, as its constructors fill them in: the Lambda-shaped
// tests judge the defaults, so they read them rather than copy them.
var (
	breakerDefaults = mustBreakerSettings()
	globalDefaults  = mustGlobalConfig()
)

func mustBreakerSettings() breaker.Settings {
	b, err := breaker.New("defaults", breaker.Settings{})
	if err != nil {
		panic(err)
	}
	return b.Settings()
}

func mustGlobalConfig() budget.GlobalConfig {
	g, err := budget.NewGlobal(local.NewBudgetStore(), "defaults", budget.GlobalConfig{})
	if err != nil {
		panic(err)
	}
	return g.Config()
}
