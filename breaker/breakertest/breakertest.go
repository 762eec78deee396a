package breakertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/names"
)

// CallTimeout bounds every store call the suite makes.
const CallTimeout = 5 * time.Second

// concurrency is the number of goroutines racing in the concurrent
// subtests: enough to race, few enough for a store that serialises writes
// to one item at a few milliseconds each.
const concurrency = 8

// Run runs the conformance suite against stores made by newStore, which is
// called once per subtest with the subtest's t (register cleanups there).
func Run(t *testing.T, newStore func(t *testing.T) breaker.Store) {
	t.Helper()
	s := &suite{newStore: newStore, run: fmt.Sprintf("ct%08x", rand.Uint32())}
	t.Run("UnknownNameIsZero", s.unknownNameIsZero)
	t.Run("TransitionCompareAndSwap", s.transitionCompareAndSwap)
	t.Run("ConcurrentTransitionsOneWins", s.concurrentTransitionsOneWins)
	t.Run("TransitionLeavesOverrideAlone", s.transitionLeavesOverrideAlone)
	t.Run("OverrideRoundTrip", s.overrideRoundTrip)
	t.Run("ReportAccumulates", s.reportAccumulates)
	t.Run("ReportSlotsRoll", s.reportSlotsRoll)
	t.Run("ReportOtherEpochConflicts", s.reportOtherEpochConflicts)
	t.Run("TransitionEmptiesBuckets", s.transitionEmptiesBuckets)
	t.Run("ReportRejectsBadInput", s.reportRejectsBadInput)
	t.Run("ReportAnswersNoOverride", s.reportAnswersNoOverride)
	t.Run("ConcurrentReports", s.concurrentReports)
	t.Run("ProbeLimit", s.probeLimit)
	t.Run("ProbeOtherEpochFreesSlot", s.probeOtherEpochFreesSlot)
	t.Run("ProbeExpiredLeaseFreesSlot", s.probeExpiredLeaseFreesSlot)
	t.Run("ConcurrentProbesOneWins", s.concurrentProbesOneWins)
	t.Run("NamesAreIndependent", s.namesAreIndependent)
	t.Run("CanceledContext", s.canceledContext)
	t.Run("InvalidNameRejected", s.invalidNameRejected)
}

type suite struct {
	newStore func(t *testing.T) breaker.Store
	run      string // unique to this Run, part of every name

	mu    sync.Mutex
	names int
}

// name returns a breaker name unique to the run.
func (s *suite) name(t *testing.T) string {
	s.mu.Lock()
	s.names++
	n := s.names
	s.mu.Unlock()
	sub := t.Name()
	if i := strings.LastIndexByte(sub, '/'); i >= 0 {
		sub = sub[i+1:]
	}
	name := fmt.Sprintf("%s.%s.%d", s.run, sanitize(sub), n)
	if len(name) > names.MaxLen {
		name = name[:names.MaxLen]
	}
	if err := names.Validate(name); err != nil {
		t.Fatalf("breakertest: generated an invalid name: %v", err)
	}
	return name
}

// sanitize replaces the characters the name rule (internal/names) rejects.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ':':
			return r
		}
		return '_'
	}, s)
}

// base returns a time close to real time (so that stores with a TTL keep
// the items), to the millisecond, on a 10 s boundary so that it can serve
// as a window start.
func base() time.Time {
	return time.UnixMilli(time.Now().UnixMilli()).Truncate(10 * time.Second)
}

func callCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), CallTimeout)
}

func canceledCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

// equal reports whether two snapshots are the same, times compared with
// Equal (so location and monotonic readings do not matter).
func equal(a, b breaker.Snapshot) bool {
	return a.State == b.State && a.Epoch == b.Epoch && a.OpenUntil.Equal(b.OpenUntil) &&
		a.Reopens == b.Reopens && a.Override == b.Override && a.OverrideUntil.Equal(b.OverrideUntil) &&
		a.WatchUntil.Equal(b.WatchUntil) && a.Buckets == b.Buckets
}

func format(s breaker.Snapshot) string {
	var buckets []string
	for i, b := range s.Buckets {
		if b != (breaker.Bucket{}) {
			buckets = append(buckets, fmt.Sprintf("%d:%+v", i, b))
		}
	}
	return fmt.Sprintf("{State:%v Epoch:%d OpenUntil:%s Reopens:%d Override:%v OverrideUntil:%s WatchUntil:%s Buckets:[%s]}",
		s.State, s.Epoch, formatTime(s.OpenUntil), s.Reopens, s.Override, formatTime(s.OverrideUntil),
		formatTime(s.WatchUntil), strings.Join(buckets, " "))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func load(t *testing.T, st breaker.Store, name string) breaker.Snapshot {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	snap, err := st.Load(ctx, name)
	if err != nil {
		t.Fatalf("Load(%q): unexpected error: %v", name, err)
	}
	return snap
}

func mustLoad(t *testing.T, st breaker.Store, name string, want breaker.Snapshot) {
	t.Helper()
	if got := load(t, st, name); !equal(got, want) {
		t.Fatalf("Load(%q) = %s, want %s", name, format(got), format(want))
	}
}

func transition(t *testing.T, st breaker.Store, name string, prev uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	return st.Transition(ctx, name, prev, next)
}

// mustTransition fails the test unless the transition succeeds and returns
// want.
func mustTransition(t *testing.T, st breaker.Store, name string, prev uint64, next, want breaker.Snapshot) {
	t.Helper()
	got, err := transition(t, st, name, prev, next)
	if err != nil {
		t.Fatalf("Transition(%q, %d, %s): unexpected error: %v", name, prev, format(next), err)
	}
	if !equal(got, want) {
		t.Fatalf("Transition(%q, %d, %s) = %s, want %s", name, prev, format(next), format(got), format(want))
	}
}

// mustConflict fails the test unless the transition is refused with
// ErrConflict and the current snapshot want.
func mustConflict(t *testing.T, st breaker.Store, name string, prev uint64, next, want breaker.Snapshot) {
	t.Helper()
	got, err := transition(t, st, name, prev, next)
	if !errors.Is(err, breaker.ErrConflict) {
		t.Fatalf("Transition(%q, %d, %s) with a stale epoch: error %v, want one satisfying errors.Is(err, breaker.ErrConflict)", name, prev, format(next), err)
	}
	if !equal(got, want) {
		t.Fatalf("Transition(%q, %d, %s) refused with the snapshot %s, want the current %s", name, prev, format(next), format(got), format(want))
	}
}

func setOverride(t *testing.T, st breaker.Store, name string, o breaker.Override, until time.Time) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	if err := st.SetOverride(ctx, name, o, until); err != nil {
		t.Fatalf("SetOverride(%q, %v, %s): unexpected error: %v", name, o, formatTime(until), err)
	}
}

func report(t *testing.T, st breaker.Store, name string, r breaker.Report) (breaker.Snapshot, error) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	return st.Report(ctx, name, r)
}

// mustReport fails the test unless the report succeeds and answers want.
func mustReport(t *testing.T, st breaker.Store, name string, r breaker.Report, want breaker.Snapshot) {
	t.Helper()
	got, err := report(t, st, name, r)
	if err != nil {
		t.Fatalf("Report(%q, %+v): unexpected error: %v", name, r, err)
	}
	if !equal(got, want) {
		t.Fatalf("Report(%q, %+v) = %s, want %s", name, r, format(got), format(want))
	}
}

// mustReportConflict fails the test unless the report is refused with
// ErrConflict and the current state want.
func mustReportConflict(t *testing.T, st breaker.Store, name string, r breaker.Report, want breaker.Snapshot) {
	t.Helper()
	got, err := report(t, st, name, r)
	if !errors.Is(err, breaker.ErrConflict) {
		t.Fatalf("Report(%q, %+v) of another epoch: error %v, want one satisfying errors.Is(err, breaker.ErrConflict)", name, r, err)
	}
	if !equal(got, want) {
		t.Fatalf("Report(%q, %+v) refused with %s, want the current %s", name, r, format(got), format(want))
	}
}

func acquire(t *testing.T, st breaker.Store, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	return st.AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
}

// mustAcquire fails the test unless a slot in [0, limit) is taken, and
// returns it.
func mustAcquire(t *testing.T, st breaker.Store, name string, epoch uint64, limit int, now, leaseUntil time.Time) int {
	t.Helper()
	slot, err := acquire(t, st, name, epoch, limit, now, leaseUntil)
	if err != nil {
		t.Fatalf("AcquireProbe(%q, epoch %d, limit %d, now %s): unexpected error: %v", name, epoch, limit, formatTime(now), err)
	}
	if slot < 0 || slot >= limit {
		t.Fatalf("AcquireProbe(%q, epoch %d, limit %d) = slot %d, want one in [0, %d)", name, epoch, limit, slot, limit)
	}
	return slot
}

func mustDeny(t *testing.T, st breaker.Store, name string, epoch uint64, limit int, now, leaseUntil time.Time) {
	t.Helper()
	slot, err := acquire(t, st, name, epoch, limit, now, leaseUntil)
	if !errors.Is(err, breaker.ErrProbeDenied) {
		t.Fatalf("AcquireProbe(%q, epoch %d, limit %d, now %s) = slot %d, %v; want an error satisfying errors.Is(err, breaker.ErrProbeDenied)", name, epoch, limit, formatTime(now), slot, err)
	}
}

func (s *suite) unknownNameIsZero(t *testing.T) {
	st := s.newStore(t)
	mustLoad(t, st, s.name(t), breaker.Snapshot{})
}

func (s *suite) transitionCompareAndSwap(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()

	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: t0.Add(30 * time.Second), Reopens: 1}
	mustTransition(t, st, name, 0, open, open)
	mustLoad(t, st, name, open)

	half := breaker.Snapshot{State: breaker.HalfOpen, Epoch: 2, OpenUntil: t0.Add(30 * time.Second), Reopens: 1}
	mustTransition(t, st, name, 1, half, half)
	mustLoad(t, st, name, half)

	// Stale epochs lose and see the current state.
	mustConflict(t, st, name, 1, breaker.Snapshot{State: breaker.Closed, Epoch: 2}, half)
	mustConflict(t, st, name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, Reopens: 1}, half)
	mustConflict(t, st, name, 7, breaker.Snapshot{State: breaker.Closed, Epoch: 8}, half)
	mustLoad(t, st, name, half)

	// A close with no open-until time stores none.
	closed := breaker.Snapshot{State: breaker.Closed, Epoch: 3}
	mustTransition(t, st, name, 2, closed, closed)
	mustLoad(t, st, name, closed)

	// A name never written has epoch 0: any other epoch conflicts, and
	// the refusal reports the zero snapshot.
	fresh := s.name(t)
	mustConflict(t, st, fresh, 3, breaker.Snapshot{State: breaker.Open, Epoch: 4}, breaker.Snapshot{})
	mustLoad(t, st, fresh, breaker.Snapshot{})
}

func (s *suite) concurrentTransitionsOneWins(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	start := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: t0.Add(time.Minute), Reopens: 1}
	mustTransition(t, st, name, 0, start, start)

	type result struct {
		next breaker.Snapshot
		got  breaker.Snapshot
		err  error
	}
	results := make([]result, concurrency)
	var wg sync.WaitGroup
	for i := range results {
		// Each contender proposes a different next state, so the
		// winner can be told apart.
		next := breaker.Snapshot{State: breaker.HalfOpen, Epoch: 2, OpenUntil: t0.Add(time.Duration(i) * time.Second), Reopens: i}
		wg.Go(func() {
			ctx, cancel := callCtx(t)
			defer cancel()
			got, err := st.Transition(ctx, name, 1, next)
			results[i] = result{next: next, got: got, err: err}
		})
	}
	wg.Wait()

	var winner *result
	for i := range results {
		r := &results[i]
		switch {
		case r.err == nil:
			if winner != nil {
				t.Fatalf("two transitions from epoch 1 both succeeded: %s and %s", format(winner.next), format(r.next))
			}
			winner = r
			if !equal(r.got, r.next) {
				t.Fatalf("winning Transition returned %s, want %s", format(r.got), format(r.next))
			}
		case errors.Is(r.err, breaker.ErrConflict):
		default:
			t.Fatalf("concurrent Transition failed with an unexpected error: %v", r.err)
		}
	}
	if winner == nil {
		t.Fatalf("none of %d concurrent transitions from epoch 1 succeeded", concurrency)
	}
	for i := range results {
		if r := &results[i]; r.err != nil && r.got.Epoch != 2 {
			t.Fatalf("a losing Transition reported epoch %d, want the winner's 2 (snapshot %s)", r.got.Epoch, format(r.got))
		}
	}
	mustLoad(t, st, name, winner.next)
}

func (s *suite) transitionLeavesOverrideAlone(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	until := t0.Add(time.Hour)
	setOverride(t, st, name, breaker.ForcedOpen, until)
	mustLoad(t, st, name, breaker.Snapshot{Override: breaker.ForcedOpen, OverrideUntil: until})

	// The override is not part of the compare-and-swap: a transition
	// keeps it, and its answer carries none (the override is a separate
	// item, not read by a transition).
	next := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: t0.Add(time.Minute), Reopens: 1}
	mustTransition(t, st, name, 0, next, next)
	want := next
	want.Override, want.OverrideUntil = breaker.ForcedOpen, until
	mustLoad(t, st, name, want)

	// The override fields of next are ignored.
	next2 := breaker.Snapshot{State: breaker.HalfOpen, Epoch: 2, OpenUntil: t0.Add(time.Minute), Reopens: 1, Override: breaker.Disabled}
	stored2 := next2
	stored2.Override = breaker.NoOverride
	mustTransition(t, st, name, 1, next2, stored2)
	want2 := stored2
	want2.Override, want2.OverrideUntil = breaker.ForcedOpen, until
	mustLoad(t, st, name, want2)

	// A conflict's answer carries no override either.
	got, err := transition(t, st, name, 0, next)
	if !errors.Is(err, breaker.ErrConflict) || got.Epoch != 2 || got.Override != breaker.NoOverride || !got.OverrideUntil.IsZero() {
		t.Fatalf("a stale Transition = %s, %v; want epoch 2, no override, and ErrConflict", format(got), err)
	}

	// Writing the override leaves the state and epoch alone.
	setOverride(t, st, name, breaker.ForcedClosed, time.Time{})
	want2.Override, want2.OverrideUntil = breaker.ForcedClosed, time.Time{}
	mustLoad(t, st, name, want2)
}

func (s *suite) overrideRoundTrip(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()

	for _, c := range []struct {
		o     breaker.Override
		until time.Time
	}{
		{breaker.ForcedClosed, t0.Add(15 * time.Minute)},
		{breaker.Disabled, time.Time{}},
		{breaker.ForcedOpen, t0.Add(1500 * time.Millisecond)},
		// A lapse time in the past is stored and returned as is: the
		// Breaker, which has a clock, decides that it lapsed.
		{breaker.ForcedOpen, t0.Add(-time.Hour)},
	} {
		setOverride(t, st, name, c.o, c.until)
		mustLoad(t, st, name, breaker.Snapshot{Override: c.o, OverrideUntil: c.until})
	}
	// NoOverride clears the override and its lapse time.
	setOverride(t, st, name, breaker.ForcedOpen, t0.Add(time.Hour))
	setOverride(t, st, name, breaker.NoOverride, time.Time{})
	mustLoad(t, st, name, breaker.Snapshot{})
}

// bucket0 is a bucket number of the suite's base time (1 s buckets).
func bucket0() int64 { return base().Unix() }

// slot returns bucket n in the slot the store keeps it in.
func slotOf(n int64) int { return int(n % breaker.FleetSlots) }

func (s *suite) reportAccumulates(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	watch := base().Add(20 * time.Second)
	var want breaker.Snapshot
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: n, Requests: 4, Successes: 2, Failures: 1, Samples: 3}
	want.WatchUntil = watch
	mustReport(t, st, name, breaker.Report{Bucket: n, Requests: 4, Successes: 2, Failures: 1, Samples: 3, WatchUntil: watch}, want)
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: n, Requests: 12, Successes: 2, Failures: 9, Samples: 5}
	mustReport(t, st, name, breaker.Report{Bucket: n, Requests: 8, Failures: 8, Samples: 2}, want)
	// Another bucket has a slot of its own; a zero WatchUntil leaves the
	// stored one alone; a later one replaces it.
	want.Buckets[slotOf(n+1)] = breaker.Bucket{Num: n + 1, Requests: 1, Successes: 1, Samples: 1}
	mustReport(t, st, name, breaker.Report{Bucket: n + 1, Requests: 1, Successes: 1, Samples: 1}, want)
	want.WatchUntil = watch.Add(time.Second)
	mustReport(t, st, name, breaker.Report{Bucket: n + 1, WatchUntil: watch.Add(time.Second)}, want)
	// Reports do not touch the state, and Load answers the same.
	mustLoad(t, st, name, want)
}

func (s *suite) reportSlotsRoll(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	var want breaker.Snapshot
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: n, Requests: 3, Failures: 3, Samples: 3}
	mustReport(t, st, name, breaker.Report{Bucket: n, Requests: 3, Failures: 3, Samples: 3}, want)
	// A bucket FleetSlots later takes the same slot and replaces it.
	later := n + breaker.FleetSlots
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: later, Requests: 2, Successes: 2, Samples: 2}
	mustReport(t, st, name, breaker.Report{Bucket: later, Requests: 2, Successes: 2, Samples: 2}, want)
	// A late report for the bucket it replaced is dropped, but its watch
	// still counts.
	want.WatchUntil = base().Add(time.Minute)
	mustReport(t, st, name, breaker.Report{Bucket: n, Requests: 5, Failures: 5, Samples: 5, WatchUntil: base().Add(time.Minute)}, want)
	mustLoad(t, st, name, want)
}

func (s *suite) reportOtherEpochConflicts(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: base().Add(30 * time.Second)}
	mustTransition(t, st, name, 0, open, open)
	// A report decided in epoch 0 arrives after the transition: refused,
	// with the state as it stands, and nothing applied.
	mustReportConflict(t, st, name, breaker.Report{Epoch: 0, Bucket: n, Requests: 2, Failures: 2, Samples: 2, WatchUntil: base().Add(time.Minute)}, open)
	mustLoad(t, st, name, open)
	// One of the current epoch is applied.
	want := open
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: n, Requests: 1, Successes: 1, Samples: 1}
	mustReport(t, st, name, breaker.Report{Epoch: 1, Bucket: n, Requests: 1, Successes: 1, Samples: 1}, want)
}

func (s *suite) transitionEmptiesBuckets(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	watch := base().Add(20 * time.Second)
	var want breaker.Snapshot
	want.WatchUntil = watch
	for i := range int64(breaker.FleetSlots) {
		want.Buckets[slotOf(n+i)] = breaker.Bucket{Num: n + i, Requests: 1, Failures: 1, Samples: 1}
		mustReport(t, st, name, breaker.Report{Bucket: n + i, Requests: 1, Failures: 1, Samples: 1, WatchUntil: watch}, want)
	}
	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: base().Add(30 * time.Second)}
	want = open
	want.WatchUntil = watch // the watch survives the transition; the counts do not
	mustTransition(t, st, name, 0, open, want)
	mustLoad(t, st, name, want)
}

func (s *suite) reportRejectsBadInput(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	for _, r := range []breaker.Report{
		{Bucket: 0, Requests: 1},
		{Bucket: -n, Requests: 1},
		{Bucket: n, Requests: -1},
		{Bucket: n, Successes: -1},
		{Bucket: n, Failures: -1},
		{Bucket: n, Samples: -1},
	} {
		if _, err := report(t, st, name, r); !errors.Is(err, breaker.ErrStore) {
			t.Errorf("Report(%+v): error %v, want one satisfying errors.Is(err, breaker.ErrStore)", r, err)
		}
	}
	mustLoad(t, st, name, breaker.Snapshot{})
}

// reportAnswersNoOverride checks that Report's answer, success or
// conflict, carries no override (reading it would cost a read per
// report), and that the override stays stored.
func (s *suite) reportAnswersNoOverride(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	until := base().Add(time.Hour)
	setOverride(t, st, name, breaker.ForcedClosed, until)
	var want breaker.Snapshot
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: n, Requests: 2, Failures: 2, Samples: 2}
	mustReport(t, st, name, breaker.Report{Bucket: n, Requests: 2, Failures: 2, Samples: 2}, want)
	withOverride := want
	withOverride.Override, withOverride.OverrideUntil = breaker.ForcedClosed, until
	mustLoad(t, st, name, withOverride)

	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: base().Add(30 * time.Second)}
	mustTransition(t, st, name, 0, open, open) // nor does a Transition's
	// A refusal answers the state as it stands, without the override.
	mustReportConflict(t, st, name, breaker.Report{Epoch: 0, Bucket: n, Requests: 1, Successes: 1, Samples: 1}, open)
}

func (s *suite) concurrentReports(t *testing.T) {
	const envs, perEnv = 5, 4
	st := s.newStore(t)
	name := s.name(t)
	n := bucket0()
	errs := make(chan error, envs*perEnv)
	var wg sync.WaitGroup
	for range envs {
		wg.Go(func() {
			for range perEnv {
				if _, err := report(t, st, name, breaker.Report{Bucket: n, Requests: 3, Successes: 1, Failures: 2, Samples: 3}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Report failed: %v", err)
	}
	var want breaker.Snapshot
	const total = envs * perEnv
	want.Buckets[slotOf(n)] = breaker.Bucket{Num: n, Requests: 3 * total, Successes: total, Failures: 2 * total, Samples: 3 * total}
	mustLoad(t, st, name, want)
}

func (s *suite) probeLimit(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	lease := t0.Add(10 * time.Second)
	a := mustAcquire(t, st, name, 1, 2, t0, lease)
	b := mustAcquire(t, st, name, 1, 2, t0, lease)
	if a == b {
		t.Fatalf("two probes of epoch 1 got the same slot %d", a)
	}
	mustDeny(t, st, name, 1, 2, t0, lease)
	mustDeny(t, st, name, 1, 2, t0.Add(time.Second), lease)
	// A larger limit opens more slots.
	c := mustAcquire(t, st, name, 1, 3, t0, lease)
	if c == a || c == b {
		t.Fatalf("a third probe of epoch 1 got slot %d, already held", c)
	}
	mustDeny(t, st, name, 1, 3, t0, lease)
	// Probe slots do not touch the state.
	mustLoad(t, st, name, breaker.Snapshot{})
}

func (s *suite) probeOtherEpochFreesSlot(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	lease := t0.Add(10 * time.Second)
	mustAcquire(t, st, name, 1, 1, t0, lease)
	mustDeny(t, st, name, 1, 1, t0, lease)
	// A transition starts a new epoch: the slot held in epoch 1 is free
	// for epoch 2 although its lease has not lapsed.
	mustAcquire(t, st, name, 2, 1, t0, lease)
	mustDeny(t, st, name, 2, 1, t0, lease)
}

func (s *suite) probeExpiredLeaseFreesSlot(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	mustAcquire(t, st, name, 1, 1, t0, t0.Add(5*time.Second))
	mustDeny(t, st, name, 1, 1, t0.Add(time.Second), t0.Add(6*time.Second))
	mustDeny(t, st, name, 1, 1, t0.Add(4999*time.Millisecond), t0.Add(10*time.Second))
	// The lease lapsed: a probe lost with its environment cannot wedge
	// the breaker.
	mustAcquire(t, st, name, 1, 1, t0.Add(6*time.Second), t0.Add(11*time.Second))
	mustDeny(t, st, name, 1, 1, t0.Add(7*time.Second), t0.Add(12*time.Second))
}

func (s *suite) concurrentProbesOneWins(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		won, denied       int
		unexpected        []error
		slotsOutsideLimit int
	)
	for range concurrency {
		wg.Go(func() {
			slot, err := acquire(t, st, name, 3, 1, t0, t0.Add(10*time.Second))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
				if slot != 0 {
					slotsOutsideLimit++
				}
			case errors.Is(err, breaker.ErrProbeDenied):
				denied++
			default:
				unexpected = append(unexpected, err)
			}
		})
	}
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("%d concurrent AcquireProbe calls failed with unexpected errors, first: %v", len(unexpected), unexpected[0])
	}
	if won != 1 || denied != concurrency-1 {
		t.Fatalf("%d concurrent AcquireProbe with limit 1: %d won, %d denied; want 1 and %d", concurrency, won, denied, concurrency-1)
	}
	if slotsOutsideLimit > 0 {
		t.Fatalf("AcquireProbe with limit 1 returned a slot other than 0")
	}
}

func (s *suite) namesAreIndependent(t *testing.T) {
	st := s.newStore(t)
	a, b := s.name(t), s.name(t)
	t0 := base()
	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: t0.Add(time.Minute), Reopens: 1}
	mustTransition(t, st, a, 0, open, open)
	setOverride(t, st, a, breaker.ForcedOpen, time.Time{})
	if _, err := report(t, st, a, breaker.Report{Epoch: 1, Bucket: bucket0(), Requests: 5, Failures: 5, Samples: 5}); err != nil {
		t.Fatalf("Report: %v", err)
	}
	mustAcquire(t, st, a, 1, 1, t0, t0.Add(time.Minute))

	mustLoad(t, st, b, breaker.Snapshot{})
	var wantB breaker.Snapshot
	wantB.Buckets[slotOf(bucket0())] = breaker.Bucket{Num: bucket0(), Requests: 1, Successes: 1, Samples: 1}
	mustReport(t, st, b, breaker.Report{Bucket: bucket0(), Requests: 1, Successes: 1, Samples: 1}, wantB)
	mustAcquire(t, st, b, 1, 1, t0, t0.Add(time.Minute))
	mustTransition(t, st, b, 0, open, open)
}

func (s *suite) canceledContext(t *testing.T) {
	st := s.newStore(t)
	name := s.name(t)
	t0 := base()
	calls := map[string]func(ctx context.Context) error{
		"Load": func(ctx context.Context) error {
			_, err := st.Load(ctx, name)
			return err
		},
		"Report": func(ctx context.Context) error {
			_, err := st.Report(ctx, name, breaker.Report{Bucket: bucket0(), Requests: 1, Successes: 1, Samples: 1})
			return err
		},
		"Transition": func(ctx context.Context) error {
			_, err := st.Transition(ctx, name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
			return err
		},
		"AcquireProbe": func(ctx context.Context) error {
			_, err := st.AcquireProbe(ctx, name, 1, 1, t0, t0.Add(time.Minute))
			return err
		},
		"SetOverride": func(ctx context.Context) error {
			return st.SetOverride(ctx, name, breaker.ForcedOpen, time.Time{})
		},
	}
	for op, call := range calls {
		err := call(canceledCtx(t))
		if !errors.Is(err, breaker.ErrStore) {
			t.Fatalf("%s with a canceled context returned %v; want an error satisfying errors.Is(err, breaker.ErrStore)", op, err)
		}
	}
}

func (s *suite) invalidNameRejected(t *testing.T) {
	st := s.newStore(t)
	t0 := base()
	for _, name := range []string{"", "has#hash", "has space", strings.Repeat("n", names.MaxLen+1)} {
		ctx, cancel := callCtx(t)
		_, errLoad := st.Load(ctx, name)
		_, errReport := st.Report(ctx, name, breaker.Report{Bucket: bucket0(), Requests: 1, Successes: 1, Samples: 1})
		_, errTransition := st.Transition(ctx, name, 0, breaker.Snapshot{State: breaker.Open, Epoch: 1})
		_, errProbe := st.AcquireProbe(ctx, name, 1, 1, t0, t0.Add(time.Minute))
		errOverride := st.SetOverride(ctx, name, breaker.ForcedOpen, time.Time{})
		cancel()
		for op, err := range map[string]error{"Load": errLoad, "Report": errReport, "Transition": errTransition, "AcquireProbe": errProbe, "SetOverride": errOverride} {
			if !errors.Is(err, breaker.ErrStore) {
				t.Fatalf("%s with name %q returned %v; want an error satisfying errors.Is(err, breaker.ErrStore) (see breaker.New on names)", op, name, err)
			}
		}
	}
}
