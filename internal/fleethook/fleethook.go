// Package fleethook builds fleet.New's stack over stores other than
// DynamoDB's (the in-memory ones of package local), for the tests of code
// that uses fleet.New; package fleet installs Build when it initialises.
package fleethook

import (
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// Build returns what fleet.New returns for the fleet.Config cfg, over the
// given stores, without the table's warm-up read.
var Build func(budgets budget.Store, breakers breaker.Store, name string, cfg any) (*retry.Executor, error)
