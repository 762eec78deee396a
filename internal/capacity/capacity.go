// Package capacity models what DynamoDB bills for a request and the
// throughput one item can take, so that the in-memory stores, the fault
// proxy in front of DynamoDB Local and the outage simulator can show a hot
// item that DynamoDB Local (which enforces no limit) never would.
//
// It is an instrument for tests and the simulator, not public API.
//
// # Billing (DynamoDB's documented rules)
//
//   - Item size is the sum, over its attributes, of the attribute name's
//     length in UTF-8 bytes plus the value's size: a string is its UTF-8
//     length; a number is one byte per pair of significant digits plus
//     one, pairs counted from the decimal point, plus one if negative
//     (NumberSize); a binary value its length; a boolean or null one
//     byte; a set the sum of its elements (numbers sized as above); a map or
//     list 3 bytes plus, per element, one byte and the element's size.
//   - A write (PutItem, UpdateItem, DeleteItem) consumes
//     ceil(max(size before, size after) / 1 KB) write units, at least one. A
//     write whose condition fails consumes the same (billed on the item as
//     it stands). A throttled request consumes nothing.
//   - A strongly consistent read consumes ceil(size / 4 KB) read units, at
//     least one; an eventually consistent read half of that. BatchGetItem
//     is billed per item, each rounded up separately; a missing item costs
//     as an empty one.
//
// # Limits
//
// One partition key takes at most ItemWriteUnitsPerSecond write units and
// ItemReadUnitsPerSecond read units per second; adaptive capacity and
// on-demand mode do not lift a single hot item above that. The Meter
// enforces them in fixed one-second buckets aligned to the Unix epoch (per
// item, separately for reads and writes): a request that would take an
// item's bucket past the limit is throttled, consumes nothing and is not
// applied. DynamoDB spreads this over a token bucket with some burst; fixed
// buckets are the simplest model that keeps every second under the limit.
// An item is at most MaxItemBytes; a write that would make it larger fails
// (ErrItemTooLarge).
package capacity

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DynamoDB's documented figures.
const (
	// WriteUnitBytes is the item size one write unit covers.
	WriteUnitBytes = 1024
	// ReadUnitBytes is the item size one strongly consistent read unit
	// covers.
	ReadUnitBytes = 4096
	// MaxItemBytes is the largest item DynamoDB stores.
	MaxItemBytes = 400 * 1024
	// ItemWriteUnitsPerSecond and ItemReadUnitsPerSecond are the most one
	// partition key takes per second.
	ItemWriteUnitsPerSecond = 1000
	ItemReadUnitsPerSecond  = 3000
)

var (
	// ErrThrottled is the answer to a request past an item's limit: what
	// DynamoDB answers with ProvisionedThroughputExceededException (or
	// ThrottlingException in on-demand mode).
	ErrThrottled = errors.New("capacity: item throughput exceeded (ProvisionedThroughputExceededException)")
	// ErrItemTooLarge is the answer to a write that would make an item
	// larger than MaxItemBytes (DynamoDB's ValidationException).
	ErrItemTooLarge = errors.New("capacity: item size has exceeded the maximum allowed size (ValidationException)")
)

// Item accumulates the size of one DynamoDB item, attribute by attribute.
// The zero value is an empty item.
type Item struct{ size int }

// Size returns the item's size in bytes.
func (it Item) Size() int { return it.size }

// String adds a string attribute.
func (it *Item) String(name, value string) *Item {
	it.size += len(name) + len(value)
	return it
}

// Number adds a number attribute given as DynamoDB's decimal string.
func (it *Item) Number(name, value string) *Item {
	it.size += len(name) + NumberSize(value)
	return it
}

// Int adds an integer number attribute.
func (it *Item) Int(name string, v int64) *Item {
	return it.Number(name, fmt.Sprint(v))
}

// StringSet adds a string set attribute.
func (it *Item) StringSet(name string, values []string) *Item {
	it.size += len(name)
	for _, v := range values {
		it.size += len(v)
	}
	return it
}

// Raw adds an attribute whose value size is already known (binary,
// boolean, null, map or list, sized by the package rules).
func (it *Item) Raw(name string, valueBytes int) *Item {
	it.size += len(name) + valueBytes
	return it
}

// NumberSize returns the size DynamoDB bills for a number given as a
// decimal string (an optional sign, digits with an optional point, an
// optional exponent). AWS documents it as "approximately one byte per two
// significant digits, plus one"; exactly, as DynamoDB stores numbers, it is
// one byte for the exponent, one per base-100 digit of the mantissa (the
// decimal digits in pairs aligned on the decimal point, leading and
// trailing zero pairs dropped) and one more for a negative number. Zero is
// one byte. DynamoDB Local 3.3.1 bills exactly this (measured: 150 and 1.5
// are 3 bytes, 1,500 is 2, -1 is 3). Text that is not a number is sized as
// its digits.
func NumberSize(value string) int {
	neg := strings.HasPrefix(value, "-")
	digits := strings.TrimLeft(value, "+-")
	exp := 0
	if i := strings.IndexAny(digits, "eE"); i >= 0 {
		exp, _ = strconv.Atoi(digits[i+1:]) // the exponent is not stored as digits
		digits = digits[:i]
	}
	// point: how many of the digits stand before the decimal point.
	point := len(digits)
	if i := strings.IndexByte(digits, '.'); i >= 0 {
		point = i
		digits = digits[:i] + digits[i+1:]
	}
	point += exp
	trimmed := strings.TrimLeft(digits, "0")
	point -= len(digits) - len(trimmed)
	digits = strings.TrimRight(trimmed, "0")
	n := len(digits)
	if n == 0 {
		return 1
	}
	// Align the pairs on the decimal point: a digit in front if an odd
	// number of digits stands before the point, one behind to fill the
	// last pair.
	if point%2 != 0 {
		n++
	}
	size := (n+1)/2 + 1
	if neg {
		size++
	}
	return size
}

// WriteUnits returns the write units of a write to an item that was before
// bytes and is after bytes (0 when it did not or does not exist).
func WriteUnits(before, after int) float64 {
	return float64(max(ceilDiv(max(before, after), WriteUnitBytes), 1))
}

// ReadUnits returns the read units of a read of an item of size bytes (0
// for a missing item), strongly consistent or not.
func ReadUnits(size int, consistent bool) float64 {
	u := float64(max(ceilDiv(size, ReadUnitBytes), 1))
	if !consistent {
		u /= 2
	}
	return u
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Config sets a Meter's limits.
type Config struct {
	// Throttle makes the Meter refuse requests past the per-item limits.
	// Without it the Meter only bills and measures.
	Throttle bool
	// WriteUnitsPerSecond and ReadUnitsPerSecond are the per-item limits;
	// zero means ItemWriteUnitsPerSecond and ItemReadUnitsPerSecond.
	WriteUnitsPerSecond float64
	ReadUnitsPerSecond  float64
}

// Meter bills requests item by item, keeps each item's load per second and,
// with Config.Throttle, refuses what DynamoDB would throttle. It is safe for
// concurrent use; times come from the caller (the store's clock, simulated
// in the simulator).
type Meter struct {
	cfg Config // immutable, defaults filled in

	mu sync.Mutex
	// items holds the current second's load of each item seen in it.
	// Invariant: every entry's second is sec or older (older entries
	// count as empty).
	items map[string]*load
	sec   int64 // the latest second seen
	stats Stats
}

type load struct {
	sec    int64
	writes float64 // units consumed in sec
	reads  float64
	// pendingWrites and pendingReads are the estimates of reservations
	// made in sec and not settled yet; they count towards the limits.
	pendingWrites float64
	pendingReads  float64
}

// side returns the consumed and pending units of l's writes or reads.
func (l *load) side(write bool) (used, pending *float64) {
	if write {
		return &l.writes, &l.pendingWrites
	}
	return &l.reads, &l.pendingReads
}

// Stats are a Meter's totals.
type Stats struct {
	// Writes and Reads count billed requests (one BatchGetItem item is one
	// read); WriteUnits and ReadUnits what they consumed.
	Writes, Reads         int64
	WriteUnits, ReadUnits float64
	// ThrottledWrites and ThrottledReads count refused requests.
	ThrottledWrites, ThrottledReads int64
	// TooLarge counts writes refused because the item would pass
	// MaxItemBytes.
	TooLarge int64
	// PeakItemWriteUnits is the most write units one item consumed in one
	// second, HottestWriteItem that item and PeakWriteSecond that second
	// (Unix seconds); the same for reads.
	PeakItemWriteUnits float64
	HottestWriteItem   string
	PeakWriteSecond    int64
	PeakItemReadUnits  float64
	HottestReadItem    string
	PeakReadSecond     int64
	// LargestItem is the largest item size written, in bytes.
	LargestItem int
}

// Throttled returns the number of throttled requests.
func (s Stats) Throttled() int64 { return s.ThrottledWrites + s.ThrottledReads }

// NewMeter returns a Meter with cfg's limits.
func NewMeter(cfg Config) *Meter {
	if cfg.WriteUnitsPerSecond <= 0 {
		cfg.WriteUnitsPerSecond = ItemWriteUnitsPerSecond
	}
	if cfg.ReadUnitsPerSecond <= 0 {
		cfg.ReadUnitsPerSecond = ItemReadUnitsPerSecond
	}
	return &Meter{cfg: cfg, items: make(map[string]*load)}
}

// Write bills a write of key at now that finds the item at before bytes
// and leaves it at after bytes (a refused conditional write: after =
// before). It returns ErrItemTooLarge, or ErrThrottled with Throttle set
// when the item's write units in the second of now would pass the limit;
// the write must then not be applied, and it consumed nothing.
func (m *Meter) Write(key string, now time.Time, before, after int) error {
	units := WriteUnits(before, after)
	m.mu.Lock()
	defer m.mu.Unlock()
	if after > MaxItemBytes {
		m.stats.TooLarge++
		return ErrItemTooLarge
	}
	l, err := m.admitLocked(key, now, true, units)
	if err != nil {
		return err
	}
	m.consumeLocked(key, l, l.sec, true, units)
	m.stats.LargestItem = max(m.stats.LargestItem, before, after)
	return nil
}

// Read bills a read of key at now of an item of size bytes (0: missing),
// strongly consistent or not. It returns ErrThrottled with Throttle set
// when the item's read units in the second of now would pass the limit.
func (m *Meter) Read(key string, now time.Time, size int, consistent bool) error {
	units := ReadUnits(size, consistent)
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.admitLocked(key, now, false, units)
	if err != nil {
		return err
	}
	m.consumeLocked(key, l, l.sec, false, units)
	return nil
}

// Reservation is a request admitted on an estimate of its units, whose
// real units are known only once it has been served: a proxy in front of
// a database decides to throttle before forwarding, from the item's last
// known size, and learns what the request consumed from the answer.
type Reservation struct {
	m        *Meter
	key      string
	sec      int64 // the second whose bucket holds the estimate
	write    bool
	estimate float64
	settled  bool
}

// ReserveWrite admits a write of key at now estimated at estimate units,
// or throttles it (ErrThrottled) as Write does. The estimate counts
// towards the item's limit until the reservation is settled.
func (m *Meter) ReserveWrite(key string, now time.Time, estimate float64) (*Reservation, error) {
	return m.reserve(key, now, true, estimate)
}

// ReserveRead is ReserveWrite for a read.
func (m *Meter) ReserveRead(key string, now time.Time, estimate float64) (*Reservation, error) {
	return m.reserve(key, now, false, estimate)
}

func (m *Meter) reserve(key string, now time.Time, write bool, estimate float64) (*Reservation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.admitLocked(key, now, write, estimate)
	if err != nil {
		return nil, err
	}
	_, pending := l.side(write)
	*pending += estimate
	return &Reservation{m: m, key: key, sec: l.sec, write: write, estimate: estimate}, nil
}

// Settle replaces the reservation's estimate by the units the request
// consumed, in the second it was admitted in: 0 for a request that
// consumed nothing (it failed before it was applied), which is then not
// counted. Only the first call counts.
func (r *Reservation) Settle(units float64) {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	l := m.items[r.key]
	if l == nil || l.sec != r.sec {
		l = nil // the second is over: only the totals change
	} else {
		_, pending := l.side(r.write)
		*pending -= r.estimate
	}
	if units > 0 {
		m.consumeLocked(r.key, l, r.sec, r.write, units)
	}
}

// admitLocked returns key's load in the second of now, or ErrThrottled
// (counted) if units more would take it past the limit. m.mu must be held.
func (m *Meter) admitLocked(key string, now time.Time, write bool, units float64) (*load, error) {
	l := m.loadLocked(key, now)
	used, pending := l.side(write)
	limit := m.cfg.ReadUnitsPerSecond
	if write {
		limit = m.cfg.WriteUnitsPerSecond
	}
	if m.cfg.Throttle && *used+*pending+units > limit {
		if write {
			m.stats.ThrottledWrites++
		} else {
			m.stats.ThrottledReads++
		}
		return nil, ErrThrottled
	}
	return l, nil
}

// consumeLocked counts a request of units in the totals and, if l is not
// nil, in its second sec, keeping the peaks. m.mu must be held.
func (m *Meter) consumeLocked(key string, l *load, sec int64, write bool, units float64) {
	if write {
		m.stats.Writes++
		m.stats.WriteUnits += units
	} else {
		m.stats.Reads++
		m.stats.ReadUnits += units
	}
	if l == nil {
		return
	}
	used, _ := l.side(write)
	*used += units
	switch {
	case write && *used > m.stats.PeakItemWriteUnits:
		m.stats.PeakItemWriteUnits, m.stats.HottestWriteItem, m.stats.PeakWriteSecond = *used, key, sec
	case !write && *used > m.stats.PeakItemReadUnits:
		m.stats.PeakItemReadUnits, m.stats.HottestReadItem, m.stats.PeakReadSecond = *used, key, sec
	}
}

// Stats returns the totals so far.
func (m *Meter) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// loadLocked returns key's load in the second of now. Entries of seconds
// before the latest one seen are dropped when a new second starts, so the
// map holds only the items touched in about one second.
func (m *Meter) loadLocked(key string, now time.Time) *load {
	sec := unixSecond(now)
	if sec > m.sec {
		m.sec = sec
		if len(m.items) > 0 {
			for k, l := range m.items {
				if l.sec < sec-1 {
					delete(m.items, k)
				}
			}
		}
	}
	l := m.items[key]
	switch {
	case l == nil:
		l = &load{sec: sec}
		m.items[key] = l
	case l.sec < sec:
		*l = load{sec: sec}
	case l.sec > sec:
		// A request stamped with an earlier second than one already seen
		// for this item (callers' clocks are not perfectly ordered): it
		// counts in the item's current second, which can only throttle
		// more, never less.
	}
	return l
}

// unixSecond is the Unix second now falls in (floor, also before 1970).
func unixSecond(now time.Time) int64 {
	ns := now.UnixNano()
	s := ns / int64(time.Second)
	if ns%int64(time.Second) < 0 {
		s--
	}
	return s
}

// PerMillion returns the price of units per million calls at price dollars
// per million units: a figure for printed tables.
func PerMillion(units float64, calls int64, price float64) float64 {
	if calls <= 0 {
		return math.NaN()
	}
	return units / float64(calls) * price
}
