package breaker_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
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
	allow := b.Allow
	if retry {
		allow = b.AllowRetry
	}
	p, err := allow(ctx, now)
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
// FailureRatio, admits 1.3 times the accepted share until probe and base
// buckets give an estimate, then the estimate in base buckets (even) and
// 1.175 times it in probe buckets (odd), admits every call when a probe
// above a measured estimate saw no failure and nothing failed since,
// raises the estimate when something did, rejects retries while
// throttling, and stays within its bounds.
func TestAdaptiveLaw(t *testing.T) {
	saturated := [3]int64{1000, 300, 45} // the partner served 30% of the calls, turning 45 admitted ones away
	measured := func(first ...[3]int64) [][3]int64 {
		return append(first, saturated, saturated, saturated, saturated, saturated)
	}
	for _, c := range []struct {
		name   string
		probe  bool // now in a probe bucket (odd) rather than a base one
		retry  bool
		counts [][3]int64 // now's bucket first
		want   float64
	}{
		{"no failure in the window", false, false, [][3]int64{{1000, 1000, 0}, {1000, 1000, 0}}, 1},
		{"every call admitted, 45% failing: left to the budgets", false, false,
			[][3]int64{{1000, 550, 450}, {1000, 550, 450}, {1000, 550, 450}}, 1},
		{"every call admitted, 52% failing over 400 samples: under 2 standard errors above 50%", false, false,
			[][3]int64{{200, 96, 104}, {200, 96, 104}}, 1},
		{"every call admitted, 70% failing: 1.3 × 30% accepted until there is an estimate", false, false,
			[][3]int64{{300, 90, 210}, {300, 90, 210}}, 1.3 * 0.3},
		{"base bucket: the partner's accepted share in settled buckets that turned calls away", false, false,
			measured(saturated), 0.3},
		{"probe bucket: 1.175 × that", true, false, measured(saturated), 1.175 * 0.3},
		{"a probe above the estimate saw no failure, nor has anything since: every call", false, false,
			measured([3]int64{100, 30, 0}, [3]int64{1000, 350, 0}), 1},
		// In the bucket after a probe that saw no failure every call went
		// until one failed; for the rest of it (half, here) the fleet
		// admits what is left of the bucket's share, 0.35 × 1,000 calls.
		{"a verdict's bucket turned calls away after 360 admitted: nothing left of its 350, the floor", false, false,
			measured([3]int64{400, 320, 40}, [3]int64{1000, 350, 0}), 0.02},
		{"a verdict's bucket turned calls away after 250 admitted: 100 left over 500 calls", false, false,
			measured([3]int64{300, 150, 100}, [3]int64{1000, 350, 0}), 0.2},
		{"a verdict's bucket turned calls away after 20 admitted (a smoother partner): the raised estimate", false, false,
			measured([3]int64{20, 5, 15}, [3]int64{1000, 350, 0}), 0.35},
		{"a probe saw no failure, but calls failed in a bucket since: the estimate rises to its accepted share", true, false,
			measured([3]int64{300, 100, 20}, [3]int64{1000, 300, 200}, [3]int64{1000, 350, 0}), 1.175 * 0.35},
		{"a probe with fewer than 50 outcomes says nothing", false, false,
			measured([3]int64{100, 30, 0}, [3]int64{1000, 40, 0}), 0.3},
		{"a probe that saw no failure without a measured estimate before it (throttling just began): a lower bound", false, false,
			[][3]int64{{100, 30, 0}, {1000, 350, 0}, {1000, 300, 0}, {1000, 300, 0}, {300, 90, 210}}, 0.35},
		{"every call went in the latest bucket, 3% failing: every call", false, false,
			measured([3]int64{1000, 980, 20}, [3]int64{1000, 970, 30}), 1},
		{"every call went in the latest bucket, 20% failing: the estimate", false, false,
			measured([3]int64{1000, 800, 200}, [3]int64{1000, 800, 200}), 0.3},
		{"throttling, nothing accepted: the floor", false, false,
			[][3]int64{{1000, 0, 100}, {1000, 0, 100}, {1000, 0, 100}, {1000, 0, 100}, {1000, 0, 100}}, 0.02},
		{"throttling rejects every retry", true, true, measured(saturated), 1.175 * 0.3},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := adaptiveAt.Add(500 * time.Millisecond)
			if c.probe {
				now = now.Add(time.Second)
			}
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
		allow := b.Allow
		if c.retry {
			allow = b.AllowRetry
		}
		_, err := allow(context.Background(), now)
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

// adaptiveFleetRate is a fleet state read at `at` (a bucket boundary) that
// is watching, with 1,000 calls a second and no failure in the eight
// buckets before: the sampling factor is 4.
func adaptiveFleetRate(at time.Time) breaker.Snapshot {
	var bs [breaker.FleetSlots]breaker.Bucket
	for i := int64(1); i <= 8; i++ {
		n := at.Unix() - i
		bs[n%breaker.FleetSlots] = breaker.Bucket{Num: n, Requests: 1000, Successes: 1000, Samples: 250}
	}
	return breaker.Snapshot{WatchUntil: at.Add(20 * time.Second), Buckets: bs}
}

// fleetTotals adds up the counts of every bucket in the store's state.
func fleetTotals(s breaker.Snapshot, from int64) breaker.Bucket {
	var got breaker.Bucket
	for _, bk := range s.Buckets {
		if bk.Num >= from {
			got.Requests += bk.Requests
			got.Successes += bk.Successes
			got.Failures += bk.Failures
			got.Samples += bk.Samples
		}
	}
	return got
}

// TestAdaptiveBusyEnvironmentCountsEveryCall: an adaptive environment
// that makes many calls per report interval (50 a second, with the
// sampling factor at 4) counts every call at weight 1, since it reports
// once a second whatever it counts; the draw of one call in 4 still
// decides which calls are samples (the standard error and MinRequests go
// by those, as with sampling). One that calls once a second samples one
// call in 4, each standing for 4.
func TestAdaptiveBusyEnvironmentCountsEveryCall(t *testing.T) {
	at := adaptiveAt
	t.Run("busy", func(t *testing.T) {
		store := newFakeStore()
		store.states["partner"] = adaptiveFleetRate(at)
		// Rand 0.5: sampling starts half a bucket after the first call,
		// and no call wins the draw of one in 4 (0.5 × 4 ≥ 1).
		b := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, StoreTimeout: 10 * time.Second, Rand: func() float64 { return 0.5 }})
		for i := range 200 { // 50 a second for 4 s
			now := at.Add(time.Duration(i) * 20 * time.Millisecond)
			if !call(t, b, now, breaker.Success) {
				t.Fatalf("call at %v rejected", now.Sub(at))
			}
			flushAt(t, b, now)
		}
		for s := 5; s < 8; s++ {
			flushAt(t, b, at.Add(time.Duration(s)*time.Second))
		}
		// The calls of the first bucket are sampled (this environment's
		// rate is not known yet) and none wins the draw; from the second
		// on (150 calls), every call counts, once, but for the 25 between
		// the end of the first window (1.5 s) and the next bucket: they
		// cover the end of their bucket only, and are dropped. Every
		// later bucket is reported whole, at its end, although a report
		// falls due mid-bucket (a second after the last one).
		got := fleetTotals(store.state("partner"), at.Unix())
		if got.Requests != 125 || got.Successes != 125 || got.Samples != 0 {
			t.Errorf("fleet counts %+v, want the 125 calls of the second bucket's first half and of the third and fourth buckets at weight 1, none a sample", got)
		}
		if n := store.reports.Load(); n > 6 {
			t.Errorf("%d reports over 4 s of calls, want at most one a second", n)
		}
	})
	t.Run("one call a second", func(t *testing.T) {
		store := newFakeStore()
		store.states["partner"] = adaptiveFleetRate(at)
		b := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, StoreTimeout: 10 * time.Second, Rand: func() float64 { return 0 }})
		for s := range 3 {
			now := at.Add(time.Duration(s) * time.Second)
			call(t, b, now, breaker.Success)
			flushAt(t, b, now)
		}
		flushAt(t, b, at.Add(4*time.Second))
		got := fleetTotals(store.state("partner"), at.Unix())
		if got.Samples != 3 || got.Successes != 4*got.Samples || got.Requests != got.Successes {
			t.Errorf("fleet counts %+v, want samples standing for 4 calls each", got)
		}
	})
}

// TestAdaptiveCountsACallInTheBucketItWentIn: a sampled call admitted at
// the end of one bucket that fails in the next counts in the bucket it was
// admitted in: the partner turned it away then, and a probe bucket must
// not show a failure of the bucket before it.
func TestAdaptiveCountsACallInTheBucketItWentIn(t *testing.T) {
	at := adaptiveAt
	store := newFakeStore()
	store.states["partner"] = adaptiveFleetRate(at)
	b := newBreaker(t, breaker.Settings{Store: store, Adaptive: true, StoreTimeout: 10 * time.Second, Rand: func() float64 { return 0 }})
	if !call(t, b, at, breaker.Success) {
		t.Fatal("first call rejected")
	}
	p, err := b.Allow(ctx, at.Add(990*time.Millisecond))
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	b.Done(ctx, at.Add(1050*time.Millisecond), p, breaker.Failure)
	for _, s := range []time.Duration{1100 * time.Millisecond, 2200 * time.Millisecond, 3300 * time.Millisecond} {
		flushAt(t, b, at.Add(s))
	}
	st := store.state("partner")
	first, next := st.Buckets[at.Unix()%breaker.FleetSlots], st.Buckets[(at.Unix()+1)%breaker.FleetSlots]
	if first.Num != at.Unix() || first.Failures != 4 || first.Successes != 4 || first.Requests != 8 {
		t.Errorf("bucket of the calls %+v, want both calls (weight 4), the failure included", first)
	}
	if next.Num == at.Unix()+1 && next.Failures != 0 {
		t.Errorf("bucket after %+v: holds the failure of a call admitted before it", next)
	}
}
