package readspread

import (
	"testing"
	"time"
)

var t0 = time.UnixMilli(1_700_000_000_000)

// replicas returns how many replicas s reads over at now: the distinct
// replicas of a round of Picks, 0 when it reads the items themselves.
func replicas(s *Spread, now time.Time) int {
	seen := map[int]bool{}
	for range MaxReplicas {
		if i := s.Pick(now); i >= 0 {
			seen[i] = true
		}
	}
	return len(seen)
}

func TestSpreadGrowsOnThrottlesAndLapses(t *testing.T) {
	var ss Spreads
	s := ss.For("payments")
	if ss.For("payments") != s {
		t.Fatal("For returned another Spread for the same name")
	}
	if got := s.Pick(t0); got != -1 {
		t.Fatalf("Pick before any throttle = %d, want -1 (the items themselves)", got)
	}
	s.Throttled(t0)
	if got := replicas(s, t0); got != MinReplicas {
		t.Fatalf("replicas after one throttle = %d, want %d", got, MinReplicas)
	}
	seen := map[int]bool{}
	for range MinReplicas {
		seen[s.Pick(t0.Add(time.Second))] = true
	}
	if len(seen) != MinReplicas {
		t.Errorf("%d Picks read %d distinct replicas, want each of %d once", MinReplicas, len(seen), MinReplicas)
	}
	want := MinReplicas
	for i := 1; i <= 4; i++ {
		s.Throttled(t0.Add(time.Duration(i) * time.Second))
		want = min(want*Growth, MaxReplicas)
		if got := replicas(s, t0.Add(time.Duration(i)*time.Second)); got != want {
			t.Errorf("after %d throttles: %d replicas, want %d", i+1, got, want)
		}
	}
	last := t0.Add(4 * time.Second)
	if got := s.Pick(last.Add(Hold - time.Millisecond)); got < 0 || got >= MaxReplicas {
		t.Errorf("Pick just before Hold lapses = %d, want a replica in [0, %d)", got, MaxReplicas)
	}
	if got := s.Pick(last.Add(Hold)); got != -1 {
		t.Errorf("Pick once Hold has lapsed = %d, want -1", got)
	}
	s.Throttled(last.Add(Hold + time.Second))
	if got := replicas(s, last.Add(Hold+time.Second)); got != MinReplicas {
		t.Errorf("a throttle after the spread lapsed starts again at %d replicas, want %d", got, MinReplicas)
	}
}

func TestSpreadOffsetsDiffer(t *testing.T) {
	a, b := (&Spreads{Offset: 0}).For("x"), (&Spreads{Offset: 3}).For("x")
	a.Throttled(t0)
	b.Throttled(t0)
	if pa, pb := a.Pick(t0), b.Pick(t0); pa != 0 || pb != 3 {
		t.Errorf("first Picks = %d and %d, want 0 and 3 (the offsets)", pa, pb)
	}
}

func TestFresh(t *testing.T) {
	s := new(Spreads).For("x")
	s.Saw(5)
	for _, c := range []struct {
		name   string
		epoch  uint64
		copied time.Time
		want   bool
	}{
		{"new copy, same epoch", 5, t0, true},
		{"MaxAge old", 5, t0.Add(-MaxAge), true},
		{"older than MaxAge", 5, t0.Add(-MaxAge - time.Millisecond), false},
		{"copy of an older epoch than seen", 4, t0, false},
		{"copy of a later epoch", 6, t0, true},
		{"dated MaxAge ahead by another clock", 5, t0.Add(MaxAge), true},
		{"dated further ahead", 5, t0.Add(MaxAge + time.Millisecond), false},
	} {
		if got := s.Fresh(c.epoch, c.copied, t0); got != c.want {
			t.Errorf("%s: Fresh = %v, want %v", c.name, got, c.want)
		}
	}
	s.Saw(3)
	if s.Fresh(4, t0, t0) {
		t.Error("Saw of a lower epoch lowered what the store has seen")
	}
	s.Read(2)
	if !s.Fresh(2, t0, t0) {
		t.Error("after reading epoch 2 from the table itself, a copy of epoch 2 is not fresh")
	}
}

func TestReplaces(t *testing.T) {
	for _, c := range []struct {
		name   string
		copied time.Time
		want   bool
	}{
		{"an older copy", t0.Add(-time.Millisecond), true},
		{"a copy dated now", t0, false},
		{"a copy dated ahead within MaxAge", t0.Add(MaxAge), false},
		{"a copy dated further ahead (a fast clock)", t0.Add(MaxAge + time.Millisecond), true},
	} {
		if got := Replaces(c.copied, t0); got != c.want {
			t.Errorf("%s: Replaces = %v, want %v", c.name, got, c.want)
		}
	}
}
