package fleetsim

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRun measures the simulator's speed (machine figures; nothing
// is asserted): E environments × 1 call/s for 60 simulated seconds with
// the global ratio and the shared breaker, healthy and in a 20 s total
// outage.
//
//	go test -run '^$' -bench BenchmarkRun -benchtime 3x ./internal/fleetsim/
func BenchmarkRun(b *testing.B) {
	for _, envs := range []int{1000, 10_000} {
		for _, p := range []struct {
			name    string
			partner Partner
		}{
			{"healthy", Partner{}},
			{"outage", Failing(1, 20*time.Second, 40*time.Second)},
		} {
			b.Run(fmt.Sprintf("envs=%d/%s", envs, p.name), func(b *testing.B) {
				var calls, events int64
				for i := range b.N {
					r, err := Run(Config{Seed: uint64(i), Strategy: GlobalBreaker(), Envs: envs, CallsPerWindow: 10, Partner: p.partner})
					if err != nil {
						b.Fatal(err)
					}
					calls += r.Totals.Calls
					events += r.Events
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(calls), "ns/call")
				b.ReportMetric(float64(events)/float64(b.N), "events/run")
			})
		}
	}
}
