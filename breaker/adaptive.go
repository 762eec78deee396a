package breaker

import (
	"math"
	"time"
)

// Adaptive throttling (Settings.Adaptive): fleet-wide client-side
// throttling over the fleet's sampled counts. See "Adaptive throttling" in
// the package documentation and docs/ARCHITECTURE.md for the control law
// and why it settles instead of oscillating. These are fixed by the design.
const (
	// adaptiveHeadroom is K in the Google SRE book's client-side
	// throttling: the fleet admits K times the calls the partner accepts.
	// Its admitted calls then fail 1 − 1/K = 20% of the time at the fixed
	// point, far enough above adaptiveHealthy that sampling noise does not
	// make the fleet believe the partner healed.
	adaptiveHeadroom = 1.2
	// adaptiveMinAdmit is the share of calls admitted however badly the
	// partner fails: the probes that see it heal.
	adaptiveMinAdmit = 0.02
	// adaptiveHealthy: when fewer than this share of the admitted calls
	// fail, the partner has room again: the fleet admits twice the share it
	// admitted (slow start), and everything once that is all.
	adaptiveHealthy = 0.05
	// adaptiveMinSamples is the number of sampled outcomes the throttle
	// needs before it changes the share admitted.
	adaptiveMinSamples = 20
	// adaptiveBuckets is how many buckets (the current one included) the
	// throttle's estimate covers: a few seconds, so that it follows the
	// partner within seconds in both directions.
	adaptiveBuckets = 3
)

// admitShareLocked returns the share of calls the fleet admits at now, by
// the counts in the snapshot held, over the latest adaptiveBuckets buckets:
// R the calls that asked to go (admitted or not), A and F the admitted
// calls' successes and failures, and prev = (A + F) / R the share the fleet
// admitted then.
//
// The fleet throttles only in a major outage: while it admits every call
// (prev ≈ 1) it starts only when the hard-stop breaker would trip
// (fleetTripsLocked), so that a partial outage (failures under
// FailureRatio) is left to the retry budgets. Once it throttles, the share
// is K × A / R (the Google SRE book's client-side throttling: admitting K
// times what the partner accepts), kept within [prev / 2, 2 × prev] so
// that a few unlucky samples cannot shut the fleet down, and at least
// adaptiveMinAdmit; it admits everything again as soon as the latest
// bucket's admitted calls fail less than adaptiveHealthy of the time.
func (b *Breaker) admitShareLocked(now time.Time) float64 {
	cur := b.bucketOf(now)
	var req, acc, fail, n int64
	var last Bucket // the latest complete bucket
	for _, bk := range b.snap.Buckets {
		if bk.Num > cur-adaptiveBuckets && bk.Num <= cur {
			req += bk.Requests
			acc += bk.Successes
			fail += bk.Failures
			n += bk.Samples
		}
		if bk.Num == cur-1 {
			last = bk
		}
	}
	if fail == 0 || req == 0 {
		return 1
	}
	prev := math.Min(1, float64(acc+fail)/float64(req))
	throttling := prev < 1-adaptiveHealthy
	if !throttling {
		// It starts when the hard-stop breaker would trip.
		if !b.fleetTripsLocked(now) {
			return 1
		}
	} else if last.Samples >= adaptiveMinSamples && float64(last.Failures) < adaptiveHealthy*float64(last.Successes+last.Failures) {
		// The latest bucket's admitted calls succeeded: the partner has
		// recovered, or has room for more than was admitted.
		return 1
	}
	share := adaptiveHeadroom * float64(acc) / float64(req)
	share = math.Min(math.Max(share, prev/2), 2*prev)
	return math.Min(1, math.Max(adaptiveMinAdmit, share))
}

// throttleLocked decides, for a call that the closed fleet would admit,
// whether adaptive throttling rejects it; the call has been sampled (as a
// request) already.
func (b *Breaker) throttleLocked(now time.Time) error {
	if !b.s.Adaptive || !b.samplingLocked(now) {
		return nil
	}
	share := b.admitShareLocked(now)
	if share >= 1 || b.randLocked() < share {
		return nil
	}
	return &OpenError{Name: b.name, State: Closed, RetryAfter: b.s.CacheTTL, Throttled: true, Admitting: share}
}
