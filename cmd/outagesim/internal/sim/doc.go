// Package sim is outagesim: a fleet of execution environments calling a
// partner API through a retry strategy, while the partner loses capacity
// for a while.
//
// # Building blocks
//
//   - Clock: simulated time, Speed times faster than real time, which stops
//     while the machine has work in transit and skips whole-process stalls,
//     so that a busy machine slows the simulation down instead of
//     distorting it.
//   - Partner: a net/http handler (or, in process, Answer) that serves at
//     most Schedule.Capacity(s) calls in simulated second s, first come
//     first served, and rejects the rest with 503 (or 429) and Retry-After
//     / x-amz-retry-after; optionally it slows down under overload.
//     Admission is exact: one atomic counter per second.
//   - Strategy: the retry logic of one execution environment (a Caller). The
//     herdguard strategies are one retry.Executor per environment with no
//     budget, a local.TokenBucket, a local.Ratio, a budget.Global over a
//     shared store, or a budget.Global plus a shared breaker.Breaker,
//     each built by fleetsim.Herdguard.Executor, the builder of the
//     fleet-shape grid's environments too. The AWS SDK strategy drives
//     aws/retry's standard retryer through its own API.
//   - Runner: runs one strategy against a fresh partner and a fresh fleet:
//     Rate new calls per simulated second for Duration, each sent by an
//     environment chosen at random (seeded), or, one call at a time per
//     environment (FleetLambda, ScaleOut), by an idle environment, a new one
//     joining when none is idle (Lambda), up to MaxEnvs. Two engines: over
//     loopback HTTP on the Clock (PartnerHTTP), or in process on
//     internal/fleetsim's discrete-event scheduler (PartnerInproc), with the
//     same dispatch, partner, strategies and accounting.
//   - KeepUp: over HTTP, whether the machine carried the scenario (how late
//     attempts reached the partner and sleeps ended, first attempts of the
//     outage that missed it, watchdog restarts).
//   - Backend: the shared stores of the global strategies, in memory
//     (internal/memstore, billed and throttled by internal/capacity's
//     meter) or in DynamoDB (package dynamo).
//   - Result, Report, WriteTable, Chart: what the partner saw, per strategy.
//
// Main is the command's body; cmd/outagesim only wires it to os.Args.
package sim
