package capacity

import (
	"errors"
	"testing"
	"time"
)

func TestNumberSize(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
	}{
		{"0", 1}, {"7", 2}, {"12", 2}, {"123", 3}, {"1000", 2}, {"-1500", 2},
		{"0.001", 2}, {"1700000000000", 2}, {"1700000000123", 8}, {"3.14159", 4},
	} {
		if got := NumberSize(c.v); got != c.want {
			t.Errorf("NumberSize(%q) = %d, want %d", c.v, got, c.want)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, c := range []struct{ before, after, want int }{
		{0, 0, 1}, {0, 100, 1}, {1024, 10, 1}, {1025, 10, 2}, {10, 3000, 3}, {10465, 10485, 11},
	} {
		if got := WriteUnits(c.before, c.after); got != float64(c.want) {
			t.Errorf("WriteUnits(%d, %d) = %v, want %d", c.before, c.after, got, c.want)
		}
	}
	if got := ReadUnits(4097, true); got != 2 {
		t.Errorf("ReadUnits(4097, strong) = %v, want 2", got)
	}
	if got := ReadUnits(100, false); got != 0.5 {
		t.Errorf("ReadUnits(100, eventual) = %v, want 0.5", got)
	}
}

func TestMeterThrottlesHotItem(t *testing.T) {
	m := NewMeter(Config{Throttle: true})
	t0 := time.Unix(1_700_000_000, 0)
	var ok, throttled int
	for i := range 1500 {
		err := m.Write("hot", t0.Add(time.Duration(i)*time.Millisecond/2), 100, 100) // 1,500 writes in 0.75 s
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrThrottled):
			throttled++
		default:
			t.Fatal(err)
		}
	}
	if ok != ItemWriteUnitsPerSecond || throttled != 500 {
		t.Fatalf("1,500 one-unit writes in one second: %d applied, %d throttled; want 1000 and 500", ok, throttled)
	}
	if err := m.Write("hot", t0.Add(time.Second), 100, 100); err != nil {
		t.Fatalf("the next second: %v", err)
	}
	if err := m.Write("cold", t0, 100, 100); err != nil {
		t.Fatalf("another item in the hot second: %v", err)
	}
	s := m.Stats()
	if s.PeakItemWriteUnits != 1000 || s.HottestWriteItem != "hot" || s.ThrottledWrites != 500 {
		t.Fatalf("stats %+v", s)
	}
}
