// Package layout names the DynamoDB items herdguard's stores keep: each
// item's partition key and attribute names, and how times are written into
// them. Package dynamo writes these items; package internal/memstore keeps
// the same items in memory and bills them (with a capacity.Meter) as
// DynamoDB would bill the items dynamo writes, so both must agree on every
// name here. docs/ARCHITECTURE.md ("DynamoDB item layout") describes it.
package layout

import (
	"fmt"
	"strconv"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// Attribute names. Every item has AttrPK; the others are per item kind.
const (
	AttrPK      = "pk"      // S: the item's key, see the key functions below
	AttrExpires = "expires" // N: TTL, seconds since the Unix epoch

	// budget window shard
	AttrAllowance = "allowance" // N: millionths of a retry left in the shard's window

	// breaker state
	AttrState     = "state"      // S: "closed", "open" or "half-open"
	AttrEpoch     = "epoch"      // N: transition counter (also on probe slots)
	AttrOpenUntil = "open_until" // N: Unix ms; absent when zero
	AttrReopens   = "reopens"    // N: consecutive openings
	// AttrWatchUntil is when the fleet stops counting (Unix ms; absent
	// when it never counted). The fleet's buckets are in the state item
	// too, in the attributes of Slots.
	AttrWatchUntil = "watch_until"

	// breaker override
	AttrOverride = "override" // S: "none", "force-open", "force-closed" or "disabled"
	AttrUntil    = "until"    // N: Unix ms; absent when the override does not lapse

	// half-open probe slot
	AttrLeaseUntil = "lease_until" // N: Unix ms

	// A read replica holds the state item's and the override item's
	// attributes (but their pk and expires) as they were read at
	// copied_at.
	AttrCopiedAt = "copied_at" // N: Unix ms
)

// SlotNames are the attribute names of one slot of fleet counts in the
// breaker state item: slot i holds bucket b<i> (N, the bucket number; the
// slot is empty without it) and its counts r<i>, s<i>, f<i>, n<i> (N:
// requests, successes, failures, samples; see breaker.Bucket).
type SlotNames struct {
	Bucket, Requests, Successes, Failures, Samples string
}

// Slots are the names of every slot, slot i at index i.
var Slots = func() (a [breaker.FleetSlots]SlotNames) {
	for i := range a {
		n := strconv.Itoa(i)
		a[i] = SlotNames{Bucket: "b" + n, Requests: "r" + n, Successes: "s" + n, Failures: "f" + n, Samples: "n" + n}
	}
	return a
}()

// All returns the slot's attribute names, the bucket number's first.
func (n SlotNames) All() [5]string {
	return [5]string{n.Bucket, n.Requests, n.Successes, n.Failures, n.Samples}
}

// Counts returns the names of the slot's four counts.
func (n SlotNames) Counts() [4]string {
	return [4]string{n.Requests, n.Successes, n.Failures, n.Samples}
}

// Key layout. Names pass the name rule (internal/names), so they never contain the
// separator '#', and the prefixes "b#" and "c#" keep budgets and breakers
// apart: two different (kind, name, ...) tuples never map to one key.
const (
	Sep            = "#"
	BudgetPrefix   = "b" + Sep
	BreakerPrefix  = "c" + Sep
	OverrideSuffix = Sep + "override"
	ProbeInfix     = Sep + "p" + Sep
	ReplicaInfix   = Sep + "r" + Sep
)

// OverrideKeyPattern is an IAM StringLike pattern matching the key of every
// breaker's override item and no other key (see dynamo.OverrideKeyPattern).
const OverrideKeyPattern = BreakerPrefix + "*" + OverrideSuffix

// CleanupGrace is how long items that only serve a lapsed probe lease or
// override are kept past it before TTL removes them.
const CleanupGrace = 24 * time.Hour

// BudgetKey returns "b#<name>#<shard>#<windowStartUnixMilli>"; the caller
// has validated name, shard and window.
func BudgetKey(name string, shard int, windowMilli int64) string {
	return BudgetPrefix + name + Sep + strconv.Itoa(shard) + Sep + strconv.FormatInt(windowMilli, 10)
}

// StateKey returns "c#<name>", the breaker state item's key.
func StateKey(name string) string { return BreakerPrefix + name }

// OverrideKey returns "c#<name>#override", the operator override item's key.
func OverrideKey(name string) string { return BreakerPrefix + name + OverrideSuffix }

// ProbeKey returns "c#<name>#p#<slot>", a half-open probe slot item's key.
func ProbeKey(name string, slot int) string {
	return BreakerPrefix + name + ProbeInfix + strconv.Itoa(slot)
}

// ReplicaKey returns "c#<name>#r#<i>", read replica i of a breaker's
// state and override items.
func ReplicaKey(name string, i int) string {
	return BreakerPrefix + name + ReplicaInfix + strconv.Itoa(i)
}

// TTLSeconds converts an expiry in Unix milliseconds (not negative) into
// the TTL attribute's Unix seconds, rounding up so that DynamoDB never
// deletes an item before it.
func TTLSeconds(unixMilli int64) int64 { return (unixMilli + 999) / 1000 }

// ParseOverride is the inverse of breaker.Override's String: the values an
// override item's "override" attribute may hold ("" reads as "none").
func ParseOverride(s string) (breaker.Override, error) {
	switch s {
	case "none", "":
		return breaker.NoOverride, nil
	case "force-open":
		return breaker.ForcedOpen, nil
	case "force-closed":
		return breaker.ForcedClosed, nil
	case "disabled":
		return breaker.Disabled, nil
	}
	return breaker.NoOverride, fmt.Errorf("herdguard: unknown breaker override %q (want none, force-open, force-closed or disabled)", s)
}
