package budget_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/memstore"
)

// t0 is the start of a 10-second window (and of a 1-minute one).
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// mapStore is the smallest budget.Store: the contract and nothing else.
type mapStore struct {
	mu    sync.Mutex
	items map[itemKey]int64
}

type itemKey struct {
	name   string
	shard  int
	window int64 // Unix milliseconds
}

func keyOf(k budget.Key) itemKey { return itemKey{k.Name, k.Shard, k.Window.UnixMilli()} }

func newMapStore() *mapStore { return &mapStore{items: make(map[itemKey]int64)} }

func (s *mapStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.items[keyOf(k)]
	if !ok {
		old = u.Floor
	}
	next := old + u.Deposit - u.Take
	if next < 0 {
		return old, fmt.Errorf("map store %v: %w", k, budget.ErrInsufficient)
	}
	s.items[keyOf(k)] = next
	return next, nil
}

// backends are the stores the behavioural tests run against.
var backends = []struct {
	name string
	new  func() budget.Store
}{
	{"map", func() budget.Store { return newMapStore() }},
	{"memstore", func() budget.Store {
		// The test clock, not the wall clock, decides expiry.
		return memstore.NewBudgetStore(memstore.Options{Now: func() time.Time { return t0 }})
	}},
}

func forEachBackend(t *testing.T, f func(t *testing.T, newStore func() budget.Store)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.new) })
	}
}

// call is one Apply seen by a recStore.
type call struct {
	Key    budget.Key
	Update budget.Update
	Result int64
	Err    error
	// Applied reports whether the inner store applied the update.
	Applied bool
}

// faultMode says what a recStore does with one call.
type faultMode int

const (
	pass           faultMode = iota
	failBefore               // fail without reaching the store
	failAfterApply           // apply, then report a failure (a lost answer)
	throttle                 // refuse for lack of capacity, applying nothing
)

// recStore wraps a Store: it records every call, can inject faults, and
// keeps per-item totals of what was applied, so tests can check the
// store-level invariant (taken <= floor + deposited) and that no deposit
// was applied twice.
type recStore struct {
	inner budget.Store

	mu    sync.Mutex
	calls []call
	fault func(k budget.Key, u budget.Update) faultMode // nil: pass
	items map[itemKey]*itemTotals
}

type itemTotals struct {
	floor, deposited, taken int64
}

func newRecStore(inner budget.Store) *recStore {
	return &recStore{inner: inner, items: make(map[itemKey]*itemTotals)}
}

var errInjected = fmt.Errorf("injected store fault: %w", context.DeadlineExceeded)

func (s *recStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	mode := pass
	s.mu.Lock()
	if s.fault != nil {
		mode = s.fault(k, u)
	}
	s.mu.Unlock()

	var (
		res     int64
		err     error
		applied bool
	)
	switch mode {
	case failBefore:
		err = errInjected
	case throttle:
		err = fmt.Errorf("budget %v: ProvisionedThroughputExceededException: %w", k, budget.ErrThrottled)
	default:
		res, err = s.inner.Apply(ctx, k, u)
		applied = err == nil
		if mode == failAfterApply {
			res, err = 0, errInjected
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call{Key: k, Update: u, Result: res, Err: err, Applied: applied})
	if applied {
		it := s.items[keyOf(k)]
		if it == nil {
			it = &itemTotals{floor: u.Floor}
			s.items[keyOf(k)] = it
		}
		it.deposited += u.Deposit
		it.taken += u.Take
	}
	return res, err
}

func (s *recStore) setFault(f func(k budget.Key, u budget.Update) faultMode) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

func (s *recStore) Calls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

func (s *recStore) NumCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// checkItems fails t if some item gave out more than its floor plus what
// was deposited into it.
func (s *recStore) checkItems(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, it := range s.items {
		if it.taken > it.floor+it.deposited {
			t.Errorf("item %v: taken %d > floor %d + deposited %d", k, it.taken, it.floor, it.deposited)
		}
	}
}

// windowTotals sums floor, deposits and takes applied to the items of
// each window (Unix milliseconds of the start).
func (s *recStore) windowTotals() map[int64]itemTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]itemTotals)
	for k, it := range s.items {
		w := out[k.window]
		w.floor += it.floor
		w.deposited += it.deposited
		w.taken += it.taken
		out[k.window] = w
	}
	return out
}

// storeFunc is a budget.Store made of a function.
type storeFunc func(ctx context.Context, k budget.Key, u budget.Update) (int64, error)

func (f storeFunc) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	return f(ctx, k, u)
}

// A Store that ignores its context or panics cannot hold a retry past
// StoreTimeout nor crash the caller: the Global treats either as a fault
// (ErrUnavailable).
func TestGlobalSurvivesAStoreThatIgnoresCtxOrPanics(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	for name, s := range map[string]storeFunc{
		"ignores ctx": func(context.Context, budget.Key, budget.Update) (int64, error) { <-stuck; return 0, nil },
		"panics":      func(context.Context, budget.Key, budget.Update) (int64, error) { panic("bad store") },
	} {
		t.Run(name, func(t *testing.T) {
			g, err := budget.NewGlobal(s, "partner", budget.GlobalConfig{StoreTimeout: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := g.AcquireRetry(context.Background(), t0, budget.Transient)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, budget.ErrUnavailable) {
					t.Errorf("AcquireRetry = %v; want an error satisfying ErrUnavailable", err)
				}
			case <-time.After(time.Minute): // a bound far above StoreTimeout, for a loaded machine
				t.Fatal("AcquireRetry still blocked a minute after StoreTimeout")
			}
		})
	}
}
