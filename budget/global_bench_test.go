package budget_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
)

// BenchmarkGlobalRecordRequest is the healthy path: every call counts its
// request in memory, and nothing else happens.
func BenchmarkGlobalRecordRequest(b *testing.B) {
	s := newRecStore(newMapStore())
	g := newGlobal(b, s, budget.GlobalConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.RecordRequest(t0)
			g.RecordSuccess(t0)
		}
	})
	if n := s.NumCalls(); n != 0 {
		b.Fatalf("%d store calls on the healthy path", n)
	}
}

// BenchmarkGlobalRecordRequestSerial is the same on one goroutine, the
// case of a Lambda execution environment.
func BenchmarkGlobalRecordRequestSerial(b *testing.B) {
	g := newGlobal(b, newMapStore(), budget.GlobalConfig{})
	b.ReportAllocs()
	for b.Loop() {
		g.RecordRequest(t0)
	}
}

// BenchmarkGlobalRecordRequestWindows crosses into a new window every
// 1,000 calls, as a long-running process does.
func BenchmarkGlobalRecordRequestWindows(b *testing.B) {
	g := newGlobal(b, newMapStore(), budget.GlobalConfig{})
	var i atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.RecordRequest(t0.Add(time.Duration(i.Add(1)/1000) * defaultGlobalWindow))
		}
	})
}

// BenchmarkGlobalAcquireRetry is the outage path over an in-memory store:
// with LeaseSize 1 every grant is one store call; with 64 most grants come
// from the lease.
func BenchmarkGlobalAcquireRetry(b *testing.B) {
	for _, lease := range []int{1, 64} {
		b.Run(map[int]string{1: "lease=1", 64: "lease=64"}[lease], func(b *testing.B) {
			g := newGlobal(b, newMapStore(), budget.GlobalConfig{LeaseSize: lease, Floor: maxGlobalFloor})
			ctx := context.Background()
			now, n := t0, 0
			b.ReportAllocs()
			for b.Loop() {
				if n++; n%100_000 == 0 { // stay under the floor of each window
					now = now.Add(defaultGlobalWindow)
				}
				rel, err := g.AcquireRetry(ctx, now, budget.Transient)
				if err != nil {
					b.Fatal(err)
				}
				rel(budget.RetryFailed)
			}
		})
	}
}
