package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/memstore"
)

// The sizes below are worked out by hand from DynamoDB's rules (attribute
// name bytes + value bytes; a string is its bytes, a string set the sum of
// its elements; a number 1 byte + 1 per pair of significant digits, the
// pairs aligned on the decimal point: 1,700,000,070 is 17|00|00|00|70, 6
// bytes, 2,100,000 is 02|10, 3 bytes) on the items package dynamo writes
// (docs/ARCHITECTURE.md, "DynamoDB item layout"). DynamoDB Local 3.3.1
// sizes strings, string sets and numbers exactly so (measured with
// ReturnConsumedCapacity at the 1 KB boundaries).

// meterDelta runs f and returns what the Meter billed meanwhile.
func meterDelta(m *capacity.Meter, f func()) capacity.Stats {
	before := m.Stats()
	f()
	after := m.Stats()
	return capacity.Stats{
		Writes: after.Writes - before.Writes, Reads: after.Reads - before.Reads,
		WriteUnits: after.WriteUnits - before.WriteUnits, ReadUnits: after.ReadUnits - before.ReadUnits,
		ThrottledWrites: after.ThrottledWrites - before.ThrottledWrites, ThrottledReads: after.ThrottledReads - before.ThrottledReads,
		LargestItem: after.LargestItem,
	}
}

func newMetered(cfg capacity.Config, now *time.Time) (*capacity.Meter, memstore.Options) {
	m := capacity.NewMeter(cfg)
	return m, memstore.Options{Meter: m, Now: func() time.Time { return *now }}
}

func TestBillingBudgetShard(t *testing.T) {
	now := t0
	m, o := newMetered(capacity.Config{}, &now)
	s := memstore.NewBudgetStore(o)
	ctx := context.Background()
	k := budget.Key{Name: "payments", Shard: 0, Window: t0} // t0 = 1,700,000,000,000 ms
	exp := t0.Add(70 * time.Second)                         // TTL 1,700,000,070 s

	// A refusal on a missing item is billed as a write of an empty item.
	d := meterDelta(m, func() {
		if _, err := s.Apply(ctx, k, budget.Update{Take: 1_000_000, Expires: exp}); !errors.Is(err, budget.ErrInsufficient) {
			t.Fatalf("Apply: %v, want ErrInsufficient", err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.LargestItem != 0 {
		t.Fatalf("a refused write on a missing item billed %+v; want 1 write, 1 unit, no item", d)
	}

	// pk "b#payments#0#1700000000000": 2 + 26 = 28
	// allowance 2,100,000 (02|10: 3 bytes): 9 + 3 = 12
	// expires 1,700,000,070 (17|00|00|00|70: 6 bytes): 7 + 6 = 13
	const shardBytes = 28 + 12 + 13 // 53
	d = meterDelta(m, func() {
		got, err := s.Apply(ctx, k, budget.Update{Floor: 3_000_000, Deposit: 100_000, Take: 1_000_000, Expires: exp})
		if err != nil || got != 2_100_000 {
			t.Fatalf("Apply = %d, %v", got, err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.LargestItem != shardBytes {
		t.Fatalf("creating the shard billed %+v; want 1 write of 1 unit on a %d-byte item", d, shardBytes)
	}
	// A refusal on the item as it stands: one unit again, item unchanged.
	d = meterDelta(m, func() {
		if _, err := s.Apply(ctx, k, budget.Update{Take: 5_000_000, Expires: exp}); !errors.Is(err, budget.ErrInsufficient) {
			t.Fatalf("Apply: %v, want ErrInsufficient", err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.LargestItem != shardBytes {
		t.Fatalf("a refusal billed %+v", d)
	}
}

func TestBillingBreakerWindowGrowsWithReporters(t *testing.T) {
	window := t0                    // pk "c#partner#w#1700000000000": 2 + 25 = 27
	exp := t0.Add(80 * time.Second) // expires 1,700,000,080 s: 7 + 6 = 13
	for _, c := range []struct {
		idLen int
		// after the 200th Report (0 successes, 200 failures):
		// 27 (pk) + 10 (successes 0: 9 + 1) + 10 (failures 02|00: 8 + 2)
		// + 4 + 200 × idLen (envs) + 13 (expires)
		size, units int
	}{
		{48, 27 + 10 + 10 + 4 + 200*48 + 13, 10}, // 9,664 bytes: ceil(9,664 / 1,024) = 10
		{52, 27 + 10 + 10 + 4 + 200*52 + 13, 11}, // 10,464 bytes: issue 10's "10,465 bytes, 11 write units"
	} {
		t.Run(fmt.Sprintf("ids of %d bytes", c.idLen), func(t *testing.T) {
			now := t0
			m, o := newMetered(capacity.Config{}, &now)
			s := memstore.NewBreakerStore(o)
			ctx := context.Background()
			report := func(i int) (breaker.Tally, error) {
				id := fmt.Sprintf("env-%0*d", c.idLen-4, i)
				return s.Report(ctx, "partner", window, id, 0, 1, exp)
			}
			for i := range 199 {
				if _, err := report(i); err != nil {
					t.Fatal(err)
				}
			}
			var tally breaker.Tally
			d := meterDelta(m, func() {
				var err error
				if tally, err = report(199); err != nil {
					t.Fatal(err)
				}
			})
			if tally.Reporters != 200 || tally.Failures != 200 {
				t.Fatalf("tally %+v", tally)
			}
			if d.Writes != 1 || d.WriteUnits != float64(c.units) || d.LargestItem != c.size {
				t.Fatalf("the 200th Report billed %+v; want 1 write of %d units on a %d-byte item", d, c.units, c.size)
			}
			// A reporter already in the set adds no bytes; its counts
			// change the item by a byte at most: same price.
			d = meterDelta(m, func() {
				if _, err := report(0); err != nil {
					t.Fatal(err)
				}
			})
			if d.WriteUnits != float64(c.units) {
				t.Fatalf("a repeated reporter billed %v units, want %d", d.WriteUnits, c.units)
			}
		})
	}
}

func TestBillingBreakerLoadTransitionProbe(t *testing.T) {
	now := t0
	m, o := newMetered(capacity.Config{}, &now)
	s := memstore.NewBreakerStore(o)
	ctx := context.Background()

	// A breaker never written: two missing items, each billed as an empty
	// one, eventually consistent: 2 × 0.5.
	d := meterDelta(m, func() {
		if _, err := s.Load(ctx, "partner"); err != nil {
			t.Fatal(err)
		}
	})
	if d.Reads != 2 || d.ReadUnits != 1 || d.Writes != 0 {
		t.Fatalf("Load of nothing billed %+v; want 2 item reads, 1 read unit", d)
	}

	// Transition from epoch 0: one write on the state item, then a read of
	// the override item (missing: 0.5).
	// pk "c#partner": 2 + 9 = 11; state "open": 5 + 4 = 9; epoch 1: 5 + 2 = 7;
	// reopens 1: 7 + 2 = 9; open_until 1,700,000,030,000 ms (1|70|00|00|03): 10 + 6 = 16.
	const stateBytes = 11 + 9 + 7 + 9 + 16 // 52
	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, Reopens: 1, OpenUntil: t0.Add(30 * time.Second)}
	d = meterDelta(m, func() {
		if _, err := s.Transition(ctx, "partner", 0, open); err != nil {
			t.Fatal(err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.Reads != 1 || d.ReadUnits != 0.5 || d.LargestItem != stateBytes {
		t.Fatalf("Transition billed %+v; want 1 unit on a %d-byte item and 0.5 read units", d, stateBytes)
	}
	// A conflict is billed the same (on the item as it stands).
	d = meterDelta(m, func() {
		if _, err := s.Transition(ctx, "partner", 0, open); !errors.Is(err, breaker.ErrConflict) {
			t.Fatalf("Transition: %v, want ErrConflict", err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.Reads != 1 || d.ReadUnits != 0.5 {
		t.Fatalf("a conflicting Transition billed %+v", d)
	}

	// pk "c#partner#override": 2 + 18 = 20; override "force-open": 8 + 10 = 18;
	// until 1,700,000,005,000 ms (1|70|00|00|00|50): 5 + 7 = 12; expires a
	// day later, 1,700,086,405 s (17|00|08|64|05): 7 + 6 = 13.
	const overrideBytes = 20 + 18 + 12 + 13 // 63
	d = meterDelta(m, func() {
		if err := s.SetOverride(ctx, "partner", breaker.ForcedOpen, t0.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.LargestItem != overrideBytes {
		t.Fatalf("SetOverride billed %+v; want 1 unit on a %d-byte item", d, overrideBytes)
	}

	// Load: 52 and 63 bytes, each rounded up to 4 KB separately and
	// halved: 0.5 + 0.5 (one 115-byte item would cost 0.5).
	d = meterDelta(m, func() {
		if _, err := s.Load(ctx, "partner"); err != nil {
			t.Fatal(err)
		}
	})
	if d.Reads != 2 || d.ReadUnits != 1 {
		t.Fatalf("Load billed %+v; want 2 item reads, 1 read unit", d)
	}

	// AcquireProbe with slots 0 and 1 held: three conditional writes (two
	// refused, one applied), as the dynamo store tries one slot per write.
	lease := t0.Add(10 * time.Second)
	for range 2 {
		if _, err := s.AcquireProbe(ctx, "partner", 2, 3, t0, lease); err != nil {
			t.Fatal(err)
		}
	}
	d = meterDelta(m, func() {
		if slot, err := s.AcquireProbe(ctx, "partner", 2, 3, t0, lease); err != nil || slot != 2 {
			t.Fatalf("AcquireProbe = %d, %v", slot, err)
		}
	})
	if d.Writes != 3 || d.WriteUnits != 3 {
		t.Fatalf("AcquireProbe of the third slot billed %+v; want 3 writes", d)
	}
	d = meterDelta(m, func() {
		if _, err := s.AcquireProbe(ctx, "partner", 2, 3, t0, lease); !errors.Is(err, breaker.ErrProbeDenied) {
			t.Fatalf("AcquireProbe: %v, want ErrProbeDenied", err)
		}
	})
	if d.Writes != 3 || d.WriteUnits != 3 {
		t.Fatalf("a denied AcquireProbe billed %+v; want limit = 3 writes", d)
	}
}

// A hot item is throttled at exactly 1,000 write units and 3,000 read units
// per (simulated) second, another item in the same second is not, and a
// throttled request applies nothing and answers an error the layers above
// recognise.
func TestThrottleHotItemAtTheLimits(t *testing.T) {
	ctx := context.Background()
	t.Run("budget shard writes", func(t *testing.T) {
		now := t0
		m, o := newMetered(capacity.Config{Throttle: true}, &now)
		s := memstore.NewBudgetStore(o)
		hot := budget.Key{Name: "p", Shard: 0, Window: t0}
		var applied int
		var err error
		for i := range 1001 {
			now = t0.Add(time.Duration(i) * 900 * time.Microsecond) // 1,001 writes within 0.9 s
			if _, err = s.Apply(ctx, hot, budget.Update{Deposit: 1, Expires: t0.Add(time.Minute)}); err != nil {
				break
			}
			applied++
		}
		if applied != capacity.ItemWriteUnitsPerSecond {
			t.Fatalf("%d one-unit writes applied in one second before %v; want %d", applied, err, capacity.ItemWriteUnitsPerSecond)
		}
		if !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, capacity.ErrThrottled) || errors.Is(err, budget.ErrInsufficient) {
			t.Fatalf("the 1,001st write: %v; want budget.ErrThrottled", err)
		}
		if got, err := s.Apply(ctx, budget.Key{Name: "p", Shard: 1, Window: t0}, budget.Update{Deposit: 1, Expires: t0.Add(time.Minute)}); err != nil || got != 1 {
			t.Fatalf("another item in the hot second: %d, %v", got, err)
		}
		now = t0.Add(time.Second)
		// The throttled deposit was not applied: 1,000 deposits of 1, plus this one.
		if got, err := s.Apply(ctx, hot, budget.Update{Deposit: 1, Expires: t0.Add(time.Minute)}); err != nil || got != 1001 {
			t.Fatalf("the next second: %d, %v; want 1001", got, err)
		}
		if st := m.Stats(); st.PeakItemWriteUnits != 1000 || st.ThrottledWrites != 1 || !strings.HasPrefix(st.HottestWriteItem, "b#p#0#") {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("breaker state reads", func(t *testing.T) {
		now := t0
		m, o := newMetered(capacity.Config{Throttle: true}, &now)
		s := memstore.NewBreakerStore(o)
		// Each Load reads the state item for 0.5 units: 6,000 fit in a second.
		var loads int
		var err error
		for i := range 6001 {
			now = t0.Add(time.Duration(i) * 150 * time.Microsecond)
			if _, err = s.Load(ctx, "hot"); err != nil {
				break
			}
			loads++
		}
		if loads != 2*capacity.ItemReadUnitsPerSecond {
			t.Fatalf("%d Loads in one second before %v; want %d", loads, err, 2*capacity.ItemReadUnitsPerSecond)
		}
		if !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
			t.Fatalf("Load past the limit: %v; want budget.ErrThrottled and breaker.ErrStore", err)
		}
		if _, err := s.Load(ctx, "cold"); err != nil {
			t.Fatalf("another breaker in the hot second: %v", err)
		}
		if st := m.Stats(); st.PeakItemReadUnits != 3000 || st.ThrottledReads != 2 {
			// The 6,001st Load was refused on both items.
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("breaker window writes by size", func(t *testing.T) {
		now := t0
		m, o := newMetered(capacity.Config{Throttle: true}, &now)
		s := memstore.NewBreakerStore(o)
		exp := t0.Add(time.Minute)
		// A 10-unit window item (200 reporters of 48 bytes, see above) takes
		// 100 Reports a second. Fill it over two seconds, report the third.
		for i := range 200 {
			now = t0.Add(time.Duration(i) * 10 * time.Millisecond)
			if _, err := s.Report(ctx, "p", t0, fmt.Sprintf("env-%044d", i), 0, 1, exp); err != nil {
				t.Fatal(err)
			}
		}
		now = t0.Add(2 * time.Second)
		var reports int
		var err error
		for i := range 101 {
			if _, err = s.Report(ctx, "p", t0, fmt.Sprintf("env-%044d", i), 0, 1, exp); err != nil {
				break
			}
			reports++
		}
		if reports != 100 || !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
			t.Fatalf("%d Reports of a 10-unit item in one second, then %v; want 100, then a throttle", reports, err)
		}
		if tally, err := s.Report(ctx, "q", t0, "env", 0, 1, exp); err != nil || tally.Reporters != 1 {
			t.Fatalf("another breaker's window in the hot second: %+v, %v", tally, err)
		}
		now = t0.Add(3 * time.Second)
		tally, err := s.Report(ctx, "p", t0, "env-x", 1, 0, exp)
		if err != nil || tally.Failures != 300 || tally.Successes != 1 {
			t.Fatalf("the next second: %+v, %v; want 300 failures (the throttled Report not applied)", tally, err)
		}
		if st := m.Stats(); st.PeakItemWriteUnits != 1000 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A Report that would take the window item past 400 KB fails as DynamoDB's
// ValidationException would, and changes nothing.
func TestReportPastTheItemSizeLimit(t *testing.T) {
	now := t0
	m, o := newMetered(capacity.Config{}, &now)
	s := memstore.NewBreakerStore(o)
	ctx := context.Background()
	exp := t0.Add(80 * time.Second)
	// 27 (pk) + 10 (successes 0) + 11 (failures 1,000 to 1,599: 15|99, 3
	// bytes) + 4 (envs) + 13 (expires) = 65 bytes besides 256 per
	// reporter: 65 + 256 n ≤ 409,600 for n ≤ 1,599.
	var n int
	var err error
	for i := range 2000 {
		if _, err = s.Report(ctx, "partner", t0, fmt.Sprintf("%0256d", i), 0, 1, exp); err != nil {
			break
		}
		n++
	}
	if n != 1599 {
		t.Fatalf("%d reporters of 256 bytes fit, want 1,599", n)
	}
	if !errors.Is(err, capacity.ErrItemTooLarge) || !errors.Is(err, breaker.ErrStore) || errors.Is(err, budget.ErrThrottled) {
		t.Fatalf("the 1,600th Report: %v; want ErrItemTooLarge, a store error, not a throttle", err)
	}
	if st := m.Stats(); st.TooLarge != 1 || st.LargestItem != 65+256*1599 {
		t.Fatalf("stats %+v", st)
	}
	tally, err := s.Report(ctx, "partner", t0, fmt.Sprintf("%0256d", 0), 0, 0, exp)
	if err != nil || tally.Reporters != 1599 || tally.Failures != 1599 {
		t.Fatalf("after the refused Report: %+v, %v; want it not applied", tally, err)
	}
}
