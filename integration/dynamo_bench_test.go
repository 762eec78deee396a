package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
)

// The DynamoDB store benchmarks measure each store operation against
// DynamoDB Local, one call at a time, and report its latency percentiles
// and the DynamoDB requests it made:
//
//	go test -run '^$' -bench BenchmarkDynamo -benchtime 300x ./integration/
//
// DynamoDB Local's latency is not the service's (single-digit milliseconds
// within a region); the request counts are exact.

// measure runs op b.N times, timing each call, and reports p50 and p99 in
// milliseconds and the store's reads and writes per call. op's errors are
// checked by ok.
func measure(b *testing.B, stats func() dynamo.Stats, op func(ctx context.Context, i int) error, ok func(error) bool) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	before := stats()
	b.ResetTimer()
	for i := range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), 5*time.Second)
		start := time.Now()
		err := op(ctx, i)
		lat = append(lat, time.Since(start))
		cancel()
		if !ok(err) {
			b.Fatalf("call %d: unexpected result %v", i, err)
		}
	}
	b.StopTimer()
	after := stats()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(after.Reads-before.Reads)/float64(b.N), "reads/op")
	b.ReportMetric(float64(after.Writes-before.Writes)/float64(b.N), "writes/op")
}

func isNil(err error) bool { return err == nil }

func benchWindow() time.Time {
	return time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)
}

// fundedBudget returns a budget store on a new table and the key of a
// window shard funded with the largest allowance, expiring in an hour.
func fundedBudget(b *testing.B) (*dynamo.BudgetStore, budget.Key, time.Time) {
	st := newBudgetStore(b, newStoreClient(b), newTable(b))
	k := budget.Key{Name: "bench", Window: benchWindow()}
	exp := k.Window.Add(time.Hour)
	if _, err := st.Apply(b.Context(), k, budget.Update{Deposit: maxAmount, Expires: exp}); err != nil {
		b.Fatal(err)
	}
	return st, k, exp
}

func BenchmarkDynamoBudgetApplyGranted(b *testing.B) {
	st, k, exp := fundedBudget(b)
	measure(b, st.Stats, func(ctx context.Context, _ int) error {
		_, err := st.Apply(ctx, k, budget.Update{Take: 1, Expires: exp})
		return err
	}, isNil)
}

// BenchmarkDynamoBudgetApplyOneItem measures how many conditional
// updates a second one item takes when 16 goroutines update it at once
// (granted withdrawals from one budget window shard): what bounds a test
// that pushes a fleet through one item of DynamoDB Local, which serialises
// writes to one item and enforces no per-item limit.
//
//	go test -run '^$' -bench BenchmarkDynamoBudgetApplyOneItem -benchtime 3000x -count 3 ./integration/
func BenchmarkDynamoBudgetApplyOneItem(b *testing.B) {
	st, k, exp := fundedBudget(b)
	b.SetParallelism(8) // 16 goroutines on 2 cores
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.Apply(b.Context(), k, budget.Update{Take: 1, Expires: exp}); err != nil {
				b.Errorf("Apply: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "updates/s")
}

func BenchmarkDynamoBudgetApplyRefused(b *testing.B) {
	api := newStoreClient(b)
	st := newBudgetStore(b, api, newTable(b))
	k := budget.Key{Name: "bench", Window: benchWindow()}
	exp := k.Window.Add(time.Hour)
	measure(b, st.Stats, func(ctx context.Context, _ int) error {
		_, err := st.Apply(ctx, k, budget.Update{Take: 1, Expires: exp})
		return err
	}, func(err error) bool { return errors.Is(err, budget.ErrInsufficient) })
}

func BenchmarkDynamoBreakerLoad(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	if _, err := st.Transition(b.Context(), "bench", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: time.Now().Add(time.Minute)}); err != nil {
		b.Fatal(err)
	}
	if err := st.SetOverride(b.Context(), "bench", breaker.ForcedOpen, time.Time{}); err != nil {
		b.Fatal(err)
	}
	measure(b, st.Stats, func(ctx context.Context, _ int) error {
		_, err := st.Load(ctx, "bench")
		return err
	}, isNil)
}

func BenchmarkDynamoBreakerReport(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	// Reports of one bucket, as the environments of a fleet make them in
	// one second: the first resets the slot, the others add to it.
	n := benchWindow().Unix()
	measure(b, st.Stats, func(ctx context.Context, i int) error {
		_, err := st.Report(ctx, "bench", breaker.Report{Bucket: n, Requests: 2, Successes: 1, Failures: 1, Samples: 2})
		return err
	}, isNil)
}

// BenchmarkDynamoBreakerReportFleet measures what a Report costs when
// several environments, each with a store of its own, report into one
// breaker: each environment reports once per 100 ms bucket (every 80 to
// 120 ms), so the first report of each bucket resets its slot and the
// others add to it; a store that guessed its slot wrong pays a refused
// write first. b.N is the number of Reports per environment.
//
//	go test -run '^$' -bench BenchmarkDynamoBreakerReportFleet -benchtime 30x ./integration/
func BenchmarkDynamoBreakerReportFleet(b *testing.B) {
	api := newStoreClient(b)
	table := newTable(b)
	for _, envs := range []int{1, 5, 20} {
		b.Run(fmt.Sprintf("envs=%d", envs), func(b *testing.B) {
			stores := make([]*dynamo.BreakerStore, envs)
			for i := range stores {
				stores[i] = newBreakerStore(b, api, table)
			}
			name := fmt.Sprintf("fleet-%d-%d", envs, b.N)
			var wg sync.WaitGroup
			for i, st := range stores {
				rnd := rand.New(rand.NewPCG(uint64(i), uint64(envs)))
				wg.Go(func() {
					for range b.N {
						time.Sleep(time.Duration(80+rnd.IntN(41)) * time.Millisecond)
						r := breaker.Report{Bucket: time.Now().UnixMilli() / 100, Requests: 4, Successes: 3, Failures: 1, Samples: 1}
						if _, err := st.Report(b.Context(), name, r); err != nil {
							b.Errorf("Report: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			var writes, refused int64
			for _, st := range stores {
				writes += st.Stats().Writes
				refused += st.Stats().ConditionalFailures
			}
			reports := float64(envs * b.N)
			b.ReportMetric(float64(writes)/reports, "writes/report")
			b.ReportMetric(float64(refused)/reports, "refused/report")
		})
	}
}

func BenchmarkDynamoBreakerTransition(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	states := []breaker.State{breaker.Open, breaker.HalfOpen, breaker.Closed}
	measure(b, st.Stats, func(ctx context.Context, i int) error {
		_, err := st.Transition(ctx, "bench", uint64(i), breaker.Snapshot{State: states[i%3], Epoch: uint64(i) + 1})
		return err
	}, isNil)
}

func BenchmarkDynamoBreakerTransitionConflict(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	if _, err := st.Transition(b.Context(), "bench", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1}); err != nil {
		b.Fatal(err)
	}
	// Another decision from epoch 0 (an identical one would be reported
	// as the success it is).
	measure(b, st.Stats, func(ctx context.Context, _ int) error {
		_, err := st.Transition(ctx, "bench", 0, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 1})
		return err
	}, func(err error) bool { return errors.Is(err, breaker.ErrConflict) })
}

func BenchmarkDynamoBreakerAcquireProbeGranted(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	now := time.Now()
	measure(b, st.Stats, func(ctx context.Context, i int) error {
		_, err := st.AcquireProbe(ctx, "bench", uint64(i), 1, now, now.Add(time.Minute))
		return err
	}, isNil)
}

func BenchmarkDynamoBreakerAcquireProbeDenied3(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	now := time.Now()
	for range 3 {
		if _, err := st.AcquireProbe(b.Context(), "bench", 1, 3, now, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	measure(b, st.Stats, func(ctx context.Context, _ int) error {
		_, err := st.AcquireProbe(ctx, "bench", 1, 3, now, now.Add(time.Hour))
		return err
	}, func(err error) bool { return errors.Is(err, breaker.ErrProbeDenied) })
}

func BenchmarkDynamoBreakerSetOverride(b *testing.B) {
	api := newStoreClient(b)
	st := newBreakerStore(b, api, newTable(b))
	overrides := []breaker.Override{breaker.ForcedOpen, breaker.NoOverride}
	measure(b, st.Stats, func(ctx context.Context, i int) error {
		return st.SetOverride(ctx, "bench", overrides[i%2], time.Time{})
	}, isNil)
}
