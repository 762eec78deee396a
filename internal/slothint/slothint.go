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
	// others says how often, lately, a report of a bucket newer than its
	// slot's known one found the bucket started by another environment: a
	// counter from 0 to 3, up when it did, down when it did not. In a busy
	// fleet that is the rule (only the first of the fleet's reports of a
	// bucket resets its slot), and being first once in a while does not
	// change the guess: Add is guessed first for such a report while the
	// counter is 2 or 3, Reset otherwise (a lone environment, which starts
	// every bucket itself).
	others atomic.Int32
}

// othersGuess is the counter from which Add is guessed; a new Hint starts
// just below it.
const othersGuess = 2

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
	case f == Reset && h.others.Load()+initialOthers >= othersGuess:
		return Add, true
	default:
		return f, f == Reset
	}
}

// NoteStart records, once per report of a bucket newer than its slot's
// known one, the form its slot called for when the first write landed:
// Add (another environment had started the bucket) or Reset (this one
// started it).
func (h *Hint) NoteStart(f Form) {
	if f == Late {
		return
	}
	c := h.others.Load() + initialOthers
	if f == Add {
		c = min(c+1, 3)
	} else {
		c = max(c-1, 0)
	}
	h.others.Store(c - initialOthers) // a race loses an update: a guess, no harm
}

// initialOthers is the counter of a new Hint (stored as the difference
// from it, so that the zero Hint starts there).
const initialOthers = othersGuess - 1

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
