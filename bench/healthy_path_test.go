package bench_test

// Healthy-path overhead of herdguard's Executor against sony/gobreaker and
// failsafe-go, side by side in one run:
//
//	go test -run '^$' -bench BenchmarkHealthyPath -benchmem -count=5 ./bench/
//
// Each wraps an operation that succeeds at once: the cost measured is the
// library's own, with the real clock (no fake clock anywhere).
//
//   - herdguard: the configuration users run, retry.Config{Breaker: br}:
//     Executor.Do with the system clock, a closed in-memory breaker and the
//     default local ratio budget: the breaker gate, the budget's request
//     count, the operation, the breaker outcome and the budget's success,
//     timed by time.Now at the start and the monotonic clock at the end of
//     the attempt.
//   - herdguard-local.Ratio: the same with a local.Ratio of the caller's
//     (the public wrapper over the default's implementation).
//   - herdguard-breaker: the same without a budget (Budgets: an empty
//     slice), what gobreaker does.
//   - gobreaker (count-based) and gobreaker-rolling (a 10 s window in 1 s
//     buckets, like herdguard's): CircuitBreaker.Execute, which reads
//     time.Now twice per call.
//   - failsafe-go: a retry policy and a circuit breaker, both defaults.
//   - clock-time.Now and clock-time.Since: one clock read of each kind, for
//     scale (time.Now reads the wall and the monotonic clocks, time.Since
//     of a time with a monotonic reading only the latter).
//
// Every variant also runs under b.RunParallel (-parallel suffix).

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sony/gobreaker/v2"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// noBudget is Config.Budgets for the breaker-only variant.
var noBudget = []budget.Budget{}

// newBenchExecutor returns an Executor with the default (system) clock, a
// breaker and budgets: nil for the default local ratio.
func newBenchExecutor(b *testing.B, budgets func() []budget.Budget) *retry.Executor {
	b.Helper()
	br, err := breaker.New("partner", breaker.Settings{})
	if err != nil {
		b.Fatalf("breaker.New: %v", err)
	}
	cfg := retry.Config{Breaker: br}
	if budgets != nil {
		cfg.Budgets = budgets()
	}
	e, err := retry.New(cfg)
	if err != nil {
		b.Fatalf("retry.New: %v", err)
	}
	return e
}

func localRatio() []budget.Budget {
	ratio, err := local.NewRatio(local.RatioConfig{})
	if err != nil {
		panic(err)
	}
	return []budget.Budget{ratio}
}

var sinkTime time.Time

func BenchmarkHealthyPath(b *testing.B) {
	ctx := context.Background()
	op := func(context.Context, int) error { return nil }
	fn := func() (any, error) { return nil, nil }
	run := func() error { return nil }

	for _, hg := range []struct {
		name   string
		budget func() []budget.Budget
	}{
		{"herdguard", nil},
		{"herdguard-local.Ratio", localRatio},
		{"herdguard-breaker", func() []budget.Budget { return noBudget }},
	} {
		b.Run(hg.name, func(b *testing.B) {
			e := newBenchExecutor(b, hg.budget)
			b.ReportAllocs()
			for b.Loop() {
				if err := e.Do(ctx, op); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(hg.name+"-parallel", func(b *testing.B) {
			e := newBenchExecutor(b, hg.budget)
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
	}
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

	b.Run("clock-time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkTime = time.Now()
		}
	})
	b.Run("clock-time.Since", func(b *testing.B) {
		start := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			if time.Since(start) < 0 {
				b.Fatal("the monotonic clock went back")
			}
		}
	})
}
