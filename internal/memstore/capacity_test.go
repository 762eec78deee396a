package memstore_test

import (
	"context"
	"errors"
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

// Reports are billed as the dynamo store's conditional writes of the state
// item: one when the form guessed from the Client's last answers is right,
// two when the slot held another bucket (the refusal billed on the item as
// it stands), one refused write for a conflict or a late report without a
// watch.
func TestBillingBreakerReport(t *testing.T) {
	now := t0
	m, o := newMetered(capacity.Config{}, &now)
	a := memstore.NewBreakerStore(o)
	b := a.Client()
	ctx := context.Background()
	const n = 1_700_000_004 // slot 4
	watch := t0.Add(20 * time.Second)
	report := func(s *memstore.BreakerStore, r breaker.Report, wantWrites int) breaker.Snapshot {
		t.Helper()
		var snap breaker.Snapshot
		d := meterDelta(m, func() {
			var err error
			if snap, err = s.Report(ctx, "partner", r); err != nil && !errors.Is(err, breaker.ErrConflict) {
				t.Fatal(err)
			}
		})
		if d.Writes != int64(wantWrites) || d.WriteUnits != float64(wantWrites) || d.Reads != 0 {
			t.Fatalf("Report(%+v) billed %+v; want %d writes of one unit, no read", r, d, wantWrites)
		}
		return snap
	}

	// The first report creates the item, closed at epoch 0:
	// pk "c#partner": 2 + 9 = 11; state "closed": 5 + 6 = 11; epoch 0: 5 + 1 = 6;
	// watch_until 1,700,000,020,000 ms (1|70|00|00|02): 11 + 6 = 17;
	// b4 1,700,000,004 (17|00|00|00|04): 2 + 6 = 8; r4 4, s4 1, f4 2, n4 3: 4 × (2 + 2) = 16.
	const firstBytes = 11 + 11 + 6 + 17 + 8 + 16 // 69
	d := meterDelta(m, func() {
		report(a, breaker.Report{Bucket: n, Requests: 4, Successes: 1, Failures: 2, Samples: 3, WatchUntil: watch}, 1)
	})
	if d.LargestItem != firstBytes {
		t.Fatalf("the first Report made a %d-byte item, want %d", d.LargestItem, firstBytes)
	}
	// Client a saw the slot hold bucket n: it adds at once. Client b,
	// which has seen nothing, guesses reset, is refused, adds: two
	// writes. It learns that others start buckets, so for bucket n+1 it
	// guesses add, is refused (the slot is empty) and resets: two again;
	// then adds to n+1 at once.
	report(a, breaker.Report{Bucket: n, Requests: 1, Successes: 1, Samples: 1}, 1)
	report(b, breaker.Report{Bucket: n, Requests: 1, Successes: 1, Samples: 1}, 2)
	report(b, breaker.Report{Bucket: n + 1, Requests: 1, Failures: 1, Samples: 1}, 2)
	snap := report(b, breaker.Report{Bucket: n + 1, Requests: 1, Failures: 1, Samples: 1}, 1)
	// Client a last saw slot 5 empty and started its last new bucket:
	// it guesses reset for n+1, is refused, adds.
	report(a, breaker.Report{Bucket: n + 1, Requests: 1, Failures: 1, Samples: 1}, 2)
	if got := snap.Buckets[4]; got != (breaker.Bucket{Num: n, Requests: 6, Successes: 3, Failures: 2, Samples: 5}) {
		t.Fatalf("slot 4 holds %+v", got)
	}
	// A late report: without a watch only the refusal is billed; with one,
	// known late, the watch alone.
	report(b, breaker.Report{Bucket: n - 10, Requests: 1, Successes: 1, Samples: 1}, 1)
	report(b, breaker.Report{Bucket: n - 10, Requests: 1, Successes: 1, Samples: 1, WatchUntil: watch.Add(time.Second)}, 1)
	// A report of an old epoch: one refused write, nothing applied.
	if _, err := a.Transition(ctx, "partner", 0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: t0.Add(30 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	after := report(b, breaker.Report{Bucket: n + 1, Requests: 1, Failures: 1, Samples: 1}, 1)
	if after.Epoch != 1 || after.Buckets != [breaker.FleetSlots]breaker.Bucket{} || !after.WatchUntil.Equal(watch.Add(time.Second)) {
		t.Fatalf("after the transition: %+v; want epoch 1, no buckets, the watch kept", after)
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

	// Transition from epoch 0: one write on the state item (the override
	// item is not read).
	// pk "c#partner": 2 + 9 = 11; state "open": 5 + 4 = 9; epoch 1: 5 + 2 = 7;
	// reopens 1: 7 + 2 = 9; open_until 1,700,000,030,000 ms (1|70|00|00|03): 10 + 6 = 16.
	const stateBytes = 11 + 9 + 7 + 9 + 16 // 52
	open := breaker.Snapshot{State: breaker.Open, Epoch: 1, Reopens: 1, OpenUntil: t0.Add(30 * time.Second)}
	d = meterDelta(m, func() {
		if _, err := s.Transition(ctx, "partner", 0, open); err != nil {
			t.Fatal(err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.Reads != 0 || d.ReadUnits != 0 || d.LargestItem != stateBytes {
		t.Fatalf("Transition billed %+v; want 1 unit on a %d-byte item and no read", d, stateBytes)
	}
	// A conflict is billed the same (on the item as it stands).
	d = meterDelta(m, func() {
		if _, err := s.Transition(ctx, "partner", 0, open); !errors.Is(err, breaker.ErrConflict) {
			t.Fatalf("Transition: %v, want ErrConflict", err)
		}
	})
	if d.Writes != 1 || d.WriteUnits != 1 || d.Reads != 0 || d.ReadUnits != 0 {
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
		if !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
			t.Fatalf("Load past the limit: %v; want budget.ErrThrottled, breaker.ErrThrottled and breaker.ErrStore", err)
		}
		if _, err := s.Load(ctx, "cold"); err != nil {
			t.Fatalf("another breaker in the hot second: %v", err)
		}
		if st := m.Stats(); st.PeakItemReadUnits != 3000 || st.ThrottledReads != 2 {
			// The 6,001st Load was refused on both items.
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("breaker state writes", func(t *testing.T) {
		now := t0
		m, o := newMetered(capacity.Config{Throttle: true}, &now)
		s := memstore.NewBreakerStore(o)
		// One Client adds to one bucket: one one-unit write per Report,
		// 1,000 a second.
		var reports int
		var err error
		for i := range 1001 {
			now = t0.Add(time.Duration(i) * 900 * time.Microsecond)
			if _, err = s.Report(ctx, "hot", breaker.Report{Bucket: 1, Requests: 1, Failures: 1, Samples: 1}); err != nil {
				break
			}
			reports++
		}
		if reports != capacity.ItemWriteUnitsPerSecond || !errors.Is(err, budget.ErrThrottled) || !errors.Is(err, breaker.ErrStore) {
			t.Fatalf("%d Reports in one second, then %v; want %d, then a throttle", reports, err, capacity.ItemWriteUnitsPerSecond)
		}
		if _, err := s.Report(ctx, "cold", breaker.Report{Bucket: 1, Requests: 1, Samples: 1}); err != nil {
			t.Fatalf("another breaker in the hot second: %v", err)
		}
		now = t0.Add(time.Second)
		snap, err := s.Report(ctx, "hot", breaker.Report{Bucket: 1})
		if err != nil || snap.Buckets[1].Failures != 1000 {
			t.Fatalf("the next second: %+v, %v; want 1,000 failures (the throttled Report not applied)", snap.Buckets[1], err)
		}
		if st := m.Stats(); st.PeakItemWriteUnits != 1000 || st.ThrottledWrites != 1 || st.HottestWriteItem != "c#hot" {
			t.Fatalf("stats %+v", st)
		}
	})
}
