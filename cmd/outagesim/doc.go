// Command outagesim shows, side by side, what each retry strategy does to a
// partner API during an outage.
//
// It runs a fleet of execution environments, each with its own retry logic,
// against a partner whose capacity per second drops for a while, once per
// strategy (no budget, the AWS SDK's standard retryer, herdguard's local
// token bucket and local ratio, the global ratio, the global ratio with a
// shared circuit breaker) with the same seed and partner, and prints the
// load each put on the partner during the outage, how many calls failed for
// good, what the breaker did and at what true failure ratio it opened, what
// the global budget granted against its bound, and what the shared stores
// cost, DynamoDB's per-item limits included.
//
// Usage:
//
//	go run ./cmd/outagesim [flags]
//	go run ./cmd/outagesim -outage partial
//	go run ./cmd/outagesim -fleet lambda [-scale-out]
//	go run ./cmd/outagesim -envs 200 -plot outage.png
//	go run ./cmd/outagesim -json
//	go run ./cmd/outagesim -dynamodb-endpoint http://localhost:8000
//	go run ./cmd/outagesim report [-quick] [-out docs/results]
//
// By default (-partner http) the partner is a real HTTP server on loopback
// and simulated time runs -speed times faster than real time (default 10):
// 60 simulated seconds take 6 s per strategy; a run the machine could not
// keep up with is marked and explained. -partner inproc (the default with
// -fleet lambda) runs the same code in virtual time on a discrete-event
// scheduler. Run with -h for every flag.
// The report subcommand runs the reference scenarios (busy and Lambda
// fleets, major and partial outages, every strategy, several seeds), the
// fleet-shape grid and the peer benchmarks, and writes docs/results/:
// Markdown tables, results.json and charts (see internal/report).
// Exit status: 0 on success, 1 when a run fails, 2 for bad flags.
package main
