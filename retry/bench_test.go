package retry_test

// Healthy-path overhead of herdguard's Executor against sony/gobreaker and
// failsafe-go, in one run:
//
//	go test -run '^$' -bench BenchmarkHealthyPath -benchmem ./retry/
//
// Each wraps an operation that succeeds at once: the cost measured is the
// library's own. herdguard runs its full healthy path: breaker gate (closed,
// in-memory), the local Ratio budget's request count, the operation, the
// breaker outcome and the budget's success.

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sony/gobreaker/v2"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

func newBenchExecutor(b *testing.B) *retry.Executor {
	b.Helper()
	ratio, err := local.NewRatio(local.RatioConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return mustNew(b, retry.Config{Breaker: mustBreaker(b), Budgets: []budget.Budget{ratio}})
}

func BenchmarkHealthyPath(b *testing.B) {
	ctx := context.Background()
	op := func(context.Context, int) error { return nil }
	fn := func() (any, error) { return nil, nil }
	run := func() error { return nil }

	b.Run("herdguard", func(b *testing.B) {
		e := newBenchExecutor(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := e.Do(ctx, op); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("herdguard-parallel", func(b *testing.B) {
		e := newBenchExecutor(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := e.Do(ctx, op); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	gobreakerRolling := gobreaker.Settings{Name: "partner", Interval: 10 * time.Second, BucketPeriod: time.Second}
	for _, gb := range []struct {
		name string
		s    gobreaker.Settings
	}{
		{"gobreaker", gobreaker.Settings{Name: "partner"}},
		{"gobreaker-rolling", gobreakerRolling},
	} {
		b.Run(gb.name, func(b *testing.B) {
			cb := gobreaker.NewCircuitBreaker[any](gb.s)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cb.Execute(fn); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(gb.name+"-parallel", func(b *testing.B) {
			cb := gobreaker.NewCircuitBreaker[any](gb.s)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cb.Execute(fn); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	newFailsafe := func() failsafe.Executor[any] {
		return failsafe.With[any](retrypolicy.NewWithDefaults[any](), circuitbreaker.NewWithDefaults[any]())
	}
	b.Run("failsafe-go", func(b *testing.B) {
		fe := newFailsafe()
		b.ReportAllocs()
		for b.Loop() {
			if err := fe.Run(run); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("failsafe-go-parallel", func(b *testing.B) {
		fe := newFailsafe()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fe.Run(run); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
