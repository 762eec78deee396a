package breaker

import (
	"math"
	"sync"
	"sync/atomic"
)

// emptySlot marks a slot that counts nothing.
const emptySlot = math.MinInt64

// cacheLine is the size the hot structures are padded to, so that a counter
// written on every call does not share a cache line with fields that every
// call only reads (on a shared line each write would make the other cores
// fetch those fields again).
const cacheLine = 64

// slot counts the outcomes of one slot of the rolling window. Its counters
// are only ever added to between resets, so readers need no lock. A slot
// fills one cache line: calls counted in different slots do not contend.
type slot struct {
	// num is the slot number (Unix nanoseconds / slot width) whose
	// outcomes the counters hold, or emptySlot. The lock-free path does not
	// read it (it goes by window.latest); rotations and sums do.
	num       atomic.Int64
	requests  atomic.Int64
	successes atomic.Int64
	failures  atomic.Int64
	excluded  atomic.Int64
	_         [cacheLine - 5*8]byte
}

// window is a rolling window of n slots of width nanoseconds each, kept in
// a ring of a power of two slots (at least n) indexed by slot number &
// mask. Because slot numbers are Unix nanoseconds / width, slots are
// aligned to the Unix epoch: when width × n is the fleet window length, the
// slots of the current fleet window are exactly those numbered from
// floor(num / n) × n on. The ring may hold slots older than the window;
// sums select slots by number, so those never count.
//
// Counting is lock-free. A time in the latest slot (the usual case) is
// counted with one atomic load of latest, a multiplication and one atomic
// add: no division, and no read of the cache line other calls write to.
// Rotating a slot to a new slot number and resetting the whole window take
// mu, which serializes them.
//
// Counts are exact when calls are sequential. Under concurrency a count
// racing with a rotation or a reset may land in the slot's new period or be
// lost; that imprecision is bounded by the number of calls in flight.
type window struct {
	// Read by every call; written only when a slot is rotated in or the
	// window is reset (with mu held).
	latest atomic.Int64 // highest slot number rotated in since the last reset, or emptySlot
	width  int64        // slot width in nanoseconds; immutable
	n      int64        // number of slots in the window; immutable
	mask   int64        // len(slots)-1; immutable
	slots  []slot       // immutable slice header
	_      [cacheLine - 4*8 - 24]byte

	mu sync.Mutex // serializes rotations and resets
	// retired is the number of successes counted in slots since rotated
	// out, or dropped as too late for their slot, since the last reset:
	// with the successes still in the ring it makes successes(). Written
	// with mu held, or atomically by a late success.
	retired atomic.Int64
	_       [cacheLine - 16]byte
}

func newWindow(width int64, n int) *window {
	size := 1
	for size < n {
		size *= 2
	}
	w := &window{width: width, n: int64(n), mask: int64(size - 1), slots: make([]slot, size)}
	for i := range w.slots {
		w.slots[i].num.Store(emptySlot)
	}
	w.latest.Store(emptySlot)
	return w
}

// number returns the slot number of a time in Unix nanoseconds.
func (w *window) number(unixNano int64) int64 {
	q := unixNano / w.width
	if unixNano%w.width < 0 {
		q--
	}
	return q
}

// slot returns the slot that counts slot number num, rotating it in if
// needed, or nil when the slot's position in the ring already counts a
// later slot number (such a late outcome is dropped).
func (w *window) slot(num int64) *slot {
	s := &w.slots[num&w.mask]
	cur := s.num.Load()
	if cur == num {
		return s
	}
	if cur > num {
		return nil
	}
	w.mu.Lock()
	if cur = s.num.Load(); cur < num {
		if succ := s.successes.Swap(0); cur != emptySlot {
			w.retired.Add(succ) // still successes in a row, if no failure followed
		}
		s.requests.Store(0)
		s.failures.Store(0)
		s.excluded.Store(0)
		s.num.Store(num) // publish only after the reset
		if num > w.latest.Load() {
			w.latest.Store(num) // and latest only after num
		}
		cur = num
	}
	w.mu.Unlock()
	if cur > num {
		return nil
	}
	return s
}

// at returns the slot counting the time unixNano (Unix nanoseconds), or
// nil for a time too old for its slot.
func (w *window) at(unixNano int64) *slot {
	// Fast path: unixNano falls in the latest slot. Its position in the
	// ring was rotated to it before latest was published; a rotation or a
	// reset since is the race the type's documentation allows for. With l
	// and unixNano not negative, l×width (at most a time already seen) and
	// the difference cannot overflow.
	if l := w.latest.Load(); l >= 0 && unixNano >= 0 {
		if d := unixNano - l*w.width; d >= 0 && d < w.width {
			return &w.slots[l&w.mask]
		}
	}
	return w.slot(w.number(unixNano))
}

func (w *window) addRequest(unixNano int64) {
	if s := w.at(unixNano); s != nil {
		s.requests.Add(1)
	}
}

func (w *window) add(unixNano int64, o Outcome) {
	s := w.at(unixNano)
	if s == nil {
		if o == Success {
			w.retired.Add(1) // out of the window, but still a success in a row
		}
		return
	}
	switch o {
	case Success:
		s.successes.Add(1)
	case Failure:
		s.failures.Add(1)
	default:
		s.excluded.Add(1)
	}
}

// successes returns the number of successes counted since the last reset,
// in the window or before it.
func (w *window) successes() int64 {
	total := w.retired.Load()
	for i := range w.slots {
		s := &w.slots[i]
		if s.num.Load() != emptySlot {
			total += s.successes.Load()
		}
	}
	return total
}

// sum adds up the slots numbered from lo to hi inclusive.
func (w *window) sum(lo, hi int64) (c Counts) {
	if hi == emptySlot {
		return c
	}
	for i := range w.slots {
		s := &w.slots[i]
		num := s.num.Load()
		if num == emptySlot || num < lo || num > hi {
			continue
		}
		c.Requests += s.requests.Load()
		c.Successes += s.successes.Load()
		c.Failures += s.failures.Load()
		c.Excluded += s.excluded.Load()
	}
	return c
}

// rolling returns the counts of the n slots ending with slot number hi.
func (w *window) rolling(hi int64) Counts {
	if hi == emptySlot {
		return Counts{}
	}
	return w.sum(hi-w.n+1, hi)
}

// fleet returns the counts of the fleet window (n slots aligned on a
// multiple of n) that holds slot number hi, up to hi.
func (w *window) fleet(hi int64) Counts {
	return w.sum(w.fleetStart(hi), hi)
}

// fleetStart returns the first slot number of the fleet window holding
// slot number num.
func (w *window) fleetStart(num int64) int64 {
	lo := num / w.n * w.n
	if num%w.n < 0 {
		lo -= w.n
	}
	return lo
}

// reset empties every slot.
func (w *window) reset() {
	w.mu.Lock()
	w.latest.Store(emptySlot) // first: the lock-free path stops using the slots
	for i := range w.slots {
		s := &w.slots[i]
		s.num.Store(emptySlot)
		s.requests.Store(0)
		s.successes.Store(0)
		s.failures.Store(0)
		s.excluded.Store(0)
	}
	w.retired.Store(0)
	w.mu.Unlock()
}
