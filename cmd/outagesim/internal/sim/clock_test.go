package sim

import (
	"context"
	"errors"
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

func TestClockHorizon(t *testing.T) {
	// At x100 the horizon 10 simulated seconds ahead is 100 ms of real time
	// away, far more than the scheduling delay between NewClock and
	// SetHorizon even on a loaded CI machine (at x1e6 a microsecond's delay
	// was a simulated second and the clock was past the horizon before it
	// was set); sleeping 200 ms would take the clock 20 s ahead without it.
	const speed, ahead = 100, 10 * time.Second
	c, _ := NewClock(testStart, speed)
	c.SetHorizon(testStart.Add(ahead))
	if err := c.Sleep(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ahead / speed)
	if now := c.Now(); !now.Equal(testStart.Add(ahead)) {
		t.Errorf("Now = %v, want the horizon %v", now, testStart.Add(ahead))
	}
	c.ClearHorizon()
	if now := c.Now(); !now.After(testStart.Add(ahead)) {
		t.Errorf("Now = %v after the horizon was cleared", now)
	}
	// A horizon behind the clock does not send time back.
	before := c.Now()
	c.SetHorizon(testStart)
	if now := c.Now(); now.Before(before) {
		t.Errorf("Now went back from %v to %v", before, now)
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
