package breaker

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/internal/names"
)

// Permit is a call admitted by Allow or AllowRetry. Pass it to Done with the call's
// outcome. It is a small value (no allocation); the zero Permit is never
// valid and Done ignores it.
type Permit struct {
	gen    uint64    // generation the call was admitted in; 0 = invalid
	start  time.Time // Allow's now, for SlowCallThreshold
	slot   int32     // local probe slot, for probes
	weight int32     // shared mode: the calls this sampled call stands for; 0 = not sampled
	kind   permitKind
	// counted: a call adaptive throttling counts without drawing it as a
	// sample (every call of a busy environment; see sampleLocked).
	counted bool
}

type permitKind uint8

const (
	permitCall      permitKind = iota // an ordinary call, counted
	permitProbe                       // a half-open probe
	permitUncounted                   // admitted by a disabled breaker: not counted
)

// Probe reports whether the permit is a half-open probe, whose outcome
// closes or re-opens the breaker.
func (p Permit) Probe() bool { return p.kind == permitProbe }

// The state word packs the generation with the flags that send a call off
// the lock-free path. It is written only with mu held.
const (
	genShift = 8
	// flagSlowAllow: Allow cannot admit lock-free (not closed, or an
	// override is in force).
	flagSlowAllow uint64 = 1 << 0
	// flagSlowDone: Done must take the lock even for a success (the
	// above, or fleet counts are being gathered for a report).
	flagSlowDone uint64 = 1 << 1
)

// maxAllowRounds bounds the store round trips one Allow may make.
const maxAllowRounds = 4

// Breaker is a circuit breaker. Create one with New; it is safe for
// concurrent use. On the healthy path (closed, no override, fresh fleet
// state) Allow and Done take no lock, make no Store call and do not
// allocate.
type Breaker struct {
	// Lock-free state, read by every call on the healthy path and written
	// only when the state changes, the fleet state is reloaded or calls
	// fail. It has a cache line of its own: nothing the healthy path
	// writes shares it (a success writes one counter, in the window's
	// slot), so concurrent healthy calls all read it from their own cache.
	word       atomic.Uint64 // gen<<genShift | flags; written with mu held
	staleAt    atomic.Int64  // shared: Unix ns at which the fleet state must be reloaded
	consecFail atomic.Int64  // failures in a row; a success resets it only if it is not zero
	win        *window
	_          [cacheLine - 4*8]byte

	// Immutable after New.
	name  string
	s     Settings // resolved: every default filled in
	store Store
	rand  func() float64
	_     [cacheLine]byte // keeps the fields below, written under mu, off the lines above

	refreshing atomic.Bool // shared: a Load is in flight
	// succMark is the window's successes() at the latest failure: the
	// successes in a row are those counted since. It is written with mu
	// held and read by Counts. (Counting successes in a row directly would
	// cost every success an atomic write to a line all calls share.)
	succMark atomic.Int64

	mu sync.Mutex
	// Guarded by mu. Invariants: gen is the generation in word; it changes
	// whenever the state machine or an override changes, and every change
	// of gen resets the window, the consecutive counts, the probe slots and
	// the pending and sent fleet counts. In shared mode, unless degraded or
	// held, state, openUntil and reopens mirror snap. While held, the
	// store is not degraded and state is Open or HalfOpen.
	gen       uint64
	state     State
	openUntil time.Time
	reopens   int
	probes    []time.Time // lease end of each local probe slot; zero = free
	override  Override    // local operator override
	lastEff   State       // state last announced to OnStateChange
	lastOv    Override    // override in force when lastEff was announced
	lastNow   time.Time   // latest time seen, for methods without a now
	events    []event     // OnStateChange calls to make once mu is released

	// Shared mode only.
	snap     Snapshot // fleet state last read or written
	degraded bool     // the store failed: the local state machine decides, nothing is written
	// held: the store answers and the fleet is closed, but this
	// environment opened on its local state machine (degraded, or the
	// stored state went back) and stays on it until its own probe
	// succeeds, or the fleet opens or is overridden. It reports its
	// failed probes to the fleet window.
	held bool
	// lowerRead: the latest Load returned an epoch below snap's. One such
	// read may be eventually consistent; two in a row are the store's
	// state (it went back: the item was lost).
	lowerRead bool
	// loadedAt is when the fleet state was last read from the Store (or
	// answered by a Transition): a fleet write decided at or after the
	// time in sched is decided on a state read at or after it.
	loadedAt time.Time
	// quietPhased: since this environment last read the fleet state at
	// another pace (its first read, a watch, an open fleet), it has drawn
	// the phase of its quiet reads (freshUntilLocked).
	quietPhased bool
	// rawOpenUntil is the OpenUntil of the snapshot the state machine was
	// last set from, before clampOpenUntil, so that reading the same
	// snapshot again is recognised as no change.
	rawOpenUntil time.Time
	armBusy      bool          // a transition into a new half-open epoch is in flight
	sched        fleetSchedule // this environment's next fleet write while the fleet is open or half-open
	// pendingArm is a transition into a half-open epoch whose fate is
	// unknown (a fault or the caller's end cut it): if the state read
	// later is that epoch, with that start, this environment armed it.
	pendingArm pendingArm
	// pend holds the sampled counts not yet reported (see fleetcount.go).
	pend       pending
	reportBusy bool // a Report (or an alarm) is in flight
	lastReport time.Time
	// sampleFrom is when this environment starts sampling in the watch
	// it follows (zero: not drawn yet); firstDone: its first window,
	// [sampleFrom, sampleFrom + the report interval), has closed; ready holds
	// that window's counts until they are reported (see
	// drawSampleFromLocked); sampleDelay: the random delay drawn then;
	// firstAsked: a first attempt asked to go since sampleFrom (see
	// restartSampleDelayLocked).
	sampleFrom  time.Time
	sampleDelay time.Duration
	firstDone   bool
	firstAsked  bool
	ready       pending
	lastAlarm   time.Time
	// lastFailure is when this environment last saw a call fail while
	// it followed the fleet (see drawSampleFromLocked).
	lastFailure time.Time
	// askBucket is the fleet bucket of now's first attempts asking to go
	// while this environment samples, askCur their number so far, askPrev
	// that of the bucket before (see countsEveryCallLocked).
	askBucket, askCur, askPrev int64
	// thin raises the sampling factor after this environment's Reports
	// were throttled, until thinUntil (see thinGrowth).
	thin      int64
	thinUntil time.Time
}

// fleetSchedule is, for one open or half-open fleet epoch, when this
// environment makes its next fleet write. Every environment waits its own
// delay (drawn once per epoch, in [0, CacheTTL)) past the time the epoch
// calls for a write, and reads the fleet state again before writing, so
// that the first environment's write is seen by the others instead of
// being repeated by all of them at the same instant.
type fleetSchedule struct {
	set   bool
	epoch uint64 // the fleet epoch it is for
	delay time.Duration
	// writeAt is, for an open epoch, when to move the fleet to half-open;
	// for a half-open epoch, when its probes are presumed lost (their
	// leases have lapsed) and the fleet is moved to a new half-open epoch.
	writeAt time.Time
	// armed: this environment moved the fleet into this half-open epoch;
	// it is the one that asks for the epoch's probe slots, from askAt
	// until askUntil (2 × CacheTTL after the epoch began), and until one
	// is refused. Every lease of the epoch has lapsed ProbeLease after
	// askUntil, before any environment moves the fleet to a new epoch.
	armed    bool
	askAt    time.Time
	askUntil time.Time
	// faults counts the Store faults in a row of this environment's
	// writes in the epoch: each one doubles the wait before the next.
	faults int
}

type pendingArm struct {
	epoch   uint64
	sinceMs int64 // the half-open epoch's start, Unix ms (as stores keep it)
}

type event struct {
	from, to State
	before   Counts
	origin   Origin
}

// New returns a closed breaker. name identifies it in a Store and in
// errors: 1 to 128 bytes of letters, digits, '-', '_', '.' and ':'. New
// returns a *herdguard.ConfigError naming the name or the field of s it
// rejects.
func New(name string, s Settings) (*Breaker, error) {
	if msg := names.Check(name); msg != "" {
		return nil, &herdguard.ConfigError{Field: "breaker.New name", Reason: msg}
	}
	rs, err := s.resolve()
	if err != nil {
		return nil, err
	}
	b := &Breaker{
		name:   name,
		s:      rs,
		store:  rs.Store,
		rand:   rs.Rand,
		win:    newWindow(int64(rs.Window)/windowSlots, windowSlots),
		probes: make([]time.Time, rs.HalfOpenProbes),
		gen:    1,
	}
	if b.rand == nil {
		b.rand = rand.Float64
	}
	b.publishLocked(time.Time{})
	return b, nil
}

// Allow asks whether a call may go now. It returns a Permit to pass to
// Done, or an *OpenError (errors.Is(err, ErrOpen)) whose RetryAfter is the
// time until the next probe may go.
//
// In shared mode Allow may call the Store, each call bounded by
// StoreTimeout and ctx: to reload a stale fleet state (one caller per
// CacheTTL; the others use the stale state meanwhile), or, once the open
// duration and this environment's delay past it have passed, to read the
// state again, move the fleet to half-open and take a probe slot.
func (b *Breaker) Allow(ctx context.Context, now time.Time) (Permit, error) {
	w := b.word.Load()
	if w&flagSlowAllow == 0 {
		t := now.UnixNano()
		if b.store == nil || t < b.staleAt.Load() {
			b.win.addRequest(t)
			return Permit{gen: w >> genShift, start: now}, nil
		}
	}
	return b.allowSlow(ctx, now, false)
}

// AllowRetry is Allow for an attempt that retries a failed one: a retry
// loop calls Allow for a call's first attempt and AllowRetry for each
// later one. While the breaker is closed, a retry is never sampled for
// the fleet's counts (it exists because an attempt failed: counting it
// would bias the fleet's failure ratio towards failures), and while the
// fleet throttles (Settings.Adaptive) every retry is rejected, whatever
// share of first attempts goes. This process's Counts and its own trip
// rule count a retry's outcome as any call's, and open or half-open it is
// decided as Allow decides (it may be a probe). Without a Store, or
// while the fleet is not watching, AllowRetry decides as Allow does.
func (b *Breaker) AllowRetry(ctx context.Context, now time.Time) (Permit, error) {
	// Allow's healthy path (nothing is sampled there), written out again:
	// a shared helper is past the inliner's budget and would cost Allow a
	// call.
	w := b.word.Load()
	if w&flagSlowAllow == 0 {
		t := now.UnixNano()
		if b.store == nil || t < b.staleAt.Load() {
			b.win.addRequest(t)
			return Permit{gen: w >> genShift, start: now}, nil
		}
	}
	return b.allowSlow(ctx, now, true)
}

// Done records the outcome of a call admitted by Allow or AllowRetry; now
// is when it ended. A success slower than SlowCallThreshold counts as a
// failure; Excluded counts in Counts.Excluded only. A permit issued before
// the latest state change (an older generation) is ignored, as is the zero
// Permit. Done never returns an error: a Store fault is reported through
// OnStoreError and handled as described in the package documentation.
func (b *Breaker) Done(ctx context.Context, now time.Time, p Permit, o Outcome) {
	if p.gen == 0 || p.kind == permitUncounted {
		return
	}
	w := b.word.Load()
	// A sampled call always takes the lock: its outcome is a fleet count,
	// whatever the flags say by now (a success dropped here while a
	// failure is counted would bias the fleet's estimate).
	if w&flagSlowDone == 0 && p.gen == w>>genShift && p.kind == permitCall && p.weight == 0 {
		switch o {
		case Success:
			if b.s.SlowCallThreshold == 0 || now.Sub(p.start) <= b.s.SlowCallThreshold {
				b.win.add(now.UnixNano(), Success)
				if b.consecFail.Load() != 0 {
					b.consecFail.Store(0)
				}
				return
			}
		case Excluded:
			b.win.add(now.UnixNano(), Excluded)
			return
		}
	}
	b.doneSlow(ctx, now, p, o)
}

// State returns the state as of now: the state an Allow at now would start
// from, overrides included (ForcedOpen reads as Open, ForcedClosed and
// Disabled as Closed). An open breaker whose open duration has passed reads
// as HalfOpen. State makes no Store call.
func (b *Breaker) State(now time.Time) State {
	b.mu.Lock()
	b.observeLocked(now)
	b.advanceLocked(now)
	b.syncEffectiveLocked(now)
	st := b.effectiveLocked(now)
	if ov, _ := b.overrideLocked(now); ov == NoOverride && st == Open && !now.Before(b.probeTimeLocked(now)) {
		st = HalfOpen // shared: the fleet moves on at the next Allow
	}
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
	return st
}

// Settings returns the Settings b runs with, every zero field filled with
// its default (a negative Jitter reads as -1, no jitter). Passed to New
// again they make the same breaker.
func (b *Breaker) Settings() Settings { return b.s }

// Counts returns the counts of the current generation in the rolling
// window ending with the latest slot a call was counted in, and the
// consecutive counts: the failures since the latest success, and the
// successes since the latest failure, both in the current generation
// (successes in a row are not limited to the window). Excluded outcomes
// break neither run. Counts are exact when calls are sequential; under
// concurrency they are as precise as the window's (see Done).
func (b *Breaker) Counts() Counts {
	c := b.win.rolling(b.win.latest.Load())
	c.ConsecutiveFailures = b.consecFail.Load()
	c.ConsecutiveSuccesses = max(b.win.successes()-b.succMark.Load(), 0)
	return c
}

// Override sets this process's operator override until the next call of
// Override or Reset: ForcedOpen rejects every call (OpenError.Forced is
// true), ForcedClosed admits every call (outcomes are still counted but
// never trip the breaker), Disabled admits every call and counts nothing,
// and NoOverride hands the breaker back to its state machine and the
// Store's override. It takes precedence over the state machine and over an
// override in the Store, and writes nothing to the Store (fleet-wide
// overrides are written with Store.SetOverride, or by hand: see package
// dynamo). An Override outside these four is ignored.
func (b *Breaker) Override(o Override) {
	if o < NoOverride || o > Disabled {
		return
	}
	b.setOverride(o)
}

// Reset clears this process's override and state: the breaker is closed,
// with zero counts, in a new generation. A shared breaker also forgets its
// cached fleet state and its degraded mode, and reloads the fleet state at
// the next Allow. Reset writes nothing to the Store.
func (b *Breaker) Reset() {
	b.mu.Lock()
	before := b.Counts()
	b.override = NoOverride
	b.state, b.openUntil, b.reopens = Closed, time.Time{}, 0
	b.snap = Snapshot{}
	b.degraded, b.held, b.lowerRead = false, false, false
	b.lastReport, b.lastAlarm = time.Time{}, time.Time{}
	b.loadedAt, b.sched, b.pendingArm = time.Time{}, fleetSchedule{}, pendingArm{}
	b.newGenerationLocked()
	b.announceLocked(b.lastNow, before, OriginLocal)
	b.publishLocked(b.lastNow)
	b.staleAt.Store(0)
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
}

func (b *Breaker) setOverride(o Override) {
	b.mu.Lock()
	before := b.Counts()
	b.override = o
	b.newGenerationLocked()
	b.announceLocked(b.lastNow, before, OriginLocal)
	b.publishLocked(b.lastNow)
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)
}

// decision is what allowSlow does next.
type decision struct {
	permit Permit
	err    error
	io     allowIO
	gen    uint64
	epoch  uint64
	from   State    // ioArm: the state the transition leaves
	next   Snapshot // ioArm
	slot   int      // ioProbe: the local probe slot reserved
}

type allowIO uint8

const (
	ioNone   allowIO = iota
	ioArm            // move the fleet into a new half-open epoch (from Open, or from a half-open epoch whose probes are lost)
	ioProbe          // take a fleet probe slot
	ioReload         // read the fleet state before deciding (err is the answer if that cannot be done)
)

// allowSlow decides a call off the healthy path; retry says that it came
// from AllowRetry.
func (b *Breaker) allowSlow(ctx context.Context, now time.Time, retry bool) (Permit, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	reloaded := false
	if b.store != nil && now.UnixNano() >= b.staleAt.Load() {
		b.refresh(ctx, now)
		reloaded = true
	}
	for round := 0; ; round++ {
		b.mu.Lock()
		b.observeLocked(now)
		b.advanceLocked(now)
		b.syncEffectiveLocked(now)
		var d decision
		if round < maxAllowRounds {
			d = b.decideLocked(now, retry)
		} else { // the fleet state kept moving under this call: give up on it
			d.err = b.openError(max(b.effectiveLocked(now), Open), b.s.CacheTTL, false)
		}
		evs := b.takeEventsLocked()
		b.mu.Unlock()
		b.fire(evs)

		switch d.io {
		case ioNone:
			return d.permit, d.err
		case ioArm:
			if err := b.runTransition(ctx, now, job{op: opTransition, gen: d.gen, from: d.from, epoch: d.epoch, next: d.next, arm: true}); err != nil || ctx.Err() != nil {
				// A Store fault (the fleet stays open: see runTransition),
				// or a caller who cannot wait for a probe slot.
				return Permit{}, b.openError(HalfOpen, b.s.CacheTTL, false)
			}
		case ioProbe:
			if p, done, err := b.acquireProbe(ctx, now, d); done {
				return p, err
			}
		case ioReload:
			if reloaded { // another caller's read is in flight, or this caller cannot wait for one
				return Permit{}, d.err
			}
			b.refresh(ctx, now)
			reloaded = true
		}
	}
}

// decideLocked admits, rejects, or names the store call needed to decide.
func (b *Breaker) decideLocked(now time.Time, retry bool) decision {
	ov, until := b.overrideLocked(now)
	switch ov {
	case ForcedOpen:
		var wait time.Duration
		if !until.IsZero() {
			wait = until.Sub(now)
		}
		return decision{err: b.openError(Open, wait, true)}
	case Disabled:
		return decision{permit: Permit{gen: b.gen, start: now, kind: permitUncounted}}
	case ForcedClosed:
		return b.admitLocked(now, retry)
	}

	switch b.state {
	case Closed:
		return b.admitLocked(now, retry)
	case Open:
		if b.sharedLocked() {
			return b.decideFleetLocked(now)
		}
		// On the local state machine advanceLocked moved it to HalfOpen
		// once openUntil passed.
		return decision{err: b.openError(Open, b.openUntil.Sub(now), false)}
	default: // HalfOpen
		if b.sharedLocked() {
			return b.decideFleetLocked(now)
		}
		i, wait := b.freeProbeLocked(now)
		if i < 0 {
			return decision{err: b.openError(HalfOpen, wait, false)}
		}
		b.probes[i] = now.Add(b.s.ProbeLease)
		b.win.addRequest(now.UnixNano())
		return decision{permit: Permit{gen: b.gen, start: now, slot: int32(i), kind: permitProbe}}
	}
}

// decideFleetLocked decides a call while the fleet is open or half-open:
// it rejects it, or names the fleet write that may admit it as a probe.
//
// Each environment makes the fleet's next move at its own time, the
// schedule's writeAt (see fleetSchedule), and only on a fleet state read at
// or after that time: when it is due and the state in hand is older, the
// call is rejected while the state is read again (by this call's refresh
// in allowSlow, or a concurrent one's).
//
//   - Open: once writeAt has passed, move the fleet to a new half-open
//     epoch (ioArm). The environment that succeeds arms the epoch.
//   - HalfOpen: the environment that armed the epoch asks for its probe
//     slots (ioProbe), each call while a local slot is free, during the
//     epoch's first 2 × CacheTTL and until one is refused; the others do
//     not ask at all. Once writeAt has passed (every lease of the epoch has
//     lapsed: its probes are presumed lost), any environment moves the
//     fleet to a new half-open epoch, whose probe slots are all free, and
//     arms it.
func (b *Breaker) decideFleetLocked(now time.Time) decision {
	sc := b.scheduleLocked(now)
	if !now.Before(sc.writeAt) {
		if b.armBusy {
			return decision{err: b.openError(HalfOpen, b.s.CacheTTL, false)}
		}
		if b.loadedAt.Before(sc.writeAt) {
			if at := sc.writeAt.UnixNano(); at < b.staleAt.Load() {
				b.staleAt.Store(at)
			}
			return decision{io: ioReload, err: b.openError(HalfOpen, b.s.CacheTTL, false)}
		}
		b.armBusy = true
		return decision{
			io:    ioArm,
			gen:   b.gen,
			epoch: b.snap.Epoch,
			from:  b.state,
			// A half-open epoch's OpenUntil is when it began.
			next: Snapshot{State: HalfOpen, Epoch: b.snap.Epoch + 1, OpenUntil: now, Reopens: b.reopens},
		}
	}
	if b.state == Open {
		return decision{err: b.openError(Open, sc.writeAt.Sub(now), false)}
	}
	// Half-open: the probe's result reaches this environment within
	// CacheTTL of its Done.
	hint := min(sc.writeAt.Sub(now), b.s.CacheTTL)
	if !sc.armed || !now.Before(sc.askUntil) {
		return decision{err: b.openError(HalfOpen, hint, false)}
	}
	if now.Before(sc.askAt) {
		return decision{err: b.openError(HalfOpen, min(sc.askAt.Sub(now), hint), false)}
	}
	i, wait := b.freeProbeLocked(now)
	if i < 0 {
		return decision{err: b.openError(HalfOpen, min(wait, hint), false)}
	}
	b.probes[i] = now.Add(b.s.ProbeLease)
	return decision{io: ioProbe, gen: b.gen, epoch: b.snap.Epoch, slot: i}
}

// scheduleLocked returns this environment's schedule for the current
// fleet epoch (open or half-open), drawing it when the epoch is new to it.
// now is when the environment learnt the epoch.
func (b *Breaker) scheduleLocked(now time.Time) *fleetSchedule {
	sc := &b.sched
	if sc.set && sc.epoch == b.snap.Epoch {
		return sc
	}
	*sc = fleetSchedule{set: true, epoch: b.snap.Epoch, delay: b.spreadLocked()}
	var due time.Time
	if b.state == Open {
		due = b.openUntil // clamped when it was read
	} else {
		since := b.snap.OpenUntil // a half-open epoch's start
		if since.IsZero() || since.After(now) {
			since = now
		}
		sc.askUntil = since.Add(2 * b.s.CacheTTL)
		due = sc.askUntil.Add(b.s.ProbeLease)
		if p := b.pendingArm; p.epoch == b.snap.Epoch && p.sinceMs == b.snap.OpenUntil.UnixMilli() {
			sc.armed = true // this environment's transition went through after all
		}
	}
	b.pendingArm = pendingArm{}
	// Past due + delay (an environment that learns the epoch late: a
	// caller whose calls are far apart, or one back from a freeze), the
	// move may be made at once, on the state just read: a fresh read is
	// what keeps environments from repeating each other's move, and
	// postponing it would keep a sparse caller from ever probing.
	sc.writeAt = due.Add(sc.delay)
	return sc
}

// probeTimeLocked returns when this environment's next probe may go, for
// an open breaker: the end of the open duration, and in shared mode the
// schedule's writeAt.
func (b *Breaker) probeTimeLocked(now time.Time) time.Time {
	if b.sharedLocked() && b.state == Open {
		return b.scheduleLocked(now).writeAt
	}
	return b.openUntil
}

// faultBackoffLocked returns how long to wait before the next fleet write
// of the epoch after a Store fault: CacheTTL, doubled with every fault in
// a row, at most ProbeLease (or CacheTTL if that is longer). An item that
// is being throttled is not written at the same rate again.
func (b *Breaker) faultBackoffLocked(sc *fleetSchedule) time.Duration {
	sc.faults++
	d := b.s.CacheTTL
	for i := 1; i < sc.faults && d < b.s.ProbeLease; i++ {
		d *= 2
	}
	return min(d, max(b.s.ProbeLease, b.s.CacheTTL))
}

// spreadLocked draws a delay in [0, CacheTTL) with Rand.
func (b *Breaker) spreadLocked() time.Duration {
	d := time.Duration(b.randLocked() * float64(b.s.CacheTTL))
	return min(max(d, 0), b.s.CacheTTL-1)
}

// randLocked returns Rand's next value, clamped to [0, 1].
func (b *Breaker) randLocked() float64 {
	r := b.rand()
	switch {
	case !(r >= 0): // negative or NaN
		return 0
	case r > 1:
		return 1
	}
	return r
}

// freshUntilLocked returns, in Unix nanoseconds, until when the fleet
// state read (or written) at now is trusted: CacheTTL, or less when this
// environment's next fleet write is due sooner (it reads the state again
// before making it).
//
// While the fleet is quiet, quietTTLFactor × CacheTTL, but the first quiet
// read after a read at another pace comes after a uniform draw of up to
// that: environments that read together (a watch that ended, a fleet
// started at once) would otherwise read together every quietTTLFactor ×
// CacheTTL, a burst on the state item, and would learn of the next watch
// at the same instant rather than evenly over the interval.
func (b *Breaker) freshUntilLocked(now time.Time) int64 {
	ttl := b.s.CacheTTL
	quiet := b.sharedLocked() && b.state == Closed && !b.watchingLocked(now)
	if !quiet {
		b.quietPhased = false
	}
	if b.sharedLocked() && b.state == Closed {
		switch {
		case quiet:
			ttl *= quietTTLFactor // quiet: a failure here reads at once (see runAlarm)
			if !b.quietPhased {
				b.quietPhased = true
				ttl = max(time.Duration((1-b.randLocked())*float64(ttl)), 1)
			}
		case b.s.Adaptive:
			ttl /= adaptiveReadsPerTTL // the share admitted follows the fleet's counts
		}
	}
	t := now.Add(ttl)
	if b.sharedLocked() && (b.state == Open || b.state == HalfOpen) {
		if w := b.scheduleLocked(now).writeAt; now.Before(w) && w.Before(t) {
			t = w
		}
	}
	return t.UnixNano()
}

// clampOpenUntil bounds the open period a snapshot read at now may
// impose: an OpenUntil further than MaxOpenDuration × (1 + Jitter) from now
// (a clock far ahead, a bug, a hand-edited item) is read as now +
// MaxOpenDuration, the longest this breaker would ever open for itself.
func (b *Breaker) clampOpenUntil(now time.Time, s Snapshot) time.Time {
	if s.State != Open {
		return s.OpenUntil
	}
	longest := float64(b.s.MaxOpenDuration) * (1 + max(b.s.Jitter, 0))
	if longest < math.MaxInt64 && s.OpenUntil.Sub(now) > time.Duration(longest) {
		return now.Add(b.s.MaxOpenDuration)
	}
	return s.OpenUntil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// admitLocked admits a call while closed: it samples it for the fleet's
// counts (a first attempt only: a retry, from AllowRetry, exists because
// an attempt failed), and adaptive throttling may reject it.
func (b *Breaker) admitLocked(now time.Time, retry bool) decision {
	var (
		w      int32
		sample bool
	)
	if !retry {
		w, sample = b.sampleLocked(now)
	}
	if err := b.throttleLocked(now, retry); err != nil {
		b.countRequestLocked(now, w)
		return decision{err: err}
	}
	b.win.addRequest(now.UnixNano())
	return decision{permit: Permit{gen: b.gen, start: now, weight: w, counted: w > 0 && !sample}}
}

// freeProbeLocked returns a free local probe slot, or -1 and the time
// until the first lease lapses.
func (b *Breaker) freeProbeLocked(now time.Time) (int, time.Duration) {
	var first time.Time
	for i, until := range b.probes {
		if until.IsZero() || until.Before(now) { // lapsed before now, as Store.AcquireProbe has it
			return i, 0
		}
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	return -1, first.Sub(now)
}

// releaseProbeLocked frees the local probe slot leased at start, unless
// its lease lapsed and the slot went to a later probe since: a late
// outcome of a lost probe must not free the slot of a live one.
func (b *Breaker) releaseProbeLocked(gen uint64, slot int, start time.Time) {
	if gen == b.gen && slot >= 0 && slot < len(b.probes) && b.probes[slot].Equal(start.Add(b.s.ProbeLease)) {
		b.probes[slot] = time.Time{}
	}
}

func (b *Breaker) openError(st State, wait time.Duration, forced bool) error {
	return &OpenError{Name: b.name, State: st, RetryAfter: max(wait, 0), Forced: forced}
}

func (b *Breaker) doneSlow(ctx context.Context, now time.Time, p Permit, o Outcome) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o != Success && o != Failure {
		o = Excluded
	}
	if o == Success && b.s.SlowCallThreshold > 0 && now.Sub(p.start) > b.s.SlowCallThreshold {
		o = Failure
	}
	b.mu.Lock()
	if p.gen != b.gen {
		b.mu.Unlock()
		return
	}
	b.observeLocked(now)
	b.recordLocked(now, o)
	var j job
	if p.kind == permitProbe {
		j = b.probeDoneLocked(now, p, o)
	} else if o != Excluded {
		j = b.callDoneLocked(now, p, o)
	}
	evs := b.takeEventsLocked()
	b.mu.Unlock()
	b.fire(evs)

	switch j.op {
	case opReport:
		_ = b.runReport(ctx, j)
	case opAlarm:
		_ = b.runAlarm(ctx, j)
	case opTransition:
		_ = b.runTransition(ctx, now, j)
	}
}

func (b *Breaker) recordLocked(now time.Time, o Outcome) {
	b.win.add(now.UnixNano(), o)
	switch o {
	case Success:
		b.consecFail.Store(0)
	case Failure:
		b.consecFail.Add(1)
		b.succMark.Store(b.win.successes())
	}
}

// probeDoneLocked closes the breaker after a successful probe and opens it
// again after a failed one.
func (b *Breaker) probeDoneLocked(now time.Time, p Permit, o Outcome) job {
	b.releaseProbeLocked(p.gen, int(p.slot), p.start)
	if o == Excluded || b.state != HalfOpen {
		return job{}
	}
	next := Snapshot{State: Closed}
	if o == Failure {
		r := b.reopens + 1
		next = Snapshot{State: Open, OpenUntil: now.Add(b.openDurationLocked(r)), Reopens: r}
	}
	if !b.held {
		return b.transitionLocked(now, HalfOpen, next)
	}
	// Held on the local state machine: its own probe decides, locally.
	// Success rejoins the fleet (closed, as last read); a failure keeps it
	// held, open for longer. (Its probes are not fleet samples: the fleet's
	// other environments sample their calls, and trip it if the partner
	// is down.)
	b.held = o == Failure
	b.setMachineLocked(now, next.State, next.OpenUntil, next.Reopens, OriginLocal)
	return job{}
}

// callDoneLocked handles a counted outcome of an ordinary call that could
// not be recorded lock-free.
func (b *Breaker) callDoneLocked(now time.Time, p Permit, o Outcome) job {
	if ov, _ := b.overrideLocked(now); ov != NoOverride || b.state != Closed {
		return job{} // forced closed: counted, never trips
	}
	if !b.sharedLocked() {
		if o == Failure && b.shouldTripLocked(now) {
			b.setMachineLocked(now, Open, now.Add(b.openDurationLocked(0)), 0, OriginLocal)
		}
		return job{}
	}
	return b.accountFleetLocked(now, p, o)
}

// transitionLocked applies a transition of the local state machine, or
// returns the Store call that makes it fleet-wide.
func (b *Breaker) transitionLocked(now time.Time, from State, next Snapshot) job {
	if b.sharedLocked() {
		next.Epoch = b.snap.Epoch + 1
		return job{op: opTransition, gen: b.gen, from: from, epoch: b.snap.Epoch, next: next}
	}
	b.setMachineLocked(now, next.State, next.OpenUntil, next.Reopens, OriginLocal)
	return job{}
}

// shouldTripLocked is the local trip rule, the one place it is decided:
// whether this environment's own counts trip a closed breaker at now,
// ConsecutiveFailures in a row (if set), or failures of at least
// FailureRatio of at least MinRequests outcomes in the rolling window
// ending at now. The fleet's rule, over sampled counts, is
// fleetAboveLocked.
func (b *Breaker) shouldTripLocked(now time.Time) bool {
	if n := b.s.ConsecutiveFailures; n > 0 && b.consecFail.Load() >= n {
		return true
	}
	c := b.win.rolling(b.win.number(now.UnixNano()))
	total := c.Successes + c.Failures
	return total > 0 && total >= b.s.MinRequests && float64(c.Failures) >= b.s.FailureRatio*float64(total)
}

// openDurationLocked returns the jittered open duration after reopens
// re-opens: OpenDuration × 2^reopens, capped at MaxOpenDuration, then
// spread over ±Jitter.
func (b *Breaker) openDurationLocked(reopens int) time.Duration {
	d := float64(b.s.OpenDuration) * math.Pow(openGrowth, float64(min(max(reopens, 0), 64)))
	d = min(d, float64(b.s.MaxOpenDuration))
	if b.s.Jitter > 0 {
		d *= 1 + b.s.Jitter*(2*b.randLocked()-1)
	}
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(time.Duration(d), 1)
}

// setMachineLocked moves the state machine to a new state in a new
// generation; origin says who decided it (for OnStateChange).
func (b *Breaker) setMachineLocked(now time.Time, st State, openUntil time.Time, reopens int, origin Origin) {
	before := b.Counts()
	b.state, b.openUntil, b.reopens = st, openUntil, max(reopens, 0)
	b.rawOpenUntil = openUntil
	b.newGenerationLocked()
	b.announceLocked(now, before, origin)
	b.publishLocked(now)
}

func (b *Breaker) newGenerationLocked() {
	b.gen++
	b.win.reset()
	b.succMark.Store(0)
	b.consecFail.Store(0)
	clear(b.probes)
	b.pend, b.ready = pending{}, pending{}
	b.sampleFrom, b.firstDone = time.Time{}, false
}

// advanceLocked moves a local (or degraded) open breaker whose open
// duration has passed to half-open. A shared breaker leaves that to the
// fleet (see decideLocked).
func (b *Breaker) advanceLocked(now time.Time) {
	if b.state == Open && !b.sharedLocked() && !now.Before(b.openUntil) {
		b.setMachineLocked(now, HalfOpen, b.openUntil, b.reopens, OriginLocal)
	}
}

// overrideLocked returns the override in force at now (local first, then
// the fleet's) and, for the fleet's, when it lapses.
func (b *Breaker) overrideLocked(now time.Time) (Override, time.Time) {
	if b.override != NoOverride {
		return b.override, time.Time{}
	}
	if b.store != nil && b.snap.Override != NoOverride && (b.snap.OverrideUntil.IsZero() || now.Before(b.snap.OverrideUntil)) {
		return b.snap.Override, b.snap.OverrideUntil
	}
	return NoOverride, time.Time{}
}

// effectiveLocked returns the state as overrides make it.
func (b *Breaker) effectiveLocked(now time.Time) State {
	ov, _ := b.overrideLocked(now)
	switch ov {
	case ForcedOpen:
		return Open
	case ForcedClosed, Disabled:
		return Closed
	}
	return b.state
}

// syncEffectiveLocked starts a new generation, and announces the change of
// state if any, when the override in force changed without a call to
// setOverride (an override in the fleet state appeared, changed or lapsed).
func (b *Breaker) syncEffectiveLocked(now time.Time) {
	if ov, _ := b.overrideLocked(now); ov != b.lastOv || b.effectiveLocked(now) != b.lastEff {
		before := b.Counts()
		b.newGenerationLocked()
		origin := OriginLocal
		if b.override == NoOverride && b.store != nil {
			origin = OriginFollowed // the fleet's override appeared, changed or lapsed
		}
		b.announceLocked(now, before, origin)
	}
	b.publishLocked(now)
}

// announceLocked queues an OnStateChange call if the effective state
// changed, and records the override in force.
func (b *Breaker) announceLocked(now time.Time, before Counts, origin Origin) {
	b.lastOv, _ = b.overrideLocked(now)
	eff := b.effectiveLocked(now)
	if eff == b.lastEff {
		return
	}
	if b.s.OnStateChange != nil {
		b.events = append(b.events, event{from: b.lastEff, to: eff, before: before, origin: origin})
	}
	b.lastEff = eff
}

func (b *Breaker) takeEventsLocked() []event {
	evs := b.events
	b.events = nil
	return evs
}

func (b *Breaker) fire(evs []event) {
	for _, e := range evs {
		b.s.OnStateChange(StateChange{Name: b.name, From: e.from, To: e.to, Counts: e.before, Origin: e.origin})
	}
}

// publishLocked stores the generation and the flags for the lock-free
// path.
func (b *Breaker) publishLocked(now time.Time) {
	var f uint64
	if ov, _ := b.overrideLocked(now); ov != NoOverride || b.state != Closed {
		f |= flagSlowAllow | flagSlowDone
	}
	if b.samplingLocked(now) {
		// Calls are sampled for the fleet: Allow draws the sample, Done
		// counts it.
		f |= flagSlowAllow | flagSlowDone
	}
	b.word.Store(b.gen<<genShift | f)
}

func (b *Breaker) observeLocked(now time.Time) {
	if now.After(b.lastNow) {
		b.lastNow = now
	}
}

// sharedLocked reports whether the fleet state decides: a Store is set,
// it has not failed, and this environment is not held on its local state
// machine.
func (b *Breaker) sharedLocked() bool { return b.store != nil && !b.degraded && !b.held }

// reportingLocked reports whether fleet counts are reported: a Store is set
// and it has not failed (held or not).
func (b *Breaker) reportingLocked() bool { return b.store != nil && !b.degraded }
