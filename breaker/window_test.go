package breaker

import (
	"testing"
	"time"
)

func TestWindowNumberIsFloored(t *testing.T) {
	w := newWindow(int64(time.Second), 10)
	cases := []struct{ ns, want int64 }{
		{0, 0}, {999_999_999, 0}, {1_000_000_000, 1}, {-1, -1}, {-1_000_000_000, -1}, {-1_000_000_001, -2},
	}
	for _, c := range cases {
		if got := w.number(c.ns); got != c.want {
			t.Errorf("number(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
	for _, c := range []struct{ num, want int64 }{{0, 0}, {9, 0}, {10, 10}, {25, 20}, {-1, -10}, {-10, -10}, {-11, -20}} {
		if got := w.fleetStart(c.num); got != c.want {
			t.Errorf("fleetStart(%d) = %d, want %d", c.num, got, c.want)
		}
	}
}

func TestWindowRollsAndDropsLateOutcomes(t *testing.T) {
	w := newWindow(int64(time.Second), 4)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	sec := int64(time.Second)
	for i := range int64(6) { // one failure per second for 6 s
		w.addRequest(base + i*sec)
		w.add(base+i*sec, Failure)
	}
	hi := w.number(base + 5*sec)
	if got := w.rolling(hi); got.Failures != 4 || got.Requests != 4 {
		t.Fatalf("rolling = %+v, want the last 4 seconds", got)
	}
	if w.latest.Load() != hi {
		t.Fatalf("latest = %d, want %d", w.latest.Load(), hi)
	}
	// An outcome from second 1, whose slot now counts second 5, is dropped.
	w.add(base+1*sec, Success)
	if got := w.rolling(hi); got.Successes != 0 {
		t.Fatalf("a late outcome was counted: %+v", got)
	}
	// An outcome from second 2, still in the window, counts.
	w.add(base+2*sec+1, Success)
	if got := w.rolling(hi); got.Successes != 1 {
		t.Fatalf("an outcome within the window was dropped: %+v", got)
	}
	// The fleet window holding second 5 starts at a multiple of 4 s.
	if got := w.fleet(hi); got.Failures != int64(hi-w.fleetStart(hi)+1) {
		t.Fatalf("fleet = %+v for slots %d..%d", got, w.fleetStart(hi), hi)
	}
	w.reset()
	if got := w.rolling(hi); got != (Counts{}) {
		t.Fatalf("after reset: %+v", got)
	}
	if got := w.rolling(emptySlot); got != (Counts{}) {
		t.Fatalf("rolling(empty) = %+v", got)
	}
}

func TestOpenDurationSaturates(t *testing.T) {
	b, err := New("x", Settings{OpenDuration: time.Duration(1 << 62), MaxOpenDuration: time.Duration(1<<63 - 1), Rand: func() float64 { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range []int{0, 1, 63, 1 << 30, -5} {
		if d := b.openDurationLocked(r); d <= 0 {
			t.Fatalf("openDuration(%d) = %v, want positive", r, d)
		}
	}
}
