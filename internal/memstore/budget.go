package memstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/names"
)

// BudgetStore is an in-memory budget.Store: the allowance of every window
// shard in a map behind a mutex. Its answers are those the DynamoDB store
// gives (window starts are kept to the millisecond, as in the DynamoDB key).
//
// Reads and Writes count calls (every Apply is a write). The zero value is
// not usable; call NewBudgetStore.
type BudgetStore struct {
	counters
	opts Options // immutable

	// mu guards items and sweep. Invariant: every stored allowance is
	// >= 0; an item is created only by an Apply that succeeds.
	mu    sync.Mutex
	items map[budgetKey]budgetItem
	sweep sweeper
}

// budgetKey is budget.Key made comparable: a time.Time with a location or
// a monotonic reading would not compare equal to the same instant without.
type budgetKey struct {
	name   string
	shard  int
	window int64 // Unix milliseconds
}

type budgetItem struct {
	allowance int64
	expires   time.Time
}

var _ budget.Store = (*BudgetStore)(nil)

// NewBudgetStore returns an empty in-memory budget.Store with the hooks of
// o.
func NewBudgetStore(o Options) *BudgetStore {
	return &BudgetStore{opts: o, items: make(map[budgetKey]budgetItem)}
}

// Apply implements budget.Store: old is the stored allowance or u.Floor,
// and the allowance becomes old + u.Deposit - u.Take unless that is
// negative, in which case nothing changes (a missing item stays missing)
// and Apply returns old with an error satisfying
// errors.Is(err, budget.ErrInsufficient). u.Expires replaces the item's
// expiry time on success.
//
// It fails without touching the store if ctx is done, if k.Name fails
// the name rule (internal/names), if k.Shard or a field of u is negative, or if the
// sum would overflow; and, with a Meter, if the write is throttled
// (errors.Is(err, budget.ErrThrottled)). A refusal is billed as a write
// of the item as it stands.
func (s *BudgetStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	s.writes.Add(1)
	if err := checkUpdate(k, u); err != nil {
		return 0, err
	}
	if err := s.opts.begin(ctx, OpApply); err != nil {
		return 0, fmt.Errorf("herdguard: local: budget store apply %s: %w", k, err)
	}
	key := budgetKey{name: k.Name, shard: k.Shard, window: k.Window.UnixMilli()}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.now()
	s.sweepLocked(now)
	item, ok := s.items[key]
	old := item.allowance
	if !ok {
		old = u.Floor
	}
	if u.Deposit > math.MaxInt64-old {
		return old, fmt.Errorf("herdguard: local: budget store apply %s: allowance %d plus deposit %d overflows", k, old, u.Deposit)
	}
	next := old + u.Deposit - u.Take
	updated := budgetItem{allowance: next, expires: toMilli(u.Expires)}
	if s.opts.Meter != nil {
		pk := layout.BudgetKey(k.Name, k.Shard, key.window)
		before := 0
		if ok {
			before = budgetItemSize(pk, item.allowance, item.expires)
		}
		after := before // a refusal is billed on the item as it stands
		if next >= 0 {
			after = budgetItemSize(pk, updated.allowance, updated.expires)
		}
		if err := s.opts.write(pk, now, before, after); err != nil {
			return 0, fmt.Errorf("herdguard: local: budget store apply %s: %w", k, err)
		}
	}
	if next < 0 {
		return old, fmt.Errorf("herdguard: local: budget store apply %s: %w: holds %d, deposit %d, take %d", k, budget.ErrInsufficient, old, u.Deposit, u.Take)
	}
	s.items[key] = updated
	return next, nil
}

func checkUpdate(k budget.Key, u budget.Update) error {
	if err := names.Validate(k.Name); err != nil {
		return fmt.Errorf("herdguard: local: budget store apply: %w", err)
	}
	var field string
	var v int64
	switch {
	case k.Shard < 0:
		field, v = "Key.Shard", int64(k.Shard)
	case u.Floor < 0:
		field, v = "Update.Floor", u.Floor
	case u.Deposit < 0:
		field, v = "Update.Deposit", u.Deposit
	case u.Take < 0:
		field, v = "Update.Take", u.Take
	default:
		return nil
	}
	return fmt.Errorf("herdguard: local: budget store apply %s: %s is %d; it must not be negative", k, field, v)
}

// sweepLocked drops expired items, at most once per sweepEvery. s.mu must
// be held.
func (s *BudgetStore) sweepLocked(now time.Time) {
	if !s.sweep.due(now) {
		return
	}
	for k, it := range s.items {
		if expired(it.expires, now) {
			delete(s.items, k)
		}
	}
}

// Len returns the number of items held (window shards not yet dropped).
func (s *BudgetStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}
