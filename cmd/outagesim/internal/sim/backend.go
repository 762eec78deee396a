package sim

import (
	"context"
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
	return Stores{
		Budget:  bs,
		Breaker: cs,
		Usage: func() StoreUsage {
			return StoreUsage{Reads: bs.Reads() + cs.Reads(), Writes: bs.Writes() + cs.Writes()}
		},
		Capacity: func() CapacityUse { return capacityUse(meter.Stats()) },
	}, nil
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
