package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/internal/storecall"
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

	// opReport, opAlarm
	now    time.Time
	report Report
	// opAlarm: the last report before the alarm, restored if the alarm
	// writes nothing.
	prevReport time.Time
}

type jobOp uint8

const (
	opNone jobOp = iota
	opReport
	opAlarm // read the state, and if the fleet is still quiet, start its watch
	opTransition
)

// callStore runs a Store call through storecall.Do: bounded by timeout
// even if the Store ignores ctx, and a panic is a fault (ErrStore).
func callStore[T any](ctx context.Context, timeout time.Duration, op string, f func(context.Context) (T, error)) (T, error) {
	return storecall.Do(ctx, timeout, ErrStore, op, f)
}

// storeError makes err satisfy errors.Is(err, ErrStore).
func storeError(op string, err error) error {
	if errors.Is(err, ErrStore) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrStore, op, err)
}

// faultLocked switches to the local state machine after a Store fault and
// returns the error to report. Sampled counts pending are dropped: back in
// the fleet, sampling starts afresh.
func (b *Breaker) faultLocked(now time.Time, op string, err error) error {
	b.degraded, b.held = true, false // the first Load that succeeds decides whether to hold
	b.pend, b.ready = pending{}, pending{}
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
	b.mu.Lock()
	timeout := b.s.StoreTimeout
	if b.loadedAt.IsZero() || now.Sub(b.loadedAt) > 2*quietTTLFactor*b.s.CacheTTL {
		// The first Load of this environment, or the first after a long
		// idle (a Lambda freeze): its connection is new, and a fault here
		// would leave it on a state read long ago.
		timeout *= coldLoadFactor
	}
	b.mu.Unlock()
	snap, err := callStore(ctx, timeout, storeOpLoad, func(c context.Context) (Snapshot, error) {
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
		b.adoptLocked(now, snap, back, recovering, OriginFollowed)
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
func (b *Breaker) adoptLocked(now time.Time, s Snapshot, back, recovering bool, origin Origin) {
	watching := b.watchingLocked(now)
	b.adoptSnapLocked(now, s, back, recovering, origin)
	if !watching && b.watchingLocked(now) {
		// This environment learns of a watch now: its sampling starts
		// from now (see drawSampleFromLocked).
		b.drawSampleFromLocked(now)
	}
}

// adoptSnapLocked is adoptLocked but for the start of sampling.
func (b *Breaker) adoptSnapLocked(now time.Time, s Snapshot, back, recovering bool, origin Origin) {
	local := b.state != Closed
	if s.Epoch < b.snap.Epoch && !back {
		b.snap.Override, b.snap.OverrideUntil = s.Override, s.OverrideUntil
		if recovering && local {
			b.held = true // the fleet state is not known yet: keep the local one
		}
		b.syncEffectiveLocked(now)
		return
	}
	if s.Epoch == b.snap.Epoch && b.snap.WatchUntil.After(s.WatchUntil) {
		// An older read of the same epoch (eventually consistent): the
		// watch this environment already knows of stands.
		s.WatchUntil = b.snap.WatchUntil
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
		b.setMachineLocked(now, s.State, b.clampOpenUntil(now, s), s.Reopens, origin)
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
	// A transition's answer carries no override (the Store contract):
	// keep the one last read.
	res.Override, res.OverrideUntil = b.snap.Override, b.snap.OverrideUntil
	switch {
	case err == nil:
		if validSnapshot(res) != nil || res.Epoch != j.next.Epoch || res.State != j.next.State {
			// The store wrote but answered oddly: keep what was written.
			res = j.next
			res.Override, res.OverrideUntil = b.snap.Override, b.snap.OverrideUntil
			res.WatchUntil = b.snap.WatchUntil
		}
		b.lowerRead = false
		b.adoptLocked(now, res, false, false, OriginWrote)
		b.loadedAt = later(b.loadedAt, now)
		b.staleAt.Store(b.freshUntilLocked(now))
		if j.arm && b.sharedLocked() && b.state == HalfOpen && b.snap.Epoch == j.next.Epoch {
			b.scheduleLocked(now).armed = true
		}
	case errors.Is(err, ErrConflict):
		b.followConflictLocked(now, j.epoch, res)
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
			b.setMachineLocked(now, j.next.State, j.next.OpenUntil, j.next.Reopens, OriginLocal)
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

// followConflictLocked follows the state a conditional write (a Transition
// or a Report decided on epoch) answered with ErrConflict: the item as it
// stands, not an eventually consistent read.
func (b *Breaker) followConflictLocked(now time.Time, epoch uint64, res Snapshot) {
	switch {
	case validSnapshot(res) != nil:
		b.staleAt.Store(0) // reload at the next call
	case res.Epoch > epoch:
		// Another environment moved first.
		b.lowerRead = false
		b.adoptLocked(now, res, false, false, OriginFollowed)
		b.loadedAt = later(b.loadedAt, now)
		b.staleAt.Store(b.freshUntilLocked(now))
	case res.Epoch < epoch && b.snap.Epoch == epoch:
		// Older than the epoch the write was decided on, and nothing
		// newer was learnt meanwhile: the stored state went back (the
		// item was deleted, the table recreated). Follow it, or every
		// write would conflict forever.
		b.lowerRead = false
		b.adoptLocked(now, res, true, false, OriginFollowed)
		b.loadedAt = later(b.loadedAt, now)
		b.staleAt.Store(b.freshUntilLocked(now))
	default:
		b.staleAt.Store(0) // reload at the next call
	}
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
			b.releaseProbeLocked(d.gen, d.slot, now) // the state moved on while asking
		}
	case errors.Is(serr, ErrProbeDenied):
		b.releaseProbeLocked(d.gen, d.slot, now)
		if sc != nil {
			// Every slot of the epoch is leased: this environment's own
			// probes, or leases that lapse at the latest when the epoch is
			// re-armed. Ask no more in this epoch.
			sc.armed = false
		}
		done, err = true, b.openError(HalfOpen, b.s.CacheTTL, false)
	case ctx.Err() != nil:
		b.releaseProbeLocked(d.gen, d.slot, now)
		done, err = true, b.openError(HalfOpen, b.s.CacheTTL, false)
	default:
		b.releaseProbeLocked(d.gen, d.slot, now)
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
