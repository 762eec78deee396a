// Package fleetsim simulates a fleet of execution environments calling one
// partner through the real library (retry.Executor, local budgets,
// budget.Global, breaker.Breaker over shared in-memory stores) in virtual
// time: deterministic for a seed, with no real sleeps and no HTTP. It is an
// instrument of the lab (this module), not public API: the fleet-shape
// grid, cmd/outagesim's in-process mode, and, in its tests, the breaker's
// and the budget's Lambda-shaped tests (adaptive throttling in an outage,
// the grid's acceptance, the budget's spread on a fleet), kept here so that
// the library's module never imports the lab.
//
// # Model
//
//   - Time: a discrete-event scheduler (Clock). Simulated goroutines run one
//     at a time and park only in Clock.Sleep, the retry.Clock every layer is
//     given; the scheduler then advances the virtual time to the earliest
//     wake-up (ties in scheduling order). The library's clock reads (the
//     Executor's, budget.GlobalConfig.Now, the stores' Now) all come from
//     it. Contexts carry no deadline (a deadline is real time).
//   - Environments are Lambda-shaped: an invocation is one logical call
//     through the environment's Env (Strategy.NewEnv builds it from the
//     shared stores; Herdguard builds a retry.Executor), then Env.Flush, as
//     examples/bikes does. A fixed fleet (Config.Envs) gives each
//     environment its own Poisson (or periodic) arrivals and runs at most
//     Config.Concurrency invocations at once per environment (1 by
//     default); scale-out (Config.Rate) routes fleet-wide Poisson arrivals
//     to the most recently idle environment, or a new one with fresh state,
//     up to Config.MaxEnvs.
//   - Partner: in process. Each attempt takes Partner.Latency of simulated
//     time and fails with a 500 with the phase's FailureRatio, or is
//     rejected with 503 and Retry-After past the phase's Capacity per
//     simulated second (first come, first served).
//   - Stores: one budget store and one breaker store shared by the fleet,
//     in memory, store calls answered synchronously. The breaker runs each
//     Store call in its own goroutine under a real-time StoreTimeout; the
//     store answers at once, so that wait never decides anything
//     (Result.StoreWaitTimeouts counts it if it ever fires, and Herdguard
//     sets a long SimStoreTimeout to keep loaded machines from firing it).
//
// # Results
//
// Run returns a Result of plain structs: per fleet window (the library's
// Window, aligned to the start of the run) calls and their outcomes,
// attempts, retries wanted and granted, the global layer's requests,
// grants, refusals, the writes refusals cost and its bound Ratio × requests
// + Floor, store requests and billed units; per environment when its
// breaker first opened and closed; the fleet's first open and the true
// failure ratio of the attempts of the Window before it; the hottest item's
// peak units per second (one capacity.Meter per store, so the hottest
// budget item and the hottest breaker item are told apart); per simulated
// second the partner's load.
//
// # The fleet-shape grid
//
// Grid runs cells of environments × calls per environment per window ×
// failure ratio × seed (GridCells: the full grid, or a reduced one under
// the race detector) and returns their results as data; BreakerGrid and
// BudgetGrid are the grids the breaker's and the budget's tests run, and
// BreakerTable and BudgetTable print them.
//
// # A driver of its own
//
// NewClock, Clock.At, Clock.Go, Clock.RunUntil and Clock.Stop expose the
// scheduler to a caller that runs its own fleet and partner on it
// (cmd/outagesim's in-process mode).
package fleetsim
