package budgettest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/names"
)

// CallTimeout bounds every store call the suite makes.
const CallTimeout = 5 * time.Second

// windowLen is the window length the suite pretends to use for keys.
const windowLen = 10 * time.Second

// Run runs the conformance suite against stores made by newStore, which is
// called once per subtest with the subtest's t (register cleanups there).
func Run(t *testing.T, newStore func(t *testing.T) budget.Store) {
	t.Helper()
	s := &suite{newStore: newStore, run: fmt.Sprintf("bt%08x", rand.Uint32())}
	t.Run("FloorInitialisesMissingItem", s.floorInitialisesMissingItem)
	t.Run("DepositAndTake", s.depositAndTake)
	t.Run("RefusalLeavesItemUnchanged", s.refusalLeavesItemUnchanged)
	t.Run("KeysAreIndependent", s.keysAreIndependent)
	t.Run("ConcurrentTakesGrantExactly", s.concurrentTakesGrantExactly)
	t.Run("LargeValues", s.largeValues)
	t.Run("CanceledContext", s.canceledContext)
	t.Run("InvalidNameRejected", s.invalidNameRejected)
}

type suite struct {
	newStore func(t *testing.T) budget.Store
	run      string // unique to this Run, part of every name

	mu   sync.Mutex
	keys int
}

// key returns a key with a name unique to the run, in the current window
// (close to real time, so that stores with a TTL keep the items).
func (s *suite) key(t *testing.T) budget.Key {
	s.mu.Lock()
	s.keys++
	n := s.keys
	s.mu.Unlock()
	sub := t.Name()
	if i := strings.LastIndexByte(sub, '/'); i >= 0 {
		sub = sub[i+1:]
	}
	name := fmt.Sprintf("%s.%s.%d", s.run, sanitize(sub), n)
	if len(name) > names.MaxLen {
		name = name[:names.MaxLen]
	}
	if err := names.Validate(name); err != nil {
		t.Fatalf("budgettest: generated an invalid name: %v", err)
	}
	window := time.UnixMilli(time.Now().UnixMilli()).Truncate(windowLen)
	return budget.Key{Name: name, Shard: 0, Window: window}
}

// sanitize replaces the characters the name rule (internal/names) rejects.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ':':
			return r
		}
		return '_'
	}, s)
}

// update returns an Update with the given amounts expiring an hour after
// the key's window.
func update(k budget.Key, floor, deposit, take int64) budget.Update {
	return budget.Update{Floor: floor, Deposit: deposit, Take: take, Expires: k.Window.Add(time.Hour)}
}

func apply(t *testing.T, st budget.Store, k budget.Key, u budget.Update) (int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), CallTimeout)
	defer cancel()
	return st.Apply(ctx, k, u)
}

// mustApply applies u and fails the test unless it succeeds with want.
func mustApply(t *testing.T, st budget.Store, k budget.Key, u budget.Update, want int64) {
	t.Helper()
	got, err := apply(t, st, k, u)
	if err != nil {
		t.Fatalf("Apply(%s, floor %d deposit %d take %d): unexpected error: %v", k, u.Floor, u.Deposit, u.Take, err)
	}
	if got != want {
		t.Fatalf("Apply(%s, floor %d deposit %d take %d) = %d, want %d", k, u.Floor, u.Deposit, u.Take, got, want)
	}
}

// mustRefuse applies u and fails the test unless it is refused with
// ErrInsufficient reporting want as the current allowance.
func mustRefuse(t *testing.T, st budget.Store, k budget.Key, u budget.Update, want int64) {
	t.Helper()
	got, err := apply(t, st, k, u)
	if !errors.Is(err, budget.ErrInsufficient) {
		t.Fatalf("Apply(%s, floor %d deposit %d take %d) = %d, %v; want an error satisfying errors.Is(err, budget.ErrInsufficient)", k, u.Floor, u.Deposit, u.Take, got, err)
	}
	if got != want {
		t.Fatalf("refused Apply(%s, floor %d deposit %d take %d) reported allowance %d, want the current %d", k, u.Floor, u.Deposit, u.Take, got, want)
	}
}

func (s *suite) floorInitialisesMissingItem(t *testing.T) {
	st := s.newStore(t)

	k := s.key(t)
	mustApply(t, st, k, update(k, 5, 0, 0), 5)
	// Once the item exists its Floor no longer matters.
	mustApply(t, st, k, update(k, 100, 0, 1), 4)

	// A first update may take from the floor at once.
	k2 := s.key(t)
	mustApply(t, st, k2, update(k2, 3, 0, 1), 2)
	mustApply(t, st, k2, update(k2, 3, 0, 0), 2)

	// A floor and a deposit add up on creation.
	k3 := s.key(t)
	mustApply(t, st, k3, update(k3, 2, 4, 1), 5)

	// A zero floor creates an item holding zero.
	k4 := s.key(t)
	mustApply(t, st, k4, update(k4, 0, 0, 0), 0)
	mustRefuse(t, st, k4, update(k4, 9, 0, 1), 0)
}

func (s *suite) depositAndTake(t *testing.T) {
	st := s.newStore(t)
	k := s.key(t)
	mustApply(t, st, k, update(k, 0, 10, 0), 10)
	mustApply(t, st, k, update(k, 0, 0, 3), 7)
	mustApply(t, st, k, update(k, 0, 2, 4), 5)
	mustApply(t, st, k, update(k, 0, 0, 5), 0) // down to exactly zero is allowed
	mustApply(t, st, k, update(k, 0, 1, 0), 1)
	mustApply(t, st, k, update(k, 0, 3, 3), 1) // a deposit covers the take in the same update
}

func (s *suite) refusalLeavesItemUnchanged(t *testing.T) {
	st := s.newStore(t)

	k := s.key(t)
	mustApply(t, st, k, update(k, 0, 5, 0), 5)
	mustRefuse(t, st, k, update(k, 0, 0, 6), 5)
	// A refused update applies none of its parts, the deposit included.
	mustRefuse(t, st, k, update(k, 0, 1, 7), 5)
	mustApply(t, st, k, update(k, 0, 0, 0), 5)
	mustApply(t, st, k, update(k, 0, 0, 5), 0)
	mustRefuse(t, st, k, update(k, 0, 0, 1), 0)

	// A refusal on a missing item reports the floor and does not create
	// the item: a later update starts from its own floor.
	k2 := s.key(t)
	mustRefuse(t, st, k2, update(k2, 2, 0, 3), 2)
	mustApply(t, st, k2, update(k2, 7, 0, 0), 7)
}

func (s *suite) keysAreIndependent(t *testing.T) {
	st := s.newStore(t)
	base := s.key(t)
	other := s.key(t)
	variants := map[string]budget.Key{
		"name":   {Name: other.Name, Shard: base.Shard, Window: base.Window},
		"shard":  {Name: base.Name, Shard: base.Shard + 1, Window: base.Window},
		"window": {Name: base.Name, Shard: base.Shard, Window: base.Window.Add(windowLen)},
	}
	mustApply(t, st, base, update(base, 0, 10, 0), 10)
	for what, k := range variants {
		got, err := apply(t, st, k, update(k, 0, 1, 0))
		if err != nil || got != 1 {
			t.Fatalf("Apply to a key differing from %s only in %s = %d, %v; want 1, <nil> (keys must not share items)", base, what, got, err)
		}
	}
	mustApply(t, st, base, update(base, 0, 0, 0), 10)
	for what, k := range variants {
		got, err := apply(t, st, k, update(k, 0, 0, 0))
		if err != nil || got != 1 {
			t.Fatalf("key differing in %s holds %d, %v after the updates; want 1, <nil>", what, got, err)
		}
	}
}

func (s *suite) concurrentTakesGrantExactly(t *testing.T) {
	const (
		workers   = 10
		perWorker = 5
		allowance = 20
	)
	st := s.newStore(t)
	k := s.key(t)
	mustApply(t, st, k, update(k, allowance, 0, 0), allowance)

	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		granted, refused  int
		unexpected        []error
		reportedNegatives int
	)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				got, err := apply(t, st, k, update(k, allowance, 0, 1))
				mu.Lock()
				switch {
				case err == nil:
					granted++
					if got < 0 {
						reportedNegatives++
					}
				case errors.Is(err, budget.ErrInsufficient):
					refused++
				default:
					unexpected = append(unexpected, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("%d concurrent takes failed with unexpected errors, first: %v", len(unexpected), unexpected[0])
	}
	if granted != allowance || refused != workers*perWorker-allowance {
		t.Fatalf("%d concurrent takes of 1 from %d: granted %d, refused %d; want granted %d, refused %d",
			workers*perWorker, allowance, granted, refused, allowance, workers*perWorker-allowance)
	}
	if reportedNegatives > 0 {
		t.Fatalf("%d granted takes reported a negative allowance", reportedNegatives)
	}
	mustApply(t, st, k, update(k, allowance, 0, 0), 0)
}

func (s *suite) largeValues(t *testing.T) {
	st := s.newStore(t)
	k := s.key(t)
	const big = int64(1) << 50
	mustApply(t, st, k, update(k, 0, big, 0), big)
	mustApply(t, st, k, update(k, 0, 0, big-1), 1)
	mustRefuse(t, st, k, update(k, 0, 0, big), 1)
}

func (s *suite) canceledContext(t *testing.T) {
	st := s.newStore(t)
	k := s.key(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	got, err := st.Apply(ctx, k, update(k, 5, 0, 0))
	if err == nil {
		t.Fatalf("Apply with a canceled context = %d, <nil>; want an error", got)
	}
	if errors.Is(err, budget.ErrInsufficient) {
		t.Fatalf("Apply with a canceled context returned %v; a canceled call is a fault, not a refusal", err)
	}
}

func (s *suite) invalidNameRejected(t *testing.T) {
	st := s.newStore(t)
	valid := s.key(t)
	for _, name := range []string{"", "has#hash", "has space", "slash/", strings.Repeat("n", names.MaxLen+1)} {
		k := budget.Key{Name: name, Window: valid.Window}
		got, err := apply(t, st, k, update(k, 5, 0, 0))
		if err == nil {
			t.Fatalf("Apply with name %q = %d, <nil>; want an error (see budget.NewGlobal on names)", name, got)
		}
		if errors.Is(err, budget.ErrInsufficient) {
			t.Fatalf("Apply with name %q returned %v; an invalid name is not a refusal", name, err)
		}
	}
}
