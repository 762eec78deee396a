package dynamo

import (
	"fmt"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/names"
)

// OverrideKeyPattern is an IAM StringLike pattern for the condition key
// dynamodb:LeadingKeys (the partition key of the items a request touches)
// that matches the key "c#<name>#override" of every breaker's override
// item and no other key the stores write: names cannot contain '#', so a
// state key "c#<name>" never ends in "#override", and probe keys end in
// digits. A deployment denies its functions writes to these items
// with
//
//	"Effect": "Deny",
//	"Action": ["dynamodb:PutItem", "dynamodb:UpdateItem", ...],
//	"Condition": {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["c#*#override"]}}
//
// and grants an operators' role writes to them only with
// ForAllValues:StringLike (SECURITY.md).
const OverrideKeyPattern = layout.OverrideKeyPattern

// Bounds on values the stores write or accept. Anything outside them in an
// item is reported as a *MalformedItemError rather than trusted.
const (
	// maxShards bounds budget.Key.Shard (1024). Sizing guidance is in the
	// package documentation; a few shards suffice for thousands of retries
	// a second.
	maxShards = 1 << 10
	// maxProbeSlots bounds the limit passed to BreakerStore.AcquireProbe.
	// Each slot is an item, and a denied AcquireProbe costs one write per
	// slot, so a half-open breaker should admit a handful of probes.
	maxProbeSlots = 64
	// maxAmount (2^53) bounds budget.Update's Floor, Deposit and Take, and
	// the allowance an item may hold: 2^53 retries in one window is far beyond
	// any real budget, so a larger stored value is reported as malformed
	// rather than granted from.
	maxAmount    = 1 << 53
	maxEpoch     = 1 << 53         // a transition a second for 285 million years
	maxReopens   = 1<<31 - 1       // fits any int
	maxUnixMilli = 253402300799999 // 9999-12-31T23:59:59.999Z
	// maxBucket bounds a fleet bucket's number: Unix milliseconds divided
	// by a bucket width of at least one millisecond.
	maxBucket = maxUnixMilli
	// maxCount bounds a bucket's stored counts: Reports add at most
	// maxAmount each, so only a hand-edited item gets near it.
	maxCount = 1<<63 - 1
)

// budgetKey returns "b#<name>#<shard>#<windowStartUnixMilli>".
func budgetKey(k budget.Key) (string, error) {
	if err := names.Validate(k.Name); err != nil {
		return "", err
	}
	if k.Shard < 0 || k.Shard >= maxShards {
		return "", fmt.Errorf("herdguard: dynamo: budget %q: shard %d out of range [0, %d)", k.Name, k.Shard, maxShards)
	}
	ms, err := unixMilli("window", k.Window)
	if err != nil {
		return "", fmt.Errorf("herdguard: dynamo: budget %q: %w", k.Name, err)
	}
	return layout.BudgetKey(k.Name, k.Shard, ms), nil
}

// unixMilli converts a time the stores write into Unix milliseconds. It
// refuses the zero time and times outside [1970, 9999], which would only
// arise from a caller's bug.
func unixMilli(what string, t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, fmt.Errorf("%s is the zero time", what)
	}
	ms := t.UnixMilli()
	if ms < 0 || ms > maxUnixMilli {
		return 0, fmt.Errorf("%s %s is outside the years 1970 to 9999", what, t.Format(time.RFC3339Nano))
	}
	return ms, nil
}

// ttlSeconds converts an expiry into the TTL attribute's Unix seconds,
// rounding up so that DynamoDB never deletes an item before t.
func ttlSeconds(what string, t time.Time) (int64, error) {
	ms, err := unixMilli(what, t)
	if err != nil {
		return 0, err
	}
	return layout.TTLSeconds(ms), nil
}
