// Package breaker is herdguard's circuit breaker: a state machine (closed,
// open, half-open) that stops calls to a partner that is failing, and the
// Store contract through which a fleet of processes shares one breaker.
//
// A Breaker on its own is in-memory and per process. Given a Store (package
// local for one process, package dynamo for a fleet of AWS Lambda execution
// environments) its state is shared: opening it anywhere blocks first
// attempts everywhere.
package breaker
