package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store operations, as passed to Settings.OnStoreError.
const (
	storeOpLoad         = "load"
	storeOpReport       = "report"
	storeOpTransition   = "transition"
	storeOpAcquireProbe = "acquire-probe"
)

// job is a Store write decided with the lock held and made without it.
type job struct {
	op  jobOp
	gen uint64 // generation the write was decided in

	// opTransition
	from  State    // the state the transition leaves
	epoch uint64   // the epoch it was decided on
	next  Snapshot // the state it writes; next.Epoch == epoch+1
	// arm: it moves the fleet into a new half-open epoch (from Open, or
	// from a half-open epoch whose probes are presumed lost); armBusy is
	// set, and the environment that succeeds asks for the epoch's probes.
	arm bool

	// opReport
	now       time.Time
	window    int64 // first slot number of the fleet window
	successes int64
	failures  int64
}

type jobOp uint8

const (
	opNone jobOp = iota
	opReport
	opTransition
)

// Flush reports what of this environment's fleet counts must not wait for
// its next call, and trips the fleet if the totals returned call for it. A
// Lambda handler calls it before returning, since the execution
// environment may be frozen afterwards.
//
// Flush writes only these Reports (usually at most two):
//
//   - the remainder of each fleet window that has ended (counts gathered
//     in it since this environment's last Report into it) and has not
//     gone yet (a Report was in flight when the window's end was noticed),
//     whatever ReportInterval says;
//   - the current window's pending counts, if this environment's last
//     Report is at least ReportInterval old as of the latest time the
//     breaker has seen (the now of its latest Allow or Done off the
//     lock-free path): the Report the next call would have made anyway.
//
// Anything else waits, so an environment calling Flush after every
// invocation still reports the current window at most once per
// ReportInterval. Without a Store, while the Store has failed (the local
// state machine decides), or with nothing due, Flush writes nothing. It
// returns the Store's fault (an error satisfying errors.Is(err, ErrStore))
// or ctx's error.
func (b *Breaker) Flush(ctx context.Context) error {
	if b.store == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	b.mu.Lock()
	now := b.lastNow
	b.rollBatchLocked(now)
	due := b.reportDueLocked(now) // decided once: a remainder's Report does not use up the interval
	n := len(b.prev)
	b.publishLocked(now)
	b.mu.Unlock()
	var errs []error
	for range n + 1 { // the ended windows' remainders, then the current one
		b.mu.Lock()
		j := b.takeReportLocked(now, true, due)
		b.mu.Unlock()
		if j.op == opNone {
			break
		}
		if err := b.runReport(ctx, j); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

// callStore runs f with its own timeout, in a goroutine, so that a Store
// that ignores its context, or panics, still cannot block the caller past
// the timeout or crash it. A result that comes too late is dropped (the
// goroutine ends when the Store call does).
func callStore[T any](ctx context.Context, timeout time.Duration, op string, f func(context.Context) (T, error)) (T, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("%w: %s panicked: %v", ErrStore, op, p)}
			}
			ch <- r
		}()
		r.v, r.err = f(sctx)
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-sctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: %s gave no answer in time: %w", ErrStore, op, sctx.Err())
	}
}

// storeError makes err satisfy errors.Is(err, ErrStore).
func storeError(op string, err error) error {
	if errors.Is(err, ErrStore) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrStore, op, err)
}

// faultLocked switches to the local state machine after a Store fault and
// returns the error to report. What was sent for the fleet window (b.sent)
// is kept: back in the fleet in the same window and generation, the batch
// is derived again from the rolling window, less what was sent.
func (b *Breaker) faultLocked(now time.Time, op string, err error) error {
	b.degraded, b.held = true, false // the first Load that succeeds decides whether to hold
	b.batch, b.prev = fleetBatch{}, nil
	b.sched, b.pendingArm = fleetSchedule{}, pendingArm{}
	b.staleAt.Store(now.Add(b.s.CacheTTL).UnixNano()) // try the store again after CacheTTL
	b.publishLocked(now)
	return storeError(op, err)
}

func (b *Breaker) storeFault(op string, err error) {
	if err != nil && b.s.OnStoreError != nil {
		b.s.OnStoreError(op, err)
	}
}

// validSnapshot reports whether a snapshot from the Store is well formed.
func validSnapshot(s Snapshot) error {
	switch {
	case s.State != Closed && s.State != Open && s.State != HalfOpen:
		return fmt.Errorf("%w: malformed snapshot: state %v", ErrStore, s.State)
	case s.Override < NoOverride || s.Override > Disabled:
		return fmt.Errorf("%w: malformed snapshot: override %v", ErrStore, s.Override)
	case s.Reopens < 0:
		return fmt.Errorf("%w: malformed snapshot: reopens %d", ErrStore, s.Reopens)
	}
	return nil
}

// refresh reloads the fleet state if it is stale. Only one caller at a
// time does; the others go on with the stale state.
func (b *Breaker) refresh(ctx context.Context, now time.Time) {
	if !b.refreshing.CompareAndSwap(false, true) {
		return
	}
	defer b.refreshing.Store(false)
	if now.UnixNano() < b.staleAt.Load() {
		return // refreshed meanwhile
	}
	b.mu.Lock()
	local := b.override != NoOverride
	b.mu.Unlock()
	if local || ctx.Err() != nil {
		return // a local override decides without the fleet; a done caller cannot wait
	}
	snap, err := callStore(ctx, b.s.StoreTimeout, storeOpLoad, func(c context.Context) (Snapshot, error) {
		return b.store.Load(c, b.name)
	})
	if err == nil {
		err = validSnapshot(snap)
	}
	b.mu.Lock()
	b.observeLocked(now)
	var fault error
	switch {
	case err == nil:
		recovering := b.degraded
		b.degraded = false
		// A Load is eventually consistent: one read of an epoch below the
		// one held may be stale, and is not trusted; a second one in a
		// row is the store's state (it went back: the item was lost).
		lower := snap.Epoch < b.snap.Epoch
		back := lower && b.lowerRead
		b.lowerRead = lower && !back
		b.adoptLocked(now, snap, back, recovering)
		b.rebaseScheduleLocked(now, b.loadedAt)
		b.loadedAt = later(b.loadedAt, now)
		b.staleAt.Store(b.freshUntilLocked(now))
	case ctx.Err() != nil:
		// The caller's context ended, not the store: the next call retries.
	default:
		fault = b.faultLocked(now, storeOpLoad, err)
	}
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
	b.storeFault(storeOpLoad, fault)
}

// adoptLocked makes a snapshot read from or written to the Store the
// fleet state this breaker follows.
//
// A snapshot older than the one held (an eventually consistent read) only
// updates the override, unless back says the store really went back to it
// (two such reads in a row, or a Transition's conflict answer, which is
// the item as it stands): then it is followed like any other.
//
// The fleet's closed state does not close a breaker that is open or
// half-open on its local state machine without a probe: when this
// environment is recovering from degraded mode, is already held, or the
// store went back, and the fleet is closed with no override in force, the
// breaker is held on its local state machine until its own probe succeeds
// (see probeDoneLocked). An open or half-open fleet, or an operator's
// override, ends the hold: the fleet state takes over.
func (b *Breaker) adoptLocked(now time.Time, s Snapshot, back, recovering bool) {
	local := b.state != Closed
	if s.Epoch < b.snap.Epoch && !back {
		b.snap.Override, b.snap.OverrideUntil = s.Override, s.OverrideUntil
		if recovering && local {
			b.held = true // the fleet state is not known yet: keep the local one
		}
		b.syncEffectiveLocked(now)
		return
	}
	known := b.snap.Epoch
	reset := s.Epoch < known
	b.snap = s
	overridden := s.Override != NoOverride && (s.OverrideUntil.IsZero() || now.Before(s.OverrideUntil))
	if local && s.State == Closed && !overridden && (recovering || b.held || reset) {
		b.held = true
		b.syncEffectiveLocked(now)
		return
	}
	b.held = false
	if s.Epoch != known || s.State != b.state || !s.OpenUntil.Equal(b.rawOpenUntil) || s.Reopens != b.reopens {
		b.setMachineLocked(now, s.State, b.clampOpenUntil(now, s), s.Reopens)
		b.rawOpenUntil = s.OpenUntil
		b.sched = fleetSchedule{} // drawn for the new state (an epoch seen before may come back when the stored state goes back)
		return
	}
	b.syncEffectiveLocked(now)
}

// runTransition makes the transition j fleet-wide, optimistically on
// j.epoch, and adopts the result: the new state, or on ErrConflict the
// state another environment wrote first. On a Store fault the breaker
// switches to its local state machine and applies the transition there,
// except for a transition into a new half-open epoch (j.arm): the fleet is
// known to be open, so the environment stays on the fleet state, rejecting
// calls, and tries again (after reading the state) CacheTTL later, the
// wait doubling with every fault in a row (faultBackoffLocked). It returns
// the Store's fault or the caller's context error.
func (b *Breaker) runTransition(ctx context.Context, now time.Time, j job) error {
	var (
		res    Snapshot
		err    error
		called bool
	)
	if err = ctx.Err(); err == nil {
		called = true
		res, err = callStore(ctx, b.s.StoreTimeout, storeOpTransition, func(c context.Context) (Snapshot, error) {
			return b.store.Transition(c, b.name, j.epoch, j.next)
		})
	}
	b.mu.Lock()
	b.observeLocked(now)
	if j.arm {
		b.armBusy = false
	}
	var fault error
	switch {
	case err == nil:
		if validSnapshot(res) != nil || res.Epoch != j.next.Epoch || res.State != j.next.State {
			// The store wrote but answered oddly: keep what was written,
			// and the override as known.
			res = j.next
			res.Override, res.OverrideUntil = b.snap.Override, b.snap.OverrideUntil
		}
		b.lowerRead = false
		b.adoptLocked(now, res, false, false)
		b.loadedAt = later(b.loadedAt, now)
		b.staleAt.Store(b.freshUntilLocked(now))
		if j.arm && b.sharedLocked() && b.state == HalfOpen && b.snap.Epoch == j.next.Epoch {
			b.scheduleLocked(now).armed = true
		}
	case errors.Is(err, ErrConflict):
		switch {
		case validSnapshot(res) != nil:
			b.staleAt.Store(0) // reload at the next call
		case res.Epoch > j.epoch:
			// Another environment moved first.
			b.lowerRead = false
			b.adoptLocked(now, res, false, false)
			b.loadedAt = later(b.loadedAt, now)
			b.staleAt.Store(b.freshUntilLocked(now))
		case res.Epoch < j.epoch && b.snap.Epoch == j.epoch:
			// The item as it stands (a conditional write's answer, not an
			// eventually consistent read) is older than the epoch this
			// transition was decided on, and nothing newer was learnt
			// meanwhile: the stored state went back (the item was deleted,
			// the table recreated). Follow it, or every transition would
			// conflict forever.
			b.lowerRead = false
			b.adoptLocked(now, res, true, false)
			b.loadedAt = later(b.loadedAt, now)
			b.staleAt.Store(b.freshUntilLocked(now))
		default:
			b.staleAt.Store(0) // reload at the next call
		}
	case ctx.Err() != nil:
		// The caller's context ended, not the store.
		if called {
			b.staleAt.Store(0) // the write may or may not have happened: reload
			b.notePendingArmLocked(j)
		}
	case j.arm:
		// The fleet is open (or half-open with its probes lost) and this
		// environment knows it: a fault here says nothing about the
		// partner. Falling back to the local state machine would let every
		// environment that met the fault admit a probe of its own; instead
		// it keeps rejecting, and tries again, after reading the state,
		// after a backoff. The write may have gone through: if the state
		// read then is the epoch it wrote, this environment armed it.
		fault = storeError(storeOpTransition, err)
		if b.gen == j.gen && b.sharedLocked() && b.snap.Epoch == j.epoch {
			sc := b.scheduleLocked(now)
			sc.writeAt = later(sc.writeAt, now.Add(b.faultBackoffLocked(sc)))
		}
		b.notePendingArmLocked(j)
		b.staleAt.Store(b.freshUntilLocked(now))
	default:
		fault = b.faultLocked(now, storeOpTransition, err)
		if b.gen == j.gen && b.state == j.from {
			b.setMachineLocked(now, j.next.State, j.next.OpenUntil, j.next.Reopens)
		}
	}
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
	b.storeFault(storeOpTransition, fault)
	if fault != nil {
		return fault
	}
	if err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	return nil
}

// notePendingArmLocked remembers a transition into a half-open epoch whose
// fate is unknown.
func (b *Breaker) notePendingArmLocked(j job) {
	if j.arm {
		b.pendingArm = pendingArm{epoch: j.next.Epoch, sinceMs: j.next.OpenUntil.UnixMilli()}
	}
}

// acquireProbe asks the Store for a fleet probe slot, the local slot
// d.slot being reserved. done is false when the decision must be made
// again (the state moved while asking).
//
// A Store fault does not send the environment to its local state machine:
// the fleet is half-open and this environment knows it, and a local
// machine would admit a probe of its own in every environment that met the
// fault. The call is rejected, the fault reported, and the environment
// asks again after a backoff (faultBackoffLocked), if the epoch's time for
// asking has not ended by then.
func (b *Breaker) acquireProbe(ctx context.Context, now time.Time, d decision) (p Permit, done bool, err error) {
	var serr error
	if serr = ctx.Err(); serr == nil {
		_, serr = callStore(ctx, b.s.StoreTimeout, storeOpAcquireProbe, func(c context.Context) (int, error) {
			return b.store.AcquireProbe(c, b.name, d.epoch, b.s.HalfOpenProbes, now, now.Add(b.s.ProbeLease))
		})
	}
	b.mu.Lock()
	b.observeLocked(now)
	// The schedule of the epoch the slot was asked for, if still current.
	var sc *fleetSchedule
	if b.gen == d.gen && b.sharedLocked() && b.snap.Epoch == d.epoch && b.sched.set && b.sched.epoch == d.epoch {
		sc = &b.sched
	}
	var fault error
	switch {
	case serr == nil:
		if sc != nil {
			b.win.addRequest(now.UnixNano())
			p, done = Permit{gen: b.gen, start: now, slot: int32(d.slot), kind: permitProbe}, true
		} else {
			b.releaseProbeLocked(d.gen, d.slot) // the state moved on while asking
		}
	case errors.Is(serr, ErrProbeDenied):
		b.releaseProbeLocked(d.gen, d.slot)
		if sc != nil {
			// Every slot of the epoch is leased: this environment's own
			// probes, or leases that lapse at the latest when the epoch is
			// re-armed. Ask no more in this epoch.
			sc.armed = false
		}
		done, err = true, b.openError(HalfOpen, b.s.CacheTTL, false)
	case ctx.Err() != nil:
		b.releaseProbeLocked(d.gen, d.slot)
		done, err = true, b.openError(HalfOpen, b.s.CacheTTL, false)
	default:
		b.releaseProbeLocked(d.gen, d.slot)
		fault = storeError(storeOpAcquireProbe, serr)
		if sc != nil {
			sc.askAt = now.Add(b.faultBackoffLocked(sc))
		}
		done, err = true, b.openError(HalfOpen, b.s.CacheTTL, false)
	}
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
	b.storeFault(storeOpAcquireProbe, fault)
	return p, done, err
}

// accountFleetLocked gathers a closed-state outcome into this
// environment's counts for the current fleet window, and returns a Report
// when one is due. Gathering starts with the window's first failure (from
// the rolling window, which holds the whole fleet window so far, so the
// successes before the failure are not lost) and lasts until the window
// ends; a window without failures is never reported.
func (b *Breaker) accountFleetLocked(now time.Time, o Outcome) job {
	num := b.win.number(now.UnixNano())
	fw := b.win.fleetStart(num)
	b.rollBatchLocked(now)
	switch {
	case b.batch.active:
		if o == Success {
			b.batch.successes++
		} else {
			b.batch.failures++
		}
	case o == Failure:
		c := b.win.fleet(num) // includes this failure
		if b.sent.active && b.sent.window == fw {
			// Gathering again after a Store fault, in the same window and
			// generation: what was handed to Report already, whatever its
			// fate, is not sent twice.
			c.Successes = max(c.Successes-b.sent.successes, 0)
			c.Failures = max(c.Failures-b.sent.failures, 0)
		}
		b.batch = fleetBatch{window: fw, successes: c.Successes, failures: max(c.Failures, 1), active: true}
	}
	// An ended window's remainder goes at once: held back for
	// ReportInterval, it could be overtaken by the end of the next window.
	due := b.reportDueLocked(now)
	j := b.takeReportLocked(now, true, due)
	b.publishLocked(now)
	return j
}

// rollBatchLocked makes the counts gathered for a fleet window that has
// ended by now a remainder, queued behind any older one not yet sent, and
// reported before the current window's counts, whatever ReportInterval
// says. The queue is nearly always empty: a remainder goes with the call
// that notices the window's end, unless a Report is in flight then.
func (b *Breaker) rollBatchLocked(now time.Time) {
	if b.batch.active && b.win.fleetStart(b.win.number(now.UnixNano())) > b.batch.window {
		if b.batch.failures > 0 {
			b.prev = append(b.prev, b.batch)
		}
		b.batch = fleetBatch{}
	}
}

// reportDueLocked reports whether ReportInterval has passed since this
// environment's last Report.
func (b *Breaker) reportDueLocked(now time.Time) bool {
	return b.lastReport.IsZero() || !now.Before(b.lastReport.Add(b.s.ReportInterval))
}

// takeReportLocked returns the Report to make now, if any: the oldest
// ended window's remainder first if prevOK, else the current window's
// counts if curOK, and only counts that hold failures. (Callers pass
// reportDueLocked for curOK, so that at most one Report of the current
// window goes per ReportInterval, and true for prevOK: a remainder goes
// at once, once per window.) The counts are
// taken out of the batch when the report is decided, and added to what
// was sent for the window (at most once: a report whose fate is unknown
// is not repeated, nor its counts gathered again).
func (b *Breaker) takeReportLocked(now time.Time, prevOK, curOK bool) job {
	if !b.reportingLocked() || b.reportBusy {
		return job{}
	}
	var bt *fleetBatch
	switch {
	case len(b.prev) > 0:
		if !prevOK {
			return job{}
		}
		rem := b.prev[0]
		b.prev[0] = fleetBatch{}
		b.prev = b.prev[1:]
		if len(b.prev) == 0 {
			b.prev = nil
		}
		bt = &rem
	case b.batch.failures > 0 && curOK:
		bt = &b.batch
	default:
		return job{}
	}
	j := job{op: opReport, gen: b.gen, epoch: b.snap.Epoch, now: now, window: bt.window, successes: bt.successes, failures: bt.failures}
	if !b.sent.active || bt.window > b.sent.window {
		b.sent = fleetBatch{window: bt.window, active: true}
	}
	if bt.window == b.sent.window { // an older window's remainder is never gathered again
		b.sent.successes += bt.successes
		b.sent.failures += bt.failures
	}
	bt.successes, bt.failures = 0, 0
	b.reportBusy = true
	b.lastReport = now
	b.publishLocked(now)
	return j
}

// runReport adds j's counts to the fleet window and, if the fleet's counts
// call for it (see fleetTripsLocked), trips the fleet.
func (b *Breaker) runReport(ctx context.Context, j job) error {
	start := time.Unix(0, j.window*b.win.width)
	var (
		tally Tally
		err   error
	)
	if err = ctx.Err(); err == nil {
		tally, err = callStore(ctx, b.s.StoreTimeout, storeOpReport, func(c context.Context) (Tally, error) {
			return b.store.Report(c, b.name, start, b.s.Env, j.successes, j.failures, start.Add(b.s.Window).Add(b.s.Window))
		})
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
		b.noteTallyLocked(j.window, j.epoch, tally)
		// The fleet is closed as this environment knows it: it is closed
		// here too, or held open on the local state machine (whose failed
		// probes are reported, and count like anyone's).
		fleetClosed := (b.sharedLocked() && b.state == Closed) || (b.held && b.snap.State == Closed)
		ov, _ := b.overrideLocked(j.now)
		if ov == NoOverride && b.gen == j.gen && fleetClosed && b.snap.Epoch == j.epoch && b.fleetTripsLocked(j.now) {
			trip = job{
				op:    opTransition,
				gen:   b.gen,
				from:  Closed,
				epoch: b.snap.Epoch,
				next:  Snapshot{State: Open, Epoch: b.snap.Epoch + 1, OpenUntil: j.now.Add(b.openDurationLocked(0))},
			}
		}
	case ctx.Err() != nil:
		// The caller's context ended, not the store.
	default:
		fault = b.faultLocked(j.now, storeOpReport, err)
		// Now on the local state machine: trip on this environment's own
		// counts, as an in-memory breaker would.
		if ov, _ := b.overrideLocked(j.now); ov == NoOverride && b.state == Closed && b.shouldTripLocked(j.now) {
			b.setMachineLocked(j.now, Open, j.now.Add(b.openDurationLocked(0)), 0)
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
	case err != nil:
		return err
	case trip.op == opTransition:
		return b.runTransition(ctx, j.now, trip)
	}
	return nil
}

// noteTallyLocked keeps a fleet window's totals as a Report answered them,
// for the two latest windows reported into.
func (b *Breaker) noteTallyLocked(window int64, epoch uint64, t Tally) {
	seen := seenTally{ok: true, window: window, epoch: epoch, t: t}
	oldest := 0
	for i, st := range b.tallies {
		if st.ok && st.window == window {
			b.tallies[i] = seen // the latest answer holds the latest totals
			return
		}
		if !st.ok || (b.tallies[oldest].ok && st.window < b.tallies[oldest].window) {
			oldest = i
		}
	}
	if o := b.tallies[oldest]; !o.ok || o.window < window {
		b.tallies[oldest] = seen
	}
}

// tallyLocked returns the totals last seen for a fleet window in the
// current fleet epoch.
func (b *Breaker) tallyLocked(window int64) (Tally, bool) {
	for _, st := range b.tallies {
		if st.ok && st.window == window && st.epoch == b.snap.Epoch {
			return st.t, true
		}
	}
	return Tally{}, false
}

// fleetTripsLocked reports whether the fleet's counts, as the Reports of
// this environment returned them, call for a trip at now. Fleet windows
// are fixed (aligned to the Unix epoch); the ratio is estimated over a
// sliding window of the same length ending at now: with f the fraction of
// the current fleet window w elapsed at now, the totals last seen for
// window w−1 count for (1 − f), those of w fully (when no totals of w−1
// were seen in this fleet epoch, those of w alone). The estimate trips
// when it holds at least MinRequests calls, at least FailureRatio of them
// failures, from at least MinReporters environments (the larger of the
// two windows' reporter counts). Early in a window its few calls, and the
// failures that made environments report them first, cannot trip the
// fleet on their own: the previous window weighs in.
func (b *Breaker) fleetTripsLocked(now time.Time) bool {
	w := b.win.fleetStart(b.win.number(now.UnixNano()))
	cur, okCur := b.tallyLocked(w)
	prev, okPrev := b.tallyLocked(w - b.win.n)
	if !okCur && !okPrev {
		return false
	}
	failures := float64(cur.Failures)
	total := float64(cur.Successes + cur.Failures)
	reporters := cur.Reporters
	if okPrev {
		f := float64(now.UnixNano()-w*b.win.width) / float64(b.s.Window)
		weight := 1 - min(max(f, 0), 1)
		failures += weight * float64(prev.Failures)
		total += weight * float64(prev.Successes+prev.Failures)
		reporters = max(reporters, prev.Reporters)
	}
	return reporters >= b.s.MinReporters && total > 0 &&
		total >= float64(b.s.MinRequests) && failures >= b.s.FailureRatio*total
}
