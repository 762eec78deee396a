package breaker

import (
	"context"
	"errors"
	"math"
	"time"
)

// The fleet's counting protocol (see "Shared mode" in the package
// documentation and docs/ARCHITECTURE.md). These are fixed by the design,
// not settings: each is derived from the limits of one DynamoDB item.
const (
	// quietTTLFactor multiplies CacheTTL while the fleet is quiet (no
	// failure anywhere for watchWindows × Window) and closed: an
	// environment making a call a second reads the state about once every
	// 16 calls instead of once a second, whatever the fleet's size. A
	// failure makes the environment read at once, so an open fleet is
	// still learnt by the first call that fails.
	quietTTLFactor = 15
	// watchWindows is how long, in Windows, one failure keeps the fleet
	// counting.
	watchWindows = 2
	// targetSamplesPerSecond is the fleet-wide rate of sampled calls the
	// sampling factor aims at: a quarter of the 1,000 writes per second one
	// DynamoDB item takes, so that reports, transitions and alarms together
	// stay far below it whatever the fleet's size.
	targetSamplesPerSecond = 250
	// initialSampling is the sampling factor (one call in initialSampling)
	// while the fleet's rate is not known yet: the first bucket of a
	// watch. A thousand environments failing at once then send about 250
	// reports in that second, not 1,000.
	initialSampling = 4
	// thinGrowth, maxThin and thinHold size the thinning of an
	// environment's sampling after a Report of its was throttled: a fleet
	// so large that a watch's first second sends more reports than the
	// state item can write (about 4,000 environments failing at once,
	// one call in initialSampling sampled) has many refused, and the reports that land are
	// the early ones of each second, which against a first-come,
	// first-served partner are its successes. Each refused environment
	// samples at most one call in initialSampling × thin, thin growing
	// thinGrowth times per refusal up to maxThin, until thinHold passes
	// without one.
	thinGrowth = 8
	maxThin    = 128
	thinHold   = 10 * time.Minute
	// tripZ is how many standard errors above FailureRatio the fleet's
	// estimated failure ratio must be to trip: the estimate comes from a
	// sample, and without the margin a fleet failing 30% of calls would
	// trip on noise whenever a window holds few calls (at 20 samples, 4.8%
	// of the time; with the margin, 0.03%).
	tripZ = 1.0
	// coldLoadFactor multiplies StoreTimeout for a Load after a long idle
	// (the first one of an environment, or one after a Lambda freeze):
	// its connection to the store is new and the TLS handshake alone can
	// take longer than StoreTimeout.
	coldLoadFactor = 4
)

// pending is this environment's sampled counts not yet reported.
type pending struct {
	first                                  int64 // bucket number of the oldest count, 0 when empty
	requests, successes, failures, samples int64
	// sawFailure: a failure, sampled or not, was seen since the last
	// report; the next report extends the fleet's watch.
	sawFailure bool
	// piece: the counts began well after the start of their bucket
	// because the counts before them left then (see emptyPendingLocked
	// and pendStartLocked): they cover its end only. An empty pending
	// with first set marks where such counts would begin.
	piece bool
}

func (p *pending) empty() bool { return p.requests == 0 && p.samples == 0 }

// merge adds q's counts to p's.
func (p *pending) merge(q pending) {
	if p.first == 0 || (q.first != 0 && q.first < p.first) {
		p.first = q.first
	}
	p.requests += q.requests
	p.successes += q.successes
	p.failures += q.failures
	p.samples += q.samples
	p.sawFailure = p.sawFailure || q.sawFailure
	p.piece = p.piece || q.piece
}

// dropOld drops counts older than the rolling window ending with bucket
// cur (an environment frozen with counts pending): they would be reported
// into a bucket they were not gathered in.
func (p *pending) dropOld(cur int64) {
	if p.first != 0 && p.first <= cur-FleetSlots {
		*p = pending{sawFailure: p.sawFailure}
	}
}

// Flush sends this environment's sampled fleet counts if its last report
// is at least a second old at now, and trips the fleet if the counts
// answered call for it. A Lambda handler calls it before returning (with
// retry.Executor.Flush, which passes the Executor's clock), since the
// execution environment may be frozen afterwards; calling it after every
// invocation costs nothing while the fleet is quiet (nothing is sampled)
// and at most one write a second otherwise. An environment making a call
// or more per report interval holds its first report of a watch until it
// has counted a whole interval (docs/ARCHITECTURE.md, "Counting for the
// law"): a Flush before then sends nothing, and the counts go with the
// first Flush after it. Without a Store, while the Store has failed
// (the local state machine decides), or with nothing due, Flush writes
// nothing. It returns the Store's fault (an error satisfying
// errors.Is(err, ErrStore)) or ctx's error.
func (b *Breaker) Flush(ctx context.Context, now time.Time) error {
	if b.store == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	b.mu.Lock()
	b.observeLocked(now)
	j := b.takeReportLocked(now, false)
	b.mu.Unlock()
	if j.op == opNone {
		return nil
	}
	return b.runReport(ctx, j)
}

// bucketStart returns when fleet bucket n begins (bucketOf's inverse).
func (b *Breaker) bucketStart(n int64) time.Time {
	return time.UnixMilli(n * (b.s.Window.Milliseconds() / FleetSlots))
}

// bucketOf returns the number of the fleet bucket now falls in: Unix
// milliseconds divided by the bucket width, floored.
func (b *Breaker) bucketOf(now time.Time) int64 {
	w := b.s.Window.Milliseconds() / FleetSlots
	ms := now.UnixMilli()
	n := ms / w
	if ms%w < 0 {
		n--
	}
	return n
}

// watchingLocked reports whether the fleet, as last read, is counting at
// now.
func (b *Breaker) watchingLocked(now time.Time) bool {
	return now.Before(b.snap.WatchUntil)
}

// samplingLocked reports whether this environment samples its calls at
// now: it follows the fleet, which is closed and watching, with no
// override in force.
func (b *Breaker) samplingLocked(now time.Time) bool {
	if !b.sharedLocked() || b.state != Closed || !b.watchingLocked(now) {
		return false
	}
	ov, _ := b.overrideLocked(now)
	return ov == NoOverride
}

// sampleLocked decides whether a first attempt asking to go at now is
// counted. It returns the call's weight (0 if not counted, otherwise the
// number of calls it stands for) and whether it is one of the samples the
// fleet's standard error and MinRequests go by. The call counts as a
// request when its fate is known (countRequestLocked): at its Done if it
// is admitted, at once if adaptive throttling rejects it, so that a
// bucket's requests are the calls whose outcome it holds plus those
// rejected, never calls still in flight.
//
// One call in k (samplingFactorLocked) is sampled, at weight k. An
// adaptive environment that makes adaptiveCensusCalls × k calls or more
// per report interval counts every call instead, at weight 1: it reports
// once per interval whether it counts one call in k or all of them, so
// the state item sees no more writes, and adaptive throttling, which
// tells whether a probe's admitted calls all succeeded, sees every
// failure. The draw of one call in k still picks its samples, so that a
// bucket's sample count, which the standard error goes by (Kish's
// effective sample size, see fleetCountsLocked), is what sampling would
// have drawn: for counts without sampling error that understates the
// precision, never overstates it, whatever mix of environments a bucket
// holds. The hard stop always samples.
func (b *Breaker) sampleLocked(now time.Time) (weight int32, sample bool) {
	if !b.samplingLocked(now) {
		b.sampleFrom, b.firstDone = time.Time{}, false
		return 0, false
	}
	if b.s.Adaptive {
		b.countAskLocked(now)
	}
	if b.sampleFrom.IsZero() {
		b.drawSampleFromLocked(now)
	}
	if now.Before(b.sampleFrom) {
		return 0, false
	}
	b.firstAsked = true
	k := b.samplingFactorLocked(now)
	drawn := k <= 1 || b.randLocked()*float64(k) < 1
	if b.s.Adaptive && k > 1 && b.countsEveryCallLocked(now, k) {
		return 1, drawn
	}
	if !drawn {
		return 0, false
	}
	return int32(k), true
}

// countAskLocked counts a first attempt asking to go at now in this
// environment's calls per bucket.
func (b *Breaker) countAskLocked(now time.Time) {
	cur := b.bucketOf(now)
	if cur != b.askBucket {
		b.askPrev = 0
		if cur == b.askBucket+1 {
			b.askPrev = b.askCur
		}
		b.askBucket, b.askCur = cur, 0
	}
	b.askCur++
}

// countsEveryCallLocked reports whether this adaptive environment counts
// every call at now rather than one in k: whether it made at least
// adaptiveCensusCalls × k calls per report interval, by its first attempts
// in the bucket before now's or its admitted calls over the rolling
// window. Sampling one call in k, it would then draw a sample in nearly
// every report interval (95% of them at 3k calls) and report as often.
func (b *Breaker) countsEveryCallLocked(now time.Time, k int64) bool {
	perInterval := float64(b.askPrev) * float64(b.s.ReportInterval) / float64(b.s.Window/FleetSlots)
	local := b.win.rolling(b.win.number(now.UnixNano()))
	perInterval = max(perInterval, float64(local.Requests)*float64(b.s.ReportInterval)/float64(b.s.Window))
	return perInterval >= adaptiveCensusCalls*float64(k)
}

// drawSampleFromLocked draws when this environment, which learnt of the
// fleet's watch at now, starts sampling, and whether its first report
// holds exactly its first report interval of sampling (its first window,
// see closeFirstLocked).
//
// An environment learns of a watch from a failure of its own, at a moment
// correlated with the failures: a partner that serves its capacity per
// second, first come, first served, fails the end of every second, and
// calls queued behind the failed one (one invocation at a time, as in
// Lambda; the most recently idle environment under scale-out) run at once,
// in the same failing part of the second. Sampling from that moment and
// reporting at once, the first samples the fleet saw were mostly failures:
// a fleet failing 30% of its calls (cmd/outagesim's partial outage) was
// estimated far above 50% in its first second of counting and the hard
// stop opened within a second in every run of the busy fleet. So an
// environment that makes at least a call per report interval (its own
// calls over the window say so) starts sampling after a random delay of up
// to one bucket width if it failed within one, and its first report covers
// its first report interval of sampling whole, whatever the pattern of the
// failures within it. An environment whose calls are further apart needs
// neither (each of its reports covers one call) and starts at once:
// holding its sample until its next call would cost a sparse fleet the
// samples its trip needs. Its sampling still starts at a moment its
// failure chose, and its next calls follow it (calls queued behind the
// failure, or behind a retry's wait of about the partner's period), so
// the environments that learn in the failing end of a second sample that
// end of it first: in cmd/outagesim's Lambda fleet (1 call a second, most
// environments under a call per report interval) those learning in each
// second of a partial outage (40% of first attempts failing) added
// failures only, and the hard stop opened about 2 s in. So such an
// environment that failed within a bucket samples from the start of the
// next bucket: the environments that sample are then the same over every
// bucket. That holds in the watch's first bucket too, which would
// otherwise hold only the failing end of the partner's second from the
// alarm on (the hard stop opened 1.2–2 s into that partial outage in 5 of
// seeds 1–20), at a price: a major outage's trip comes up to a second
// later in a fleet of such environments (docs/ARCHITECTURE.md). For the
// same reason a sparse environment that learns of the watch at a read in
// the watch's first bucket (after the alarm, so in the failing end of that
// second) samples from the next bucket too
// (docs/decisions/0004-when-sampling-starts.md). Adaptive throttling always takes the delay and the
// first window: it starts on the fleet's first seconds of counts and must
// tell a major outage from a partial one there; and an adaptive
// environment that is back from a retry's wait before it asked anything
// counts the delay again from there (restartSampleDelayLocked).
func (b *Breaker) drawSampleFromLocked(now time.Time) {
	b.sampleFrom, b.firstDone, b.firstAsked = now, true, false
	w := b.s.Window / FleetSlots
	if !b.s.Adaptive {
		local := b.win.rolling(b.win.number(now.UnixNano()))
		failed := !b.lastFailure.IsZero() && now.Sub(b.lastFailure) < w
		if time.Duration(local.Requests)*b.s.ReportInterval < b.s.Window {
			if failed || !b.countedBeforeLocked(now) {
				// Learnt at a moment a failure chose, or in the watch's
				// first bucket, after the alarm: sample from the next
				// bucket on.
				b.sampleFrom = b.bucketStart(b.bucketOf(now) + 1)
			}
			return // fewer than one call per report interval
		}
		if !failed {
			b.firstDone = false
			return
		}
	}
	b.sampleDelay = min(time.Duration(b.randLocked()*float64(w)), w-1)
	b.sampleFrom = now.Add(b.sampleDelay)
	b.firstDone = false
}

// countedBeforeLocked reports whether a bucket of the window before now's
// has counts in the snapshot held: if none has, now's bucket is the
// watch's first (as far as this environment can tell).
func (b *Breaker) countedBeforeLocked(now time.Time) bool {
	cur := b.bucketOf(now)
	for _, bk := range b.snap.Buckets {
		if bk.Num > cur-FleetSlots && bk.Num < cur && bk.Requests > 0 {
			return true
		}
	}
	return false
}

// restartSampleDelayLocked counts this adaptive environment's random delay
// before sampling again, from now, the Allow of a retry while the fleet
// admits every call, if it has asked no first attempt to go since its
// sampling start: it was away, in that retry's wait, since before its
// first window began or for all of it, and would come back in the failing
// part of a later second with calls it reports at once. The delay is the
// one drawn when it learnt of the watch (independent of everything since,
// it is as random from now as it was then). Once the fleet throttles,
// retries are rejected and the start test is behind it; there the draw
// stands. docs/decisions/0004-when-sampling-starts.md has the
// measurements.
func (b *Breaker) restartSampleDelayLocked(now time.Time) {
	if b.sampleFrom.IsZero() || b.firstDone || b.firstAsked {
		return
	}
	b.sampleFrom = now.Add(b.sampleDelay)
}

// closeFirstLocked closes this environment's first window of the watch,
// [sampleFrom, sampleFrom + the report interval), once now is past it: the
// counts it gathered become ready to report, alone; later counts wait for
// the report after.
func (b *Breaker) closeFirstLocked(now time.Time) {
	if b.sampleFrom.IsZero() || b.firstDone || now.Before(b.sampleFrom.Add(b.s.ReportInterval)) {
		return
	}
	b.firstDone = true
	saw := b.pend.sawFailure
	b.pend.sawFailure = false
	b.ready.merge(b.pend)
	b.pend = b.emptyPendingLocked(now, saw) // it goes with the next report that extends the watch
}

// emptyPendingLocked returns the pending counts left when the counts
// before them leave at now (a report, the end of the first window). For
// adaptive throttling they begin in now's bucket, and are a piece if now
// is well into it (see pendStartLocked): what follows covers the end of
// the bucket only. Counts that begin with the first call of a bucket
// after none pending are whole: nothing was taken away before them.
func (b *Breaker) emptyPendingLocked(now time.Time, saw bool) pending {
	if !b.s.Adaptive {
		return pending{sawFailure: saw}
	}
	cur := b.bucketOf(now)
	w := b.s.Window / FleetSlots
	return pending{sawFailure: saw, first: cur, piece: now.Sub(b.bucketStart(cur)) > w/10}
}

// firstOpenLocked reports whether this environment's first window of the
// watch has not closed yet: it reports nothing until it has.
func (b *Breaker) firstOpenLocked() bool { return !b.sampleFrom.IsZero() && !b.firstDone }

// countRequestLocked counts a sampled call of weight w as a request, at
// now, when its fate is known.
func (b *Breaker) countRequestLocked(now time.Time, w int32) {
	b.closeFirstLocked(now)
	if w > 0 {
		b.pendStartLocked(now)
		b.pend.requests += int64(w)
	}
}

// countsForLocked returns the counts a sampled call admitted at start and
// ending at now goes to, or nil if it is not counted. Adaptive throttling
// reads bucket by bucket, and the partner's verdict on a call is given
// when the call reaches it: a call admitted in an earlier bucket than
// now's goes to that bucket's counts if they are still held, starts the
// pending counts if there are none, and is not counted if that bucket's
// counts have gone already (a failure from the end of a bucket in which
// the partner turned calls away must not say that the next one, a probe,
// saw failures; the request goes with the outcome, so the accepted share
// of its bucket stays unbiased).
func (b *Breaker) countsForLocked(now, start time.Time) *pending {
	b.closeFirstLocked(now)
	if b.s.Adaptive && !b.firstOpenLocked() {
		if ab, cur := b.bucketOf(start), b.bucketOf(now); ab < cur {
			switch {
			case !b.ready.empty() && b.ready.first == ab:
				return &b.ready
			case b.pend.first == ab:
				return &b.pend
			case b.pend.empty() && ab > cur-FleetSlots:
				b.pend.first, b.pend.piece = ab, true
				return &b.pend
			}
			return nil
		}
	}
	b.pendStartLocked(now)
	return &b.pend
}

// pendStartLocked notes the bucket of the first count pending, after
// dropping pending counts older than the rolling window (an environment
// frozen with samples pending): they would be reported into a bucket they
// were not gathered in.
func (b *Breaker) pendStartLocked(now time.Time) {
	cur := b.bucketOf(now)
	if b.pend.empty() && b.pend.first != cur {
		// Emptied in an earlier bucket: the counts start now, whole.
		b.pend.first, b.pend.piece = 0, false
	}
	if b.pend.first != 0 && b.pend.first <= cur-FleetSlots {
		b.pend = pending{sawFailure: b.pend.sawFailure}
	}
	if b.s.Adaptive && b.pend.first != 0 && b.pend.first < cur && !b.firstOpenLocked() && b.ready.empty() &&
		b.countsEveryCallLocked(now, max(b.samplingFactorLocked(now), 1)) {
		// Adaptive throttling reads bucket by bucket (probe buckets apart
		// from base ones): the counts of an earlier bucket go alone, in
		// a report of their own, made at once. An environment that makes
		// many calls per report interval then reports once per bucket,
		// as often as before; one that makes few, whose reports hold a
		// call or two, would report more often, and does not cut.
		//
		// Counts that began well into their bucket because the counts
		// before them left then (the piece between the end of this
		// environment's first window and the next bucket, or a call
		// that ended after its bucket's counts had gone) cover the end
		// of the bucket only, and every such piece ends there:
		// reported, they would weigh the end of each bucket over its
		// start, and a partner that fails the end of every second
		// (first come, first served) would read as failing more than
		// it does. They are dropped, requests and outcomes alike. So
		// that such pieces stay rare, the counts of the current bucket
		// are not reported before the cut (see takeReportLocked), and
		// the cut's report carries the watch's extension.
		if !b.pend.piece {
			b.ready = b.pend
			b.pend = pending{}
		} else {
			b.pend = pending{sawFailure: b.pend.sawFailure}
		}
	}
	if b.pend.first == 0 {
		b.pend.first = cur
	}
}

// samplingFactorLocked returns k: one call in k is sampled, each counting
// for k. It aims at targetSamplesPerSecond fleet-wide, from the fleet's
// request rate: the requests of the complete buckets of the rolling window
// in the snapshot held (the estimates there are unbiased whatever k was
// then), over the span since the oldest of them that has counts. Counts
// land in the bucket of their report, up to the report interval after their
// calls, so one bucket can hold a the report interval of a fleet's calls
// (environments that report together): the span is never shorter than
// the report interval, nor longer than the complete buckets. While the watch is
// young the rate comes out low (k smaller: more samples, never fewer). k
// is initialSampling while no complete bucket has counts. After a
// throttled Report, k is at least initialSampling × thin (see thinGrowth).
func (b *Breaker) samplingFactorLocked(now time.Time) int64 {
	cur := b.bucketOf(now)
	var req int64
	oldest := cur
	for _, bk := range b.snap.Buckets {
		if bk.Num > cur-FleetSlots && bk.Num < cur && bk.Requests > 0 {
			req += bk.Requests
			oldest = min(oldest, bk.Num)
		}
	}
	floor := int64(1)
	if b.thin > 1 && now.Before(b.thinUntil) {
		floor = initialSampling * b.thin
	}
	if req <= 0 {
		return max(initialSampling, floor)
	}
	bucket := b.s.Window / FleetSlots
	span := min(max(time.Duration(cur-oldest)*bucket, b.s.ReportInterval), (FleetSlots-1)*bucket)
	return max(floor, int64(math.Ceil(float64(req)/span.Seconds()/targetSamplesPerSecond)))
}

// accountFleetLocked counts the outcome of a call admitted while the fleet
// is closed, and returns the store call it makes due, if any: an alarm
// when a failure finds the fleet quiet, a report when this environment's
// samples are due.
func (b *Breaker) accountFleetLocked(now time.Time, p Permit, o Outcome) job {
	if p.weight > 0 && o != Excluded {
		if q := b.countsForLocked(now, p.start); q != nil {
			q.requests += int64(p.weight)
			if o == Success {
				q.successes += int64(p.weight)
			} else {
				q.failures += int64(p.weight)
			}
			if !p.counted {
				q.samples++
			}
		}
	}
	if o == Failure {
		b.lastFailure = now
		b.pend.sawFailure = true
		if !b.watchingLocked(now) {
			return b.alarmLocked(now)
		}
	}
	return b.takeReportLocked(now, false)
}

// alarmLocked returns the alarm job after a failure found the fleet quiet,
// at most once per CacheTTL per environment.
func (b *Breaker) alarmLocked(now time.Time) job {
	if !b.reportingLocked() || b.reportBusy || (!b.lastAlarm.IsZero() && now.Before(b.lastAlarm.Add(b.s.CacheTTL))) {
		return job{}
	}
	j := job{op: opAlarm, gen: b.gen, epoch: b.snap.Epoch, now: now, prevReport: b.lastReport}
	b.lastAlarm = now
	b.lastReport = now // the alarm is this environment's report for the report interval
	b.reportBusy = true
	return j
}

// runAlarm starts the fleet's watch after a failure found it quiet. It
// reads the state first (unless it was read within CacheTTL/10), since
// another environment has most likely started the watch already; if the
// fleet is still quiet and closed, it writes a report that carries no
// counts (the failure that raised the alarm was not sampled: counting it
// would bias the estimate) and sets WatchUntil.
func (b *Breaker) runAlarm(ctx context.Context, j job) error {
	b.mu.Lock()
	fresh := j.now.Before(b.loadedAt.Add(b.s.CacheTTL / 10))
	b.mu.Unlock()
	if !fresh {
		b.staleAt.Store(0)
		b.refresh(ctx, j.now)
	}
	b.mu.Lock()
	if !b.reportingLocked() || b.gen != j.gen || b.state != Closed || b.held || b.watchingLocked(j.now) || ctx.Err() != nil {
		// No alarm after all (most often: another environment started the
		// watch): this environment wrote nothing.
		b.reportBusy = false
		if b.lastReport.Equal(j.now) {
			b.lastReport = j.prevReport
		}
		b.mu.Unlock()
		return nil
	}
	r := Report{Epoch: b.snap.Epoch, Bucket: b.bucketOf(j.now), WatchUntil: j.now.Add(watchWindows * b.s.Window)}
	b.mu.Unlock()
	return b.runReport(ctx, job{op: opReport, gen: j.gen, epoch: r.Epoch, now: j.now, report: r})
}

// reportDueLocked reports whether the report interval has passed since this
// environment's last report.
func (b *Breaker) reportDueLocked(now time.Time) bool {
	return b.lastReport.IsZero() || !now.Before(b.lastReport.Add(b.s.ReportInterval))
}

// takeReportLocked returns the report to make now, if any: the counts
// pending, once the report interval has passed since the last report (or at
// once with force); but nothing while this environment's first window of
// the watch is open, and its first window's counts alone, at once, when
// it has closed (see drawSampleFromLocked); an adaptive environment's
// counts of an earlier bucket, cut from the pending ones at the bucket's
// end, go the same way (see pendStartLocked). Counts older than the rolling
// window are dropped (see pending.dropOld). An adaptive environment that
// cuts its counts at bucket boundaries holds those of now's bucket until
// the cut, whatever the report interval says. A report also goes, with no
// counts, to extend the fleet's watch when this environment saw a failure
// that was not sampled and the watch has less than a quarter of its
// length left. The counts leave the pending ones when the report is
// decided, whatever its fate: they are never sent twice.
func (b *Breaker) takeReportLocked(now time.Time, force bool) job {
	if !b.reportingLocked() || b.reportBusy || b.held {
		return job{}
	}
	cur := b.bucketOf(now)
	b.pend.dropOld(cur)
	b.ready.dropOld(cur)
	b.closeFirstLocked(now)
	if b.firstOpenLocked() {
		return job{}
	}
	if !b.ready.empty() {
		q := b.ready
		b.ready = pending{}
		if !b.s.Adaptive {
			// The hard stop needs the first report to cover its first
			// window whole, not to hold it alone: what came after goes
			// with it (a sparse caller's next call would wait a gap).
			q.merge(b.pend)
			b.pend = pending{}
		}
		return b.reportJobLocked(now, q)
	}
	if b.s.Adaptive && !force && !b.pend.empty() && b.pend.first == cur && b.countsEveryCallLocked(now, max(b.samplingFactorLocked(now), 1)) {
		// This environment cuts its counts at bucket boundaries (see
		// pendStartLocked): the current bucket's go, whole, when the
		// next bucket's first count cuts them, once a bucket. Reported
		// when a report interval had passed, mid-bucket, they would
		// leave what follows a piece of the bucket's end, dropped.
		return job{}
	}
	watchFor := watchWindows * b.s.Window
	// An unsampled failure extends a watch that has less than a quarter
	// left, itself sampled (one in the sampling factor): a fleet that
	// fails is extending the watch with its sampled reports anyway, and a
	// thousand environments must not all write at once to do it.
	extend := b.pend.sawFailure && b.watchingLocked(now) && b.snap.WatchUntil.Sub(now) < watchFor/4
	if extend && b.pend.empty() {
		if k := b.samplingFactorLocked(now); k > 1 && b.randLocked()*float64(k) >= 1 {
			extend = false
			b.pend.sawFailure = false
		}
	}
	if (b.pend.empty() && !extend) || (!force && !b.reportDueLocked(now)) {
		return job{}
	}
	q := b.pend
	b.pend = b.emptyPendingLocked(now, false)
	return b.reportJobLocked(now, q)
}

// reportJobLocked returns the report of the counts q, made at now, into
// the bucket of q's oldest count.
func (b *Breaker) reportJobLocked(now time.Time, q pending) job {
	bucket := b.bucketOf(now)
	if b.s.Adaptive && q.first != 0 && !q.empty() {
		bucket = q.first
	}
	r := Report{
		Epoch:     b.snap.Epoch,
		Bucket:    bucket,
		Requests:  q.requests,
		Successes: q.successes,
		Failures:  q.failures,
		Samples:   q.samples,
	}
	if q.sawFailure {
		r.WatchUntil = now.Add(watchWindows * b.s.Window)
	}
	b.reportBusy = true
	b.lastReport = now
	return job{op: opReport, gen: b.gen, epoch: r.Epoch, now: now, report: r}
}

// runReport makes the report j and follows the state it answers; if the
// fleet's counts call for it (see fleetTripsLocked), it trips the fleet.
func (b *Breaker) runReport(ctx context.Context, j job) error {
	var (
		snap Snapshot
		err  error
	)
	if err = ctx.Err(); err == nil {
		snap, err = callStore(ctx, b.s.StoreTimeout, storeOpReport, func(c context.Context) (Snapshot, error) {
			return b.store.Report(c, b.name, j.report)
		})
	}
	if err == nil {
		err = validSnapshot(snap)
	}
	b.mu.Lock()
	b.observeLocked(j.now)
	b.reportBusy = false
	var (
		fault error
		trip  job
	)
	switch {
	case err == nil:
		// A report's answer carries no override (the Store contract): keep
		// the one last read.
		snap.Override, snap.OverrideUntil = b.snap.Override, b.snap.OverrideUntil
		b.lowerRead = false
		b.adoptLocked(j.now, snap, false, false, OriginFollowed)
		b.loadedAt = later(b.loadedAt, j.now)
		b.staleAt.Store(b.freshUntilLocked(j.now))
		ov, _ := b.overrideLocked(j.now)
		if ov == NoOverride && !b.s.Adaptive && b.gen == j.gen && b.sharedLocked() && b.state == Closed && b.snap.Epoch == j.epoch && b.fleetTripsLocked(j.now) {
			trip = job{
				op:    opTransition,
				gen:   b.gen,
				from:  Closed,
				epoch: b.snap.Epoch,
				next:  Snapshot{State: Open, Epoch: b.snap.Epoch + 1, OpenUntil: j.now.Add(b.openDurationLocked(0))},
			}
		}
	case errors.Is(err, ErrConflict):
		// The fleet moved to another epoch: the counts belonged to the
		// old one and are dropped. Follow the state answered (with the
		// override last read: the answer carries none), as a
		// Transition's conflict does.
		snap.Override, snap.OverrideUntil = b.snap.Override, b.snap.OverrideUntil
		b.followConflictLocked(j.now, j.epoch, snap)
	case ctx.Err() != nil:
		// The caller's context ended, not the store.
	case errors.Is(err, ErrThrottled):
		// Nothing was applied and the store still answers: stay on the
		// fleet, keep the counts for the next report (in the bucket of
		// that one), and sample fewer calls.
		if j.now.Before(b.thinUntil) {
			b.thin = min(b.thin*thinGrowth, maxThin)
		} else {
			b.thin = thinGrowth
		}
		b.thinUntil = j.now.Add(thinHold)
		if r := j.report; b.gen == j.gen && b.snap.Epoch == r.Epoch {
			back := pending{requests: r.Requests, successes: r.Successes, failures: r.Failures, samples: r.Samples, sawFailure: !r.WatchUntil.IsZero()}
			if !back.empty() {
				back.first = r.Bucket
			}
			b.pend.merge(back)
		}
		// As on the local state machine, the store is tried again a
		// CacheTTL later, not sooner: neither the next report nor a
		// Load before then.
		b.lastReport = later(b.lastReport, j.now.Add(b.s.CacheTTL-b.s.ReportInterval))
		b.staleAt.Store(max(b.staleAt.Load(), j.now.Add(b.s.CacheTTL).UnixNano()))
		fault = storeError(storeOpReport, err)
	default:
		fault = b.faultLocked(j.now, storeOpReport, err)
		// Now on the local state machine: trip on this environment's own
		// counts, as an in-memory breaker would.
		if ov, _ := b.overrideLocked(j.now); ov == NoOverride && b.state == Closed && b.shouldTripLocked(j.now) {
			b.setMachineLocked(j.now, Open, j.now.Add(b.openDurationLocked(0)), 0, OriginLocal)
		}
	}
	b.publishLocked(j.now)
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
	b.storeFault(storeOpReport, fault)
	switch {
	case fault != nil:
		return fault
	case err != nil && !errors.Is(err, ErrConflict):
		return err
	case trip.op == opTransition:
		return b.runTransition(ctx, j.now, trip)
	}
	return nil
}

// fleetCountsLocked sums the buckets of the rolling window ending at now
// in the snapshot held: the weighted successes and failures, and the
// effective number of samples behind them. Samples weigh the sampling
// factor they were drawn with, which changes as the fleet's rate does;
// with unequal weights a few heavy samples would decide the estimate, so
// the count that its standard error (and MinRequests) goes by is Kish's
// effective sample size (Σw)² ÷ Σw², each bucket's samples taken at their
// mean weight. With equal weights it is the number of samples.
func (b *Breaker) fleetCountsLocked(now time.Time) (successes, failures int64, samples float64) {
	cur := b.bucketOf(now)
	var sumW, sumW2 float64
	for _, bk := range b.snap.Buckets {
		if bk.Num > cur-FleetSlots && bk.Num <= cur {
			successes += bk.Successes
			failures += bk.Failures
			if w := float64(bk.Successes + bk.Failures); w > 0 && bk.Samples > 0 {
				sumW += w
				sumW2 += w * w / float64(bk.Samples)
			}
		}
	}
	if sumW2 > 0 {
		samples = sumW * sumW / sumW2
	}
	return successes, failures, samples
}

// fleetTripsLocked reports whether the fleet's counts, as the snapshot
// held has them, call for a trip at now: over the rolling window (the
// FleetSlots buckets ending with now's), at least MinRequests sampled
// outcomes (effective: see fleetCountsLocked), and an estimated failure
// ratio of at least FailureRatio plus tripZ standard errors of a sample of
// that many outcomes. The counts come from samples chosen before their
// outcome was known, so the estimate is unbiased (see the package
// documentation for what remains).
func (b *Breaker) fleetTripsLocked(now time.Time) bool {
	return b.fleetAboveLocked(now, tripZ)
}

// fleetAboveLocked reports whether the fleet's estimated failure ratio over
// the rolling window ending at now is at least FailureRatio plus z standard
// errors, over at least MinRequests sampled outcomes. It is the one place
// the fleet's rule is decided: the hard stop's trip (fleetTripsLocked, at
// tripZ) and adaptive throttling's start (admitShareLocked, at
// adaptiveStartZ) differ only in z. The local rule, over this
// environment's exact counts, is shouldTripLocked.
func (b *Breaker) fleetAboveLocked(now time.Time, z float64) bool {
	s, f, n := b.fleetCountsLocked(now)
	total := s + f
	if total == 0 || n < float64(max(b.s.MinRequests, 1))-1e-9 {
		return false
	}
	fr := b.s.FailureRatio
	return float64(f)/float64(total) >= fr+z*math.Sqrt(fr*(1-fr)/n)
}
