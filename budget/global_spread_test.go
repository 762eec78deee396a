package budget_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
)

// spreadProbe drives one Global whose spread sizes itself (Shards zero)
// through store contacts in simulated time, a contact every 4 s (past
// any next contact, D × U(0.5, 1.5) with D = 2.5 s), each funded by its
// own 10 requests.
type spreadProbe struct {
	t   *testing.T
	ts  *throttlingStore
	rec *recStore
	g   *budget.Global
	now time.Time
}

func newSpreadProbe(t *testing.T) *spreadProbe {
	ts := &throttlingStore{Store: newMapStore()}
	rec := newRecStore(ts)
	// Rand walks [0, 1) evenly (the fractions of i × the golden ratio),
	// so that a few contacts show the spread.
	i := 0
	golden := func() float64 { i++; return math.Mod(float64(i)*0.6180339887498949, 1) }
	return &spreadProbe{t: t, ts: ts, rec: rec, g: newGlobal(t, rec, budget.GlobalConfig{Rand: golden}), now: t0}
}

// contacts makes n contacts and returns the smallest and the largest
// shard they wrote to, failing the test if a write's Floor is not the
// whole Floor on shard 0 and zero elsewhere.
func (p *spreadProbe) contacts(n int, throttled bool) (bottom, top int) {
	p.t.Helper()
	p.ts.set(throttled)
	bottom, top = math.MaxInt, -1
	for range n {
		p.now = p.now.Add(4 * time.Second)
		record(p.g, p.now, 10)
		acquire(p.t, p.g, p.now)
		c := p.rec.Calls()[p.rec.NumCalls()-1]
		bottom, top = min(bottom, c.Key.Shard), max(top, c.Key.Shard)
		want := int64(0)
		if c.Key.Shard == 0 {
			want = 3 * unit
		}
		if c.Update.Floor != want {
			p.t.Fatalf("write to shard %d with Floor %d, want %d (the whole Floor on shard 0 only)", c.Key.Shard, c.Update.Floor, want)
		}
	}
	p.ts.set(false)
	return bottom, top
}

// TestGlobalSpreadSizesItself is the rule of a Global with Shards zero: it
// writes to shard 0 alone until a store call is throttled; each throttle
// spreads its writes over eight times as many other shards (1 to 8, 1 to
// 64, then 1 to 256 at most); six windows without a throttle halve the
// spread.
func TestGlobalSpreadSizesItself(t *testing.T) {
	p := newSpreadProbe(t)
	if bottom, top := p.contacts(30, false); bottom != 0 || top != 0 {
		t.Fatalf("never throttled, writes went to shards %d to %d; want shard 0 only", bottom, top)
	}
	for _, want := range []int{8, 64, 256, 256} {
		p.contacts(1, true)
		// 14 contacts (56 s) stay within six windows of the throttle.
		if bottom, top := p.contacts(14, false); bottom < 1 || top > want || top <= want/4 {
			t.Fatalf("after a throttle: writes to shards %d to %d, want shards 1 to %d", bottom, top, want)
		}
	}
	// The spread halves once per six windows without a throttle: 256, 128,
	// 64, ..., back to shard 0 alone after eight halvings.
	p.contacts(1, false) // past six windows since the last throttle
	if bottom, top := p.contacts(14, false); bottom < 1 || top > 128 || top <= 32 {
		t.Fatalf("six quiet windows later: writes to shards %d to %d, want shards 1 to 128", bottom, top)
	}
	p.contacts(15*7, false)
	if bottom, top := p.contacts(10, false); bottom != 0 || top != 0 {
		t.Fatalf("long quiet: writes to shards %d to %d, want shard 0 alone", bottom, top)
	}
	if st := p.g.Stats(); st.Throttled != 4 {
		t.Errorf("Throttled %d, want 4", st.Throttled)
	}
}

// TestGlobalSpreadNeverMultipliesTheFloor: environments whose spreads
// differ (each throttled a different number of times) share one window with
// no requests; the whole fleet gets at most Floor retries, as with a
// single shard.
func TestGlobalSpreadNeverMultipliesTheFloor(t *testing.T) {
	shared := newMapStore()
	var gs []*budget.Global
	var stores []*throttlingStore
	for e := range 6 {
		ts := &throttlingStore{Store: shared}
		r := rand.New(rand.NewPCG(uint64(e), 7))
		g := newGlobal(t, ts, budget.GlobalConfig{Floor: 5, Rand: r.Float64})
		ts.set(true)
		for i := range e % 4 { // spreads 1, 8, 64, 256, 1, 8
			acquire(t, g, t0.Add(time.Duration(4*i)*time.Second))
		}
		ts.set(false)
		gs, stores = append(gs, g), append(stores, ts)
	}
	// A later window, asked again and again by every environment.
	start := t0.Add(time.Minute)
	granted := 0
	for i := range 200 {
		now := start.Add(time.Duration(i) * 40 * time.Millisecond)
		for _, g := range gs {
			if _, ok := acquire(t, g, now); ok {
				granted++
			}
		}
	}
	if granted > 5 || granted == 0 {
		t.Errorf("%d retries granted without requests; want 1 to Floor = 5", granted)
	}
}
