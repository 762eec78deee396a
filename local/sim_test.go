package local_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
)

// The retry-budget article's simulation (seeds/sim.mjs), ported to drive
// this package's budgets. For 60 one-second ticks, 100 new requests a tick
// reach a server that serves 150 a tick, 60 during ticks 20-39, chosen at
// random (a seeded LCG and a Fisher-Yates shuffle, exactly as written in
// JavaScript); each failed request is retried the next tick, up to 3
// attempts, if the budget grants it.
const (
	simTicks      = 60
	simNewPerTick = 100
	simAttempts   = 3
)

func simCapacity(tick int) int {
	if tick >= 20 && tick < 40 {
		return 60
	}
	return 150
}

// simRandom is the article's seeded(seed): the LCG evaluated in float64 as
// JavaScript does. seed*1103515245 exceeds 2^53, so the product is rounded;
// integer arithmetic would diverge at the second draw. The explicit
// float64 conversion forbids a fused multiply-add, which would skip that
// rounding.
func simRandom(seed float64) func() float64 {
	return func() float64 {
		seed = math.Mod(float64(seed*1103515245)+12345, 2147483648)
		return seed / 2147483648
	}
}

type simResult struct {
	attemptsInOutage, newInOutage, failedForGood int
}

func (r simResult) load() string {
	return fmt.Sprintf("%.2f", float64(r.attemptsInOutage)/float64(r.newInOutage))
}

// simRequest is one offered attempt: its number, and for a retry the
// Release of the grant that allowed it.
type simRequest struct {
	attempt int
	release budget.Release
}

// runSim runs the model against b (nil for no budget). The JavaScript
// budget calls map onto budget.Budget as follows: recordRequest() is
// RecordRequest(now); recordSuccess() after a first attempt is
// RecordSuccess(now); recordSuccess("throttling") after a retry is the
// retry's Release(RetrySucceeded) (refunding the cost of its kind,
// throttling); a failed retry is Release(RetryFailed); tryAcquireRetry
// ("throttling") is AcquireRetry(ctx, now, Throttling).
func runSim(t *testing.T, b budget.Budget) simResult {
	t.Helper()
	ctx := context.Background()
	random := simRandom(42)
	var (
		res     simResult
		pending []simRequest
	)
	for tick := range simTicks {
		now := time.UnixMilli(int64(tick) * 1000)
		offered := make([]simRequest, 0, simNewPerTick+len(pending))
		for range simNewPerTick {
			if b != nil {
				b.RecordRequest(now)
			}
			offered = append(offered, simRequest{attempt: 1})
		}
		offered = append(offered, pending...)
		pending = nil
		for i := len(offered) - 1; i > 0; i-- {
			j := int(math.Floor(random() * float64(i+1)))
			offered[i], offered[j] = offered[j], offered[i]
		}
		capacity := simCapacity(tick)
		if tick >= 20 && tick < 40 {
			res.attemptsInOutage += len(offered)
			res.newInOutage += simNewPerTick
		}
		for i, req := range offered {
			if i < capacity {
				if req.attempt > 1 {
					req.release.Done(budget.RetrySucceeded)
				} else if b != nil {
					b.RecordSuccess(now)
				}
				continue
			}
			req.release.Done(budget.RetryFailed)
			if req.attempt >= simAttempts {
				res.failedForGood++
				continue
			}
			var rel budget.Release
			if b != nil {
				var err error
				rel, err = b.AcquireRetry(ctx, now, budget.Throttling)
				if err != nil {
					res.failedForGood++
					continue
				}
			}
			pending = append(pending, simRequest{attempt: req.attempt + 1, release: rel})
		}
	}
	// Retries granted in the last tick never run.
	for _, req := range pending {
		req.release.Done(budget.RetryNotUsed)
	}
	return res
}

func TestSimRandomMatchesJavaScript(t *testing.T) {
	// node -e 'let s=42; for(let i=0;i<3;i++){s=(s*1103515245+12345)%2147483648; console.log(s)}'
	random := simRandom(42)
	for i, want := range []float64{1250496027, 1116302080, 1964818176} {
		if got := random() * 2147483648; got != want {
			t.Fatalf("draw %d = %.0f, want %.0f", i, got, want)
		}
	}
}

// Seed (5) of the retry-budget article: `node seeds/sim.mjs` prints
//
//	no budget              load during outage: 2.12x failed for good: 687
//	token bucket (500/5)   load during outage: 1.25x failed for good: 780
//	10% ratio              load during outage: 1.10x failed for good: 800
//
// (attempts in the outage: 4239, 2493 and 2200 of 2000 new requests).
func TestSimReproducesArticle(t *testing.T) {
	bucket, err := local.NewTokenBucket(local.TokenBucketConfig{Capacity: 500})
	if err != nil {
		t.Fatal(err)
	}
	ratio, err := local.NewRatio(local.RatioConfig{Ratio: 0.1, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		budget   budget.Budget
		attempts int
		load     string
		failed   int
	}{
		{"no budget", nil, 4239, "2.12", 687},
		{"token bucket (500/5)", bucket, 2493, "1.25", 780},
		{"10% ratio", ratio, 2200, "1.10", 800},
	} {
		res := runSim(t, c.budget)
		t.Logf("%-22s load during outage: %sx failed for good: %d (attempts in outage %d / %d new)",
			c.name, res.load(), res.failedForGood, res.attemptsInOutage, res.newInOutage)
		if res.load() != c.load || res.failedForGood != c.failed || res.attemptsInOutage != c.attempts || res.newInOutage != 2000 {
			t.Errorf("%s: load %sx (%d/%d attempts), %d failed for good; the article has %sx (%d/2000), %d",
				c.name, res.load(), res.attemptsInOutage, res.newInOutage, res.failedForGood, c.load, c.attempts, c.failed)
		}
	}
}
