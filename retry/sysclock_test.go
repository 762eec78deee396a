package retry

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// checkNear fails unless got lies between before and after (two time.Now
// readings around it), on the monotonic clock and, up to
// wallStepTolerance, on the wall clock.
func checkNear(t *testing.T, before, got, after time.Time) {
	t.Helper()
	if got.Before(before) || got.After(after) {
		t.Fatalf("now() = %v, not between %v and %v on the monotonic clock", got, before, after)
	}
	tol := int64(wallStepTolerance)
	if ns := got.UnixNano(); ns < before.UnixNano()-tol || ns > after.UnixNano()+tol {
		t.Fatalf("now() = %d Unix ns, not between %d and %d", ns, before.UnixNano(), after.UnixNano())
	}
	if !hasMonotonic(got) {
		t.Fatalf("now() = %v has no monotonic reading", got)
	}
}

func TestSysClockIsTimeNow(t *testing.T) {
	c := newSysClock()
	for range 1000 {
		before := time.Now()
		got := c.now()
		after := time.Now()
		checkNear(t, before, got, after)
	}
}

func TestSysClockIsMonotonicUnderConcurrency(t *testing.T) {
	c := newSysClock()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			prev := c.now()
			for range 2000 {
				cur := c.now()
				if cur.Before(prev) {
					t.Errorf("now() went back from %v to %v", prev, cur)
					return
				}
				prev = cur
			}
		})
	}
	wg.Wait()
}

// A synctest bubble's time.Now() is fake and has no monotonic reading: the
// clock must follow it inside the bubble and the real clock again outside.
func TestSysClockFollowsSynctestBubbles(t *testing.T) {
	c := newSysClock()
	synctest.Test(t, func(t *testing.T) {
		for _, sleep := range []time.Duration{0, 0, 50 * time.Millisecond, 5 * time.Second, time.Millisecond, time.Hour} {
			time.Sleep(sleep)
			if got, want := c.now(), time.Now(); !got.Equal(want) || hasMonotonic(got) {
				t.Fatalf("after sleeping %v in the bubble: now() = %v, want %v (no monotonic reading)", sleep, got, want)
			}
		}
	})
	before := time.Now()
	got := c.now()
	after := time.Now()
	checkNear(t, before, got, after)
}

func TestWallSteady(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		elapsed, wall time.Duration
		want          bool
	}{
		{0, 0, true},
		{time.Second, time.Second, true},
		{time.Second, time.Second + ms, true},
		{time.Second, time.Second - ms, true},
		{time.Second, time.Second + ms + 1, false},    // stepped forward
		{time.Second, time.Second - ms - 1, false},    // stepped back
		{time.Second, -time.Hour, false},              // stepped far back
		{-time.Millisecond, -time.Millisecond, false}, // a base from the future
	} {
		if got := wallSteady(c.elapsed, c.wall); got != c.want {
			t.Errorf("wallSteady(%v, %v) = %v, want %v", c.elapsed, c.wall, got, c.want)
		}
	}
}

// After a time.Now() reading consistent with the base, the base is kept
// and the next look at the wall clock is wallCheckInterval later; a reading
// that disagrees with it replaces it.
func TestSysClockResync(t *testing.T) {
	c := newSysClock()
	b := c.base.Load()
	got := c.resync(b)
	if c.base.Load() != b {
		t.Fatal("resync replaced a base the wall clock agrees with")
	}
	if check := time.Duration(b.check.Load()); check < got.Sub(b.t)+wallCheckInterval {
		t.Fatalf("check = %v, want at least %v", check, got.Sub(b.t)+wallCheckInterval)
	}

	// A base without a monotonic reading (as made in a synctest bubble)
	// is replaced by the next real reading.
	stale := &clockBase{t: b.t.Round(0)}
	stale.check.Store(int64(time.Hour))
	c.base.Store(stale)
	before := time.Now()
	got = c.resync(stale)
	if nb := c.base.Load(); nb == stale || !nb.t.Equal(got) || time.Duration(nb.check.Load()) != wallCheckInterval {
		t.Fatalf("resync kept a base of the other kind: %+v", nb)
	}
	checkNear(t, before, c.now(), time.Now())
}

func TestExecutorReadsTheSystemClockThroughSysClock(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if e.sys == nil {
		t.Fatal("default clock: no sysClock")
	}
	e, err = New(Config{Clock: SystemClock{}})
	if err != nil {
		t.Fatal(err)
	}
	if e.sys == nil {
		t.Fatal("SystemClock: no sysClock")
	}
	e, err = New(Config{Clock: otherClock{}})
	if err != nil {
		t.Fatal(err)
	}
	if e.sys != nil {
		t.Fatal("an injected clock is bypassed")
	}
	if got := e.now(); !got.Equal(otherClockTime) {
		t.Fatalf("now() = %v, want the injected clock's %v", got, otherClockTime)
	}
}

var otherClockTime = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type otherClock struct{ SystemClock }

func (otherClock) Now() time.Time { return otherClockTime }
