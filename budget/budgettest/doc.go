// Package budgettest is the conformance suite for budget.Store
// implementations, importable from any test in the style of net/http/httptest:
//
//	func TestStore(t *testing.T) {
//		budgettest.Run(t, func(t *testing.T) budget.Store { return newMyStore(t) })
//	}
//
// The suite is written for slow, remote stores as well as in-memory ones:
// every call gets its own generous timeout (CallTimeout), concurrency is
// modest, it never sleeps, and every subtest uses budget names unique to the
// run, so stores that share one table across subtests and runs are fine.
package budgettest
