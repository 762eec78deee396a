// Package breakertest is the conformance suite for breaker.Store
// implementations, importable from any test in the style of net/http/httptest:
//
//	func TestStore(t *testing.T) {
//		breakertest.Run(t, func(t *testing.T) breaker.Store { return newMyStore(t) })
//	}
//
// The suite is written for slow, remote stores as well as in-memory ones:
// every call gets its own generous timeout (CallTimeout), concurrency is
// modest, it never sleeps (times are passed to the store explicitly), and
// every subtest uses breaker names unique to the run, so stores that share
// one table across subtests and runs are fine. Times are compared to the
// millisecond, the precision of the DynamoDB item layout.
package breakertest
