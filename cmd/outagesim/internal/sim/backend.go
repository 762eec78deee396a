package sim

import (
	"context"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/memstore"
)

// Stores are the shared stores of one strategy run: every environment's
// global budget and breaker goes through them.
type Stores struct {
	Budget  budget.Store
	Breaker breaker.Store
	// Usage returns the store calls made so far through these stores.
	Usage func() StoreUsage
}

// Backend makes the shared stores of the global strategies.
type Backend interface {
	// Stores returns fresh stores for one strategy run (their own counters;
	// for DynamoDB, the process's table and client).
	Stores(ctx context.Context) (Stores, error)
	// Close releases what the backend holds.
	Close(ctx context.Context) error
}

// MemoryBackend shares stores in process memory: memstore's BudgetStore and
// BreakerStore (package local's, with their counters), which answer as the
// DynamoDB stores do.
type MemoryBackend struct{}

// Stores returns a fresh in-memory budget store and breaker store.
func (MemoryBackend) Stores(context.Context) (Stores, error) {
	bs := memstore.NewBudgetStore(memstore.Options{})
	cs := memstore.NewBreakerStore(memstore.Options{})
	return Stores{
		Budget:  bs,
		Breaker: cs,
		Usage: func() StoreUsage {
			return StoreUsage{Reads: bs.Reads() + cs.Reads(), Writes: bs.Writes() + cs.Writes()}
		},
	}, nil
}

// Close does nothing.
func (MemoryBackend) Close(context.Context) error { return nil }
