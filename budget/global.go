package budget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/internal/names"
	"github.com/herdguard/herdguard/internal/storecall"
)

// AllowancePerRetry is the allowance one retry costs in a Store item. Global
// keeps allowances in millionths of a retry, so that fractions of a retry
// earned in different environments add up in the shared item: a request at
// Ratio 0.1 deposits 100,000, a retry takes 1,000,000. An item holding
// allowance a can fund a / AllowancePerRetry retries.
const AllowancePerRetry int64 = 1_000_000

// globalLayer prefixes the Budget field of the errors a Global returns:
// "global:<name>".
const globalLayer = "global"

// Defaults for the zero fields of GlobalConfig.
const (
	defaultRatio  = 0.1
	defaultWindow = 10 * time.Second
	// defaultFloor is small enough that even a thousand
	// idle-then-failing environments add only three retries per window to
	// a partner in trouble (it matches the local ratio's MinRetries).
	defaultFloor            = 3
	defaultLeaseSize        = 1
	defaultDepositIntervals = 4 // DepositInterval = Window / 4
	defaultStoreTimeout     = 50 * time.Millisecond
	defaultFaultCooldown    = time.Second
)

// Limits on GlobalConfig.
const (
	minWindow = 100 * time.Millisecond
	maxWindow = 24 * time.Hour
	minRatio  = 1.0 / float64(AllowancePerRetry)
	maxFloor  = 1_000_000
	maxShards = 1000
	// maxAutoShards caps the spread of a Global that sizes its shards
	// itself: 256 items take about 200,000 writes a second at 80% of
	// DynamoDB's per-item limit.
	maxAutoShards = 256
	// autoGrowth is the factor a throttled store call multiplies the
	// spread by.
	autoGrowth = 8
	// autoShrinkWindows is how many windows without a throttle halve the
	// spread.
	autoShrinkWindows = 6
	maxLeaseSize      = 1000
)

// GlobalConfig holds the optional settings of a Global. The zero value of
// every field selects its default.
type GlobalConfig struct {
	// Ratio is the number of retries the fleet may make per request, in
	// [0.000001, 1]; zero means 0.1. It is applied in millionths:
	// a request earns floor(Ratio × 1,000,000) millionths of a retry, so the
	// effective ratio never exceeds Ratio.
	Ratio float64

	// Window is the length of the fixed windows the ratio is enforced over,
	// a whole number of milliseconds from 100 ms to 24 h; zero means 10 s.
	// Windows are aligned to the Unix epoch (window i covers
	// [i×Window, (i+1)×Window) since 1970-01-01 UTC), so every environment
	// computes the same store keys. Allowance never carries over from one
	// window to the next; unreported requests are carried at most one
	// window (see Global).
	Window time.Duration

	// Floor is the number of retries the whole fleet may make in a window
	// however few requests it made (the role of Envoy's
	// min_retry_concurrency). It is added to what requests earn, where
	// local.Ratio's MinRetries is a minimum. Zero means 3; a negative value
	// means no floor; at most 1,000,000. With Shards set, the floor is
	// split evenly between the shards: choose Floor >= Shards if it must be
	// reachable in full; with Shards zero, shard 0 holds all of it.
	Floor int

	// Shards fixes the number of store items one window of the budget is
	// spread over, from 1 to 1000, and splits Floor evenly between them.
	// Zero (the default) lets every environment size the spread itself:
	// it writes to one item (shard 0) until a store call is throttled;
	// each throttle spreads its writes over eight times as many other
	// items (shards 1 to 8, then 1 to 64, up to 256), and six windows
	// without a throttle halve the spread. The whole Floor is held by
	// shard 0, so that environments that disagree on the spread never add
	// up more than one Floor. See "Sizing shards"
	// under "Fleet-wide retry ratio (budget.Global)" in
	// docs/ARCHITECTURE.md.
	Shards int

	// LeaseSize is the largest number of retries one store write
	// withdraws, from 1 to 1000; zero means 1. An environment's first
	// lease in a window is one retry and each further one doubles, up to
	// LeaseSize; the retries left in a lease go to later callers in this
	// environment without a store call until the window ends. Larger
	// leases save writes when one environment retries often (many
	// concurrent invocations), at the price of up to LeaseSize-1 retries
	// the rest of the fleet cannot use.
	LeaseSize int

	// DepositInterval (D) spaces the store contacts of an environment that
	// is retrying: after every store call its next contact is drawn at
	// now + D × U(0.5, 1.5), and until then Flush writes nothing and
	// AcquireRetry refuses from memory when the store's last answer showed
	// a dry shard. It must be positive and at most Window; zero means
	// Window / 4 (2.5 s with the default Window). A retrying fleet writes
	// about environments ÷ D times per second; a shorter D reports requests
	// sooner for more writes.
	DepositInterval time.Duration

	// StoreTimeout bounds each Store call, even one that ignores its ctx.
	// Zero means 50 ms; it must not be negative.
	StoreTimeout time.Duration

	// FaultCooldown is how long, after a store call failed (a timeout, a
	// malformed answer, an unreachable table; not a refusal nor a
	// throttle), AcquireRetry and Flush answer as for a fault without
	// calling the store, so that a failing table does not add StoreTimeout
	// to every retry. Zero means 1 s; a negative value disables it.
	FaultCooldown time.Duration

	// FailOpen chooses what AcquireRetry answers when the store fails
	// (timeout, unreachable, malformed item). False (fail closed, the
	// default) refuses the retry with an *ExhaustedError whose Cause is the
	// fault: a slow or broken table never lifts the fleet's bound. True
	// answers the fault itself, so the retry.Executor lets the local budget
	// in each environment decide alone, and the fleet's retries are then
	// bounded by that budget times the number of environments. Either way
	// errors.Is(err, ErrUnavailable) holds. A throttled store call
	// (ErrThrottled) is always a refusal, whatever FailOpen says.
	FailOpen bool

	// Rand returns a number in [0, 1) to pick the shard of a store call
	// and to jitter the contact schedule; nil means math/rand/v2's Float64.
	// Global calls it with its lock held, so it need not be safe for
	// concurrent use unless it is shared. Seed it differently in every
	// environment, or the environments' contacts line up.
	Rand func() float64
}

// GlobalStats are a Global's cumulative counters.
type GlobalStats struct {
	// Granted counts retries handed to callers, from a lease in memory or
	// from a store call. A grant given back (Returned) and handed out again
	// counts twice, so the retries actually used are Granted - Returned.
	Granted int64
	// Returned counts grants given back with RetryNotUsed.
	Returned int64
	// Refused counts AcquireRetry calls that refused: from memory
	// (CachedRefusals), after a store call (RefusalWrites), throttled,
	// because the caller's context had ended, or, when failing closed,
	// because the store failed.
	Refused int64
	// CachedRefusals counts refusals answered from memory, without a store
	// call: the environment's last answer from the store said its shard
	// could not fund a retry, and its next contact was not due.
	CachedRefusals int64
	// RefusalWrites counts store calls made by AcquireRetry calls that then
	// refused. Each refusal makes at most one, so RefusalWrites <= Refused
	// always holds.
	RefusalWrites int64
	// Throttled counts store calls answered with ErrThrottled (by
	// AcquireRetry, a refusal; by Flush, an ErrUnavailable error). Their
	// requests stay pending: a throttled call applied nothing.
	Throttled int64
	// Unavailable counts AcquireRetry calls the store could not decide: a
	// fault or the fault cooldown (not the caller's context ending). Failing
	// closed (the default) they were also refused (and count in Refused);
	// with FailOpen they were answered with an ErrUnavailable error.
	Unavailable int64
	// StoreCalls counts Store.Apply calls, whatever their outcome.
	StoreCalls int64
	// Leases counts store calls that withdrew retries, and LeasedRetries
	// the retries they withdrew. Granted - Returned <= LeasedRetries
	// always holds: every retry handed out was withdrawn from the store.
	Leases        int64
	LeasedRetries int64
	// Deposits counts store calls that only deposited (Take zero): the
	// scheduled contacts of Flush and of AcquireRetry.
	Deposits int64
	// Faults counts store calls that failed other than by a refusal or a
	// throttle; the caller cannot know whether they were applied.
	Faults int64
	// ReportedRequests counts requests whose allowance a successful store
	// call deposited, CarriedRequests those of them deposited into the
	// window after their own (see Global).
	ReportedRequests int64
	CarriedRequests  int64
	// LostRequests counts requests whose allowance was sent in a store
	// call that failed. It is never sent again: it may or may not have
	// reached the store, and sending it twice could count it twice.
	LostRequests int64
	// SkippedRequests counts requests never deposited because they were
	// made, before the environment engaged, in an earlier period of
	// DepositInterval than the one before its first ask (see "Engagement"
	// in docs/ARCHITECTURE.md).
	SkippedRequests int64
}

// Global is the fleet-wide retry ratio: at most Ratio retries per request
// plus Floor retries per window, across every environment (process, Lambda
// execution environment) that shares one Store and one name. It implements
// Budget, has a Flush for a Lambda handler (retry.Executor.Flush calls it),
// and is safe for concurrent use.
//
// The bound: in every window w, the retries granted across the fleet and
// not given back, G(w), satisfy
//
//	G(w) <= Ratio × (R(w) + C(w)) + Floor
//
// where R(w) is the number of requests recorded with a time in w, by all
// environments together, and C(w) <= R(w-1) the requests of w-1 that an
// environment had not reported when w-1 ended and carried into w (each
// request is deposited at most once, so over consecutive windows a..b the
// grants are at most Ratio × (R(a-1) + ... + R(b)) + Floor × (b-a+1)).
// The bound is about Global's own grants: with FailOpen, while the store
// fails, the other layers bound the retries. Global errs on the side of
// fewer retries, never more. Only environments that asked for a global
// retry in the current or the previous window report their requests, so
// the ratio is in effect over the requests of environments that retry: in
// an outage, all of them.
//
// Cost: RecordRequest is two atomic compare-and-swaps, no lock, no I/O, no
// allocation. AcquireRetry and Flush make at most one Store.Apply each, and
// Global never reads. A fleet in which nobody retries makes no store call
// at all; a retrying environment makes about one write per DepositInterval,
// one per lease, and at most one per refusal (refusals between its store
// contacts are answered from memory). Call Flush after every Lambda
// invocation: it is a no-op on the healthy path.
//
// Store faults: every store call is bounded by StoreTimeout, even if the
// Store ignores ctx, so AcquireRetry and Flush return within StoreTimeout
// or ctx's deadline, whichever is first. A fault refuses the retry (an
// *ExhaustedError whose Cause matches ErrUnavailable) or, with FailOpen,
// abstains, and starts FaultCooldown; a throttled store call is always a
// refusal. Requests sent in a failed call are never sent again
// (LostRequests). Global never panics on a Store's answer, and a Store
// that panics is a fault.
//
// See "Fleet-wide retry ratio (budget.Global)" in docs/ARCHITECTURE.md for
// the algorithm, the proof of the bound, measured costs and how to choose
// Shards.
type Global struct {
	store        Store
	name         string
	label        string // Budget field of the errors Global returns
	cfg          GlobalConfig
	windowMilli  int64
	depositMilli int64   // DepositInterval in whole milliseconds, at least 1
	perRequest   int64   // allowance earned by one request
	floorShares  []int64 // allowance each shard item starts with (Shards fixed)
	floor        int64   // the whole Floor in allowance units
	auto         bool    // Shards is zero: the spread sizes itself
	expiryMargin time.Duration

	// slots count the requests of the two most recent windows seen, at
	// index window&1, without a lock. Each packs the low 32 bits of the
	// window index (the tag) above a 32-bit count. RecordRequest increments
	// the count if the tag is its window, starts the slot over if the slot
	// is empty or holds an older window (dropping counts of a window before
	// the previous one), and drops its request if the slot holds a newer
	// window. The lock-holding code moves counts out with a CAS that keeps
	// the tag.
	slots [2]atomic.Uint64
	// recent counts, the same way, the requests of the two most recent
	// periods of DepositInterval (aligned to the epoch) seen, at index
	// period&1: what an environment made lately, which its first write
	// after it engages deposits (see skipStaleLocked).
	recent [2]atomic.Uint64
	_      [64]byte // keep the hot slots off the mutex's cache line

	storeCalls atomic.Int64

	// mu guards everything below. It is never held across a Store call.
	// Window indexes use noWindow for "none".
	mu sync.Mutex
	// held[window&1] holds the requests of window moved out of slots and
	// not yet sent. Invariant: a request is counted in at most one of
	// slots, held, or an in-flight store call.
	held [2]heldCount
	// lease holds retries withdrawn from the store for window lease.window
	// and not yet handed out; lease.window never decreases.
	lease heldCount
	// leased counts the leases taken in window leased.window (their size
	// doubles within a window).
	leased heldCount
	// asked is the latest window in which AcquireRetry was called, and
	// bit i of askedMask is set if it was called in window asked-i.
	asked     int64
	askedMask uint64
	// nextContact is when this environment's next scheduled store contact
	// is due (the zero time: now).
	nextContact time.Time
	// view is what the last store answer said about a shard of one
	// window.
	view shardView
	// quietUntil, set by a throttled call to the next contact, holds back
	// every write until then, even one this environment's own requests
	// would fund.
	quietUntil time.Time
	// throttle is the throttled call's error, the cause of the refusals
	// made from memory until quietUntil.
	throttle error
	// faultUntil ends the cooldown after a store fault.
	faultUntil time.Time
	// spread is the number of shards a write picks from when the spread
	// sizes itself; spreadSince is when it last changed or a throttle
	// confirmed it.
	spread      int
	spreadSince time.Time
	stats       GlobalStats
}

// heldCount is a count that belongs to one window.
type heldCount struct {
	window int64
	n      int64
}

// shardView is the allowance a store answer showed in a shard of one
// window: after the update, or as it stood when the update was refused.
type shardView struct {
	window    int64
	allowance int64 // clamped to [0, maxViewAllowance]
}

const (
	noWindow  = math.MinInt64
	countBits = 32
	countMask = 1<<countBits - 1
	// maxHeld caps an environment's unreported requests in one window, so
	// that a deposit stays far below any store's numeric limits.
	maxHeld = countMask
	// maxViewAllowance caps what a view believes a shard holds, so that
	// sums with a deposit cannot overflow whatever a store answers.
	maxViewAllowance = 1 << 53
)

var _ Budget = (*Global)(nil)

// errCoolingDown is the cause given while the fault cooldown runs.
var errCoolingDown = errors.New("store call skipped: cooling down after a store fault")

// NewGlobal returns the fleet-wide retry ratio called name over store. All
// environments that should share one budget use the same store, name and
// configuration. name becomes part of the store's keys: 1 to 128 bytes of
// letters, digits, '-', '_', '.' and ':'. Bad input is a
// *herdguard.ConfigError.
func NewGlobal(store Store, name string, cfg GlobalConfig) (*Global, error) {
	if store == nil {
		return nil, &herdguard.ConfigError{Field: "budget.NewGlobal store", Reason: "is nil"}
	}
	if msg := names.Check(name); msg != "" {
		return nil, &herdguard.ConfigError{Field: "budget.NewGlobal name", Reason: msg}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Global{
		store:        store,
		name:         name,
		label:        globalLayer + ":" + name,
		cfg:          cfg,
		windowMilli:  cfg.Window.Milliseconds(),
		depositMilli: max(cfg.DepositInterval.Milliseconds(), 1),
		perRequest:   max(int64(math.Floor(cfg.Ratio*float64(AllowancePerRetry)+1e-6)), 1),
		floorShares:  make([]int64, cfg.Shards),
		floor:        int64(cfg.Floor) * AllowancePerRetry,
		auto:         cfg.Shards == 0,
		spread:       1,
		expiryMargin: max(cfg.Window, time.Minute),
		lease:        heldCount{window: noWindow},
		leased:       heldCount{window: noWindow},
		asked:        noWindow,
		view:         shardView{window: noWindow},
	}
	g.held[0].window, g.held[1].window = noWindow, noWindow
	for i := range g.floorShares {
		g.floorShares[i] = g.floor / int64(cfg.Shards)
		if int64(i) < g.floor%int64(cfg.Shards) {
			g.floorShares[i]++
		}
	}
	return g, nil
}

// Config returns the configuration g runs with, its zero fields filled
// with the defaults.
func (g *Global) Config() GlobalConfig { return g.cfg }

// WindowStart returns the start of the window that now falls in: windows
// are aligned to the Unix epoch, so every environment computes the same.
func (g *Global) WindowStart(now time.Time) time.Time { return g.windowStart(g.windowIndex(now)) }

// withDefaults fills the zero fields and validates the others.
func (c GlobalConfig) withDefaults() (GlobalConfig, error) {
	bad := func(field, format string, args ...any) (GlobalConfig, error) {
		return c, &herdguard.ConfigError{Field: "budget.GlobalConfig." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Ratio == 0:
		c.Ratio = defaultRatio
	case math.IsNaN(c.Ratio) || c.Ratio < minRatio || c.Ratio > 1:
		return bad("Ratio", "is %v; want a ratio in [%v, 1] (0 for the default %v)", c.Ratio, minRatio, defaultRatio)
	}
	switch {
	case c.Window == 0:
		c.Window = defaultWindow
	case c.Window < minWindow || c.Window > maxWindow || c.Window%time.Millisecond != 0:
		return bad("Window", "is %v; want a whole number of milliseconds from %v to %v (0 for the default %v)", c.Window, minWindow, maxWindow, defaultWindow)
	}
	switch {
	case c.Floor == 0:
		c.Floor = defaultFloor
	case c.Floor < 0:
		c.Floor = 0
	case c.Floor > maxFloor:
		return bad("Floor", "is %d; want at most %d (0 for the default %d, negative for none)", c.Floor, maxFloor, defaultFloor)
	}
	if c.Shards < 0 || c.Shards > maxShards {
		return bad("Shards", "is %d; want 1 to %d (0 to let the spread size itself)", c.Shards, maxShards)
	}
	switch {
	case c.LeaseSize == 0:
		c.LeaseSize = defaultLeaseSize
	case c.LeaseSize < 0 || c.LeaseSize > maxLeaseSize:
		return bad("LeaseSize", "is %d; want 1 to %d (0 for the default %d)", c.LeaseSize, maxLeaseSize, defaultLeaseSize)
	}
	switch {
	case c.DepositInterval == 0:
		c.DepositInterval = c.Window / defaultDepositIntervals
	case c.DepositInterval < 0 || c.DepositInterval > c.Window:
		return bad("DepositInterval", "is %v; want a positive duration up to Window (%v), or 0 for Window/%d", c.DepositInterval, c.Window, defaultDepositIntervals)
	}
	switch {
	case c.StoreTimeout == 0:
		c.StoreTimeout = defaultStoreTimeout
	case c.StoreTimeout < 0:
		return bad("StoreTimeout", "is %v; want a positive duration (0 for the default %v)", c.StoreTimeout, defaultStoreTimeout)
	}
	if c.FaultCooldown == 0 {
		c.FaultCooldown = defaultFaultCooldown
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c, nil
}

// Stats returns the cumulative counters.
func (g *Global) Stats() GlobalStats {
	g.mu.Lock()
	s := g.stats
	g.mu.Unlock()
	s.StoreCalls = g.storeCalls.Load()
	return s
}

// RecordRequest counts a request in memory. It never calls the store.
func (g *Global) RecordRequest(now time.Time) {
	ms := now.UnixMilli()
	w, d := floorDiv(ms, g.windowMilli), floorDiv(ms, g.depositMilli)
	count(&g.slots[w&1], w)
	count(&g.recent[d&1], d)
}

// count adds one to the count of period i in s, a slot of slots or recent.
func count(s *atomic.Uint64, i int64) {
	tag := uint64(uint32(i)) << countBits
	for {
		v := s.Load()
		var next uint64
		switch n := v & countMask; {
		case v&^countMask == tag:
			if n == countMask {
				return // saturated; undercounting is safe
			}
			next = v + 1
		case n == 0 || int32(uint32(i)-uint32(v>>countBits)) > 0:
			next = tag | 1 // empty, or an older period: start over
		default:
			return // the slot holds a newer period: drop this late request
		}
		if s.CompareAndSwap(v, next) {
			return
		}
	}
}

// countOf returns the count of period i in s, 0 if s holds another.
func countOf(s *atomic.Uint64, i int64) int64 {
	v := s.Load()
	if v&^countMask != uint64(uint32(i))<<countBits {
		return 0
	}
	return int64(v & countMask)
}

// floorDiv is a ÷ b rounded down (b > 0), also for negative a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// RecordSuccess does nothing: the ratio is over requests, whatever their
// outcome.
func (g *Global) RecordSuccess(time.Time) {}

// pending is what one store write in window w reports: requests of w
// (cur) and requests of w-1 carried into w (carry), moved out of memory
// until the write's fate is known.
type pending struct {
	w, cur, carry int64
}

func (p pending) n() int64 { return p.cur + p.carry }

// AcquireRetry asks for one retry in the window of now. It is served from
// this environment's lease when it holds one for the window, refused from
// memory when this environment's last answer from the store said its
// shard cannot fund a retry and its next contact is not due, and otherwise
// decided by one store call. kind does not change the price.
//
// A refusal is an *ExhaustedError whose RetryAfter is the time to this
// environment's next store contact (zero when the store's last answer
// showed allowance, which the next call will try to take). A throttled
// store call is a refusal whose Cause matches ErrUnavailable and wraps the
// store's error, and so are the refusals made from memory until the next
// contact after it. A store fault is an *ExhaustedError whose Cause matches
// ErrUnavailable and wraps the fault, or with FailOpen that Cause alone.
// A ctx that ends before or during the store call is not a store fault:
// the refusal's Cause is ctx.Err(), whatever FailOpen says, and no
// cooldown starts.
func (g *Global) AcquireRetry(ctx context.Context, now time.Time, _ Kind) (Release, error) {
	w := g.windowIndex(now)

	g.mu.Lock()
	if g.lease.window == w && g.lease.n > 0 {
		g.lease.n--
		g.stats.Granted++
		g.mu.Unlock()
		return g.grant(w), nil
	}
	onset := g.asked == noWindow || g.asked < w-1 // its first ask since it was engaged, if ever
	g.noteAskLocked(w)
	p := g.harvestPendingLocked(w)
	if onset {
		p.cur = g.skipStaleLocked(now, w, p.cur)
	}
	deposit := p.n() * g.perRequest
	est, known := g.estimateLocked(w)
	fund := !known || est+deposit >= AllowancePerRetry
	if (!fund || now.Before(g.quietUntil)) && now.Before(g.nextContact) {
		g.stats.Refused++
		g.stats.CachedRefusals++
		after := g.nextContact.Sub(now)
		var cause error
		if now.Before(g.quietUntil) {
			cause = g.throttle // the store's fault, not the fleet's allowance
		}
		g.mu.Unlock()
		return nil, g.refusal(after, cause)
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up: no store call, and not a store fault.
		g.stats.Refused++
		g.mu.Unlock()
		return nil, g.refusal(0, err)
	}
	if g.coolingLocked(now) {
		g.stats.Unavailable++
		g.mu.Unlock()
		return nil, g.faultError(now, errCoolingDown)
	}
	take := int64(0)
	if fund {
		take = g.leaseSizeLocked(w)
		if known {
			take = min(take, max((est+deposit)/AllowancePerRetry, 1))
		}
	}
	shard := g.pickShardLocked(now)
	g.sendLocked(p)
	g.mu.Unlock()

	allowance, err := g.apply(ctx, w, shard, deposit, take*AllowancePerRetry)

	g.mu.Lock()
	defer g.mu.Unlock()
	g.scheduleLocked(now)
	switch {
	case err == nil:
		g.reportedLocked(p)
		g.seeLocked(w, allowance)
		if take == 0 {
			g.stats.Deposits++
			break // a contact that found the shard dry: refused below
		}
		g.grantedLocked(w, take)
		return g.grant(w), nil
	case errors.Is(err, ErrThrottled):
		// The item is hot: the fleet is asking too often. Refuse rather
		// than abstain, which would let every local layer retry.
		g.unappliedLocked(w, p, allowance, err)
		g.throttledLocked(now)
		g.stats.Refused++
		g.stats.RefusalWrites++
		return nil, g.refusal(g.nextContact.Sub(now), g.throttle)
	case errors.Is(err, ErrInsufficient):
		g.unappliedLocked(w, p, allowance, err)
	case ctx.Err() != nil:
		// The caller's context ended during the call: its requests are
		// lost as after any fault, but the store is not to blame.
		g.faultLocked(ctx, now, p)
		g.stats.Refused++
		return nil, g.refusal(0, ctx.Err())
	default:
		g.faultLocked(ctx, now, p)
		g.stats.Unavailable++
		if !g.cfg.FailOpen {
			g.stats.RefusalWrites++ // failing closed, the fault is a refusal
		}
		return nil, g.faultErrorLocked(now, err)
	}
	g.stats.Refused++
	g.stats.RefusalWrites++
	after := g.nextContact.Sub(now)
	if g.view.allowance >= AllowancePerRetry {
		after = 0 // the next AcquireRetry will try to take what the store showed
	}
	return nil, g.refusal(after, nil)
}

// Flush reports this environment's unreported requests of the window of
// now, and of the previous one if it was engaged then, with one
// deposit-only store write, when this environment is engaged (it asked for
// a global retry in this window or the previous one) and its next
// scheduled contact is due. Otherwise it does nothing, so a Lambda handler
// calls it after every invocation (retry.Executor.Flush does, with the
// Executor's clock): it costs no write
// on the healthy path and about one per DepositInterval while retrying.
// The deposit funds retries anywhere in the fleet, and would be lost if
// the environment were frozen until the window ended. It returns an error
// matching ErrUnavailable if the call fails (the requests are then lost, never
// sent again), is throttled (they stay pending), or is skipped during the
// fault cooldown (they stay pending), and ctx.Err() if ctx ended before the
// call (they stay pending) or during it (they are lost).
func (g *Global) Flush(ctx context.Context, now time.Time) error {
	w := g.windowIndex(now)
	g.mu.Lock()
	if !g.engagedLocked(w) || now.Before(g.nextContact) {
		g.mu.Unlock()
		return nil
	}
	p := g.harvestPendingLocked(w)
	if p.n() == 0 {
		g.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		g.mu.Unlock()
		return err // the requests stay for the next contact
	}
	if g.coolingLocked(now) {
		g.mu.Unlock()
		return &unavailableError{budget: g.label, err: errCoolingDown}
	}
	g.sendLocked(p)
	shard := g.pickShardLocked(now)
	g.mu.Unlock()

	allowance, err := g.apply(ctx, w, shard, p.n()*g.perRequest, 0)

	g.mu.Lock()
	defer g.mu.Unlock()
	g.scheduleLocked(now)
	switch {
	case err == nil:
		g.stats.Deposits++
		g.reportedLocked(p)
		g.seeLocked(w, allowance)
		return nil
	case errors.Is(err, ErrInsufficient), errors.Is(err, ErrThrottled):
		// (A refusal cannot happen for an update that takes nothing; the
		// store says nothing was applied, so the requests are kept.)
		g.unappliedLocked(w, p, allowance, err)
		if errors.Is(err, ErrThrottled) {
			g.throttledLocked(now)
		}
	default:
		g.faultLocked(ctx, now, p)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return &unavailableError{budget: g.label, err: err}
}

// apply makes one store call bounded by StoreTimeout, even if the Store
// ignores ctx; a Store that panics is a fault (storecall).
func (g *Global) apply(ctx context.Context, w int64, shard int, deposit, take int64) (int64, error) {
	g.storeCalls.Add(1)
	k := Key{Name: g.name, Shard: shard, Window: g.windowStart(w)}
	u := Update{
		Floor:   g.floorOf(shard),
		Deposit: deposit,
		Take:    take,
		Expires: g.windowStart(w + 1).Add(g.expiryMargin),
	}
	return storecall.Do(ctx, g.cfg.StoreTimeout, ErrUnavailable, "apply", func(ctx context.Context) (int64, error) {
		return g.store.Apply(ctx, k, u)
	})
}

// grant returns the Release of a retry granted in window w.
func (g *Global) grant(w int64) Release {
	var done atomic.Bool
	return func(o Outcome) {
		if done.Swap(true) || o != RetryNotUsed {
			return
		}
		g.mu.Lock()
		g.stats.Returned++
		if g.lease.window == w {
			g.lease.n++
		}
		g.mu.Unlock()
	}
}

// noteAskLocked records that AcquireRetry was called in window w.
func (g *Global) noteAskLocked(w int64) {
	switch {
	case g.asked == noWindow || w-g.asked >= 64:
		g.asked, g.askedMask = w, 1
	case w > g.asked:
		g.askedMask = g.askedMask<<(w-g.asked) | 1
		g.asked = w
	case g.asked-w < 64:
		g.askedMask |= 1 << (g.asked - w)
	}
}

// engagedLocked reports whether this environment is engaged in window w:
// it asked for a retry in w or in w-1.
func (g *Global) engagedLocked(w int64) bool {
	askedIn := func(v int64) bool {
		d := g.asked - v
		return g.asked != noWindow && d >= 0 && d < 64 && g.askedMask&(1<<d) != 0
	}
	return askedIn(w) || askedIn(w-1)
}

// harvestPendingLocked returns what a write in window w reports: the
// requests of w and, if this environment was engaged in w-1, those of w-1
// (carried once, into the next window only).
func (g *Global) harvestPendingLocked(w int64) pending {
	p := pending{w: w, cur: g.harvestLocked(w)}
	if g.engagedLocked(w - 1) {
		p.carry = g.harvestLocked(w - 1)
	}
	return p
}

// skipStaleLocked is the engagement rule: an environment that was not
// engaged deposits, with its first write at now, only those of its cur
// unreported requests of window w that it made in the current or the
// previous period of DepositInterval (between D and 2 × D before now), as
// if its previous contact had been then. The others, made while it had no
// retry to ask for (before an outage, typically), are dropped: when an
// outage starts late in a window they would fund a burst of retries at its
// onset, far above the ratio over the outage. Dropping only lowers the
// allowance. It returns the requests kept.
func (g *Global) skipStaleLocked(now time.Time, w, cur int64) int64 {
	d := floorDiv(now.UnixMilli(), g.depositMilli)
	keep := min(cur, countOf(&g.recent[d&1], d)+countOf(&g.recent[(d-1)&1], d-1))
	g.held[w&1].n -= cur - keep
	g.stats.SkippedRequests += cur - keep
	return keep
}

// harvestLocked moves the requests of window w from its slot into held and
// returns all held requests of w. A window older than the one held at its
// parity has no counts left.
func (g *Global) harvestLocked(w int64) int64 {
	h := &g.held[w&1]
	switch {
	case h.window > w:
		return 0
	case h.window < w:
		*h = heldCount{window: w} // drops counts of an older window
	}
	tag := uint64(uint32(w)) << countBits
	s := &g.slots[w&1]
	for {
		v := s.Load()
		n := v & countMask
		if v&^countMask != tag || n == 0 {
			break
		}
		if s.CompareAndSwap(v, tag) {
			h.n = min(h.n+int64(n), maxHeld)
			break
		}
	}
	return h.n
}

// sendLocked takes p's requests out of memory: they are in flight.
func (g *Global) sendLocked(p pending) {
	g.held[p.w&1].n -= p.cur
	g.held[(p.w-1)&1].n -= p.carry
}

// restoreLocked puts back the requests of p, whose store call applied
// nothing.
func (g *Global) restoreLocked(p pending) {
	g.restoreWindowLocked(p.w, p.cur)
	g.restoreWindowLocked(p.w-1, p.carry)
}

func (g *Global) restoreWindowLocked(w, n int64) {
	if n == 0 {
		return
	}
	h := &g.held[w&1]
	switch {
	case h.window > w:
		return // the window is gone
	case h.window < w:
		*h = heldCount{window: w}
	}
	h.n = min(h.n+n, maxHeld)
}

// unappliedLocked records a store call in window w that applied nothing,
// a refusal or a throttle: p's requests stay pending for the next contact.
// A refusal's answer (the allowance as it stands) becomes the view; a
// throttle shows nothing, so the shard counts as empty and no write at all
// is made before the next contact.
func (g *Global) unappliedLocked(w int64, p pending, allowance int64, err error) {
	g.restoreLocked(p)
	if errors.Is(err, ErrThrottled) {
		g.stats.Throttled++
		g.seeLocked(w, 0)
		g.quietUntil = g.nextContact
		g.throttle = &unavailableError{budget: g.label, err: err}
		return
	}
	g.seeLocked(w, allowance)
}

// reportedLocked records that p's requests were deposited.
func (g *Global) reportedLocked(p pending) {
	g.stats.ReportedRequests += p.n()
	g.stats.CarriedRequests += p.carry
}

// estimateLocked returns what this environment believes a store write in
// window w would find: the allowance the store's last answer showed in w
// (in whichever shard: a write picks its shard at random, and the shards
// of a window fill and drain alike), or, at the start of a window, zero if
// the last answer in the previous window could not fund a retry (the fleet
// is likely still short of allowance: wait for the next contact rather
// than write at the window's first instant). known is false when it has no
// belief: then it asks the store.
func (g *Global) estimateLocked(w int64) (allowance int64, known bool) {
	switch {
	case g.view.window == w:
		return g.view.allowance, true
	case g.view.window == w-1 && g.view.allowance < AllowancePerRetry:
		return 0, true
	}
	return 0, false
}

// seeLocked keeps a store answer in window w as this environment's view,
// unless it already holds a view of a later window (a caller whose clock
// is behind).
func (g *Global) seeLocked(w int64, allowance int64) {
	if w < g.view.window {
		return
	}
	g.view = shardView{window: w, allowance: min(max(allowance, 0), maxViewAllowance)}
}

// scheduleLocked draws the next contact after a store call at now:
// now + D × U(0.5, 1.5).
func (g *Global) scheduleLocked(now time.Time) {
	g.nextContact = now.Add(time.Duration((0.5 + g.randLocked()) * float64(g.cfg.DepositInterval)))
}

// grantedLocked records a successful lease of take retries in window w;
// one retry goes to the caller.
func (g *Global) grantedLocked(w, take int64) {
	g.stats.Granted++
	g.stats.Leases++
	g.stats.LeasedRetries += take
	if w > g.lease.window {
		g.lease = heldCount{window: w}
	}
	if w == g.lease.window {
		g.lease.n += take - 1
	}
	if w > g.leased.window {
		g.leased = heldCount{window: w}
	}
	if w == g.leased.window {
		g.leased.n++
	}
}

// faultLocked records a store call that failed with p's requests in it
// and, unless the caller's own context ended, starts the cooldown.
func (g *Global) faultLocked(ctx context.Context, now time.Time, p pending) {
	g.stats.Faults++
	g.stats.LostRequests += p.n()
	if ctx.Err() == nil && g.cfg.FaultCooldown > 0 {
		if until := now.Add(g.cfg.FaultCooldown); until.After(g.faultUntil) {
			g.faultUntil = until
		}
	}
}

// coolingLocked reports whether a recent fault's cooldown forbids a store
// call at now.
func (g *Global) coolingLocked(now time.Time) bool { return now.Before(g.faultUntil) }

// leaseSizeLocked is the size of the next lease in window w: 1, then
// doubling with every lease taken in the window, up to LeaseSize.
func (g *Global) leaseSizeLocked(w int64) int64 {
	var n int64
	if g.leased.window == w {
		n = g.leased.n
	}
	return min(int64(1)<<min(n, 30), int64(g.cfg.LeaseSize))
}

// floorOf is the allowance shard's item starts with: its share of Floor
// when Shards is fixed, the whole Floor in shard 0 when the spread sizes
// itself (whatever spread each environment uses, the shards of a window
// start with Floor in all).
func (g *Global) floorOf(shard int) int64 {
	switch {
	case !g.auto:
		return g.floorShares[shard]
	case shard == 0:
		return g.floor
	}
	return 0
}

// pickShardLocked picks a shard with the configured Rand, whatever it
// returns: among the fixed Shards, or shard 0 while the spread is one and
// one of shards 1 to spread after that.
func (g *Global) pickShardLocked(now time.Time) int {
	s := len(g.floorShares)
	if g.auto {
		if g.spread > 1 && !now.Before(g.spreadSince.Add(autoShrinkWindows*g.cfg.Window)) {
			g.spread /= 2 // quiet for long enough: fewer shards fragment less
			g.spreadSince = now
		}
		if g.spread > 1 {
			// Shards 1 to spread: shard 0 is left to the environments
			// that were never throttled, so that it cools down as soon as
			// they alone write to it.
			return 1 + min(int(g.randLocked()*float64(g.spread)), g.spread-1)
		}
		return 0
	}
	if s == 1 {
		return 0
	}
	return min(int(g.randLocked()*float64(s)), s-1)
}

// throttledLocked widens the spread after a throttled store call at now,
// when it sizes itself: the item was hot, so the fleet writes too often
// for the shards this environment spreads over.
func (g *Global) throttledLocked(now time.Time) {
	if g.auto {
		g.spread = min(g.spread*autoGrowth, maxAutoShards)
		g.spreadSince = now
	}
}

// randLocked returns the configured Rand's number, forced into [0, 1).
func (g *Global) randLocked() float64 {
	r := g.cfg.Rand()
	switch {
	case !(r > 0): // also NaN
		return 0
	case r >= 1:
		return math.Nextafter(1, 0)
	}
	return r
}

// refusal is a refused retry with the given hint and cause.
func (g *Global) refusal(after time.Duration, cause error) error {
	return &ExhaustedError{Budget: g.label, RetryAfter: max(after, 0), Cause: cause}
}

// faultError is the answer when the store could not decide.
func (g *Global) faultError(now time.Time, cause error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.faultErrorLocked(now, cause)
}

func (g *Global) faultErrorLocked(now time.Time, cause error) error {
	u := &unavailableError{budget: g.label, err: cause}
	if g.cfg.FailOpen {
		return u
	}
	g.stats.Refused++
	return g.refusal(g.faultUntil.Sub(now), u)
}

// windowIndex is the number of the window now falls in.
func (g *Global) windowIndex(now time.Time) int64 {
	return floorDiv(now.UnixMilli(), g.windowMilli)
}

func (g *Global) windowStart(w int64) time.Time {
	return time.UnixMilli(w * g.windowMilli).UTC()
}
