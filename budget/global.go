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
)

// AllowancePerRetry is the allowance one retry costs in a Store item. Global
// keeps allowances in millionths of a retry: a request at Ratio 0.1 deposits
// 100,000, a retry takes 1,000,000. Fractions of a retry earned by different
// environments therefore add up in the shared item instead of being rounded
// away in each environment (twenty environments with nine requests each earn
// 18 retries at Ratio 0.1, not zero). An item holding allowance a can fund
// a / AllowancePerRetry retries.
const AllowancePerRetry int64 = 1_000_000

// GlobalLayer prefixes the Budget field of the errors a Global returns:
// "global:<name>".
const GlobalLayer = "global"

// Defaults for the zero fields of GlobalConfig.
const (
	// DefaultGlobalRatio is the fleet-wide number of retries per request.
	DefaultGlobalRatio = 0.1
	// DefaultGlobalWindow is the length of the fixed windows over which the
	// ratio is enforced.
	DefaultGlobalWindow = 10 * time.Second
	// DefaultGlobalFloor is the number of retries the whole fleet may make
	// in a window regardless of its traffic, so that a fleet with little
	// traffic can still retry the odd failure. Three per window matches the
	// local ratio budget's MinRetries and is small enough that even a
	// thousand idle-then-failing environments add only three retries per
	// window to a partner in trouble.
	DefaultGlobalFloor = 3
	// DefaultGlobalShards is the number of items one budget is spread over.
	DefaultGlobalShards = 1
	// DefaultLeaseSize is the largest number of retries one store write
	// withdraws. One means every global retry costs one write and no
	// environment ever holds allowance another could use.
	DefaultLeaseSize = 1
	// DefaultStoreTimeout bounds every Store call.
	DefaultStoreTimeout = 50 * time.Millisecond
	// DefaultFaultCooldown is how long Global answers from memory after a
	// store fault before it calls the store again.
	DefaultFaultCooldown = time.Second
)

// Limits on GlobalConfig.
const (
	// MinGlobalWindow and MaxGlobalWindow bound GlobalConfig.Window.
	MinGlobalWindow = 100 * time.Millisecond
	MaxGlobalWindow = 24 * time.Hour
	// MinGlobalRatio is the resolution of GlobalConfig.Ratio: one request
	// earns a whole number of millionths of a retry.
	MinGlobalRatio = 1.0 / float64(AllowancePerRetry)
	// MaxGlobalFloor bounds GlobalConfig.Floor.
	MaxGlobalFloor = 1_000_000
	// MaxGlobalShards bounds GlobalConfig.Shards.
	MaxGlobalShards = 1000
	// MaxLeaseSize bounds GlobalConfig.LeaseSize.
	MaxLeaseSize = 1000
)

// GlobalConfig holds the optional settings of a Global. The zero value of
// every field selects its default.
type GlobalConfig struct {
	// Ratio is the number of retries the fleet may make per request, in
	// (0, 1]; zero means DefaultGlobalRatio. It is applied in millionths:
	// a request earns floor(Ratio × 1,000,000) millionths of a retry, so the
	// effective ratio never exceeds Ratio.
	Ratio float64

	// Window is the length of the fixed windows the ratio is enforced over,
	// a whole number of milliseconds in [MinGlobalWindow, MaxGlobalWindow];
	// zero means DefaultGlobalWindow. Windows are aligned to the Unix epoch
	// (window i covers [i×Window, (i+1)×Window) since 1970-01-01 UTC), so
	// every environment computes the same store keys without talking to the
	// others. Allowance never carries over from one window to the next.
	Window time.Duration

	// Floor is the number of retries the whole fleet may make in a window
	// however few requests it made: the role of Envoy's
	// min_retry_concurrency. It is added to what requests earn (each window
	// item starts at its share of the floor), where local.Ratio's
	// MinRetries is a minimum; the bound Ratio × requests + Floor holds
	// either way. Zero means DefaultGlobalFloor; a negative value means no
	// floor. At most MaxGlobalFloor. With several shards the floor
	// is split evenly between them, so a shard may hold a fraction of a
	// retry that only deposits can complete: choose Floor >= Shards if the
	// floor must be reachable in full.
	Floor int

	// Shards is the number of store items one window of the budget is
	// spread over, in [1, MaxGlobalShards]; zero means DefaultGlobalShards.
	// Each store call picks one shard at random. A store item takes at most
	// about 1,000 writes per second (DynamoDB's per-partition limit), and
	// Global makes about one write per lease: see Global for sizing.
	Shards int

	// LeaseSize is the largest number of retries one store write
	// withdraws, in [1, MaxLeaseSize]; zero means DefaultLeaseSize. The
	// first lease an environment takes in a window is one retry; each
	// further lease in the same window doubles, up to LeaseSize. Retries
	// left in a lease are handed to later callers in this environment
	// without a store call, until the window ends. Larger leases save
	// writes when one environment retries often (many concurrent
	// invocations); they also let an environment hold up to LeaseSize-1
	// retries that others in the fleet cannot use, which can only make the
	// fleet grant fewer retries, never more.
	LeaseSize int

	// StoreTimeout bounds each Store call: it runs under
	// context.WithTimeout(ctx, StoreTimeout). Zero means
	// DefaultStoreTimeout; it must not be negative.
	StoreTimeout time.Duration

	// FaultCooldown is how long, after a store call failed (not a refusal:
	// a timeout, throttling, a malformed answer), AcquireRetry and Flush
	// answer without calling the store, as they would for a fault. It keeps
	// a failing table from adding StoreTimeout to every retry and from
	// being hammered while it recovers. Zero means DefaultFaultCooldown; a
	// negative value disables it (every call tries the store).
	FaultCooldown time.Duration

	// FailClosed chooses what AcquireRetry answers when the store cannot
	// decide. False (fail open, the default) answers an *UnavailableError,
	// so that a Layered composition lets the other layers (the local
	// budget) decide alone. True answers an *ExhaustedError (whose Err is
	// the *UnavailableError), which refuses the retry.
	FailClosed bool

	// Rand returns a number in [0, 1) to pick the shard of a store call;
	// nil means math/rand/v2's Float64. Global calls it with its lock held,
	// so it need not be safe for concurrent use unless it is shared.
	Rand func() float64

	// Now is the clock Flush reads; nil means time.Now. Every other method
	// takes the time as an argument.
	Now func() time.Time
}

// GlobalStats are a Global's cumulative counters.
type GlobalStats struct {
	// Granted counts retries handed to callers, from a lease in memory or
	// from a store call. A grant given back (Returned) and handed out again
	// counts twice, so the retries actually used are Granted - Returned.
	Granted int64
	// Returned counts grants given back with RetryNotUsed.
	Returned int64
	// Refused counts AcquireRetry calls that refused, whether the store
	// refused or the exhausted-until cache did (CachedRefusals).
	Refused int64
	// CachedRefusals counts refusals answered from memory, without a store
	// call, because the store refused earlier in the same window.
	CachedRefusals int64
	// Unavailable counts AcquireRetry calls the store could not decide: a
	// fault, the fault cooldown, or ctx done before the call. With
	// FailClosed they were answered with an *ExhaustedError, otherwise
	// with an *UnavailableError.
	Unavailable int64
	// StoreCalls counts Store.Apply calls, whatever their outcome.
	StoreCalls int64
	// Leases counts store calls that withdrew retries, and LeasedRetries
	// the retries they withdrew. Granted - Returned <= LeasedRetries
	// always holds: every retry handed out was withdrawn from the store.
	Leases        int64
	LeasedRetries int64
	// Faults counts store calls that failed other than by a refusal; the
	// caller cannot know whether they were applied.
	Faults int64
	// ReportedRequests counts requests whose allowance a successful store
	// call deposited.
	ReportedRequests int64
	// LostRequests counts requests whose allowance was sent in a store
	// call that failed. It is never sent again: it may or may not have
	// reached the store, and sending it twice could count it twice.
	LostRequests int64
}

// Global is the fleet-wide retry ratio: at most Ratio retries per request
// plus Floor retries per window, across every environment (process, Lambda
// execution environment) that shares one Store and one name. It implements
// Budget and Flusher and is safe for concurrent use.
//
// # Algorithm
//
// Time is cut into fixed windows aligned to the Unix epoch. Each window has
// its own store items (one per shard, Key{Name, Shard, Window}), created on
// first use holding the shard's share of Floor. Allowance is counted in
// millionths of a retry (AllowancePerRetry).
//
//   - RecordRequest counts the request in memory, in the slot of its
//     window: one compare-and-swap, no lock, no allocation, no I/O. On the
//     healthy path nothing else happens, so a healthy fleet makes zero
//     store calls.
//   - AcquireRetry first hands out a retry left in this environment's lease
//     for the window, without a store call. Otherwise it makes one
//     Store.Apply on a random shard that, in one atomic conditional update,
//     deposits the allowance earned by this environment's unreported
//     requests of the window (Ratio × n) and takes a lease of k retries.
//     One retry goes to the caller, the other k-1 into the lease.
//   - If the store refuses (the shard holds too little), the deposit was
//     not applied; Global banks it with a second Apply that takes nothing
//     (it cannot be refused), so that fractions of a retry from many
//     environments still add up in the pool, and remembers "exhausted until
//     the window ends". Until then, AcquireRetry refuses from memory with
//     no store call, unless this environment's own new requests have earned
//     a whole retry: a call that deposits at least what it takes cannot be
//     refused, so it is made (and grants). A refused lease of k > 1 is
//     retried once at the size the refusal showed was available.
//   - RetryNotUsed puts the grant back into the lease if its window is
//     still the lease's window; RetrySucceeded and RetryFailed keep it
//     used (a ratio does not refund successful retries).
//   - Requests counted in a window are deposited only into that window's
//     items. Counts of an earlier window are dropped rather than deposited
//     into the current one, where they would fund retries in a window they
//     did not belong to and the per-window bound would double at every
//     window boundary. (Two slots, for the current and previous window,
//     keep a caller whose clock reading is a little behind from corrupting
//     the current count.)
//   - RecordSuccess does nothing: the ratio is over requests, and Kind does
//     not change the price of a retry.
//
// # Bound
//
// For every window w, the retries granted across the fleet and not given
// back, G(w), satisfy
//
//	G(w) <= Ratio × R(w) + Floor
//
// where R(w) is the number of requests recorded with a time in w, by all
// environments together. Proof: each shard item of w starts at its floor
// share (the shares sum to Floor) and never goes negative, because the
// store applies an update only if the result is not negative. Every
// deposit into w carries requests recorded in w, and each request is sent
// in at most one store call: its count is moved out of memory before the
// call, put back only after a refusal (which applies nothing), and dropped
// after a failure whose fate is unknown. So the takes from w's items sum to
// at most Floor + Ratio × R(w). A retry is handed to a caller only from a
// take (directly or through the lease, whose tokens are valid only in their
// window), and a returned grant is handed out again at most once per
// return. There is no lease slack: an environment cannot hand out more than
// it withdrew. Summed over a run of windows,
// G <= Ratio × R + Floor × windows.
//
// The bound is about Global's own grants. What it does not cover, by
// design: while the store is failing and FailClosed is false, Global
// abstains and the retries the other layers grant are bounded by those
// layers (the local budget in each environment), not by the fleet ratio.
// An item deleted by TTL and then written again by a caller whose clock is
// more than max(Window, 1 minute) behind would start again at its floor.
// Environments whose clocks disagree attribute requests near a boundary to
// different windows; the bound holds per store window either way.
//
// Global errs on the side of fewer retries: counts lost with a failed store
// call, counts of a frozen environment that never reported them, a lease
// left over at the end of a window, a fraction of a floor share, and a
// refusal on one shard while another holds allowance all make the fleet
// grant less than the bound, never more. Healthy environments do not report
// their requests (that would cost writes on the healthy path), so the ratio
// is in effect computed over the requests of environments that ask for
// retries.
//
// # Cost
//
// Healthy (no environment retrying): zero store calls; RecordRequest is
// one atomic compare-and-swap; Flush is a no-op.
// Outage: one write per lease (with LeaseSize 1, one per granted retry);
// two writes per refusal (the refused update and the bank), then no writes
// from that environment for the rest of the window except to spend a
// whole retry it earned itself; one write per Flush that reports at least
// one retry's worth. Global never reads.
//
// # Sharding
//
// One item takes at most about 1,000 writes per second. Peak writes per
// second per budget is about
//
//	peak retries/s ÷ mean lease size + 2 × environments ÷ Window (refusals)
//
// and the peak retry rate is at most Ratio × peak requests/s + Floor ÷ Window.
// With the shard chosen at random, choose
//
//	Shards = ceil(peak writes/s ÷ 500)
//
// (half the item limit, as headroom for the uneven random spread). For
// example, 20,000 requests/s at Ratio 0.1 gives at most 2,000 retries/s:
// 4 shards. Every extra shard splits the floor further and raises the
// chance that a refusal on a dry shard comes while another holds allowance.
//
// # Store faults
//
// Every store call runs under context.WithTimeout(ctx, StoreTimeout) and
// AcquireRetry makes at most two, so it returns within 2 × StoreTimeout or
// ctx's deadline, whichever is first (given a Store that honours ctx, as
// the contract requires). A fault is answered with an *UnavailableError
// (or an *ExhaustedError when FailClosed) and starts FaultCooldown, during
// which AcquireRetry answers the same way from memory. The deposit sent in
// a failed call is never sent again (see LostRequests): if it was applied,
// resending would count the requests twice; if not, they are lost, which
// only lowers the allowance. A lease withdrawn by a call whose answer was
// lost is likewise never handed out. Global never panics on a Store's
// answer, whatever the error or allowance it returns.
type Global struct {
	store        Store
	name         string
	label        string // Budget field of the errors Global returns
	cfg          GlobalConfig
	windowMilli  int64
	perRequest   int64   // allowance earned by one request
	floorShares  []int64 // allowance each shard item starts with
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
	_     [64]byte // keep the hot slots off the mutex's cache line

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
	// exhausted is the window in which the store last refused.
	exhausted int64
	// engaged is the latest window in which AcquireRetry was called; Flush
	// reports nothing in other windows.
	engaged int64
	// faultUntil ends the cooldown after a store fault.
	faultUntil time.Time
	stats      GlobalStats
}

// heldCount is a count that belongs to one window.
type heldCount struct {
	window int64
	n      int64
}

const (
	noWindow  = math.MinInt64
	countBits = 32
	countMask = 1<<countBits - 1
	// maxHeld caps an environment's unreported requests in one window, so
	// that a deposit stays far below any store's numeric limits.
	maxHeld = countMask
)

var (
	_ Budget  = (*Global)(nil)
	_ Flusher = (*Global)(nil)
)

// errCoolingDown is the cause given while the fault cooldown runs.
var errCoolingDown = errors.New("store call skipped: cooling down after a store fault")

// NewGlobal returns the fleet-wide retry ratio called name over store. All
// environments that should share one budget use the same store, name and
// configuration. name must pass ValidateName.
func NewGlobal(store Store, name string, cfg GlobalConfig) (*Global, error) {
	if store == nil {
		return nil, errors.New("herdguard: budget.NewGlobal: store is nil")
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("herdguard: budget.NewGlobal: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("herdguard: budget.NewGlobal %q: %w", name, err)
	}
	g := &Global{
		store:        store,
		name:         name,
		label:        GlobalLayer + ":" + name,
		cfg:          cfg,
		windowMilli:  cfg.Window.Milliseconds(),
		perRequest:   max(int64(math.Floor(cfg.Ratio*float64(AllowancePerRetry)+1e-6)), 1),
		floorShares:  make([]int64, cfg.Shards),
		expiryMargin: max(cfg.Window, time.Minute),
		lease:        heldCount{window: noWindow},
		leased:       heldCount{window: noWindow},
		exhausted:    noWindow,
		engaged:      noWindow,
	}
	g.held[0].window, g.held[1].window = noWindow, noWindow
	floor := int64(cfg.Floor) * AllowancePerRetry
	for i := range g.floorShares {
		g.floorShares[i] = floor / int64(cfg.Shards)
		if int64(i) < floor%int64(cfg.Shards) {
			g.floorShares[i]++
		}
	}
	return g, nil
}

// withDefaults fills the zero fields and validates the others.
func (c GlobalConfig) withDefaults() (GlobalConfig, error) {
	switch {
	case c.Ratio == 0:
		c.Ratio = DefaultGlobalRatio
	case math.IsNaN(c.Ratio) || c.Ratio < MinGlobalRatio || c.Ratio > 1:
		return c, fmt.Errorf("GlobalConfig.Ratio is %v; it must be in [%v, 1] (or 0 for the default %v)", c.Ratio, MinGlobalRatio, DefaultGlobalRatio)
	}
	switch {
	case c.Window == 0:
		c.Window = DefaultGlobalWindow
	case c.Window < MinGlobalWindow || c.Window > MaxGlobalWindow || c.Window%time.Millisecond != 0:
		return c, fmt.Errorf("GlobalConfig.Window is %v; it must be a whole number of milliseconds in [%v, %v] (or 0 for the default %v)", c.Window, MinGlobalWindow, MaxGlobalWindow, DefaultGlobalWindow)
	}
	switch {
	case c.Floor == 0:
		c.Floor = DefaultGlobalFloor
	case c.Floor < 0:
		c.Floor = 0
	case c.Floor > MaxGlobalFloor:
		return c, fmt.Errorf("GlobalConfig.Floor is %d; it must be at most %d (0 for the default %d, negative for none)", c.Floor, MaxGlobalFloor, DefaultGlobalFloor)
	}
	switch {
	case c.Shards == 0:
		c.Shards = DefaultGlobalShards
	case c.Shards < 0 || c.Shards > MaxGlobalShards:
		return c, fmt.Errorf("GlobalConfig.Shards is %d; it must be in [1, %d] (or 0 for the default %d)", c.Shards, MaxGlobalShards, DefaultGlobalShards)
	}
	switch {
	case c.LeaseSize == 0:
		c.LeaseSize = DefaultLeaseSize
	case c.LeaseSize < 0 || c.LeaseSize > MaxLeaseSize:
		return c, fmt.Errorf("GlobalConfig.LeaseSize is %d; it must be in [1, %d] (or 0 for the default %d)", c.LeaseSize, MaxLeaseSize, DefaultLeaseSize)
	}
	switch {
	case c.StoreTimeout == 0:
		c.StoreTimeout = DefaultStoreTimeout
	case c.StoreTimeout < 0:
		return c, fmt.Errorf("GlobalConfig.StoreTimeout is %v; it must be positive (or 0 for the default %v)", c.StoreTimeout, DefaultStoreTimeout)
	}
	if c.FaultCooldown == 0 {
		c.FaultCooldown = DefaultFaultCooldown
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Name returns the budget's name.
func (g *Global) Name() string { return g.name }

// Config returns the configuration in effect, defaults filled in.
func (g *Global) Config() GlobalConfig { return g.cfg }

// WindowOf returns the start of the window now falls in.
func (g *Global) WindowOf(now time.Time) time.Time {
	return g.windowStart(g.windowIndex(now))
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
	w := g.windowIndex(now)
	tag := uint64(uint32(w)) << countBits
	s := &g.slots[w&1]
	for {
		v := s.Load()
		var next uint64
		switch n := v & countMask; {
		case v&^countMask == tag:
			if n == countMask {
				return // saturated; undercounting is safe
			}
			next = v + 1
		case n == 0 || int32(uint32(w)-uint32(v>>countBits)) > 0:
			next = tag | 1 // empty, or an older window: start over
		default:
			return // the slot holds a newer window: drop this late request
		}
		if s.CompareAndSwap(v, next) {
			return
		}
	}
}

// RecordSuccess does nothing: the ratio is over requests, whatever their
// outcome.
func (g *Global) RecordSuccess(time.Time) {}

// AcquireRetry asks for one retry in the window of now. It is served from
// this environment's lease when it holds one for the window, refused from
// memory when the store refused earlier in the window, and otherwise
// decided by at most two store calls. kind does not change the price.
//
// A refusal is an *ExhaustedError whose RetryAfter is the time left in the
// window. A store fault is an *UnavailableError, or with FailClosed an
// *ExhaustedError wrapping one.
func (g *Global) AcquireRetry(ctx context.Context, now time.Time, _ Kind) (Release, error) {
	w := g.windowIndex(now)

	g.mu.Lock()
	if g.lease.window == w && g.lease.n > 0 {
		g.lease.n--
		g.stats.Granted++
		g.mu.Unlock()
		return g.grant(w), nil
	}
	if w > g.engaged {
		g.engaged = w
	}
	pending := g.harvestLocked(w)
	funded := pending*g.perRequest >= AllowancePerRetry
	if g.exhausted == w && !funded {
		g.stats.Refused++
		g.stats.CachedRefusals++
		g.mu.Unlock()
		return nil, g.exhaustedError(now, w)
	}
	if err := g.blockedLocked(ctx, now); err != nil {
		g.stats.Unavailable++
		g.mu.Unlock()
		return nil, g.faultError(now, err)
	}
	take := int64(1)
	if g.exhausted != w {
		take = g.leaseSizeLocked(w)
	}
	g.held[w&1].n -= pending // now in flight
	shard := g.pickShardLocked()
	g.mu.Unlock()

	deposit := pending * g.perRequest
	allowance, err := g.apply(ctx, w, shard, deposit, take*AllowancePerRetry)
	if errors.Is(err, ErrInsufficient) && take > 1 {
		// A lease of take did not fit; one of what the shard holds, with
		// this deposit, may. The refusal applied nothing, so the deposit is
		// still unsent and may be sent again.
		avail := max(allowance, 0)
		if avail <= AllowancePerRetry*MaxLeaseSize && avail+deposit >= AllowancePerRetry && avail+deposit < take*AllowancePerRetry {
			take = (avail + deposit) / AllowancePerRetry
			allowance, err = g.apply(ctx, w, shard, deposit, take*AllowancePerRetry)
			if errors.Is(err, ErrInsufficient) {
				// Raced with another environment: keep the deposit for
				// later rather than pay a third write now.
				g.mu.Lock()
				g.refusedLocked(w, pending)
				g.mu.Unlock()
				return nil, g.exhaustedError(now, w)
			}
		}
	}
	switch {
	case err == nil:
		g.mu.Lock()
		g.grantedLocked(w, pending, take, allowance)
		g.mu.Unlock()
		return g.grant(w), nil
	case errors.Is(err, ErrInsufficient):
		if deposit > 0 {
			// Bank the deposit: an update that takes nothing cannot be
			// refused, and the fleet's fractions add up only in the store.
			_, err = g.apply(ctx, w, shard, deposit, 0)
		}
		g.mu.Lock()
		switch {
		case err == nil || errors.Is(err, ErrInsufficient):
			// Banked, or (a store breaking its contract) refused and so
			// not applied: keep it.
			if deposit > 0 && err == nil {
				g.stats.ReportedRequests += pending
				pending = 0
			}
			g.refusedLocked(w, pending)
		default:
			// The bank's fate is unknown: the requests are lost.
			g.faultLocked(ctx, now, pending)
			g.refusedLocked(w, 0)
		}
		g.mu.Unlock()
		return nil, g.exhaustedError(now, w)
	default:
		g.mu.Lock()
		g.faultLocked(ctx, now, pending)
		g.stats.Unavailable++
		g.mu.Unlock()
		return nil, g.faultError(now, err)
	}
}

// Flush reports this environment's unreported requests of the current
// window (by the configured Now) when they are worth at least one retry
// and this environment asked for a global retry in the window: then the
// allowance can serve others, and it would be lost if the environment were
// frozen until the window ended. Otherwise it does nothing, so calling it
// after every Lambda invocation costs no write on the healthy path. It
// makes at most one store call and returns an *UnavailableError if that
// call fails (the requests are then lost, never sent again) or is skipped
// during the fault cooldown (they stay pending).
func (g *Global) Flush(ctx context.Context) error {
	return g.FlushAt(ctx, g.cfg.Now())
}

// FlushAt is Flush at the time now.
func (g *Global) FlushAt(ctx context.Context, now time.Time) error {
	w := g.windowIndex(now)
	g.mu.Lock()
	if g.engaged != w {
		g.mu.Unlock()
		return nil
	}
	pending := g.harvestLocked(w)
	if pending*g.perRequest < AllowancePerRetry {
		g.mu.Unlock()
		return nil
	}
	if err := g.blockedLocked(ctx, now); err != nil {
		g.mu.Unlock()
		return &UnavailableError{Budget: g.label, Err: err}
	}
	g.held[w&1].n -= pending
	shard := g.pickShardLocked()
	g.mu.Unlock()

	_, err := g.apply(ctx, w, shard, pending*g.perRequest, 0)

	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.stats.ReportedRequests += pending
		return nil
	case errors.Is(err, ErrInsufficient):
		// Cannot happen for an update that takes nothing; the store says
		// nothing was applied, so keep the requests.
		g.restoreLocked(w, pending)
	default:
		g.faultLocked(ctx, now, pending)
	}
	return &UnavailableError{Budget: g.label, Err: err}
}

// apply makes one store call bounded by StoreTimeout.
func (g *Global) apply(ctx context.Context, w int64, shard int, deposit, take int64) (int64, error) {
	g.storeCalls.Add(1)
	ctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	return g.store.Apply(ctx,
		Key{Name: g.name, Shard: shard, Window: g.windowStart(w)},
		Update{
			Floor:   g.floorShares[shard],
			Deposit: deposit,
			Take:    take,
			Expires: g.windowStart(w + 1).Add(g.expiryMargin),
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

// restoreLocked puts back requests of window w whose store call applied
// nothing.
func (g *Global) restoreLocked(w, n int64) {
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

// grantedLocked records a successful lease of take retries in window w
// that deposited pending requests and left allowance in the shard; one
// retry goes to the caller.
func (g *Global) grantedLocked(w, pending, take, allowance int64) {
	g.stats.Granted++
	g.stats.Leases++
	g.stats.LeasedRetries += take
	g.stats.ReportedRequests += pending
	// An exhausted environment that spent a retry it earned itself stays
	// exhausted unless the shard now holds another retry. (The allowance
	// only decides whether to ask the store again; a wrong value costs a
	// call, never a retry.)
	if g.exhausted == w && allowance >= AllowancePerRetry {
		g.exhausted = noWindow
	}
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

// refusedLocked records a refusal in window w, keeping pending requests
// whose deposit was not applied.
func (g *Global) refusedLocked(w, pending int64) {
	g.stats.Refused++
	g.restoreLocked(w, pending)
	if w > g.exhausted {
		g.exhausted = w
	}
}

// faultLocked records a store call that failed with pending requests in it
// and, unless the caller's own context ended, starts the cooldown.
func (g *Global) faultLocked(ctx context.Context, now time.Time, pending int64) {
	g.stats.Faults++
	g.stats.LostRequests += pending
	if ctx.Err() == nil && g.cfg.FaultCooldown > 0 {
		if until := now.Add(g.cfg.FaultCooldown); until.After(g.faultUntil) {
			g.faultUntil = until
		}
	}
}

// blockedLocked returns why a store call must not be made now, if it must
// not.
func (g *Global) blockedLocked(ctx context.Context, now time.Time) error {
	if now.Before(g.faultUntil) {
		return errCoolingDown
	}
	return ctx.Err()
}

// leaseSizeLocked is the size of the next lease in window w: 1, then
// doubling with every lease taken in the window, up to LeaseSize.
func (g *Global) leaseSizeLocked(w int64) int64 {
	var n int64
	if g.leased.window == w {
		n = g.leased.n
	}
	return min(int64(1)<<min(n, 30), int64(g.cfg.LeaseSize))
}

// pickShardLocked picks a shard with the configured Rand, whatever it
// returns.
func (g *Global) pickShardLocked() int {
	s := len(g.floorShares)
	if s == 1 {
		return 0
	}
	r := g.cfg.Rand()
	if !(r > 0) { // also NaN
		return 0
	}
	if r >= 1 {
		return s - 1
	}
	return min(int(r*float64(s)), s-1)
}

// exhaustedError is the refusal in window w at now.
func (g *Global) exhaustedError(now time.Time, w int64) error {
	return &ExhaustedError{Budget: g.label, RetryAfter: max(g.windowStart(w+1).Sub(now), 0)}
}

// faultError is the answer when the store could not decide.
func (g *Global) faultError(now time.Time, cause error) error {
	u := &UnavailableError{Budget: g.label, Err: cause}
	if !g.cfg.FailClosed {
		return u
	}
	g.mu.Lock()
	until := g.faultUntil
	g.mu.Unlock()
	return &ExhaustedError{Budget: g.label, RetryAfter: max(until.Sub(now), 0), Cause: u}
}

// windowIndex is the number of the window now falls in.
func (g *Global) windowIndex(now time.Time) int64 {
	ms := now.UnixMilli()
	w := ms / g.windowMilli
	if ms%g.windowMilli < 0 {
		w--
	}
	return w
}

func (g *Global) windowStart(w int64) time.Time {
	return time.UnixMilli(w * g.windowMilli).UTC()
}
