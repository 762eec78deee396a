// Package slothint guesses the form of a breaker Report's conditional
// write, for package dynamo, which sends it, and internal/memstore, which
// bills what dynamo would send.
//
// A Report adds an environment's counts to one slot of the breaker state
// item (slot = bucket mod breaker.FleetSlots), and the write's form
// depends on what the slot holds: the same bucket (Add), an older one or
// none (Reset), or a newer one (Late: only the watch is written). The
// store cannot read before writing without paying for a read, so it
// guesses from what it last saw; a wrong guess costs one refused write,
// whose answer (the item as it stands) tells the right form. A Hint is
// what one store last saw of one breaker.
package slothint

import (
	"sync"
	"sync/atomic"

	"github.com/herdguard/herdguard/breaker"
)

// Form is the shape of a Report's conditional write.
type Form uint8

const (
	// Add: the slot holds the reported bucket; the counts are added.
	Add Form = iota
	// Reset: the slot holds an older bucket or none; it is replaced.
	Reset
	// Late: the slot holds a newer bucket; only the watch is written.
	Late
)

// String returns "add", "reset" or "late".
func (f Form) String() string {
	switch f {
	case Add:
		return "add"
	case Reset:
		return "reset"
	default:
		return "late"
	}
}

// FormFor returns the form a report of bucket reported needs when its slot
// holds bucket held (0: empty).
func FormFor(held, reported int64) Form {
	switch {
	case held == reported:
		return Add
	case held < reported:
		return Reset
	default:
		return Late
	}
}

// Hint is what a store last saw of one breaker's slots. It is a guess,
// never trusted for an answer. Safe for concurrent use; it holds no lock.
type Hint struct {
	// held is the bucket number each slot held in the last state seen
	// (0: empty).
	held [breaker.FleetSlots]atomic.Int64
	// othersStart: the last time a report of a bucket newer than its
	// slot's known one was written, another environment had already
	// started the bucket. In a busy fleet that is the rule (only the
	// first of the fleet's reports of a bucket resets its slot), so Add is
	// guessed first for such a report; otherwise Reset.
	othersStart atomic.Bool
}

// Learn notes the slots of a state read or written.
func (h *Hint) Learn(buckets *[breaker.FleetSlots]breaker.Bucket) {
	for i := range h.held {
		h.held[i].Store(buckets[i].Num)
	}
}

// Predict returns the form to try first for r, and whether r's bucket is
// newer than the one its slot was last seen holding (pass that to
// NoteStart with the form that turned out right).
func (h *Hint) Predict(r breaker.Report) (f Form, newBucket bool) {
	switch f := FormFor(h.held[r.Bucket%breaker.FleetSlots].Load(), r.Bucket); {
	case f == Late && r.WatchUntil.IsZero():
		// Nothing to write if the slot does hold a newer bucket, but only
		// a write answers the item as it stands: Reset, refused then,
		// is as good as any.
		return Reset, false
	case f == Reset && h.othersStart.Load():
		return Add, true
	default:
		return f, f == Reset
	}
}

// NoteStart records the form a report of a bucket newer than its slot's
// known one turned out to need: Add (another environment had started the
// bucket) or Reset (this one started it).
func (h *Hint) NoteStart(f Form) {
	if f != Late {
		h.othersStart.Store(f == Add)
	}
}

// Hints holds a Hint per breaker name. The zero value is ready to use.
type Hints struct{ m sync.Map }

// For returns name's Hint, creating it.
func (hs *Hints) For(name string) *Hint {
	if h, ok := hs.m.Load(name); ok {
		return h.(*Hint)
	}
	h, _ := hs.m.LoadOrStore(name, new(Hint))
	return h.(*Hint)
}
