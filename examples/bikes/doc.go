// Command bikes is the bike-rental function from the retry-budget article,
// in Go, ready to deploy with the top-level template.yaml (AWS SAM,
// provided.al2023 on arm64): behind an HTTP API, GET
// /stations/{stationId}/bikes asks a partner how many bikes a station has,
// through a herdguard Executor.
//
// The Executor lives at package level, built once per execution environment,
// so that its budgets and breaker count across invocations. It layers an
// in-memory ratio budget with a small floor, the fleet-wide ratio budget in
// DynamoDB, and the circuit breaker whose state is shared through the same
// table.
//
// Answers: 200 with the partner's JSON; 400 for a missing or malformed
// station id; 404 when the partner does not know the station; 503 with
// Retry-After when the breaker is open, the retry budget is exhausted or the
// partner itself asked to come back later; 502 for every other partner
// failure. Every attempt has its own timeout (ATTEMPT_TIMEOUT) and the whole
// call ends before the invocation's deadline. Pending counts are flushed to
// DynamoDB before the handler returns, since Lambda may freeze the
// environment afterwards.
//
// Each invocation that retried, was refused or saw the breaker change ends
// with one CloudWatch Embedded Metric Format line on stdout (package emf:
// namespace Herdguard, dimensions FunctionName and Partner; metrics
// Retries, BudgetExhausted, BreakerOpened and the others emf lists);
// template.yaml puts alarms on BudgetExhausted and BreakerOpened. Log
// records (JSON on stderr) carry the invocation's request id, requestId.
//
// Configuration comes from environment variables (see config.go):
// TABLE_NAME and PARTNER_URL are required; DYNAMODB_ENDPOINT points the
// function at DynamoDB Local.
package main
