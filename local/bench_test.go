package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
)

// The hot path of a healthy partner: every call records a request and a
// first-attempt success. Run with
//
//	go test -run '^$' -bench . -benchmem ./local/
func BenchmarkTokenBucket(b *testing.B) {
	newBucket := func(b *testing.B) *local.TokenBucket {
		tb, err := local.NewTokenBucket(local.TokenBucketConfig{})
		if err != nil {
			b.Fatal(err)
		}
		return tb
	}
	b.Run("RecordRequest+RecordSuccess", func(b *testing.B) {
		tb := newBucket(b)
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			tb.RecordRequest(now)
			tb.RecordSuccess(now)
		}
	})
	b.Run("RecordRequest+RecordSuccess/parallel", func(b *testing.B) {
		tb := newBucket(b)
		now := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.RecordRequest(now)
				tb.RecordSuccess(now)
			}
		})
	})
	b.Run("AcquireRetry+Release", func(b *testing.B) {
		tb := newBucket(b)
		ctx, now := context.Background(), time.Now()
		b.ReportAllocs()
		for b.Loop() {
			rel, err := tb.AcquireRetry(ctx, now, budget.Transient)
			if err != nil {
				b.Fatal(err)
			}
			rel(budget.RetrySucceeded)
		}
	})
	b.Run("AcquireRetry+Release/parallel", func(b *testing.B) {
		tb := newBucket(b)
		ctx, now := context.Background(), time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				// Concurrent grants may drain the bucket for a moment:
				// only a granted retry is released.
				if rel, err := tb.AcquireRetry(ctx, now, budget.Throttling); err == nil {
					rel(budget.RetrySucceeded)
				}
			}
		})
	})
}

func BenchmarkRatio(b *testing.B) {
	newRatio := func(b *testing.B) *local.Ratio {
		r, err := local.NewRatio(local.RatioConfig{})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	b.Run("RecordRequest+RecordSuccess", func(b *testing.B) {
		r := newRatio(b)
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			r.RecordRequest(now)
			r.RecordSuccess(now)
		}
	})
	b.Run("RecordRequest+RecordSuccess/parallel", func(b *testing.B) {
		r := newRatio(b)
		now := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.RecordRequest(now)
				r.RecordSuccess(now)
			}
		})
	})
	// With a real clock the window rotates as it would in production.
	b.Run("RecordRequest/time.Now/parallel", func(b *testing.B) {
		r := newRatio(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.RecordRequest(time.Now())
			}
		})
	})
	b.Run("AcquireRetry+Release", func(b *testing.B) {
		r := newRatio(b)
		ctx, now := context.Background(), time.Now()
		b.ReportAllocs()
		for b.Loop() {
			rel, err := r.AcquireRetry(ctx, now, budget.Transient)
			if err != nil {
				b.Fatal(err)
			}
			rel(budget.RetryNotUsed)
		}
	})
	b.Run("AcquireRetry+Release/parallel", func(b *testing.B) {
		r := newRatio(b)
		ctx, now := context.Background(), time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if rel, err := r.AcquireRetry(ctx, now, budget.Transient); err == nil {
					rel(budget.RetryNotUsed)
				}
			}
		})
	})
}
