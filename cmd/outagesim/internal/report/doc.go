// Package report is outagesim's report subcommand: it runs the reference
// scenarios (Scenarios), the fleet-shape grid and the peer benchmarks, and
// writes docs/results/: Markdown tables, results.json and PNG charts, each
// Markdown file headed by the machine, the date and the command.
//
//	go run ./cmd/outagesim report [-out docs/results] [-quick] [-seeds 1-3]
//
// Every scenario runs in process, in virtual time, once per seed and
// strategy; tables give the range (min–max) over the seeds. For given seeds
// the output is the same on every run, except the timing lines and the
// benchmarks.
package report
