package breaker

import (
	"math"
	"time"
)

// Adaptive throttling (Settings.Adaptive): fleet-wide client-side
// throttling over the fleet's counts, in probe and base buckets. See
// "Adaptive throttling" in the package documentation and
// docs/ARCHITECTURE.md for the control law and why it settles instead of
// oscillating. These are fixed by the design.
const (
	// adaptiveBaseHeadroom is K in base buckets (even bucket numbers):
	// while the partner turns calls away, the fleet admits K times the
	// share of calls it serves, as estimated from the buckets in which it
	// turned calls away.
	adaptiveBaseHeadroom = 1.0
	// adaptiveProbeHeadroom is K in probe buckets (odd bucket numbers):
	// enough above the estimate that the partner, still at the capacity
	// it had, turns some of the admitted calls away (15% of them), so
	// that a probe bucket whose admitted calls all succeed says it has
	// more, and a probe bucket it turned calls away in says exactly what
	// it serves (a partner at capacity serves its capacity whatever is
	// admitted above it). Over a probe and a base bucket the fleet sends
	// the partner about 1.09 times what it serves.
	adaptiveProbeHeadroom = 1.175
	// adaptiveStartHeadroom is K while no settled bucket gives an
	// estimate yet (the first seconds of throttling), over the counts of
	// the window's buckets before the current one: the seconds in which
	// every call went read low, since retries, which the counts do not
	// see, took part of the partner's capacity then.
	adaptiveStartHeadroom = 1.3
	// adaptiveProbeSamples is the number of sampled outcomes the
	// estimate, and a bucket that says the partner recovered, need.
	adaptiveProbeSamples = 50
	// adaptiveEstimateBuckets is how many buckets in which the partner
	// turned calls away, the latest in the rolling window, the estimate
	// reads.
	adaptiveEstimateBuckets = 5
	// adaptiveSettledBuckets: a bucket counts for the estimate or a
	// verdict when it and the adaptiveSettledBuckets − 1 before it were
	// throttled: it was throttled from its start (the bucket in which
	// throttling starts, fed by first-window reports, looks throttled
	// but reads low).
	adaptiveSettledBuckets = 3
	// adaptiveVerdictLookback is how far back, in buckets, the latest
	// bucket that can say the partner recovered is looked for.
	adaptiveVerdictLookback = 4
	// adaptiveMinAdmit is the share of calls admitted however badly the
	// partner fails: the calls that see it heal.
	adaptiveMinAdmit = 0.02
	// adaptiveHealthy: a bucket in which the fleet admitted at least
	// 1 − adaptiveHealthy of the calls was not throttled; over the
	// window, such a share means the fleet is not throttling, and it
	// starts only on the start test. Failures in at most this share of
	// an unthrottled bucket's outcomes do not keep the fleet throttling.
	adaptiveHealthy = 0.05
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
	// adaptiveCensusCalls: an adaptive environment making at least
	// adaptiveCensusCalls × k calls per report interval, with the
	// sampling factor at k, counts every call (see sampleLocked).
	adaptiveCensusCalls = 3
)

// probeBucket reports whether the fleet probes in bucket n: odd buckets
// probe, even ones are base buckets. Every environment knows the phase
// from the bucket number.
func probeBucket(n int64) bool { return n%2 != 0 }

// headroom returns K in bucket n: adaptiveProbeHeadroom in probe buckets,
// adaptiveBaseHeadroom in base ones.
func headroom(n int64) float64 {
	if probeBucket(n) {
		return adaptiveProbeHeadroom
	}
	return adaptiveBaseHeadroom
}

// admitShareLocked returns the share of calls the fleet admits at now, by
// the counts in the snapshot held.
//
// Over the rolling window (the FleetSlots buckets ending with now's), R
// is the calls that asked to go (admitted or not), A and F the admitted
// calls' successes and failures, and prev = (A + F) / R the share the
// fleet admitted then. A bucket was throttled when the fleet admitted
// less than 1 − adaptiveHealthy of its calls, and is settled when it and
// the adaptiveSettledBuckets − 1 buckets before it were throttled.
//
//   - No failure in the window: every call goes.
//   - The fleet admitted every call (prev ≥ 1 − adaptiveHealthy): it
//     starts throttling only when the failure ratio is adaptiveStartZ (2)
//     standard errors above FailureRatio over at least MinRequests samples
//     (fleetAboveLocked), so that a partial outage is left to the retry
//     budgets; otherwise every call goes.
//   - The estimate is A / R over the latest adaptiveEstimateBuckets
//     complete settled buckets in which the partner turned calls away: it
//     served what it could, so A / R there is its capacity as a share of
//     the calls (a probe bucket, above the estimate, is one such bucket
//     when nothing changed). Settled buckets newer than those whose
//     admitted calls all succeeded raise it to their A / R, a lower
//     bound; without any of either, the fleet admits
//     adaptiveStartHeadroom × A / R of the window's buckets before the
//     current one (of the whole window if only the current one has
//     counts: see the default case below).
//   - The partner has recovered when the latest complete bucket that can
//     say so (one not throttled, or a settled probe bucket newer than a
//     bucket the estimate reads, so that it probed above a measured
//     capacity), holding adaptiveProbeSamples sampled outcomes, saw no
//     failure (at most adaptiveHealthy of its outcomes if it was not
//     throttled), and no bucket after it, now's included, saw any (more
//     than adaptiveHealthy after an unthrottled one): every call goes.
//     If a later bucket saw failures (a probe below the partner's
//     capacity, since the estimate trailed, or whose few failures the
//     sample missed, made the fleet admit every call, and the partner
//     turned calls away at once), the estimate is raised to the probe's
//     accepted share instead; if that failure came in the bucket right
//     after the probe, the calls admitted in it count against its share
//     for the rest of it (restOfBucketLocked).
//   - Otherwise the fleet admits adaptiveProbeHeadroom × the estimate in
//     probe buckets and adaptiveBaseHeadroom × it in base buckets, at
//     most 2 × prev, at least adaptiveMinAdmit.
func (b *Breaker) admitShareLocked(now time.Time) float64 {
	cur := b.bucketOf(now)
	var win Bucket
	var at [FleetSlots]Bucket // at[i]: bucket cur − i
	var throttled [FleetSlots]bool
	for _, bk := range b.snap.Buckets {
		if bk.Num <= cur-FleetSlots || bk.Num > cur {
			continue
		}
		win.add(bk)
		i := cur - bk.Num
		at[i] = bk
		throttled[i] = bk.Requests > 0 && float64(bk.Successes+bk.Failures) < (1-adaptiveHealthy)*float64(bk.Requests)
	}
	if win.Failures == 0 || win.Requests == 0 {
		return 1
	}
	prev := math.Min(1, float64(win.Successes+win.Failures)/float64(win.Requests))
	if prev >= 1-adaptiveHealthy && !b.fleetAboveLocked(now, adaptiveStartZ) {
		return 1
	}
	settled := func(i int64) bool {
		if i+adaptiveSettledBuckets > FleetSlots {
			return false
		}
		for j := i; j < i+adaptiveSettledBuckets; j++ {
			if !throttled[j] {
				return false
			}
		}
		return true
	}
	// The estimate reads the latest adaptiveEstimateBuckets settled
	// buckets in which the partner turned calls away: it served what it
	// could, so their accepted share is what it serves. A settled bucket
	// whose admitted calls all succeeded, newer than those, says only
	// that it serves at least its accepted share.
	var est Bucket
	measured := int64(0) // the oldest bucket the estimate reads
	lower := 0.0
	for i, n := int64(1), 0; i < FleetSlots && n < adaptiveEstimateBuckets; i++ {
		switch {
		case !settled(i) || at[i].Requests == 0:
		case at[i].Failures == 0:
			if n == 0 && at[i].Samples >= adaptiveProbeSamples {
				lower = math.Max(lower, float64(at[i].Successes)/float64(at[i].Requests))
			}
		default:
			est.add(at[i])
			measured = i
			n++
		}
	}
	var estimate float64
	switch {
	case est.Samples >= adaptiveProbeSamples:
		estimate = math.Max(lower, float64(est.Successes)/float64(est.Requests))
	case lower > 0:
		estimate, measured = lower, 0
	default:
		// The bucket in progress is left out while an earlier one has
		// counts: a first-come, first-served partner serves the start
		// of each second, and the counts that reach the current bucket
		// before it ends come from its start, so they read high (38
		// successes in 39 requests in one Lambda run, where the partner
		// served 30% of the calls).
		var done Bucket
		for _, bk := range at[1:] {
			done.add(bk)
		}
		if done.Requests == 0 {
			done = win
		}
		share := adaptiveStartHeadroom * float64(done.Successes) / float64(done.Requests)
		return math.Min(1, math.Max(adaptiveMinAdmit, math.Min(share, 2*prev)))
	}
	later := at[0] // the buckets after the one looked at
	for i := int64(1); i <= adaptiveVerdictLookback; i++ {
		bk := at[i]
		if bk.Samples >= adaptiveProbeSamples && (!throttled[i] || (probeBucket(cur-i) && settled(i) && i < measured)) {
			if !throttled[i] {
				// Every call went then: the fleet stays there unless
				// more than adaptiveHealthy of the calls fail.
				if failingShare(bk) <= adaptiveHealthy && failingShare(later) <= adaptiveHealthy {
					return 1
				}
			} else if bk.Failures == 0 {
				if later.Failures == 0 {
					return 1
				}
				estimate = math.Max(estimate, float64(bk.Successes)/float64(bk.Requests))
				if i == 1 {
					return b.restOfBucketLocked(now, cur, &at, estimate)
				}
			}
			break
		}
		later.add(bk)
	}
	share := math.Min(headroom(cur)*estimate, 2*prev)
	return math.Min(1, math.Max(adaptiveMinAdmit, share))
}

// restOfBucketLocked returns the share the fleet admits for the rest of
// now's bucket, cur, after a failure cancelled a verdict of the bucket before
// (a probe that saw no failure): every call went from this bucket's start
// until the failure, and what was admitted then counts against the
// bucket's share, estimate × the calls a bucket holds (the most of the
// four buckets before counted), the rest spread over the rest of the
// bucket, at least adaptiveMinAdmit and at most what the law admits in
// the bucket. A partner that serves its capacity per second, first come,
// first served, served all of it to those calls, so the rest of the
// bucket would be turned away; a smoother one turns calls away at once,
// and few were admitted by then. See "Adaptive throttling" in
// docs/ARCHITECTURE.md.
func (b *Breaker) restOfBucketLocked(now time.Time, cur int64, at *[FleetSlots]Bucket, estimate float64) float64 {
	k := headroom(cur)
	var calls int64
	for _, bk := range at[1:5] {
		calls = max(calls, bk.Requests)
	}
	if calls <= 0 {
		// Not met (the probe before has counts); it keeps a zero out
		// of the division below.
		return k * estimate
	}
	w := b.s.Window / FleetSlots
	left := 1 - float64(now.Sub(b.bucketStart(cur)))/float64(w)
	budget := estimate*float64(calls) - float64(at[0].Successes+at[0].Failures)
	share := budget / (float64(calls) * math.Max(left, 0.05))
	return math.Max(adaptiveMinAdmit, math.Min(k*estimate, share))
}

// failingShare returns the share of b's outcomes that failed (0 without
// any).
func failingShare(b Bucket) float64 {
	if b.Failures == 0 {
		return 0
	}
	return float64(b.Failures) / float64(b.Successes+b.Failures)
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
// lower the accepted share the law measures, and the share with it. While
// every call goes, a retry tells that this environment is back from a
// wait, which may have taken its first window (restartSampleDelayLocked).
func (b *Breaker) throttleLocked(now time.Time, retry bool) error {
	if !b.s.Adaptive || !b.samplingLocked(now) {
		return nil
	}
	share := b.admitShareLocked(now)
	if retry && share >= 1 {
		b.restartSampleDelayLocked(now)
	}
	if share >= 1 || (!retry && b.randLocked() < share) {
		return nil
	}
	return &OpenError{Name: b.name, State: Closed, RetryAfter: b.s.CacheTTL, Throttled: true, Admitting: share}
}
