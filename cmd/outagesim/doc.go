// Command outagesim shows, side by side, what each retry strategy does to a
// partner API during an outage.
//
// It starts a real HTTP partner on loopback whose capacity per second drops
// for a while, and a fleet of execution environments calling it, each with
// its own retry logic. It runs the fleet once per strategy (no budget, the
// AWS SDK's standard retryer, herdguard's local token bucket and local
// ratio, the global ratio, the global ratio with a shared circuit breaker)
// with the same seed and partner, and prints the load each put on the
// partner during the outage, how many calls failed for good, what the
// breaker blocked and what the shared stores cost.
//
// Usage:
//
//	go run ./cmd/outagesim [flags]
//	go run ./cmd/outagesim -envs 200 -plot outage.png
//	go run ./cmd/outagesim -json
//	go run ./cmd/outagesim -dynamodb-endpoint http://localhost:8000
//
// Simulated time runs -speed times faster than real time (default 10):
// 60 simulated seconds take 6 s per strategy. Run with -h for every flag.
// Exit status: 0 on success, 1 when a run fails, 2 for bad flags.
package main
