package sim

import (
	"context"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/memstore"
)

// Stores are the shared stores of one strategy run: every environment's
// global budget and breaker goes through them.
type Stores struct {
	Budget  budget.Store
	Breaker breaker.Store
	// BreakerFor, if not nil, returns the store an environment uses for
	// the breaker's items: one of its own over the same items, as each
	// environment has a dynamo store of its own. Nil means Breaker.
	BreakerFor func() breaker.Store
	// Usage returns the store calls made so far through these stores.
	Usage func() StoreUsage
	// Capacity, if not nil, returns what DynamoDB's capacity model billed
	// and throttled so far.
	Capacity func() CapacityUse
}

// Backend makes the shared stores of the global strategies.
type Backend interface {
	// Stores returns fresh stores for one strategy run (their own counters;
	// for DynamoDB, the process's table and client). now is the run's
	// simulated clock.
	Stores(ctx context.Context, now func() time.Time) (Stores, error)
	// Close releases what the backend holds.
	Close(ctx context.Context) error
}

// MemoryBackend shares stores in process memory: memstore's BudgetStore and
// BreakerStore, which answer as the DynamoDB stores do, billed by
// DynamoDB's capacity model and throttled at its per-item limits (1,000
// write units and 3,000 read units per second on one item), in simulated
// seconds.
type MemoryBackend struct{}

// Stores returns a fresh in-memory budget store and breaker store sharing
// one capacity meter, as they would share one DynamoDB table.
func (MemoryBackend) Stores(_ context.Context, now func() time.Time) (Stores, error) {
	meter := capacity.NewMeter(capacity.Config{Throttle: true})
	opts := memstore.Options{Now: now, Meter: meter}
	bs := memstore.NewBudgetStore(opts)
	cs := memstore.NewBreakerStore(opts)
	clients := new(breakerClients)
	return Stores{
		Budget:  bs,
		Breaker: cs,
		BreakerFor: func() breaker.Store {
			c := cs.Client()
			clients.add(c)
			return c
		},
		Usage: func() StoreUsage {
			r, w := clients.counts()
			return StoreUsage{Reads: bs.Reads() + cs.Reads() + r, Writes: bs.Writes() + cs.Writes() + w}
		},
		Capacity: func() CapacityUse { return capacityUse(meter.Stats()) },
	}, nil
}

// breakerClients are the environments' Clients of one breaker store, for
// their call counts.
type breakerClients struct {
	mu sync.Mutex
	cs []*memstore.BreakerStore
}

func (c *breakerClients) add(s *memstore.BreakerStore) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cs = append(c.cs, s)
}

// counts returns the Clients' reads and writes so far.
func (c *breakerClients) counts() (reads, writes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.cs {
		reads += s.Reads()
		writes += s.Writes()
	}
	return reads, writes
}

// Close does nothing.
func (MemoryBackend) Close(context.Context) error { return nil }

// capacityUse converts the meter's totals.
func capacityUse(s capacity.Stats) CapacityUse {
	return CapacityUse{
		PeakItemWriteUnits: s.PeakItemWriteUnits, HottestWriteItem: s.HottestWriteItem,
		PeakItemReadUnits: s.PeakItemReadUnits, HottestReadItem: s.HottestReadItem,
		Throttled: s.Throttled(), ThrottledWrites: s.ThrottledWrites, ThrottledReads: s.ThrottledReads,
		WriteUnits: s.WriteUnits, ReadUnits: s.ReadUnits, LargestItem: s.LargestItem,
	}
}
