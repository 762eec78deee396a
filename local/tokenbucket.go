package local

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/budget"
)

// Defaults of TokenBucketConfig: the AWS SDKs' standard retry mode with the
// retry behaviour AWS announced for 2026.
const (
	defaultCapacity       = 500
	defaultTransientCost  = 14
	defaultThrottlingCost = 5
	defaultSuccessReward  = 1
)

// tokenBucketLayer is the Budget field of the *budget.ExhaustedError a
// TokenBucket returns when it refuses a retry.
const tokenBucketLayer = "local-token-bucket"

// TokenBucketConfig configures a TokenBucket. The zero value of each field
// selects its default: the AWS SDKs' standard retry mode with the retry
// behaviour AWS announced for 2026.
type TokenBucketConfig struct {
	// Capacity is the number of tokens the bucket holds when full; it
	// starts full. It must be at least TransientCost and ThrottlingCost,
	// or some kind of retry could never be granted. 0 means 500.
	Capacity int
	// TransientCost is taken for a retry after a transient failure (5xx,
	// timeout, dropped connection); 0 means 14.
	TransientCost int
	// ThrottlingCost is taken for a retry after throttling (429, or 503
	// with Retry-After); 0 means 5.
	ThrottlingCost int
	// SuccessReward is put back for every call that succeeds on its first
	// attempt (RecordSuccess), up to Capacity; 0 means 1.
	SuccessReward int
}

// withDefaults returns c with every zero field set to its default.
func (c TokenBucketConfig) withDefaults() TokenBucketConfig {
	if c.Capacity == 0 {
		c.Capacity = defaultCapacity
	}
	if c.TransientCost == 0 {
		c.TransientCost = defaultTransientCost
	}
	if c.ThrottlingCost == 0 {
		c.ThrottlingCost = defaultThrottlingCost
	}
	if c.SuccessReward == 0 {
		c.SuccessReward = defaultSuccessReward
	}
	return c
}

// validate reports the first field of c (defaults applied) that is out of
// range.
func (c TokenBucketConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return &herdguard.ConfigError{Field: "local.TokenBucketConfig." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Capacity < 0:
		return bad("Capacity", "is %d; want at least 0 (0 for the default %d)", c.Capacity, defaultCapacity)
	case c.TransientCost < 0:
		return bad("TransientCost", "is %d; want at least 0 (0 for the default %d)", c.TransientCost, defaultTransientCost)
	case c.ThrottlingCost < 0:
		return bad("ThrottlingCost", "is %d; want at least 0 (0 for the default %d)", c.ThrottlingCost, defaultThrottlingCost)
	case c.SuccessReward < 0:
		return bad("SuccessReward", "is %d; want at least 0 (0 for the default %d)", c.SuccessReward, defaultSuccessReward)
	case c.Capacity < c.TransientCost:
		return bad("Capacity", "(%d) is below TransientCost (%d): no retry after a transient failure could ever be granted", c.Capacity, c.TransientCost)
	case c.Capacity < c.ThrottlingCost:
		return bad("Capacity", "(%d) is below ThrottlingCost (%d): no retry after throttling could ever be granted", c.Capacity, c.ThrottlingCost)
	}
	return nil
}

// TokenBucket is the AWS SDK's retry quota: a bucket of tokens that retries
// take from and successes refill. A retry after a transient failure costs
// TransientCost, one after throttling ThrottlingCost; a call that succeeds
// on its first attempt puts back SuccessReward; a retry that succeeds gets
// its own cost back (Release with budget.RetrySucceeded), one that never ran
// too (budget.RetryNotUsed), one that failed does not (budget.RetryFailed).
// When the bucket holds less than a retry's cost, the retry is refused
// with a *budget.ExhaustedError whose Budget is "local-token-bucket".
//
// A TokenBucket recovers only through successes, never through time alone,
// so it ignores the times it is given. It is safe for concurrent use and
// does not allocate except to build the error of a refusal.
type TokenBucket struct {
	// tokens is the fill level. It stays in [0, capacity]: every change is
	// a compare-and-swap from a value read just before, taking only when
	// the value covers the cost and adding at most capacity minus the
	// value.
	tokens atomic.Int64

	// Immutable after construction.
	capacity       int64
	transientCost  int64
	throttlingCost int64
	reward         int64

	// The Releases handed out with grants, built once so that a grant
	// does not allocate. A grant needs no state of its own: the refund is
	// the cost of its kind.
	releaseTransient  budget.Release
	releaseThrottling budget.Release
}

var _ budget.Budget = (*TokenBucket)(nil)

// NewTokenBucket returns a full bucket configured by cfg (zero fields take
// their defaults). It returns a *herdguard.ConfigError naming the field if
// cfg is invalid.
func NewTokenBucket(cfg TokenBucketConfig) (*TokenBucket, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &TokenBucket{
		capacity:       int64(cfg.Capacity),
		transientCost:  int64(cfg.TransientCost),
		throttlingCost: int64(cfg.ThrottlingCost),
		reward:         int64(cfg.SuccessReward),
	}
	b.tokens.Store(b.capacity)
	b.releaseTransient = b.doneTransient
	b.releaseThrottling = b.doneThrottling
	return b, nil
}

// Available returns the number of tokens in the bucket.
func (b *TokenBucket) Available() int { return int(b.tokens.Load()) }

// RecordRequest does nothing: a first attempt is free.
func (b *TokenBucket) RecordRequest(time.Time) {}

// RecordSuccess puts SuccessReward tokens back, up to the capacity.
func (b *TokenBucket) RecordSuccess(time.Time) { b.refund(b.reward) }

// AcquireRetry takes the cost of a retry after a failure of the given kind
// (an unknown kind is priced as Transient, the dearer one). It returns a
// *budget.ExhaustedError when the bucket holds less than the cost. It never
// blocks and ignores ctx and now.
func (b *TokenBucket) AcquireRetry(_ context.Context, _ time.Time, kind budget.Kind) (budget.Release, error) {
	cost, release := b.transientCost, b.releaseTransient
	if kind == budget.Throttling {
		cost, release = b.throttlingCost, b.releaseThrottling
	}
	for {
		old := b.tokens.Load()
		if old < cost {
			return nil, &budget.ExhaustedError{Budget: tokenBucketLayer}
		}
		if b.tokens.CompareAndSwap(old, old-cost) {
			return release, nil
		}
	}
}

func (b *TokenBucket) doneTransient(o budget.Outcome)  { b.done(o, b.transientCost) }
func (b *TokenBucket) doneThrottling(o budget.Outcome) { b.done(o, b.throttlingCost) }

// done refunds cost unless the retry ran and failed.
func (b *TokenBucket) done(o budget.Outcome, cost int64) {
	switch o {
	case budget.RetrySucceeded, budget.RetryNotUsed:
		b.refund(cost)
	}
}

// refund adds n tokens, up to the capacity.
func (b *TokenBucket) refund(n int64) {
	for {
		old := b.tokens.Load()
		if old >= b.capacity || n <= 0 {
			return // full: the healthy path stops here, without a write
		}
		next := b.capacity
		if n < b.capacity-old {
			next = old + n
		}
		if b.tokens.CompareAndSwap(old, next) {
			return
		}
	}
}
