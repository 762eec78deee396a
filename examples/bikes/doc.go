// Command bikes is the bike-rental function from the retry-budget article,
// in Go, ready to deploy with the top-level template.yaml (AWS SAM,
// provided.al2023 on arm64): behind an HTTP API, GET
// /stations/{stationId}/bikes asks a partner how many bikes a station has,
// through herdguard, with package herdlambda doing the Lambda side.
//
// herdlambda builds the partner's Executor once per execution environment
// (an in-memory ratio budget with a small floor, the fleet-wide ratio
// budget in DynamoDB and the breaker whose state the same table shares),
// flushes its counts and the metrics before each invocation returns, and
// answers a refusal with 503 and a Retry-After.
//
// Answers: the partner's own answer below 500 (200 with its JSON, 404 for a
// station it does not know); 503 with Retry-After when the breaker is open
// or the retry budget exhausted (the JSON body's reason says which:
// breaker-open, budget-exhausted); 502 for a 5xx of the partner. A partner
// that cannot be reached fails the invocation.
//
// Each invocation that retried, was refused or saw the breaker change ends
// with one CloudWatch Embedded Metric Format line on stdout (namespace
// Herdguard, dimensions FunctionName and Partner); template.yaml puts alarms
// on them. Log records (JSON on stderr) carry requestId and coldStart.
//
// Configuration: PARTNER_URL (the partner's base URL) and herdlambda's
// HERDGUARD_* variables, of which HERDGUARD_NAME and HERDGUARD_TABLE are
// required; template.yaml sets them.
package main
