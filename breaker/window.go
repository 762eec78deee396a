package breaker

import (
	"math"
	"sync"
	"sync/atomic"
)

// emptySlot marks a slot that counts nothing.
const emptySlot = math.MinInt64

// slot counts the outcomes of one slot of the rolling window. Its counters
// are only ever added to between resets, so readers need no lock.
type slot struct {
	// num is the slot number (Unix nanoseconds / slot width) whose
	// outcomes the counters hold, or emptySlot.
	num       atomic.Int64
	requests  atomic.Int64
	successes atomic.Int64
	failures  atomic.Int64
	excluded  atomic.Int64
	_         [24]byte // one slot per 64-byte cache line
}

// window is a rolling window of n slots of width nanoseconds each, indexed
// by slot number modulo n. Counting is lock-free; rotating a slot to a new
// slot number and resetting the whole window take mu, which serializes
// them. Because slot numbers are Unix nanoseconds / width, slots are
// aligned to the Unix epoch: when width × n is the fleet window length, the
// slots of the current fleet window are exactly those numbered from
// floor(num / n) × n on.
//
// Counts are exact when calls are sequential. Under concurrency a count
// racing with a rotation or a reset may land in the slot's new period or be
// lost; that imprecision is bounded by the number of calls in flight.
type window struct {
	width  int64 // slot width in nanoseconds; immutable
	n      int64 // number of slots; immutable
	slots  []slot
	latest atomic.Int64 // highest slot number rotated in, or emptySlot

	mu sync.Mutex // serializes rotations and resets
}

func newWindow(width int64, n int) *window {
	w := &window{width: width, n: int64(n), slots: make([]slot, n)}
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
// needed, or nil when num is more than a window older than the slot's
// current period (such a late outcome is dropped).
func (w *window) slot(num int64) *slot {
	i := num % w.n
	if i < 0 {
		i += w.n
	}
	s := &w.slots[i]
	cur := s.num.Load()
	if cur == num {
		return s
	}
	if cur > num {
		return nil
	}
	w.mu.Lock()
	if cur = s.num.Load(); cur < num {
		s.requests.Store(0)
		s.successes.Store(0)
		s.failures.Store(0)
		s.excluded.Store(0)
		s.num.Store(num) // publish only after the reset
		if num > w.latest.Load() {
			w.latest.Store(num)
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
// nil for a time more than a window older than its slot's period.
func (w *window) at(unixNano int64) *slot {
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
	for i := range w.slots {
		s := &w.slots[i]
		s.num.Store(emptySlot)
		s.requests.Store(0)
		s.successes.Store(0)
		s.failures.Store(0)
		s.excluded.Store(0)
	}
	w.mu.Unlock()
}
