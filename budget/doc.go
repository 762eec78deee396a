// Package budget defines herdguard's retry-budget contract: the question
// "may I retry once more?" that the retry loop asks before every retry, and
// the typed error returned when the answer is no. A retry.Executor asks its
// budgets in order (an in-memory one per process, then a fleet-wide one in
// DynamoDB), and a retry goes only if every one grants it.
//
// A Budget is told about every logical call (RecordRequest), about every
// call that succeeded on its first attempt (RecordSuccess), and is asked for
// permission before every retry (AcquireRetry). A grant comes with a Release
// that the caller invokes exactly once with the retry's Outcome, so that a
// budget can refund the cost of a retry that succeeded, or the whole grant
// when the retry never ran.
//
// Times are passed in explicitly, in the style of golang.org/x/time/rate's
// AllowN(now, n): the caller (usually a retry.Executor) owns the clock, so
// tests and simulations drive every layer from one injected clock.
//
// This package holds no backend of its own except Global, the fleet-wide
// ratio algorithm, which runs over a Store. Package local provides in-memory
// budgets and an in-memory Store; package dynamo provides a DynamoDB Store.
// Package budgettest is the conformance suite every Store must pass.
// ExampleGlobal runs a fleet-wide budget over an in-memory Store, and
// ExampleGlobal_layered puts it behind a local one. docs/ARCHITECTURE.md
// ("Fleet-wide retry ratio (budget.Global)") describes Global's algorithm
// and proves its bound.
package budget
