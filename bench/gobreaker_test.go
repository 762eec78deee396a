package bench_test

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// The reference for breaker's BenchmarkAllowDone*: sony/gobreaker v2's
// Execute on its closed path, with a rolling window as close to ours as it
// offers.
func newGobreaker() *gobreaker.CircuitBreaker[struct{}] {
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "partner",
		Interval:     10 * time.Second,
		BucketPeriod: time.Second,
		Timeout:      30 * time.Second,
	})
}

func ok() (struct{}, error) { return struct{}{}, nil }

func BenchmarkGobreakerExecute(b *testing.B) {
	cb := newGobreaker()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cb.Execute(ok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGobreakerExecuteParallel(b *testing.B) {
	cb := newGobreaker()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cb.Execute(ok); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
