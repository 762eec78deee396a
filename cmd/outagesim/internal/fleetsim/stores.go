package fleetsim

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/memstore"
)

// Stores are the shared stores of a run, as one environment sees them:
// internal/memstore's stores shared by the whole fleet (one table, billed
// and throttled by DynamoDB's capacity model unless
// Config.NoCapacityModel), behind a thin layer that counts every request
// for the results.
type Stores struct {
	Budget  budget.Store
	Breaker breaker.Store
}

type storeKind uint8

const (
	budgetWrite storeKind = iota
	breakerRead
	breakerWrite
)

// shared are the fleet's stores and the capacity model billing them.
type shared struct {
	budget  budget.Store
	breaker breaker.Store
	// meters bill the budget store and the breaker store (nil: no
	// capacity model). DynamoDB limits each item on its own and the two
	// stores never share an item, so a Meter per store throttles exactly
	// as one for the table would, and tells the hottest budget item apart
	// from the hottest breaker item.
	meters [2]*capacity.Meter
}

// Indexes of shared.meters.
const (
	budgetMeter = iota
	breakerMeter
)

// newShared returns the in-memory stores on the simulated clock, billed by
// capacity.Meters that throttle hot items as DynamoDB does, unless metered
// is false.
func newShared(clock *Clock, metered bool) *shared {
	s := &shared{}
	opts := [2]memstore.Options{{Now: clock.Now}, {Now: clock.Now}}
	if metered {
		for i := range opts {
			s.meters[i] = capacity.NewMeter(capacity.Config{Throttle: true})
			opts[i].Meter = s.meters[i]
		}
	}
	s.budget = memstore.NewBudgetStore(opts[budgetMeter])
	s.breaker = memstore.NewBreakerStore(opts[breakerMeter])
	return s
}

// forEnv returns the stores as e sees them.
func (s *shared) forEnv(rec *recorder, e *env) Stores {
	return Stores{
		Budget: &budgetStore{inner: s.budget, rec: rec},
		// One breaker store for every environment, so one slot hint
		// (internal/slothint) guesses every Report's form. Each real
		// environment has a dynamo store, and hints, of its own (as
		// memstore.Client models, and cmd/outagesim uses): then the grid's
		// busiest cells guess wrong more often and bill about 1,000 WCU/s
		// on the state item, against 670–870 here.
		Breaker: &breakerStore{inner: s.breaker, rec: rec, env: e},
	}
}

type budgetStore struct {
	inner budget.Store
	rec   *recorder
}

func (s *budgetStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	a, err := s.inner.Apply(ctx, k, u)
	s.rec.storeCall(budgetWrite)
	return a, err
}

type breakerStore struct {
	inner breaker.Store
	rec   *recorder
	env   *env
}

func (s *breakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	snap, err := s.inner.Load(ctx, name)
	s.rec.storeCall(breakerRead)
	return snap, err
}

func (s *breakerStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	snap, err := s.inner.Report(ctx, name, r)
	s.rec.storeCall(breakerWrite)
	return snap, err
}

func (s *breakerStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	snap, err := s.inner.Transition(ctx, name, prevEpoch, next)
	s.rec.storeCall(breakerWrite)
	if err == nil {
		s.rec.transition(s.env, snap)
	}
	return snap, err
}

func (s *breakerStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	slot, err := s.inner.AcquireProbe(ctx, name, epoch, limit, now, leaseUntil)
	s.rec.storeCall(breakerWrite)
	return slot, err
}

func (s *breakerStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	err := s.inner.SetOverride(ctx, name, o, until)
	s.rec.storeCall(breakerWrite)
	return err
}
