package breaker_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/attempt"
)

// adaptiveAt is the start of a whole second (a bucket boundary).
var adaptiveAt = time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)

// bucketsOf returns fleet buckets ending with now's: counts[0] is now's
// bucket, counts[1] the one before, and so on; each is {requests,
// successes, failures} with as many samples as outcomes (weight 1).
func bucketsOf(now time.Time, counts ...[3]int64) [breaker.FleetSlots]breaker.Bucket {
	var bs [breaker.FleetSlots]breaker.Bucket
	cur := now.Unix() // buckets are 1 s wide with the default Window
	for i, c := range counts {
		n := cur - int64(i)
		bs[n%breaker.FleetSlots] = breaker.Bucket{Num: n, Requests: c[0], Successes: c[1], Failures: c[2], Samples: c[1] + c[2]}
	}
	return bs
}

// admitted returns the share a fresh adaptive breaker admits at now with
// the fleet counts given in the store: Rand is close to 1, so any share
// below 1 rejects the call and the OpenError says the share.
func admitted(t *testing.T, now time.Time, retry bool, counts ...[3]int64) float64 {
	t.Helper()
	store := newFakeStore()
	store.states["partner"] = breaker.Snapshot{WatchUntil: now.Add(20 * time.Second), Buckets: bucketsOf(now, counts...)}
	b := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, Rand: func() float64 { return 0.999 }, StoreTimeout: 10 * time.Second})
	ctx := context.Background()
	if retry {
		ctx = attempt.Retry(ctx)
	}
	p, err := b.Allow(ctx, now)
	if err == nil {
		b.Done(ctx, now, p, breaker.Success)
		return 1
	}
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !oe.Throttled || !errors.Is(err, breaker.ErrOpen) || oe.State != breaker.Closed {
		t.Fatalf("Allow: %v, want a throttling *OpenError", err)
	}
	return oe.Admitting
}

// TestAdaptiveLaw checks the share the fleet admits for given fleet
// counts: it starts only where the failure ratio is clearly above
// FailureRatio, admits 1.15 times what the partner accepts, doubles the
// share (or admits everything) when the latest admitted calls succeed,
// rejects retries while throttling, and stays within its bounds.
func TestAdaptiveLaw(t *testing.T) {
	now := adaptiveAt.Add(500 * time.Millisecond)
	for _, c := range []struct {
		name   string
		retry  bool
		counts [][3]int64
		want   float64
	}{
		{"no failure in the window", false, [][3]int64{{1000, 1000, 0}, {1000, 1000, 0}}, 1},
		{"every call admitted, 45% failing: left to the budgets", false,
			[][3]int64{{1000, 550, 450}, {1000, 550, 450}, {1000, 550, 450}}, 1},
		{"every call admitted, 52% failing over 400 samples: under 2 standard errors above 50%", false,
			[][3]int64{{200, 96, 104}, {200, 96, 104}}, 1},
		{"every call admitted, 70% failing: 1.15 × 30% accepted", false,
			[][3]int64{{300, 90, 210}, {300, 90, 210}}, 1.15 * 0.3},
		{"throttling, admitted calls failing 13%: 1.15 × accepted", false,
			[][3]int64{{1000, 300, 45}, {1000, 300, 45}, {1000, 300, 45}}, 1.15 * 0.3},
		{"throttling, 4% of the latest 120 outcomes fail: the share admitted doubles", false,
			[][3]int64{{200, 58, 2}, {200, 57, 3}, {1000, 300, 45}, {1000, 300, 45}}, 2 * 0.3},
		{"throttling, the latest 150 outcomes all succeed: every call", false,
			[][3]int64{{250, 75, 0}, {250, 75, 0}, {1000, 300, 45}}, 1},
		{"throttling, half of the latest calls admitted, 2% failing: every call", false,
			[][3]int64{{240, 118, 2}, {1000, 300, 45}}, 1},
		{"throttling, 50 outcomes all successes: not enough to say", false,
			[][3]int64{{100, 30, 0}, {100, 20, 0}, {1000, 300, 45}, {1000, 300, 45}}, 1.15 * 650.0 / 2200},
		{"throttling, nothing accepted: the floor", false,
			[][3]int64{{1000, 0, 100}, {1000, 0, 100}}, 0.02},
		{"at most twice the share admitted", false,
			[][3]int64{{1000, 100, 100}, {1000, 100, 100}}, math.Min(1.15*0.1, 2*0.2)},
		{"throttling rejects every retry", true,
			[][3]int64{{1000, 300, 45}, {1000, 300, 45}}, 1.15 * 0.3},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := admitted(t, now, c.retry, c.counts...)
			if math.Abs(got-c.want) > 1e-9 {
				t.Errorf("admits %.4f, want %.4f", got, c.want)
			}
		})
	}
}

// TestAdaptiveThrottlesFirstAttemptsByShare: with Rand below the share the
// call goes, above it the call is rejected; a retry is rejected whatever
// Rand says while the fleet throttles.
func TestAdaptiveThrottlesFirstAttemptsByShare(t *testing.T) {
	now := adaptiveAt.Add(500 * time.Millisecond)
	for _, c := range []struct {
		r     float64
		retry bool
		want  bool
	}{{0.1, false, true}, {0.5, false, false}, {0.1, true, false}} {
		store := newFakeStore()
		store.states["partner"] = breaker.Snapshot{WatchUntil: now.Add(20 * time.Second),
			Buckets: bucketsOf(now, [3]int64{300, 90, 210}, [3]int64{300, 90, 210})}
		r := c.r
		b := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, Rand: func() float64 { return r }, StoreTimeout: 10 * time.Second})
		ctx := context.Background()
		if c.retry {
			ctx = attempt.Retry(ctx)
		}
		_, err := b.Allow(ctx, now)
		if got := err == nil; got != c.want {
			t.Errorf("Rand %v, retry %v: admitted %v (%v), want %v", c.r, c.retry, got, err, c.want)
		}
	}
}

// TestAdaptiveNeverTripsToOpen: an adaptive breaker whose fleet fails
// every call throttles to the floor and never writes Open.
func TestAdaptiveNeverTripsToOpen(t *testing.T) {
	store := newFakeStore()
	e := newEnv(t, store, "a", func(s *breaker.Settings) { s.Adaptive = true })
	for i := range 60 {
		at := adaptiveAt.Add(time.Duration(i) * 100 * time.Millisecond)
		if p, err := e.Allow(context.Background(), at); err == nil {
			e.Done(context.Background(), at, p, breaker.Failure)
		}
		flushAt(t, e.Breaker, at)
	}
	if store.transitions.Load() != 0 || store.state("partner").State != breaker.Closed {
		t.Errorf("%d transitions, state %v; an adaptive breaker never opens on its counts", store.transitions.Load(), store.state("partner").State)
	}
	late := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, Rand: func() float64 { return 0.999 }, StoreTimeout: 10 * time.Second})
	var oe *breaker.OpenError
	if _, err := late.Allow(context.Background(), adaptiveAt.Add(6*time.Second)); !errors.As(err, &oe) || oe.Admitting != 0.02 {
		t.Errorf("a fleet failing every call: %v, want throttling to the floor of 2%%", err)
	}
}

// TestAdaptiveFirstWindow: an adaptive environment that learns of a watch
// starts sampling after its random delay, and its first report holds
// exactly its first ReportInterval of sampling, a sample whose fate comes
// later waiting for the next report; requests count when the call's fate
// is known.
func TestAdaptiveFirstWindow(t *testing.T) {
	store := newFakeStore()
	at := adaptiveAt
	store.states["partner"] = breaker.Snapshot{WatchUntil: at.Add(20 * time.Second)}
	// Rand 0.5: a delay of half a bucket, and every call sampled (the
	// sampling factor is 4 without a complete bucket: 0.5 × 4 ≥ 1 ...
	// so sampling draws are made with a Rand of their own below).
	draws := []float64{0.5} // the delay
	b := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, StoreTimeout: 10 * time.Second,
		Rand: func() float64 {
			if len(draws) > 0 {
				d := draws[0]
				draws = draws[1:]
				return d
			}
			return 0 // sampled, admitted
		}})
	ctx := context.Background()
	one := func(now time.Time, o breaker.Outcome) {
		t.Helper()
		p, err := b.Allow(ctx, now)
		if err != nil {
			t.Fatalf("Allow at %v: %v", now, err)
		}
		b.Done(ctx, now.Add(20*time.Millisecond), p, o)
		flushAt(t, b, now.Add(20*time.Millisecond))
	}
	one(at.Add(100*time.Millisecond), breaker.Failure) // learns the watch at its first Allow; before its delay: not sampled
	one(at.Add(700*time.Millisecond), breaker.Success) // sampled, first window [0.6 s, 1.6 s)
	one(at.Add(1200*time.Millisecond), breaker.Failure)
	if n := store.reports.Load(); n != 0 {
		t.Fatalf("%d reports while the first window is open", n)
	}
	one(at.Add(1700*time.Millisecond), breaker.Success) // closes the window; its own sample waits
	st := store.state("partner")
	var got breaker.Bucket
	for _, bk := range st.Buckets {
		got.Requests += bk.Requests
		got.Successes += bk.Successes
		got.Failures += bk.Failures
		got.Samples += bk.Samples
	}
	if store.reports.Load() != 1 || got.Samples != 2 || got.Successes != 4 || got.Failures != 4 || got.Requests != 8 {
		t.Errorf("%d reports, fleet counts %+v; want one report of the first window's 2 samples (weight 4)", store.reports.Load(), got)
	}
}
