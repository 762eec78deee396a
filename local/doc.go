// Package local holds herdguard's in-memory backends: two retry budgets for
// one process (one Lambda execution environment) and in-memory versions of
// the stores through which budgets and breakers are shared.
//
// # Budgets
//
// TokenBucket is the AWS SDK's retry quota in standard mode with the 2026
// retry behaviour: 500 tokens, a retry after a transient failure costs 14,
// one after throttling 5, a first-attempt success puts 1 back and a
// successful retry gets its own cost back. An empty bucket refuses. It
// recovers through successes only.
//
// Ratio is the Google SRE book's and Envoy's budget: retries may be at most
// 10% of the requests of the last 10 seconds (in 10 slots), with a floor of
// 3 retries per window so that quiet clients can still retry. It recovers
// through time and traffic. A retry.Executor with no Config.Budgets uses
// one with these defaults; NewRatio is for other settings.
//
// Both implement budget.Budget, take the time from their caller (in the
// style of golang.org/x/time/rate's AllowN), are safe for concurrent use,
// and do not allocate on the path every call takes (RecordRequest,
// RecordSuccess) nor when they grant a retry. A refusal is a
// *budget.ExhaustedError naming the layer ("local-token-bucket",
// "local-ratio"); the Ratio's carries a RetryAfter hint.
//
// Configuration structs follow one rule: the zero value of a field selects
// its default, and constructors return a *herdguard.ConfigError naming the
// field that is out of range.
//
// # Stores
//
// BudgetStore implements budget.Store and BreakerStore implements
// breaker.Store in memory. They give the answers the DynamoDB stores give
// (both pass budget/budgettest and breaker/breakertest), which makes them
// the reference for tests and simulations, and the right choice when a
// "fleet" is several Breakers or Global budgets inside one process. Both
// reject the names budget.NewGlobal and breaker.New reject, honour ctx, and
// count their calls (Stats).
//
// ExampleTokenBucket, ExampleRatio, ExampleBudgetStore and
// ExampleBreakerStore are runnable. See "Local layers (package local)" in
// docs/ARCHITECTURE.md for the budgets' and the stores' design.
package local
