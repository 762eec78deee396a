package breaker_test

import (
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// The closed path: Allow and Done of a successful call. The caller owns
// the clock (a retry.Executor reads it once per call); the *Now variants
// read time.Now() for both, as gobreaker does internally. gobreaker's own
// Execute is measured beside them in the bench module (../bench/).

func BenchmarkAllowDone(b *testing.B) {
	br := newBreaker(b, breaker.Settings{})
	b.ReportAllocs()
	for b.Loop() {
		p, err := br.Allow(ctx, t0)
		if err != nil {
			b.Fatal(err)
		}
		br.Done(ctx, t0, p, breaker.Success)
	}
}

func BenchmarkAllowDoneNow(b *testing.B) {
	br := newBreaker(b, breaker.Settings{})
	b.ReportAllocs()
	for b.Loop() {
		p, err := br.Allow(ctx, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		br.Done(ctx, time.Now(), p, breaker.Success)
	}
}

func BenchmarkAllowDoneParallel(b *testing.B) {
	br := newBreaker(b, breaker.Settings{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := br.Allow(ctx, t0)
			if err != nil {
				b.Error(err)
				return
			}
			br.Done(ctx, t0, p, breaker.Success)
		}
	})
}

func BenchmarkAllowDoneNowParallel(b *testing.B) {
	br := newBreaker(b, breaker.Settings{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := br.Allow(ctx, time.Now())
			if err != nil {
				b.Error(err)
				return
			}
			br.Done(ctx, time.Now(), p, breaker.Success)
		}
	})
}

// BenchmarkAllowDoneShared is the healthy path of a shared breaker: the
// fleet state is cached, so no Store call and no lock.
func BenchmarkAllowDoneShared(b *testing.B) {
	store := newFakeStore()
	br := newBreaker(b, breaker.Settings{Store: store, CacheTTL: time.Hour})
	b.ReportAllocs()
	for b.Loop() {
		p, err := br.Allow(ctx, t0)
		if err != nil {
			b.Fatal(err)
		}
		br.Done(ctx, t0, p, breaker.Success)
	}
	if store.loads.Load() != 1 || store.writes() != 0 {
		b.Fatalf("store calls: %d loads, %d writes", store.loads.Load(), store.writes())
	}
}

func BenchmarkAllowDoneSharedParallel(b *testing.B) {
	store := newFakeStore()
	br := newBreaker(b, breaker.Settings{Store: store, CacheTTL: time.Hour})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := br.Allow(ctx, t0)
			if err != nil {
				b.Error(err)
				return
			}
			br.Done(ctx, t0, p, breaker.Success)
		}
	})
}
