// Package readspread decides, for one environment's breaker store, which
// item a breaker's Load reads: the state and override items themselves, or
// one of the breaker's read replicas, copies of both that the readers keep
// fresh. Package dynamo does the reads and writes; internal/memstore
// models them, with the same decisions, for the simulators.
//
// A fleet of a few thousand environments reads the state item well inside
// DynamoDB's 3,000 read units a second per item, so a store reads it
// directly until one of its reads is throttled. From then on, for Hold
// after its last throttled read, it reads replica 0, 1, ... in turn, over
// Replicas of them (MinReplicas at first, Growth times more after each
// further throttle, at most MaxReplicas). A replica copied more than MaxAge
// ago, or holding an older epoch than the store has seen, is stale: the
// store then reads the items themselves and writes the copy, dated with
// the read, on condition that no later copy is there. See "Read replicas"
// in docs/ARCHITECTURE.md.
package readspread

import (
	"sync"
	"time"
)

// The sizing of the spread.
const (
	// MinReplicas is the number of replicas a store reads after its
	// first throttled read.
	MinReplicas = 8
	// Growth is the factor by which each further throttle multiplies the
	// number of replicas.
	Growth = 4
	// MaxReplicas bounds the number of replicas: 128 replicas take
	// 768,000 eventually consistent reads a second.
	MaxReplicas = 128
	// MaxAge is how old a replica may be and still answer a Load.
	MaxAge = 500 * time.Millisecond
	// Hold is how long after its last throttled read a store keeps
	// reading replicas.
	Hold = 2 * time.Minute
)

// Spreads holds one store's spread for each breaker name. The zero value
// is ready to use; it is safe for concurrent use.
type Spreads struct {
	// Offset is the first replica a new Spread reads: give each store
	// another (a random number, or an environment's index), so that the
	// environments throttled together do not read one replica together.
	Offset int

	m sync.Map // name -> *Spread
}

// For returns name's Spread.
func (s *Spreads) For(name string) *Spread {
	if v, ok := s.m.Load(name); ok {
		return v.(*Spread)
	}
	v, _ := s.m.LoadOrStore(name, &Spread{next: uint64(max(s.Offset, 0))})
	return v.(*Spread)
}

// Spread is one store's spread for one breaker. Its methods are safe for
// concurrent use and cheap: a mutex held for a few assignments, never
// across I/O.
type Spread struct {
	mu sync.Mutex
	// Invariants: replicas is 0 or in [MinReplicas, MaxReplicas]; until
	// is the zero time when replicas is 0.
	replicas int
	until    time.Time // replicas are read until then
	epoch    uint64    // the highest epoch the store has seen
	next     uint64    // the next replica to read, mod replicas
}

// Pick returns the replica a Load at now reads, or -1 for the items
// themselves.
func (s *Spread) Pick(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replicas == 0 {
		return -1
	}
	if !now.Before(s.until) {
		s.replicas, s.until = 0, time.Time{}
		return -1
	}
	i := int(s.next % uint64(s.replicas))
	s.next++
	return i
}

// Throttled records a read of the store throttled at now: the first one
// starts the spread over MinReplicas, each further one while it lasts
// multiplies it by Growth.
func (s *Spread) Throttled(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replicas == 0 || !now.Before(s.until) {
		s.replicas = MinReplicas
	} else {
		s.replicas = min(s.replicas*Growth, MaxReplicas)
	}
	s.until = now.Add(Hold)
}

// Saw records an epoch the store wrote, was answered by a write, or read
// from a replica, so that a replica of an older one never answers later.
func (s *Spread) Saw(epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch = max(s.epoch, epoch)
}

// Read records the epoch of the state item as the store read it: what
// the table holds now, even if lower (a table recreated).
func (s *Spread) Read(epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch = epoch
}

// Fresh reports whether a replica of epoch, copied at copiedAt, may answer
// a Load at now: it is dated within MaxAge of now (either way: another
// environment's clock dated it) and holds no older epoch than the store has
// seen, so that a store never reads its own writes undone.
func (s *Spread) Fresh(epoch uint64, copiedAt, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := now.Sub(copiedAt)
	return epoch >= s.epoch && d <= MaxAge && d >= -MaxAge
}

// Replaces reports whether a copy dated now may replace one dated
// copiedAt: one dated earlier, or so far ahead (more than MaxAge) that
// only a clock running fast can have dated it.
func Replaces(copiedAt, now time.Time) bool {
	return copiedAt.Before(now) || copiedAt.After(now.Add(MaxAge))
}
