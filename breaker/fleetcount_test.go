package breaker_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// Tests of the fleet's counting protocol (fleetcount.go): quiet fleets
// write nothing, a failure starts a watch, calls are sampled before their
// outcome is known, the estimate trips only when it is clearly above the
// ratio, and what each environment costs.

// invoke is one Lambda invocation at `at`: one call with outcome o, then
// Flush. It reports whether the call was admitted.
func invoke(t testing.TB, e env, at time.Time, o breaker.Outcome) bool {
	t.Helper()
	ok := call(t, e.Breaker, at, o)
	if err := e.Flush(ctx, at); err != nil {
		t.Fatalf("Flush at %v: %v", at.Sub(t0), err)
	}
	return ok
}

func TestFleetQuietWritesNothingAndReadsRarely(t *testing.T) {
	store := newFakeStore()
	const envs, seconds = 20, 100
	fleet := make([]env, envs)
	for i := range fleet {
		fleet[i] = newEnv(t, store, fmt.Sprintf("e%d", i), nil)
	}
	for s := range seconds { // one call per environment per second
		for i, e := range fleet {
			at := t0.Add(time.Duration(s)*time.Second + time.Duration(i)*time.Millisecond)
			if !invoke(t, e, at, breaker.Success) {
				t.Fatal("rejected")
			}
		}
	}
	if w := store.writes(); w != 0 {
		t.Fatalf("a healthy fleet wrote %d times", w)
	}
	// One read per environment per 10 × CacheTTL: 0.1 reads per call.
	calls := float64(envs * seconds)
	if perCall := float64(store.loads.Load()) / calls; perCall > 0.1 {
		t.Fatalf("%.3f reads per call (%d loads for %v calls), want at most 0.1", perCall, store.loads.Load(), calls)
	}
}

func TestFleetFirstFailureStartsTheWatchOnce(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	b := newEnv(t, store, "b", nil)
	invoke(t, a, t0, breaker.Success)
	invoke(t, b, t0, breaker.Success) // both cache a quiet, closed fleet
	loads := store.loads.Load()

	at := t0.Add(3 * time.Second)
	invoke(t, a, at, breaker.Failure)
	st := store.state("partner")
	var counted int64
	for _, bk := range st.Buckets {
		counted += bk.Requests + bk.Samples
	}
	if store.reports.Load() != 1 || !st.WatchUntil.Equal(at.Add(2*defaultWindow)) || counted != 0 {
		t.Fatalf("after the first failure: %d reports, stored %+v; want one alarm that sets WatchUntil = now + 2 Windows and counts nothing", store.reports.Load(), st)
	}
	if got := store.loads.Load() - loads; got != 1 {
		t.Fatalf("%d loads before the alarm, want 1: a failure finding the fleet quiet reads it at once", got)
	}
	// b's failure finds its cached state quiet too: it reads the state,
	// sees the watch, and writes nothing.
	invoke(t, b, at.Add(time.Millisecond), breaker.Failure)
	if store.reports.Load() != 1 {
		t.Fatalf("%d reports, want still 1: the watch was already on", store.reports.Load())
	}
	// From now on both sample their calls (Rand is 0: every call, each
	// counting for initialSampling = 4 while no bucket is complete).
	invoke(t, b, at.Add(time.Second), breaker.Success)
	st = store.state("partner")
	if b := st.Buckets[at.Add(time.Second).Unix()%breaker.FleetSlots]; b.Requests != 4 || b.Successes != 4 || b.Samples != 1 {
		t.Fatalf("bucket %+v, want b's sampled success counted for 4 calls", b)
	}
}

func TestFleetSamplingIsDrawnBeforeTheOutcome(t *testing.T) {
	store := newFakeStore()
	// Rand cycles 0, 0.25, 0.5, 0.75: with the initial factor (1 in 4),
	// the first of every four calls is sampled, whatever its outcome.
	var n atomic.Int64
	n.Store(-1)
	cycle := func() float64 { return float64(n.Add(1)%4) / 4 }
	a := newEnv(t, store, "a", func(s *breaker.Settings) {
		s.Rand = cycle
		s.MinRequests = 1000
		s.ReportInterval = time.Millisecond
	})
	// The alarm (no draw: the fleet was quiet), a bucket before the calls:
	// an environment that learnt of the watch by failing samples from the
	// next bucket on.
	invoke(t, a, t0.Add(-time.Second), breaker.Failure)
	for i := range 40 {
		o := breaker.Success
		if i%4 == 1 {
			o = breaker.Failure // a quarter of the calls fail, none of them sampled
		}
		call(t, a.Breaker, t0.Add(time.Duration(i+1)*time.Millisecond), o)
	}
	flushAt(t, a.Breaker, t0.Add(time.Second))
	var got breaker.Bucket
	for _, bk := range store.state("partner").Buckets {
		got.Requests += bk.Requests
		got.Successes += bk.Successes
		got.Failures += bk.Failures
		got.Samples += bk.Samples
	}
	if got != (breaker.Bucket{Requests: 40, Successes: 40, Samples: 10}) {
		t.Fatalf("fleet counts %+v, want 10 samples standing for 40 requests, all successes: the draw decides, not the outcome", got)
	}
}

// TestFleetRetriesAreNotSampled: with the fleet watching and Rand at 0,
// every first attempt asked with Allow is sampled (for initialSampling = 4
// calls), and no retry asked with AllowRetry is, so the retries' failures
// reach this environment's Counts but not the fleet's counts; the same
// failures asked with Allow are sampled like the successes.
func TestFleetRetriesAreNotSampled(t *testing.T) {
	for _, retry := range []bool{false, true} {
		store := newFakeStore()
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.ReportInterval = time.Millisecond })
		watching(t, a, t0)
		at := t0
		for i := range 15 {
			at = at.Add(time.Millisecond)
			allow, o := a.Allow, breaker.Success
			if i >= 5 { // 5 first attempts succeed, then 10 attempts fail
				o = breaker.Failure
				if retry {
					allow = a.AllowRetry
				}
			}
			p, err := allow(ctx, at)
			if err != nil {
				t.Fatalf("retry %v, call %d: %v", retry, i, err)
			}
			a.Done(ctx, at, p, o)
		}
		flushAt(t, a.Breaker, t0.Add(time.Second))
		var got breaker.Bucket
		for _, bk := range store.state("partner").Buckets {
			got.Requests += bk.Requests
			got.Successes += bk.Successes
			got.Failures += bk.Failures
			got.Samples += bk.Samples
		}
		want := breaker.Bucket{Requests: 60, Successes: 20, Failures: 40, Samples: 15}
		if retry {
			want = breaker.Bucket{Requests: 20, Successes: 20, Samples: 5}
		}
		if got != want {
			t.Errorf("retry %v: fleet counts %+v, want %+v", retry, got, want)
		}
		// The failure that started the watch, then the 10 failures.
		if c := a.Counts(); c.Successes != 5 || c.Failures != 11 {
			t.Errorf("retry %v: Counts %+v, want 5 successes and 11 failures whichever way they were asked", retry, c)
		}
		if st := a.State(t0.Add(time.Second)); st != breaker.Closed {
			t.Errorf("retry %v: %v, want closed (15 samples are fewer than MinRequests)", retry, st)
		}
	}
}

func TestFleetSamplingFactorFollowsTheFleetRate(t *testing.T) {
	store := newFakeStore()
	// A fleet making 10,000 calls a second for the whole window: its
	// complete buckets say so.
	now := t0.Add(10 * time.Second)
	cur := now.Unix()
	store.mu.Lock()
	snap := store.states["partner"]
	snap.WatchUntil = now.Add(time.Minute)
	for i := int64(1); i < breaker.FleetSlots; i++ {
		snap.Buckets[(cur-i)%breaker.FleetSlots] = breaker.Bucket{Num: cur - i, Requests: 10000, Successes: 10000, Samples: 250}
	}
	store.states["partner"] = snap
	store.mu.Unlock()
	// Rand 0.0249 < 1/40: sampled; 0.0251: not (k = 10,000/250 = 40).
	for _, c := range []struct {
		r       float64
		sampled bool
	}{{0.0249, true}, {0.0251, false}} {
		e := newEnv(t, store, "e", func(s *breaker.Settings) { s.Rand = func() float64 { return c.r } })
		before := store.reports.Load()
		call(t, e.Breaker, now, breaker.Success)
		st := store.state("partner")
		got := st.Buckets[cur%breaker.FleetSlots]
		if sampled := store.reports.Load() > before; sampled != c.sampled || (sampled && got.Requests != 40) {
			t.Fatalf("Rand %v: reported %v, bucket %+v; want sampled %v with a weight of 40", c.r, sampled, got, c.sampled)
		}
	}
}

// runFleet runs envs environments on store, each making a call every
// `every` (staggered) that fails with probability p, for d, with Flush
// after each call; it returns when the fleet first opened (-1: never).
func runFleet(t *testing.T, store *fakeStore, envs int, every, d time.Duration, p float64, seed uint64) time.Duration {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	fleet := make([]env, envs)
	for i := range fleet {
		fleet[i] = newEnv(t, store, fmt.Sprintf("e%d", i), func(s *breaker.Settings) {
			s.Rand = rand.New(rand.NewPCG(seed, uint64(i))).Float64
		})
	}
	for at := t0; at.Before(t0.Add(d)); at = at.Add(every) {
		for i, e := range fleet {
			o := breaker.Success
			if rng.Float64() < p {
				o = breaker.Failure
			}
			invoke(t, e, at.Add(time.Duration(i)*every/time.Duration(envs)), o)
		}
		if store.state("partner").State != breaker.Closed {
			return at.Sub(t0)
		}
	}
	return -1
}

func TestFleetTripsOnlyClearlyAboveTheRatio(t *testing.T) {
	for seed := range uint64(3) {
		// 50 environments, a call a second each, for 60 s.
		if at := runFleet(t, newFakeStore(), 50, time.Second, time.Minute, 0.3, seed); at >= 0 {
			t.Errorf("seed %d: a fleet failing 30%% of its calls opened %v in", seed, at)
		}
		if at := runFleet(t, newFakeStore(), 50, time.Second, time.Minute, 0.7, seed); at < 0 || at > 2*defaultWindow {
			t.Errorf("seed %d: a fleet failing 70%% of its calls opened %v in, want within 2 windows", seed, at)
		}
	}
}

func TestFleetSingleEnvironmentTrips(t *testing.T) {
	store := newFakeStore()
	// One environment making a call every 200 ms against a dead partner.
	if at := runFleet(t, store, 1, 200*time.Millisecond, time.Minute, 1, 1); at < 0 || at > 10*time.Second {
		t.Fatalf("a lone environment failing every call opened %v in, want within a window", at)
	}
}

func TestFleetCountsBeforeATripDoNotReopenIt(t *testing.T) {
	// OpenDuration (5 s) is shorter than Window (10 s): the fleet closes
	// while the failures that tripped it are still in its rolling window.
	store := newFakeStore()
	mod := func(s *breaker.Settings) { s.OpenDuration = 5 * time.Second }
	a, b := tripFleet(t, store, t0, mod)
	at := t0.Add(5 * time.Second)
	p, err := b.Allow(ctx, at)
	if err != nil || !p.Probe() {
		t.Fatalf("%v, want b's probe", err)
	}
	b.Done(ctx, at, p, breaker.Success)
	if st := store.state("partner"); st.State != breaker.Closed {
		t.Fatalf("stored %+v, want closed", st)
	}
	// One failure in 16 calls: nothing like a trip.
	for i := range 16 {
		o := breaker.Success
		if i == 0 {
			o = breaker.Failure
		}
		invoke(t, a, at.Add(time.Second+time.Duration(i)*50*time.Millisecond), o)
		invoke(t, b, at.Add(time.Second+time.Duration(i)*50*time.Millisecond), breaker.Success)
	}
	if st := store.state("partner"); st.State != breaker.Closed || st.Reopens != 0 {
		t.Fatalf("stored %+v: the counts of the trip re-opened the fleet", st)
	}
}

// TestFleetSparseCallerGetsItsProbe: an environment whose calls are
// further apart than CacheTTL gets the probe within OpenDuration (plus
// jitter) plus its gap plus CacheTTL (issue 10, item 2).
func TestFleetSparseCallerGetsItsProbe(t *testing.T) {
	for _, gap := range []time.Duration{1600 * time.Millisecond, 10 * time.Second, time.Minute} {
		t.Run(gap.String(), func(t *testing.T) {
			store := newFakeStore()
			mod := func(s *breaker.Settings) { s.OpenDuration = 5 * time.Second; s.Jitter = 0.2 }
			tripFleet(t, store, t0, mod)
			// The sparse caller: a fresh environment with random jitter and
			// spread, which reads the open state at its first call.
			b := newEnv(t, store, "sparse", func(s *breaker.Settings) {
				mod(s)
				s.Rand = rand.New(rand.NewPCG(uint64(gap), 3)).Float64
			})
			bound := t0.Add(6*time.Second + gap + defaultCacheTTL) // OpenDuration × 1.2 + gap + CacheTTL
			for at := t0.Add(gap); ; at = at.Add(gap) {
				if at.After(bound) {
					t.Fatalf("no probe by %v (bound %v)", at.Sub(t0), bound.Sub(t0))
				}
				p, err := b.Allow(ctx, at)
				if err == nil {
					if !p.Probe() {
						t.Fatalf("admitted a non-probe at %v while the fleet was open", at.Sub(t0))
					}
					b.Done(ctx, at, p, breaker.Success)
					break
				}
				mustOpenError(t, err)
			}
			if st := store.state("partner"); st.State != breaker.Closed {
				t.Fatalf("stored %+v, want closed after the probe", st)
			}
		})
	}
}

// TestFleetColdLoadHasMoreTime: the first Load of an environment, or the
// first after a long idle (a Lambda freeze), runs under coldLoadFactor ×
// StoreTimeout: a new connection's TLS handshake alone can take longer
// than StoreTimeout, and a fault would leave the environment on a state
// read long ago (issue 10, item 5).
func TestFleetColdLoadHasMoreTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		var latency atomic.Int64
		hook := func() { time.Sleep(time.Duration(latency.Load())) }
		store.loadHook.Store(&hook)
		open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: time.Now().Add(time.Hour)}
		a := newEnv(t, store, "a", func(s *breaker.Settings) { s.StoreTimeout = 50 * time.Millisecond })
		latency.Store(int64(120 * time.Millisecond)) // over StoreTimeout, under 4 × it
		if !call(t, a.Breaker, time.Now(), breaker.Success) || a.errs.count() != 0 {
			t.Fatalf("first Load: %d faults; want it to have 200 ms", a.errs.count())
		}
		// A warm Load (the quiet fleet's 15 s cache expired) gets StoreTimeout only.
		time.Sleep(16 * time.Second)
		call(t, a.Breaker, time.Now(), breaker.Success)
		if a.errs.count() != 1 {
			t.Fatalf("%d faults, want the warm Load cut at 50 ms", a.errs.count())
		}
		// The fleet opens while a is idle for a minute; its first Load after
		// that has the cold timeout, and it learns the open state.
		store.mu.Lock()
		open.OpenUntil = time.Now().Add(time.Hour)
		store.states["partner"] = open
		store.mu.Unlock()
		time.Sleep(time.Minute)
		a.Reset() // leaves degraded mode; keeps no fleet state
		_, err := a.Allow(ctx, time.Now())
		mustOpenError(t, err)
	})
}

// TestFleetOneWroteEventPerTransition: every environment announces the
// fleet's transitions, but exactly one of them, fleet-wide, as
// OriginWrote (issue 10, item 7).
func TestFleetOneWroteEventPerTransition(t *testing.T) {
	store := newFakeStore()
	const envs = 10
	fleet := make([]env, envs)
	for i := range fleet {
		fleet[i] = newEnv(t, store, fmt.Sprintf("e%d", i), nil)
	}
	for s := range 50 { // everyone fails, one call a second each
		for i, e := range fleet {
			invoke(t, e, t0.Add(time.Duration(s)*time.Second+time.Duration(i)*time.Millisecond), breaker.Failure)
		}
	}
	wrote, followed := map[breaker.State]int{}, map[breaker.State]int{}
	for _, e := range fleet {
		for _, tr := range e.rec.all() {
			switch tr.origin {
			case breaker.OriginWrote:
				wrote[tr.to]++
			case breaker.OriginFollowed:
				followed[tr.to]++
			default:
				t.Fatalf("a %v event in a fleet with a healthy store: %+v", tr.origin, tr)
			}
		}
	}
	if wrote[breaker.Open] < 1 || followed[breaker.Open] == 0 {
		t.Fatalf("wrote %v, followed %v: want the trip written once and followed by the others", wrote, followed)
	}
	st := store.state("partner")
	// Every transition of the fleet (epoch 1 to st.Epoch) was written by
	// exactly one environment.
	total := 0
	for _, n := range wrote {
		total += n
	}
	if uint64(total) != st.Epoch {
		t.Fatalf("%d wrote events for %d fleet transitions (%v)", total, st.Epoch, wrote)
	}
}

func TestFleetWatchLapsesAndWritesStop(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", nil)
	invoke(t, a, t0, breaker.Failure) // the watch: 20 s
	for s := 1; s < 60; s++ {
		invoke(t, a, t0.Add(time.Duration(s)*time.Second), breaker.Success)
	}
	writes := store.writes()
	for s := 60; s < 120; s++ {
		invoke(t, a, t0.Add(time.Duration(s)*time.Second), breaker.Success)
	}
	if store.writes() != writes {
		t.Fatalf("%d writes after the watch lapsed", store.writes()-writes)
	}
	if writes > 22 {
		t.Fatalf("%d writes during the watch: want about one report per second for 20 s", writes)
	}
}

func TestFleetFrozenCountsAreDropped(t *testing.T) {
	store := newFakeStore()
	a := newEnv(t, store, "a", func(s *breaker.Settings) { s.MinRequests = 1000 })
	invoke(t, a, t0, breaker.Failure)                                 // the alarm
	call(t, a.Breaker, t0.Add(100*time.Millisecond), breaker.Failure) // sampled, not due
	// Frozen for a minute: the sample is older than the rolling window.
	invoke(t, a, t0.Add(time.Minute), breaker.Success)
	var failures int64
	for _, bk := range store.state("partner").Buckets {
		failures += bk.Failures
	}
	if failures != 0 {
		t.Fatalf("a sample from before a one-minute freeze was reported (%d failures in the buckets)", failures)
	}
}

// TestFleetTripWeighsSamples: samples weigh the sampling factor they were
// drawn with. A window whose failures come from a few heavy samples (the
// factor was 12 then) and whose successes come from light ones holds
// fewer than MinRequests samples' worth of evidence and does not trip;
// the same weighted counts from samples of equal weight do.
func TestFleetTripWeighsSamples(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples [3]int64 // per bucket, oldest first
		trips   bool
	}{
		{"heavy failures", [3]int64{2, 2, 20}, false},
		{"equal weights", [3]int64{24, 12, 20}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newFakeStore()
			now := t0.Add(10 * time.Second)
			cur := now.Unix()
			store.mu.Lock()
			snap := store.states["partner"]
			snap.WatchUntil = now.Add(time.Minute)
			// 56 weighted outcomes, 75% failures.
			for i, bk := range []breaker.Bucket{
				{Num: cur - 2, Requests: 24, Failures: 24},
				{Num: cur - 1, Requests: 12, Successes: 6, Failures: 6},
				{Num: cur, Requests: 20, Successes: 8, Failures: 12},
			} {
				bk.Samples = c.samples[i]
				snap.Buckets[bk.Num%breaker.FleetSlots] = bk
			}
			store.states["partner"] = snap
			store.mu.Unlock()
			e := newEnv(t, store, "e", func(s *breaker.Settings) { s.ReportInterval = time.Millisecond })
			before := store.reports.Load()
			call(t, e.Breaker, now, breaker.Failure)
			if store.reports.Load() == before {
				t.Fatal("the sampled call was not reported")
			}
			if st := store.state("partner"); (st.State == breaker.Open) != c.trips {
				t.Fatalf("fleet %v after the report; want tripped %v", st.State, c.trips)
			}
		})
	}
}

// TestFleetSamplingFactorSpansTheWindow: environments that report
// together put a ReportInterval of the fleet's calls into one bucket; the
// rate is taken over the span of the window's complete buckets since the
// oldest with counts, and never a span shorter than ReportInterval, so the
// factor stays near the fleet's true one instead of a multiple of it.
func TestFleetSamplingFactorSpansTheWindow(t *testing.T) {
	for _, c := range []struct {
		name    string
		window  time.Duration
		buckets map[int64]int64 // buckets before now's: requests
		k       int64
	}{
		// 1,000 calls a second, reported every 3 s: k = 4, not 12.
		{"reports 3 s apart", 10 * time.Second, map[int64]int64{3: 3000, 6: 3000, 9: 3000}, 4},
		// The watch's first second (250 calls) in one bucket of 100 ms:
		// over ReportInterval (1 s, capped at the 0.9 s of complete
		// buckets) k = 2, not 10.
		{"a bucket shorter than ReportInterval", time.Second, map[int64]int64{1: 250}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newFakeStore()
			bucket := c.window / breaker.FleetSlots
			now := t0.Add(10 * c.window)
			cur := now.UnixMilli() / bucket.Milliseconds()
			store.mu.Lock()
			snap := store.states["partner"]
			snap.WatchUntil = now.Add(time.Minute)
			for back, req := range c.buckets {
				snap.Buckets[(cur-back)%breaker.FleetSlots] = breaker.Bucket{Num: cur - back, Requests: req, Successes: req, Samples: req / 4}
			}
			store.states["partner"] = snap
			store.mu.Unlock()
			edge := 1 / float64(c.k)
			for _, r := range []struct {
				r       float64
				sampled bool
			}{{edge - 1e-4, true}, {edge + 1e-4, false}} {
				e := newEnv(t, store, "e", func(s *breaker.Settings) {
					s.Window = c.window
					s.Rand = func() float64 { return r.r }
				})
				before := store.reports.Load()
				call(t, e.Breaker, now, breaker.Success)
				got := store.state("partner").Buckets[cur%breaker.FleetSlots]
				if sampled := store.reports.Load() > before; sampled != r.sampled || (sampled && got.Requests != c.k) {
					t.Fatalf("Rand %v: reported %v, bucket %+v; want sampled %v with a weight of %d", r.r, sampled, got, r.sampled, c.k)
				}
			}
		})
	}
}

// TestFleetFirstWindowOfABusyEnvironment: an environment that makes a call
// per ReportInterval or more, and learns of the fleet's watch by failing,
// holds its first report until it covers a whole ReportInterval of
// sampling (its first samples would otherwise all come from the moment
// the partner fails); one that calls less often reports its first sample,
// made from the next bucket on, at once.
func TestFleetFirstWindowOfABusyEnvironment(t *testing.T) {
	for _, c := range []struct {
		name  string
		calls int           // successes over the window before the failure
		next  time.Duration // when, after the failure, its next call goes
		held  bool
	}{
		{"busy", 20, 100 * time.Millisecond, true},
		{"sparse", 2, 1100 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newFakeStore()
			starter := newEnv(t, store, "starter", nil)
			e := newEnv(t, store, "e", nil)
			for i := range c.calls {
				invoke(t, e, t0.Add(time.Duration(i)*defaultWindow/time.Duration(c.calls)), breaker.Success)
			}
			at := t0.Add(defaultWindow)
			invoke(t, starter, at, breaker.Failure) // the alarm: the fleet watches
			invoke(t, e, at.Add(time.Millisecond), breaker.Failure)
			// e learnt of the watch by failing; Rand is 0: no delay, every
			// call sampled.
			before := store.reports.Load()
			invoke(t, e, at.Add(c.next), breaker.Success)
			if held := store.reports.Load() == before; held != c.held {
				t.Fatalf("first sampled call: report held %v, want %v", held, c.held)
			}
			if !c.held {
				return
			}
			invoke(t, e, at.Add(500*time.Millisecond), breaker.Failure)
			if store.reports.Load() != before {
				t.Fatal("a report went before the first window closed")
			}
			invoke(t, e, at.Add(1100*time.Millisecond), breaker.Success)
			if store.reports.Load() != before+1 {
				t.Fatalf("%d reports after the first window closed, want 1", store.reports.Load()-before)
			}
			var n int64
			for _, bk := range store.state("partner").Buckets {
				n += bk.Samples
			}
			if n != 3 {
				t.Fatalf("%d samples reported, want the first window's 2 and the call after it", n)
			}
		})
	}
}

// A sparse environment (under a call per report interval) that learns of
// the fleet's watch from a failure of its own samples from the start of
// the next bucket, in the watch's first bucket as in later ones: it learnt
// at a moment its failure chose (the failing end of a partner's second),
// and sampling from there, the newly learning environments over-counted
// the failing end of every second (cmd/outagesim's Lambda fleet opened
// the hard stop on partial outages). So does one that learns at a read in
// the watch's first bucket, after the alarm, in the failing end of that
// second. One that learns at a call that did not fail in a later bucket
// samples at once.
func TestFleetSparseLearnerSamplesFromTheNextBucket(t *testing.T) {
	store := newFakeStore()
	starter := newEnv(t, store, "starter", nil)
	first := newEnv(t, store, "first", nil)
	late := newEnv(t, store, "late", nil)
	quiet := newEnv(t, store, "quiet", nil)
	for _, e := range []env{first, late} {
		invoke(t, e, t0, breaker.Success) // each caches a quiet fleet
	}
	at := t0.Add(defaultWindow)
	invoke(t, starter, at, breaker.Failure) // the alarm: the fleet watches
	invoke(t, first, at.Add(time.Millisecond), breaker.Failure)
	before := store.reports.Load()
	invoke(t, first, at.Add(100*time.Millisecond), breaker.Success)
	if store.reports.Load() != before {
		t.Fatal("in the watch's first bucket, a sparse environment that learnt of it by failing sampled a call in the same bucket")
	}
	reader := newEnv(t, store, "reader", nil)
	invoke(t, reader, at.Add(200*time.Millisecond), breaker.Success) // its first read finds the watch
	if store.reports.Load() != before {
		t.Fatal("in the watch's first bucket, a sparse environment that learnt of it at a read sampled a call in the same bucket")
	}
	invoke(t, first, at.Add(time.Second+100*time.Millisecond), breaker.Success)
	if store.reports.Load() != before+1 {
		t.Fatal("a sparse environment that learnt of the watch by failing in its first bucket did not sample from the next bucket on")
	}
	invoke(t, reader, at.Add(time.Second+200*time.Millisecond), breaker.Success)
	if store.reports.Load() != before+2 {
		t.Fatal("a sparse environment that learnt of the watch at a read in its first bucket did not sample from the next bucket on")
	}

	// A later bucket.
	next := at.Add(3 * time.Second)
	invoke(t, late, next.Add(-300*time.Millisecond), breaker.Failure)
	before = store.reports.Load()
	invoke(t, late, next.Add(-200*time.Millisecond), breaker.Failure)
	if store.reports.Load() != before {
		t.Fatal("a sparse environment that learnt of the watch by failing sampled a call in the same bucket")
	}
	invoke(t, late, next.Add(100*time.Millisecond), breaker.Success)
	if store.reports.Load() != before+1 {
		t.Fatal("a sparse environment that learnt of the watch by failing did not sample from the next bucket on")
	}

	before = store.reports.Load()
	invoke(t, quiet, next.Add(500*time.Millisecond), breaker.Success) // its first read finds the watch
	if store.reports.Load() != before+1 {
		t.Fatal("a sparse environment that learnt of the watch at a successful call did not sample it")
	}
}
