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
	// throttling: while the partner turns calls away, the fleet admits K
	// times the calls it accepts. At the fixed point the admitted calls
	// then fail 1 − 1/K = 13% of the time, clearly apart from the
	// adaptiveHealthy share that says the partner has room again, and the
	// partner sees 15% more attempts than it serves: the price of finding
	// out, without a probe, that it serves more.
	adaptiveHeadroom = 1.15
	// adaptiveMinAdmit is the share of calls admitted however badly the
	// partner fails: the calls that see it heal.
	adaptiveMinAdmit = 0.02
	// adaptiveHealthy: while the fleet throttles, admitted calls of which
	// at most this share fail (over the latest adaptiveHealthySamples
	// sampled outcomes) say the partner has room for more than is
	// admitted; the fleet then doubles the share it admits, and admits
	// every call at once if none failed or the share is half of them or
	// more.
	adaptiveHealthy = 0.05
	// adaptiveHealthySamples is the number of sampled outcomes the latest
	// counts must hold before they can say the partner has room: at the
	// fixed point (13% of admitted calls failing) 100 outcomes with at
	// most 5% failures happen 0.7% of the time, none failing about one
	// time in a million.
	adaptiveHealthySamples = 100
	// adaptiveLatestBuckets is how far back the latest counts go, from
	// now's bucket, to hold adaptiveHealthySamples outcomes.
	adaptiveLatestBuckets = 3
	// adaptiveReadsPerTTL: while the fleet watches, an adaptive breaker
	// reads the fleet state every CacheTTL / adaptiveReadsPerTTL, so that
	// the share it admits follows the fleet's counts within a quarter of
	// a second rather than a second, at the start of an outage and when
	// the partner recovers.
	adaptiveReadsPerTTL = 4
	// adaptiveStartZ is how many standard errors above FailureRatio the
	// fleet's estimated failure ratio must be for the fleet to start
	// throttling.
	adaptiveStartZ = 2.0
)

// admitShareLocked returns the share of calls the fleet admits at now, by
// the counts in the snapshot held.
//
// Over the rolling window (the FleetSlots buckets ending with now's), R
// is the calls that asked to go (admitted or not), A and F the admitted
// calls' successes and failures, and prev = (A + F) / R the share the
// fleet admitted then. The latest counts are those of the newest buckets,
// from now's back, that together hold adaptiveHealthySamples outcomes
// (at most adaptiveLatestBuckets buckets).
//
//   - No failure in the window: every call goes.
//   - The fleet admitted every call (prev ≥ 1 − adaptiveHealthy): it
//     starts throttling only when the failure ratio is adaptiveStartZ (2)
//     standard errors above FailureRatio over at least MinRequests samples
//     (fleetAboveLocked), so that a partial outage is left to the retry
//     budgets; otherwise every call goes.
//   - The fleet throttles, and the latest admitted calls fail at most
//     adaptiveHealthy of the time: the partner has room for more than is
//     admitted, and the share doubles (from the share admitted in the
//     latest counts); every call goes if none of them failed, or if the
//     share admitted was half of them or more.
//   - Otherwise it admits K × A / R (the Google SRE book's client-side
//     throttling: K times what the partner accepts), at most 2 × prev, at
//     least adaptiveMinAdmit.
func (b *Breaker) admitShareLocked(now time.Time) float64 {
	cur := b.bucketOf(now)
	var win Bucket
	var recent [adaptiveLatestBuckets]Bucket // recent[i]: bucket cur − i
	for _, bk := range b.snap.Buckets {
		if bk.Num <= cur-FleetSlots || bk.Num > cur {
			continue
		}
		win.add(bk)
		if i := cur - bk.Num; i < adaptiveLatestBuckets {
			recent[i] = bk
		}
	}
	if win.Failures == 0 || win.Requests == 0 {
		return 1
	}
	prev := math.Min(1, float64(win.Successes+win.Failures)/float64(win.Requests))
	if prev >= 1-adaptiveHealthy {
		if !b.fleetAboveLocked(now, adaptiveStartZ) {
			return 1
		}
	} else {
		var latest Bucket
		for _, bk := range recent {
			if latest.Samples >= adaptiveHealthySamples {
				break
			}
			latest.add(bk)
		}
		if latest.Samples >= adaptiveHealthySamples && latest.Requests > 0 &&
			float64(latest.Failures) <= adaptiveHealthy*float64(latest.Successes+latest.Failures) {
			admitted := float64(latest.Successes+latest.Failures) / float64(latest.Requests)
			if admitted >= 0.5 || latest.Failures == 0 {
				return 1
			}
			return math.Max(adaptiveMinAdmit, 2*admitted)
		}
	}
	share := adaptiveHeadroom * float64(win.Successes) / float64(win.Requests)
	share = math.Min(share, 2*prev)
	return math.Min(1, math.Max(adaptiveMinAdmit, share))
}

// add adds c's counts to b's (Num aside).
func (b *Bucket) add(c Bucket) {
	b.Requests += c.Requests
	b.Successes += c.Successes
	b.Failures += c.Failures
	b.Samples += c.Samples
}

// throttleLocked decides whether adaptive throttling rejects a call that
// the closed fleet would admit at now. While the fleet throttles it
// rejects every retry: the partner turned the attempt before it away, the
// share admitted already carries K times what the partner accepts, and a
// retry admitted takes the place of a first attempt, which the fleet's
// counts do not see (retries are not sampled): admitted, retries would
// lower the accepted share the law measures, and the share with it.
func (b *Breaker) throttleLocked(now time.Time, retry bool) error {
	if !b.s.Adaptive || !b.samplingLocked(now) {
		return nil
	}
	share := b.admitShareLocked(now)
	if share >= 1 || (!retry && b.randLocked() < share) {
		return nil
	}
	return &OpenError{Name: b.name, State: Closed, RetryAfter: b.s.CacheTTL, Throttled: true, Admitting: share}
}
