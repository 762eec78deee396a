package sim

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestClockScales(t *testing.T) {
	c, err := NewClock(testStart, 50)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Real(10 * time.Second); got != 200*time.Millisecond {
		t.Errorf("Real(10s) at x50 = %v, want 200ms", got)
	}
	if c.Now().Before(testStart) || c.Epoch() != testStart || c.Speed() != 50 {
		t.Errorf("clock %v / %v / %v", c.Now(), c.Epoch(), c.Speed())
	}
	before := c.Now()
	if err := c.Sleep(context.Background(), 500*time.Millisecond); err != nil { // 10 ms real
		t.Fatal(err)
	}
	if el := c.Now().Sub(before); el < 500*time.Millisecond {
		t.Errorf("slept %v simulated, want at least 500ms", el)
	}
}

func TestClockSleepHonoursContext(t *testing.T) {
	c, _ := NewClock(testStart, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a canceled ctx = %v, want context.Canceled", err)
	}
	if err := c.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(0) on a canceled ctx = %v, want context.Canceled", err)
	}
	if err := c.Sleep(context.Background(), -time.Second); err != nil {
		t.Errorf("Sleep(-1s) = %v, want nil", err)
	}
}

func TestNewClockRejectsBadSpeed(t *testing.T) {
	for _, s := range []float64{0, -1, 2e6} {
		if _, err := NewClock(testStart, s); err == nil {
			t.Errorf("speed %v: no error", s)
		}
	}
}

// While more than high units of work are in transit the clock stands
// still; at low it runs again, from where it stopped.
func TestClockBackpressure(t *testing.T) {
	c, _ := NewClock(testStart, 1000)
	c.SetBackpressure(3, 1)
	for i := 0; i < 3; i++ {
		c.Busy(+1)
	}
	if st := c.Stats(); st.Stops != 0 {
		t.Fatalf("stopped at 3 in transit (high 3): %+v", st)
	}
	c.Busy(+1) // 4 > 3: stop
	frozen := c.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Sleep(ctx, time.Nanosecond) }()
	if again := c.Now(); !again.Equal(frozen) {
		t.Fatalf("stopped clock moved from %v to %v", frozen, again)
	}
	cancel() // the sleep can only end through ctx while the clock stands still
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a stopped clock returned %v, want context.Canceled", err)
	}
	c.Busy(-1)
	c.Busy(-1) // 2 > low: still stopped
	if again := c.Now(); !again.Equal(frozen) {
		t.Fatalf("clock restarted above low")
	}
	c.Busy(-1) // 1 <= low: runs again
	if err := c.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if now := c.Now(); !now.After(frozen) {
		t.Errorf("restarted clock at %v, not after %v", now, frozen)
	}
	if st := c.Stats(); st.Stops != 1 || st.Forced != 0 || st.Paused <= 0 {
		t.Errorf("stats %+v, want one stop with some paused time", st)
	}
}

// wallClock is a manual real-time source for the Clock.
type wallClock struct {
	mu  sync.Mutex
	now time.Time
}

func newWallClock() *wallClock { return &wallClock{now: time.Unix(1_700_000_000, 0)} }

func (w *wallClock) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *wallClock) Advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
}

// The horizon holds simulated time back however much real time passes,
// and a horizon set behind the clock never sends it back. Real time is a
// manual clock, so the test does not depend on how fast the machine runs.
func TestClockHorizon(t *testing.T) {
	const speed, ahead = 100, 10 * time.Second
	wall := newWallClock()
	c, err := newClockWall(testStart, speed, wall.Now)
	if err != nil {
		t.Fatal(err)
	}
	wall.Advance(ahead / speed / 2) // half way: the clock runs freely up to the horizon
	c.SetHorizon(testStart.Add(ahead))
	if now, want := c.Now(), testStart.Add(ahead/2); !now.Equal(want) {
		t.Errorf("Now = %v below the horizon, want %v", now, want)
	}
	wall.Advance(2 * ahead / speed) // 20 simulated seconds without the horizon
	if now := c.Now(); !now.Equal(testStart.Add(ahead)) {
		t.Errorf("Now = %v, want the horizon %v", now, testStart.Add(ahead))
	}
	c.ClearHorizon()
	if now, want := c.Now(), testStart.Add(ahead/2+2*ahead); !now.Equal(want) {
		t.Errorf("Now = %v after the horizon was cleared, want %v", now, want)
	}
	// A horizon behind the clock does not send time back: it is raised to
	// a millisecond past Now.
	before := c.Now()
	c.SetHorizon(testStart)
	if now := c.Now(); !now.Equal(before) {
		t.Errorf("Now moved from %v to %v with real time standing still", before, now)
	}
	wall.Advance(time.Second)
	if now, want := c.Now(), before.Add(time.Millisecond); !now.Equal(want) {
		t.Errorf("Now = %v, want the raised horizon %v", now, want)
	}
}

// With a step cap, real time the clock did not step over (the process
// was not scheduled) is not counted as simulated time.
func TestClockMaxStep(t *testing.T) {
	wall := newWallClock()
	c, err := newClockWall(testStart, 10, wall.Now)
	if err != nil {
		t.Fatal(err)
	}
	c.SetMaxStep(5 * time.Millisecond)
	wall.Advance(time.Second) // a stall: nobody stepped the clock
	if now, want := c.Now(), testStart.Add(50*time.Millisecond); !now.Equal(want) {
		t.Errorf("Now = %v after a 1 s stall, want %v (5 ms of real time at x10)", now, want)
	}
}

// Run ends a stop that lasts too long (lost accounting cannot hang a run)
// and, with a step cap, does not count a stall as simulated time.
func TestClockRunWatchdog(t *testing.T) {
	c, _ := NewClock(testStart, 10)
	c.SetBackpressure(1, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx, time.Millisecond, 5*time.Millisecond)
	c.Busy(+2) // never taken back
	if err := c.Sleep(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatal(err) // returns only because the watchdog restarts the clock
	}
	if st := c.Stats(); st.Forced == 0 {
		t.Errorf("stats %+v: want a forced restart", st)
	}
}
