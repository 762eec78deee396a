package ratio_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/budgetcheck"
	"github.com/herdguard/herdguard/internal/ratio"
)

var (
	t0         = time.UnixMilli(1_700_000_000_000)
	mustGrant  = budgetcheck.MustGrant
	mustRefuse = budgetcheck.MustRefuse
)

func mustRatio(t testing.TB, cfg ratio.Config) *ratio.Ratio {
	t.Helper()
	r, err := ratio.New(cfg)
	if err != nil {
		t.Fatalf("NewRatio(%+v): %v", cfg, err)
	}
	return r
}

func grants(r budget.Budget, now time.Time, asks int) int {
	n := 0
	for range asks {
		if rel, err := r.AcquireRetry(context.Background(), now, budget.Transient); err == nil {
			rel(budget.RetryFailed)
			n++
		}
	}
	return n
}

// Seed (2) of the retry-budget article.
func TestRatioSeedTenPercentThenFloor(t *testing.T) {
	r := mustRatio(t, ratio.Config{Ratio: 0.1, Window: 10 * time.Second, MinRetries: 3})
	for range 50 {
		r.RecordRequest(t0)
	}
	if got := grants(r, t0, 10); got != 5 {
		t.Fatalf("after 50 requests, 10 asks granted %d retries, want 5 (10%% of 50)", got)
	}
	// The window has moved on: the floor applies.
	mustGrant(t, r, t0.Add(11*time.Second), budget.Transient)
}

func TestRatioDefaults(t *testing.T) {
	r := mustRatio(t, ratio.Config{})
	if got := grants(r, t0, 10); got != 3 {
		t.Fatalf("an empty window granted %d retries, want the floor 3", got)
	}
	for range 100 {
		r.RecordRequest(t0)
	}
	if got := grants(r, t0, 20); got != 7 {
		t.Fatalf("after 100 requests and 3 retries, %d more granted, want 7 (10 in all)", got)
	}
}

func TestRatioSlidesOneSlotAtATime(t *testing.T) {
	r := mustRatio(t, ratio.Config{}) // 10 s in 1 s slots
	for range 40 {
		r.RecordRequest(t0) // slot 0
	}
	for range 60 {
		r.RecordRequest(t0.Add(4500 * time.Millisecond)) // slot 4
	}
	if got := grants(r, t0.Add(5*time.Second), 20); got != 10 {
		t.Fatalf("100 requests in the window: granted %d, want 10", got)
	}
	// At 9.999 s slot 0 is still in the window; at 10 s it leaves, with
	// its 40 requests: 60 requests allow 6, and the 10 retries (in slot 5)
	// still count.
	if got := grants(r, t0.Add(9999*time.Millisecond), 5); got != 0 {
		t.Fatalf("at 9.999 s: granted %d, want 0", got)
	}
	if req, ret := r.Counts(t0.Add(10 * time.Second)); req != 60 || ret != 10 {
		t.Fatalf("Counts at 10 s = %d requests, %d retries; want 60, 10", req, ret)
	}
	if got := grants(r, t0.Add(10*time.Second), 5); got != 0 {
		t.Fatalf("at 10 s: granted %d, want 0", got)
	}
	// At 15 s the retries of slot 5 leave; slot 4's 60 requests left at
	// 14 s. An empty window grants the floor.
	if req, ret := r.Counts(t0.Add(15 * time.Second)); req != 0 || ret != 0 {
		t.Fatalf("Counts at 15 s = %d requests, %d retries; want 0, 0", req, ret)
	}
	if got := grants(r, t0.Add(15*time.Second), 5); got != 3 {
		t.Fatalf("at 15 s: granted %d, want the floor 3", got)
	}
}

func TestRatioRefusalCarriesRetryAfter(t *testing.T) {
	r := mustRatio(t, ratio.Config{})
	if got := grants(r, t0.Add(500*time.Millisecond), 2); got != 2 {
		t.Fatalf("granted %d, want 2", got)
	}
	mustGrant(t, r, t0.Add(3*time.Second), budget.Transient)(budget.RetrySucceeded)
	ex := mustRefuse(t, r, t0.Add(4200*time.Millisecond), budget.Transient, ratio.Layer)
	// The oldest retries are in slot [0 s, 1 s): they leave at 10 s.
	if want := 5800 * time.Millisecond; ex.RetryAfter != want {
		t.Fatalf("RetryAfter = %v, want %v", ex.RetryAfter, want)
	}
	mustRefuse(t, r, t0.Add(9999*time.Millisecond), budget.Throttling, ratio.Layer)
	if got := grants(r, t0.Add(10*time.Second), 5); got != 2 {
		t.Fatalf("at 10 s, with 1 retry left in the window: granted %d, want 2 (floor 3)", got)
	}
	ex = mustRefuse(t, r, t0.Add(10*time.Second), budget.Transient, ratio.Layer)
	// Now the oldest retry is the one of slot [3 s, 4 s).
	if want := 3 * time.Second; ex.RetryAfter != want {
		t.Fatalf("RetryAfter = %v, want %v", ex.RetryAfter, want)
	}
}

func TestRatioOutcomes(t *testing.T) {
	r := mustRatio(t, ratio.Config{MinRetries: 2})
	a := mustGrant(t, r, t0, budget.Transient)
	b := mustGrant(t, r, t0, budget.Transient)
	mustRefuse(t, r, t0, budget.Transient, ratio.Layer)
	a(budget.RetrySucceeded) // a retry that ran counts, whatever its outcome
	mustRefuse(t, r, t0, budget.Transient, ratio.Layer)
	b(budget.RetryNotUsed) // one that never ran does not
	if _, ret := r.Counts(t0); ret != 1 {
		t.Fatalf("retries counted after one not used: %d, want 1", ret)
	}
	c := mustGrant(t, r, t0.Add(time.Second), budget.Transient)
	c(budget.RetryFailed)
	mustRefuse(t, r, t0.Add(time.Second), budget.Transient, ratio.Layer)

	// A Release for a slot that has left the window un-counts nothing in
	// the new one.
	d := mustGrant(t, r, t0.Add(20*time.Second), budget.Transient)
	e := mustGrant(t, r, t0.Add(29*time.Second), budget.Transient)
	if _, ret := r.Counts(t0.Add(30 * time.Second)); ret != 1 {
		t.Fatalf("retries at 30 s: %d, want 1 (the one granted at 29 s)", ret)
	}
	d(budget.RetryNotUsed)
	if _, ret := r.Counts(t0.Add(30 * time.Second)); ret != 1 {
		t.Fatalf("a late RetryNotUsed for a slot out of the window changed the count to %d, want 1", ret)
	}
	e(budget.RetryNotUsed)
	if _, ret := r.Counts(t0.Add(30 * time.Second)); ret != 0 {
		t.Fatalf("retries at 30 s after RetryNotUsed: %d, want 0", ret)
	}
}

func TestRatioSecondReleaseIsIgnored(t *testing.T) {
	r := mustRatio(t, ratio.Config{MinRetries: 2})
	a := mustGrant(t, r, t0, budget.Transient)
	mustGrant(t, r, t0, budget.Transient)
	a(budget.RetryNotUsed)
	a(budget.RetryNotUsed) // misuse: must not un-count the other grant
	if _, ret := r.Counts(t0); ret != 1 {
		t.Fatalf("retries after a doubled Release: %d, want 1", ret)
	}
}

func TestRatioTimeGoingBackwards(t *testing.T) {
	r := mustRatio(t, ratio.Config{})
	now := t0.Add(20 * time.Second)
	r.RecordRequest(now)
	r.RecordRequest(now.Add(-3 * time.Second))  // still in the window: counted in its slot
	r.RecordRequest(now.Add(-30 * time.Second)) // older than the window: ignored
	if req, _ := r.Counts(now); req != 2 {
		t.Fatalf("requests = %d, want 2", req)
	}
	// A retry at a stale time counts in the newest slot, so it stays in the
	// window as long as any retry granted now.
	mustGrant(t, r, now.Add(-time.Minute), budget.Transient)
	if _, ret := r.Counts(now.Add(9 * time.Second)); ret != 1 {
		t.Fatalf("retries 9 s later = %d, want 1", ret)
	}
	if req, ret := r.Counts(now.Add(10 * time.Second)); req != 0 || ret != 0 {
		t.Fatalf("Counts 10 s later = %d, %d; want 0, 0", req, ret)
	}
}

func TestRatioSlotsAndOddWindows(t *testing.T) {
	// One slot: a fixed window.
	r := mustRatio(t, ratio.Config{Window: time.Second, Slots: 1, MinRetries: 1})
	mustGrant(t, r, t0.Add(999*time.Millisecond), budget.Transient)
	mustRefuse(t, r, t0.Add(999*time.Millisecond), budget.Transient, ratio.Layer)
	mustGrant(t, r, t0.Add(time.Second), budget.Transient)

	// Slots need not be whole milliseconds.
	r = mustRatio(t, ratio.Config{Window: 7 * time.Nanosecond, Slots: 7, MinRetries: 1})
	mustGrant(t, r, time.Unix(0, 100), budget.Transient)
	mustRefuse(t, r, time.Unix(0, 106), budget.Transient, ratio.Layer)
	mustGrant(t, r, time.Unix(0, 107), budget.Transient)

	// Times before 1970 work too.
	r = mustRatio(t, ratio.Config{MinRetries: 1})
	old := time.Date(1960, 1, 1, 0, 0, 0, 500, time.UTC)
	mustGrant(t, r, old, budget.Transient)
	mustRefuse(t, r, old.Add(9*time.Second), budget.Transient, ratio.Layer)
	mustGrant(t, r, old.Add(10*time.Second), budget.Transient)
}

func TestRatioConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg   ratio.Config
		field string
	}{
		{ratio.Config{Ratio: -0.1}, "Ratio"},
		{ratio.Config{Ratio: 1.01}, "Ratio"},
		{ratio.Config{Ratio: math.NaN()}, "Ratio"},
		{ratio.Config{Ratio: math.Inf(1)}, "Ratio"},
		{ratio.Config{Window: -time.Second}, "Window"},
		{ratio.Config{Slots: -1}, "Slots"},
		{ratio.Config{Slots: 1000 + 1}, "Slots"},
		{ratio.Config{Window: 10 * time.Second, Slots: 3}, "Window (10s) is not a whole multiple of Slots (3)"},
		{ratio.Config{Window: 5 * time.Nanosecond}, "Window (5ns) is not a whole multiple of Slots (10)"},
		{ratio.Config{MinRetries: -1}, "MinRetries"},
	} {
		r, err := ratio.New(c.cfg)
		if err == nil {
			t.Errorf("NewRatio(%+v) = %p, <nil>; want an error naming %s", c.cfg, r, c.field)
			continue
		}
		if r != nil {
			t.Errorf("NewRatio(%+v) returned a Ratio with error %v", c.cfg, err)
		}
		if !strings.HasPrefix(err.Error(), "herdguard: local.RatioConfig."+c.field) {
			t.Errorf("NewRatio(%+v) error %q does not name local.RatioConfig.%s", c.cfg, err, c.field)
		}
	}
	mustRatio(t, ratio.Config{Ratio: 1, Window: time.Hour, Slots: 1000, MinRetries: 1})
}

// refRatio is the article's RatioRetryBudget, ported line by line (with
// Slots slots instead of ten, times in nanoseconds) and extended with the
// un-counting of a retry that was not used. Ratio must answer exactly as it
// does for times that never go backwards.
type refRatio struct {
	ratio      float64
	window     int64
	minRetries int64
	slotLen    int64
	slots      []refSlot
}

type refSlot struct{ start, requests, retries int64 }

func (r *refRatio) current(t int64) *refSlot {
	start := t - t%r.slotLen
	for len(r.slots) > 0 && r.slots[0].start <= t-r.window {
		r.slots = r.slots[1:]
	}
	if len(r.slots) == 0 || r.slots[len(r.slots)-1].start != start {
		r.slots = append(r.slots, refSlot{start: start})
	}
	return &r.slots[len(r.slots)-1]
}

func (r *refRatio) recordRequest(t int64) { r.current(t).requests++ }

// tryAcquireRetry returns the start of the slot the retry counts in, or -1.
func (r *refRatio) tryAcquireRetry(t int64) int64 {
	slot := r.current(t)
	var requests, retries int64
	for _, s := range r.slots {
		requests += s.requests
		retries += s.retries
	}
	allowed := math.Max(float64(r.minRetries), float64(requests)*r.ratio)
	if float64(retries+1) > allowed {
		return -1
	}
	slot.retries++
	return slot.start
}

func (r *refRatio) notUsed(start int64) {
	for i := range r.slots {
		if r.slots[i].start == start && r.slots[i].retries > 0 {
			r.slots[i].retries--
		}
	}
}

func TestRatioMatchesArticleModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ratios := []float64{0.1, 0.2, 0.05, 0.5, 1, 1.0 / 3}
	slotCounts := []int{1, 2, 5, 10, 16}
	slotLens := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second}
	for run := range 200 {
		cfg := ratio.Config{
			Ratio:      ratios[rng.IntN(len(ratios))],
			Slots:      slotCounts[rng.IntN(len(slotCounts))],
			MinRetries: 1 + rng.IntN(5),
		}
		slotLen := slotLens[rng.IntN(len(slotLens))]
		cfg.Window = slotLen * time.Duration(cfg.Slots)
		r := mustRatio(t, cfg)
		ref := &refRatio{ratio: cfg.Ratio, window: int64(cfg.Window), minRetries: int64(cfg.MinRetries), slotLen: int64(slotLen)}

		type grant struct {
			rel   budget.Release
			start int64
		}
		var outstanding []grant
		now := int64(1_700_000_000_000_000_000) + rng.Int64N(int64(cfg.Window))
		for step := range 2000 {
			switch op := rng.IntN(100); {
			case op < 3: // move time on, sometimes past a whole window
				now += rng.Int64N(int64(cfg.Window) * 3 / 2)
			case op < 30:
				now += rng.Int64N(int64(slotLen))
			case op < 70:
				r.RecordRequest(time.Unix(0, now))
				ref.recordRequest(now)
			case op < 90:
				rel, err := r.AcquireRetry(context.Background(), time.Unix(0, now), budget.Transient)
				start := ref.tryAcquireRetry(now)
				if (err == nil) != (start >= 0) {
					t.Fatalf("run %d (%+v), step %d: Ratio granted=%v (err %v), article model granted=%v", run, cfg, step, err == nil, err, start >= 0)
				}
				if err == nil {
					outstanding = append(outstanding, grant{rel, start})
				}
			default:
				if len(outstanding) == 0 {
					continue
				}
				i := rng.IntN(len(outstanding))
				g := outstanding[i]
				outstanding = append(outstanding[:i], outstanding[i+1:]...)
				o := budget.Outcome(rng.IntN(3))
				g.rel(o)
				if o == budget.RetryNotUsed {
					ref.notUsed(g.start)
				}
			}
		}
	}
}

// Concurrent requests and retries at one instant: exactly Ratio of the
// requests are granted.
func TestRatioConcurrent(t *testing.T) {
	const workers = 8
	r := mustRatio(t, ratio.Config{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range 100 {
				r.RecordRequest(t0)
				r.RecordSuccess(t0)
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	total := 0
	for range workers {
		wg.Go(func() {
			n := grants(r, t0, 20)
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != 80 {
		t.Fatalf("granted %d retries for 800 requests, want 80", total)
	}
}

// Concurrent calls with times spread over many windows, for the race
// detector, and a check that counts never go negative or exceed what was
// recorded.
func TestRatioConcurrentRotation(t *testing.T) {
	r := mustRatio(t, ratio.Config{Window: 100 * time.Millisecond, Slots: 10})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			now := t0
			for range 2000 {
				now = now.Add(time.Duration(rng.IntN(3)) * time.Millisecond)
				r.RecordRequest(now)
				if rel, err := r.AcquireRetry(context.Background(), now, budget.Transient); err == nil {
					rel(budget.Outcome(rng.IntN(3)))
				}
			}
		})
	}
	wg.Wait()
	req, ret := r.Counts(t0.Add(time.Hour))
	if req != 0 || ret != 0 {
		t.Fatalf("an hour later: %d requests, %d retries; want 0, 0", req, ret)
	}
	for range 50 {
		r.RecordRequest(t0.Add(time.Hour))
	}
	if got := grants(r, t0.Add(time.Hour), 10); got != 5 {
		t.Fatalf("after the storm, 50 requests grant %d, want 5", got)
	}
}

func TestRatioHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	r := mustRatio(t, ratio.Config{})
	ctx := context.Background()
	for range 1000 {
		r.RecordRequest(t0)
	}
	now := t0
	for name, f := range map[string]func(){
		"RecordRequest": func() { r.RecordRequest(t0) },
		"RecordSuccess": func() { r.RecordSuccess(t0) },
		"RecordRequest rotating": func() {
			now = now.Add(time.Second)
			r.RecordRequest(now)
		},
		"AcquireRetry+Release": func() {
			rel, err := r.AcquireRetry(ctx, now, budget.Transient)
			if err != nil {
				panic(fmt.Sprint("refused: ", err))
			}
			rel(budget.RetryNotUsed)
		},
	} {
		if allocs := testing.AllocsPerRun(1000, f); allocs != 0 {
			t.Errorf("%s: %v allocs, want 0", name, allocs)
		}
	}
}
