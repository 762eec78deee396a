// Package herdguard keeps retries from knocking over the partners a service
// or a fleet of AWS Lambda functions calls: a retry budget per process, a
// fleet-wide retry ratio and a circuit breaker shared through DynamoDB, and
// the retry loop that puts them in front of every call.
//
// The packages, by what a caller touches:
//
//   - one partner in one process: retry.New(retry.Config{}) (a local retry
//     budget by default) and retry.NewTransport, or Executor.Do; add a
//     breaker.New for a circuit breaker;
//   - a fleet on DynamoDB, such as Lambda functions: fleet.New, which builds
//     the Executor over one table (local and fleet-wide budgets, shared
//     breaker), and Executor.Flush before each invocation returns;
//   - calls made with the AWS SDK for Go v2: awsretry.New over the
//     partner's Executor.
//
// This package holds the one error type every constructor of the library
// returns for bad input, ConfigError (see ExampleConfigError). The
// packages' Examples (retry's ExampleNewTransport, fleet's
// ExampleNewWithStores, ...) are the runnable starting points, and
// docs/ARCHITECTURE.md is the design.
package herdguard

// ConfigError is a setting or argument a herdguard constructor rejected.
// Every constructor of the library (retry.New, breaker.New,
// budget.NewGlobal, local.NewRatio, dynamo.NewBudgetStore, fleet.New, ...)
// returns one for bad input:
//
//	var ce *herdguard.ConfigError
//	if errors.As(err, &ce) { /* ce.Field, ce.Reason */ }
type ConfigError struct {
	// Field names what was rejected, qualified by its package and type,
	// such as "breaker.Settings.FailureRatio" or "retry.Config.Budgets[1]",
	// or by the constructor for an argument, such as "budget.NewGlobal
	// name".
	Field string
	// Reason says what is wrong with it and what is wanted.
	Reason string
}

// Error returns "herdguard: <Field> <Reason>".
func (e *ConfigError) Error() string { return "herdguard: " + e.Field + " " + e.Reason }
