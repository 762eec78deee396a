package slothint

import (
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

func TestFormFor(t *testing.T) {
	for _, c := range []struct {
		held, reported int64
		want           Form
	}{{0, 5, Reset}, {4, 14, Reset}, {14, 14, Add}, {24, 14, Late}} {
		if got := FormFor(c.held, c.reported); got != c.want {
			t.Errorf("FormFor(%d, %d) = %s, want %s", c.held, c.reported, got, c.want)
		}
	}
}

func TestPredict(t *testing.T) {
	var h Hint
	r := breaker.Report{Bucket: 14}
	watched := r
	watched.WatchUntil = time.UnixMilli(1)
	check := func(r breaker.Report, want Form, wantNew bool) {
		t.Helper()
		if f, n := h.Predict(r); f != want || n != wantNew {
			t.Fatalf("Predict(bucket %d, watch %v) = %s, %v; want %s, %v", r.Bucket, !r.WatchUntil.IsZero(), f, n, want, wantNew)
		}
	}
	// Nothing seen: the slot is empty, this environment starts the bucket.
	check(r, Reset, true)
	// Another environment started it: next time a new bucket is guessed
	// started already.
	h.NoteStart(Add)
	check(r, Add, true)
	var b [breaker.FleetSlots]breaker.Bucket
	b[4] = breaker.Bucket{Num: 14}
	h.Learn(&b)
	check(r, Add, false)
	// The slot holds a newer bucket: late; without a watch, nothing to
	// write, and a reset's refusal is the answer.
	b[4].Num = 24
	h.Learn(&b)
	check(watched, Late, false)
	check(r, Reset, false)
	h.NoteStart(Late) // changes nothing
	b[4].Num = 4
	h.Learn(&b)
	check(r, Add, true)
	// Others started buckets twice more (the counter saturates at 3):
	// being first once does not change the guess, twice does.
	h.NoteStart(Add)
	h.NoteStart(Add)
	h.NoteStart(Reset)
	check(r, Add, true)
	h.NoteStart(Reset)
	check(r, Reset, true)
	// A lone environment stays on Reset.
	for range 5 {
		h.NoteStart(Reset)
	}
	check(r, Reset, true)
	h.NoteStart(Add)
	check(r, Reset, true)
	h.NoteStart(Add)
	check(r, Add, true)
}

func TestHintsPerName(t *testing.T) {
	var hs Hints
	if hs.For("a") != hs.For("a") || hs.For("a") == hs.For("b") {
		t.Fatal("Hints.For does not keep one Hint per name")
	}
}
