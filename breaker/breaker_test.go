package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// t0 is a round time, so that windows start at t0.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var ctx = context.Background()

type transition struct {
	from, to breaker.State
	before   breaker.Counts
	origin   breaker.Origin
}

// recorder collects OnStateChange calls.
type recorder struct {
	mu sync.Mutex
	ts []transition
}

func (r *recorder) hook(c breaker.StateChange) {
	r.mu.Lock()
	r.ts = append(r.ts, transition{c.From, c.To, c.Counts, c.Origin})
	r.mu.Unlock()
}

func (r *recorder) all() []transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]transition(nil), r.ts...)
}

func (r *recorder) last(t *testing.T) transition {
	t.Helper()
	ts := r.all()
	if len(ts) == 0 {
		t.Fatal("no state change recorded")
	}
	return ts[len(ts)-1]
}

func newBreaker(t testing.TB, s breaker.Settings) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("partner", s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// call makes one call at now with outcome o; it reports whether the call
// was admitted.
func call(t testing.TB, b *breaker.Breaker, now time.Time, o breaker.Outcome) bool {
	t.Helper()
	p, err := b.Allow(ctx, now)
	if err != nil {
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("Allow: unexpected error %v", err)
		}
		return false
	}
	b.Done(ctx, now, p, o)
	return true
}

func calls(t testing.TB, b *breaker.Breaker, now time.Time, o breaker.Outcome, n int) {
	t.Helper()
	for i := range n {
		if !call(t, b, now, o) {
			t.Fatalf("call %d of %d (%v) at %v rejected; state %v", i+1, n, o, now, b.State(now))
		}
	}
}

func mustOpenError(t *testing.T, err error) *breaker.OpenError {
	t.Helper()
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("got error %v, want an *OpenError satisfying errors.Is(err, ErrOpen)", err)
	}
	return oe
}

func wantState(t *testing.T, b *breaker.Breaker, now time.Time, want breaker.State) {
	t.Helper()
	if got := b.State(now); got != want {
		t.Fatalf("State(%v) = %v, want %v", now.Sub(t0), got, want)
	}
}

func TestTripsOnRatioWithMinThroughput(t *testing.T) {
	rec := &recorder{}
	b := newBreaker(t, breaker.Settings{Jitter: -1, OnStateChange: rec.hook})
	calls(t, b, t0, breaker.Success, 10)
	calls(t, b, t0, breaker.Failure, 9)
	wantState(t, b, t0, breaker.Closed) // 19 calls: below MinRequests
	calls(t, b, t0, breaker.Failure, 1) // 10 of 20 failed: 50%
	wantState(t, b, t0, breaker.Open)

	got := rec.last(t)
	want := breaker.Counts{Requests: 20, Successes: 10, Failures: 10, ConsecutiveFailures: 10}
	if got.from != breaker.Closed || got.to != breaker.Open || got.before != want {
		t.Fatalf("OnStateChange got %v→%v %+v, want closed→open %+v", got.from, got.to, got.before, want)
	}
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("counts after the trip = %+v, want zero (new generation)", c)
	}
}

func TestRatioBelowThresholdOrThroughputDoesNotTrip(t *testing.T) {
	b := newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Failure, 19) // 100% of 19 < MinRequests
	wantState(t, b, t0, breaker.Closed)

	b = newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Success, 11)
	calls(t, b, t0, breaker.Failure, 9) // 45% of 20
	wantState(t, b, t0, breaker.Closed)
	calls(t, b, t0, breaker.Success, 100)
	calls(t, b, t0, breaker.Failure, 100) // 109 of 220: 49.5%
	wantState(t, b, t0, breaker.Closed)
	calls(t, b, t0, breaker.Failure, 2) // 111 of 222: 50%
	wantState(t, b, t0, breaker.Open)
}

func TestCustomRatioAndMinRequests(t *testing.T) {
	b := newBreaker(t, breaker.Settings{FailureRatio: 0.25, MinRequests: 4})
	calls(t, b, t0, breaker.Success, 3)
	wantState(t, b, t0, breaker.Closed)
	calls(t, b, t0, breaker.Failure, 1) // 1 of 4
	wantState(t, b, t0, breaker.Open)
}

func TestRollingWindow(t *testing.T) {
	// 10 s in 10 slots: failures older than the window no longer count.
	b := newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Failure, 15)
	calls(t, b, t0.Add(10*time.Second), breaker.Failure, 15) // the first 15 rolled out
	wantState(t, b, t0.Add(10*time.Second), breaker.Closed)
	if c := b.Counts(); c.Failures != 15 || c.Requests != 15 {
		t.Fatalf("counts = %+v, want 15 failures in the window", c)
	}
	calls(t, b, t0.Add(19*time.Second+999*time.Millisecond), breaker.Failure, 5) // 15+5 in [10 s, 20 s)
	wantState(t, b, t0.Add(19*time.Second), breaker.Open)

	// Slot by slot: 10 failures at 0 s and 10 at 9.9 s are in one window.
	b = newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Failure, 10)
	calls(t, b, t0.Add(9900*time.Millisecond), breaker.Failure, 9)
	wantState(t, b, t0.Add(9900*time.Millisecond), breaker.Closed)
	calls(t, b, t0.Add(9950*time.Millisecond), breaker.Failure, 1)
	wantState(t, b, t0.Add(9950*time.Millisecond), breaker.Open)
}

func TestConsecutiveFailures(t *testing.T) {
	b := newBreaker(t, breaker.Settings{ConsecutiveFailures: 3, MinRequests: 1000})
	calls(t, b, t0, breaker.Failure, 2)
	calls(t, b, t0, breaker.Success, 1)
	calls(t, b, t0, breaker.Failure, 2)
	calls(t, b, t0, breaker.Excluded, 5) // excluded calls do not break a streak
	if c := b.Counts(); c.ConsecutiveFailures != 2 || c.ConsecutiveSuccesses != 0 {
		t.Fatalf("counts = %+v, want 2 consecutive failures", c)
	}
	wantState(t, b, t0, breaker.Closed)
	calls(t, b, t0, breaker.Failure, 1)
	wantState(t, b, t0, breaker.Open)
}

// Successes in a row are not limited to the window: they run from the
// latest failure (or the start of the generation), however many slots
// have rolled out since.
func TestConsecutiveSuccessesOutliveTheWindow(t *testing.T) {
	b := newBreaker(t, breaker.Settings{Window: 4 * time.Second})
	for i := range 30 { // 30 s, 3 calls a second: the ring is reused many times
		calls(t, b, t0.Add(time.Duration(i)*time.Second), breaker.Success, 3)
	}
	end := t0.Add(29 * time.Second)
	if c := b.Counts(); c.ConsecutiveSuccesses != 90 || c.Successes != 12 || c.ConsecutiveFailures != 0 {
		t.Fatalf("counts = %+v, want 90 successes in a row, 12 in the window", c)
	}
	calls(t, b, end, breaker.Excluded, 2)
	if c := b.Counts(); c.ConsecutiveSuccesses != 90 {
		t.Fatalf("excluded calls broke the run: %+v", c)
	}
	calls(t, b, end, breaker.Failure, 1)
	if c := b.Counts(); c.ConsecutiveSuccesses != 0 || c.ConsecutiveFailures != 1 {
		t.Fatalf("after a failure: %+v", c)
	}
	calls(t, b, end.Add(time.Second), breaker.Success, 2)
	calls(t, b, end.Add(9*time.Second), breaker.Success, 1)
	if c := b.Counts(); c.ConsecutiveSuccesses != 3 || c.ConsecutiveFailures != 0 {
		t.Fatalf("after 3 more successes: %+v", c)
	}
	b.Reset()
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("after Reset: %+v", c)
	}
}

// A new generation empties the window; calls in the same slot as before it
// must be counted in the fresh counts.
func TestCountsAfterResetInTheSameSlot(t *testing.T) {
	b := newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Success, 3)
	b.Reset()
	calls(t, b, t0.Add(time.Millisecond), breaker.Success, 2)
	if c := b.Counts(); c.Requests != 2 || c.Successes != 2 || c.ConsecutiveSuccesses != 2 {
		t.Fatalf("counts = %+v, want the 2 calls after Reset", c)
	}
}

func TestOpenHalfOpenClosed(t *testing.T) {
	rec := &recorder{}
	b := newBreaker(t, breaker.Settings{Jitter: -1, OnStateChange: rec.hook})
	calls(t, b, t0, breaker.Failure, 20)
	wantState(t, b, t0, breaker.Open)

	_, err := b.Allow(ctx, t0.Add(10*time.Second))
	oe := mustOpenError(t, err)
	if oe.State != breaker.Open || oe.RetryAfter != 20*time.Second || oe.Forced || oe.Name != "partner" {
		t.Fatalf("OpenError = %+v, want open, RetryAfter 20s", oe)
	}

	at := t0.Add(30 * time.Second)
	wantState(t, b, at, breaker.HalfOpen)
	probe, err := b.Allow(ctx, at)
	if err != nil || !probe.Probe() {
		t.Fatalf("Allow at the end of the open duration = %+v, %v; want a probe", probe, err)
	}
	_, err = b.Allow(ctx, at)
	if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen {
		t.Fatalf("second call while half-open: %+v, want rejected by half-open", oe)
	}
	b.Done(ctx, at.Add(time.Millisecond), probe, breaker.Success)
	wantState(t, b, at, breaker.Closed)

	ts := rec.all()
	want := []struct{ from, to breaker.State }{
		{breaker.Closed, breaker.Open}, {breaker.Open, breaker.HalfOpen}, {breaker.HalfOpen, breaker.Closed},
	}
	if len(ts) != len(want) {
		t.Fatalf("transitions = %+v, want %v", ts, want)
	}
	for i, w := range want {
		if ts[i].from != w.from || ts[i].to != w.to {
			t.Fatalf("transition %d = %v→%v, want %v→%v", i, ts[i].from, ts[i].to, w.from, w.to)
		}
	}
	if got := ts[2].before; got.Successes != 1 || got.Requests != 1 || got.ConsecutiveSuccesses != 1 {
		t.Fatalf("counts before half-open→closed = %+v, want the probe's success", got)
	}
	// Closed again: reopens were reset, the next trip opens for 30 s.
	calls(t, b, at, breaker.Failure, 20)
	_, err = b.Allow(ctx, at)
	if oe := mustOpenError(t, err); oe.RetryAfter != 30*time.Second {
		t.Fatalf("RetryAfter after a re-trip = %v, want 30s", oe.RetryAfter)
	}
}

func TestOpenDurationGrowsAndIsCapped(t *testing.T) {
	b := newBreaker(t, breaker.Settings{Jitter: -1, MaxOpenDuration: 5 * time.Minute})
	calls(t, b, t0, breaker.Failure, 20)
	now := t0
	wantDurations := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i, want := range wantDurations {
		_, err := b.Allow(ctx, now)
		if oe := mustOpenError(t, err); oe.RetryAfter != want {
			t.Fatalf("open period %d: RetryAfter = %v, want %v", i, oe.RetryAfter, want)
		}
		now = now.Add(want)
		p, err := b.Allow(ctx, now)
		if err != nil || !p.Probe() {
			t.Fatalf("open period %d: no probe at its end: %v", i, err)
		}
		b.Done(ctx, now, p, breaker.Failure)
	}
}

func TestJitterBounds(t *testing.T) {
	cases := []struct {
		r    float64
		want time.Duration
	}{
		{0, 24 * time.Second},   // 30 s - 20%
		{0.5, 30 * time.Second}, // centre
		{0.75, 33 * time.Second},
		{1, 36 * time.Second},  // clamped to the top of the range
		{-3, 24 * time.Second}, // out-of-range values are clamped
	}
	for _, c := range cases {
		b := newBreaker(t, breaker.Settings{Rand: func() float64 { return c.r }})
		calls(t, b, t0, breaker.Failure, 20)
		_, err := b.Allow(ctx, t0)
		if oe := mustOpenError(t, err); oe.RetryAfter != c.want {
			t.Errorf("rand %v: RetryAfter = %v, want %v", c.r, oe.RetryAfter, c.want)
		}
	}

	// A seeded source: every open period lies within ±20% of its nominal
	// value, the cap applying before the jitter.
	rng := rand.New(rand.NewPCG(1, 2))
	b := newBreaker(t, breaker.Settings{Rand: rng.Float64, MaxOpenDuration: 2 * time.Minute})
	calls(t, b, t0, breaker.Failure, 20)
	now := t0
	nominal := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
	seen := map[time.Duration]bool{}
	for round := range 40 {
		nom := nominal[min(round, len(nominal)-1)]
		_, err := b.Allow(ctx, now)
		d := mustOpenError(t, err).RetryAfter
		if d < nom*8/10 || d > nom*12/10 {
			t.Fatalf("round %d: open for %v, want within ±20%% of %v", round, d, nom)
		}
		seen[d] = true
		now = now.Add(d)
		p, err := b.Allow(ctx, now)
		if err != nil {
			t.Fatalf("round %d: no probe: %v", round, err)
		}
		b.Done(ctx, now, p, breaker.Failure)
	}
	if len(seen) < 30 {
		t.Fatalf("only %d distinct open durations in 40 rounds: jitter is not spreading", len(seen))
	}
}

func TestHalfOpenProbeLimit(t *testing.T) {
	b := newBreaker(t, breaker.Settings{HalfOpenProbes: 3, Jitter: -1, ProbeLease: 5 * time.Second})
	calls(t, b, t0, breaker.Failure, 20)
	at := t0.Add(30 * time.Second)
	var probes []breaker.Permit
	for i := range 3 {
		p, err := b.Allow(ctx, at)
		if err != nil || !p.Probe() {
			t.Fatalf("probe %d: %v", i, err)
		}
		probes = append(probes, p)
	}
	_, err := b.Allow(ctx, at.Add(time.Second))
	if oe := mustOpenError(t, err); oe.State != breaker.HalfOpen || oe.RetryAfter != 4*time.Second {
		t.Fatalf("fourth probe: %+v, want half-open rejection until the first lease lapses (4s)", oe)
	}
	// An excluded probe frees its slot without deciding anything.
	b.Done(ctx, at, probes[0], breaker.Excluded)
	wantState(t, b, at, breaker.HalfOpen)
	p, err := b.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("probe after an excluded one: %v", err)
	}
	// Probes lost with their callers free their slots when the leases lapse.
	if _, err := b.Allow(ctx, at.Add(5*time.Second)); err == nil {
		t.Fatal("a probe slot was free while every lease still held")
	}
	lost, err := b.Allow(ctx, at.Add(5*time.Second+time.Nanosecond))
	if err != nil || !lost.Probe() {
		t.Fatalf("no probe once the leases lapsed: %v", err)
	}
	// One failed probe re-opens; the other probes' results are then stale.
	b.Done(ctx, at.Add(6*time.Second), probes[1], breaker.Failure)
	wantState(t, b, at.Add(6*time.Second), breaker.Open)
	b.Done(ctx, at.Add(6*time.Second), probes[2], breaker.Success)
	wantState(t, b, at.Add(6*time.Second), breaker.Open)
}

// A probe whose lease lapsed, and whose slot went to a later probe, must
// not free that slot when its outcome finally arrives: the later probe is
// still out (found by TestRapidLocalBreaker).
func TestLateProbeKeepsLiveProbesSlot(t *testing.T) {
	for _, o := range []breaker.Outcome{breaker.Excluded, breaker.Success, breaker.Failure} {
		b := newBreaker(t, breaker.Settings{HalfOpenProbes: 1, Jitter: -1, OpenDuration: time.Second, ProbeLease: time.Second})
		calls(t, b, t0, breaker.Failure, 20)
		at := t0.Add(time.Second)
		lost, err := b.Allow(ctx, at)
		if err != nil || !lost.Probe() {
			t.Fatalf("first probe: %v", err)
		}
		at = at.Add(2 * time.Second) // its lease lapsed
		live, err := b.Allow(ctx, at)
		if err != nil || !live.Probe() {
			t.Fatalf("probe after the first lease lapsed: %v", err)
		}
		b.Done(ctx, at, lost, o)
		if o != breaker.Excluded {
			// A late outcome still decides (closed, or open again); what
			// matters here is only the half-open case.
			continue
		}
		wantState(t, b, at, breaker.HalfOpen)
		if p, err := b.Allow(ctx, at); err == nil {
			t.Fatalf("a second probe (probe=%v) went out while the live one's lease holds; HalfOpenProbes is 1", p.Probe())
		}
		b.Done(ctx, at, live, breaker.Success)
		wantState(t, b, at, breaker.Closed)
	}
}

func TestStaleGenerationIsDropped(t *testing.T) {
	rec := &recorder{}
	b := newBreaker(t, breaker.Settings{Jitter: -1, OnStateChange: rec.hook})
	old, err := b.Allow(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	calls(t, b, t0, breaker.Failure, 20) // trips: a new generation
	b.Done(ctx, t0, old, breaker.Failure)
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("a result from the closed generation was counted while open: %+v", c)
	}

	at := t0.Add(30 * time.Second)
	probe, err := b.Allow(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	b.Done(ctx, at, old, breaker.Success) // stale: must not close
	wantState(t, b, at, breaker.HalfOpen)
	b.Done(ctx, at, probe, breaker.Success)
	wantState(t, b, at, breaker.Closed)
	b.Done(ctx, at, probe, breaker.Failure) // the probe's generation is over too
	if c := b.Counts(); c.Failures != 0 {
		t.Fatalf("a stale probe result was counted: %+v", c)
	}
	b.Done(ctx, at, breaker.Permit{}, breaker.Failure) // the zero Permit is ignored
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("the zero Permit was counted: %+v", c)
	}
}

func TestSlowCalls(t *testing.T) {
	b := newBreaker(t, breaker.Settings{SlowCallThreshold: 100 * time.Millisecond, MinRequests: 4})
	for i := range 2 {
		p, err := b.Allow(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		b.Done(ctx, t0.Add(100*time.Millisecond), p, breaker.Success) // at the threshold: not slow
		if i == 0 {
			if c := b.Counts(); c.Successes != 1 {
				t.Fatalf("a call at the threshold did not count as a success: %+v", c)
			}
		}
	}
	for range 2 {
		p, err := b.Allow(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		b.Done(ctx, t0.Add(101*time.Millisecond), p, breaker.Success) // slow: a failure
	}
	wantState(t, b, t0, breaker.Open) // 2 of 4 failed
}

func TestSlowProbeReopens(t *testing.T) {
	b := newBreaker(t, breaker.Settings{SlowCallThreshold: time.Second, Jitter: -1})
	calls(t, b, t0, breaker.Failure, 20)
	at := t0.Add(30 * time.Second)
	p, err := b.Allow(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	b.Done(ctx, at.Add(2*time.Second), p, breaker.Success)
	wantState(t, b, at.Add(2*time.Second), breaker.Open)
}

func TestExcludedIsNotCounted(t *testing.T) {
	b := newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Excluded, 100)
	calls(t, b, t0, breaker.Failure, 19)
	wantState(t, b, t0, breaker.Closed) // 19 counted calls, excluded ones do not add throughput
	c := b.Counts()
	if c.Excluded != 100 || c.Failures != 19 || c.Requests != 119 || c.Successes != 0 {
		t.Fatalf("counts = %+v", c)
	}
	calls(t, b, t0, breaker.Excluded, 1000) // nor do they dilute the ratio
	calls(t, b, t0, breaker.Failure, 1)
	wantState(t, b, t0, breaker.Open)
	// An outcome value out of range is treated as excluded.
	b = newBreaker(t, breaker.Settings{})
	calls(t, b, t0, breaker.Outcome(9), 30)
	if c := b.Counts(); c.Excluded != 30 || c.Failures != 0 {
		t.Fatalf("counts after invalid outcomes = %+v", c)
	}
}

func TestInFlightCountsAsRequest(t *testing.T) {
	b := newBreaker(t, breaker.Settings{})
	p, err := b.Allow(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Counts(); c.Requests != 1 || c.Successes != 0 {
		t.Fatalf("counts with one call in flight = %+v", c)
	}
	b.Done(ctx, t0, p, breaker.Success)
	if c := b.Counts(); c.Requests != 1 || c.Successes != 1 || c.ConsecutiveSuccesses != 1 {
		t.Fatalf("counts after it = %+v", c)
	}
}

func TestOnStateChangeRunsOutsideTheLock(t *testing.T) {
	var b *breaker.Breaker
	var seen []breaker.State
	b = newBreaker(t, breaker.Settings{OnStateChange: func(c breaker.StateChange) {
		// Calling back into the breaker would deadlock if the lock were held.
		seen = append(seen, b.State(t0))
		_ = b.Counts()
		if c.Name != "partner" || c.Origin != breaker.OriginLocal {
			t.Errorf("name = %q, origin %v; want partner, local", c.Name, c.Origin)
		}
	}})
	calls(t, b, t0, breaker.Failure, 20)
	if len(seen) != 1 || seen[0] != breaker.Open {
		t.Fatalf("callback saw %v, want [open]", seen)
	}
}

func TestOverrides(t *testing.T) {
	rec := &recorder{}
	b := newBreaker(t, breaker.Settings{OnStateChange: rec.hook, Jitter: -1})
	calls(t, b, t0, breaker.Success, 3)

	b.Override(breaker.ForcedOpen)
	wantState(t, b, t0, breaker.Open)
	_, err := b.Allow(ctx, t0)
	if oe := mustOpenError(t, err); !oe.Forced || oe.State != breaker.Open || oe.RetryAfter != 0 {
		t.Fatalf("forced open: %+v", oe)
	}
	if got := rec.last(t); got.from != breaker.Closed || got.to != breaker.Open || got.before.Successes != 3 {
		t.Fatalf("Override(ForcedOpen) announced %+v", got)
	}

	b.Override(breaker.ForcedClosed)
	wantState(t, b, t0, breaker.Closed)
	calls(t, b, t0, breaker.Failure, 50) // counted, never trips
	wantState(t, b, t0, breaker.Closed)
	if c := b.Counts(); c.Failures != 50 {
		t.Fatalf("forced closed: counts = %+v, want 50 failures", c)
	}

	b.Override(breaker.Disabled)
	calls(t, b, t0, breaker.Failure, 50)
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("disabled: counts = %+v, want nothing counted", c)
	}
	wantState(t, b, t0, breaker.Closed)

	b.Reset()
	calls(t, b, t0, breaker.Failure, 20)
	wantState(t, b, t0, breaker.Open) // the state machine is back
	b.Reset()
	wantState(t, b, t0, breaker.Closed)
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("after Reset: counts = %+v", c)
	}

	// ForcedClosed over an open breaker admits at once; a call admitted
	// before the override belongs to an older generation.
	calls(t, b, t0, breaker.Failure, 20)
	wantState(t, b, t0, breaker.Open)
	b.Override(breaker.ForcedClosed)
	p, err := b.Allow(ctx, t0)
	if err != nil || p.Probe() {
		t.Fatalf("force-closed over open: %v", err)
	}
	b.Reset()
	b.Done(ctx, t0, p, breaker.Failure)
	if c := b.Counts(); c != (breaker.Counts{}) {
		t.Fatalf("a call from before Reset was counted: %+v", c)
	}
}

func TestOpenErrorMessage(t *testing.T) {
	err := error(&breaker.OpenError{Name: "payments", State: breaker.Open, RetryAfter: 1500 * time.Millisecond, Forced: true})
	want := `herdguard: circuit breaker "payments" is open (forced by operator); next probe in 1.5s`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatal("errors.Is(err, ErrOpen) is false")
	}
}

func TestConcurrentUse(t *testing.T) {
	// Many goroutines drive one breaker through trips and recoveries; run
	// with -race. The invariants: no panic, no call admitted while open
	// before the open period ends, and the breaker ends in a valid state.
	b := newBreaker(t, breaker.Settings{MinRequests: 10, Window: time.Second, HalfOpenProbes: 2, OpenDuration: 50 * time.Millisecond, Jitter: -1})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 3000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				p, err := b.Allow(ctx, now)
				if err != nil {
					var oe *breaker.OpenError
					if !errors.As(err, &oe) {
						t.Errorf("Allow: %v", err)
						return
					}
					continue
				}
				o := breaker.Success
				if rng.IntN(3) == 0 || (i/500)%2 == 1 {
					o = breaker.Failure
				}
				b.Done(ctx, now.Add(time.Millisecond), p, o)
				_ = b.Counts()
			}
		})
	}
	wg.Wait()
	switch st := b.State(t0.Add(time.Hour)); st {
	case breaker.Closed, breaker.HalfOpen:
	default:
		t.Fatalf("state an hour later = %v", st)
	}
}
