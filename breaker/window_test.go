package breaker

import (
	"testing"
	"time"
	"unsafe"
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

// The lock-free path reads word, staleAt, consecFail, win and the window's
// geometry on every call, and writes only slot counters. These tests pin
// the layout that keeps the two apart (see the comments on Breaker, window
// and slot).
func TestHotFieldsHaveTheirOwnCacheLine(t *testing.T) {
	var b Breaker
	for _, f := range []struct {
		name string
		off  uintptr
	}{
		{"word", unsafe.Offsetof(b.word)},
		{"staleAt", unsafe.Offsetof(b.staleAt)},
		{"consecFail", unsafe.Offsetof(b.consecFail)},
		{"win", unsafe.Offsetof(b.win)},
	} {
		if f.off >= cacheLine {
			t.Errorf("Breaker.%s at offset %d, want within the first %d bytes", f.name, f.off, cacheLine)
		}
	}
	if off := unsafe.Offsetof(b.name); off < cacheLine {
		t.Errorf("Breaker.name at offset %d shares the hot cache line", off)
	}
	if gap := unsafe.Offsetof(b.refreshing) - (unsafe.Offsetof(b.rand) + unsafe.Sizeof(b.rand)); gap < cacheLine {
		t.Errorf("only %d bytes between the immutable fields and refreshing, want %d", gap, cacheLine)
	}

	var w window
	if off := unsafe.Offsetof(w.slots) + unsafe.Sizeof(w.slots); off > cacheLine {
		t.Errorf("window geometry ends at offset %d, want within %d", off, cacheLine)
	}
	if off := unsafe.Offsetof(w.mu); off < cacheLine {
		t.Errorf("window.mu at offset %d shares the line of latest", off)
	}
	if size := unsafe.Sizeof(w); size%cacheLine != 0 {
		t.Errorf("window is %d bytes, want a multiple of %d", size, cacheLine)
	}
	if size := unsafe.Sizeof(slot{}); size != cacheLine {
		t.Errorf("slot is %d bytes, want %d", size, cacheLine)
	}
}

func TestWindowRingIsAPowerOfTwo(t *testing.T) {
	for _, c := range []struct{ n, size int }{{1, 1}, {2, 2}, {3, 4}, {10, 16}, {16, 16}, {1000, 1024}} {
		w := newWindow(int64(time.Second), c.n)
		if len(w.slots) != c.size || w.mask != int64(c.size-1) || w.n != int64(c.n) {
			t.Errorf("newWindow(_, %d): %d slots, mask %d, n %d; want %d slots", c.n, len(w.slots), w.mask, w.n, c.size)
		}
	}
}

// A ring larger than the window holds slots older than it; they must not
// count.
func TestWindowRollsWithALargerRing(t *testing.T) {
	w := newWindow(int64(time.Second), 10) // a ring of 16
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	sec := int64(time.Second)
	for i := range int64(14) {
		w.addRequest(base + i*sec)
		w.add(base+i*sec+sec/2, Failure)
	}
	hi := w.number(base + 13*sec)
	if got := w.rolling(hi); got.Failures != 10 || got.Requests != 10 {
		t.Fatalf("rolling = %+v, want the last 10 seconds", got)
	}
	// Second 2 left the window but its position in the ring still holds
	// it: an outcome for it lands there and is not counted.
	w.add(base+2*sec, Failure)
	if got := w.rolling(hi); got.Failures != 10 {
		t.Fatalf("an outcome older than the window was counted: %+v", got)
	}
	// Sixteen seconds on, the positions are reused.
	w.add(base+29*sec, Failure)
	if got := w.rolling(w.number(base + 29*sec)); got.Failures != 1 || got.Requests != 0 {
		t.Fatalf("rolling after 16 s = %+v, want only the new failure", got)
	}
}

// The lock-free path goes by latest; a reset must stop it from counting
// into the emptied slots.
func TestWindowCountsAfterReset(t *testing.T) {
	w := newWindow(int64(time.Second), 10)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	w.addRequest(now)
	w.add(now, Success)
	w.reset()
	if w.latest.Load() != emptySlot {
		t.Fatalf("latest = %d after reset, want emptySlot", w.latest.Load())
	}
	w.addRequest(now)
	w.add(now, Success)
	if got := w.rolling(w.latest.Load()); got.Requests != 1 || got.Successes != 1 {
		t.Fatalf("after reset: %+v, want one request and one success", got)
	}
	if got := w.successes(); got != 1 {
		t.Fatalf("successes() = %d, want 1", got)
	}
}

// successes() keeps counting the successes of slots rotated out, and late
// successes, until a reset.
func TestWindowSuccessesSurviveRotation(t *testing.T) {
	w := newWindow(int64(time.Second), 2) // a ring of 2
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	sec := int64(time.Second)
	for i := range int64(7) {
		w.add(base+i*sec, Success)
		w.add(base+i*sec, Success)
	}
	w.add(base, Success) // late: its position holds second 6
	if got := w.successes(); got != 15 {
		t.Fatalf("successes() = %d, want 15", got)
	}
	if got := w.rolling(w.latest.Load()); got.Successes != 4 {
		t.Fatalf("rolling = %+v, want the 4 successes of the last 2 seconds", got)
	}
	w.reset()
	if got := w.successes(); got != 0 {
		t.Fatalf("successes() after reset = %d", got)
	}
}

// Times before the Unix epoch take the slow path, which floors.
func TestWindowNegativeTimes(t *testing.T) {
	w := newWindow(int64(time.Second), 4)
	for _, ns := range []int64{-1, -1, -int64(time.Second), 0} {
		w.addRequest(ns)
	}
	if got := w.rolling(w.latest.Load()); got.Requests != 4 || w.latest.Load() != 0 {
		t.Fatalf("rolling = %+v, latest %d; want 4 requests up to slot 0", got, w.latest.Load())
	}
	if got := w.sum(-1, -1); got.Requests != 3 {
		t.Fatalf("slot -1 = %+v, want 3 requests", got)
	}
}
