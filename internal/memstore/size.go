package memstore

import (
	"strconv"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/layout"
)

// The sizes of the items package dynamo writes, attribute by attribute as
// it writes them (internal/layout), for the Meter. A size of 0 is a
// missing item.

// budgetItemSize is a budget window shard: pk, allowance, expires.
func budgetItemSize(key string, allowance int64, expires time.Time) int {
	var it capacity.Item
	it.String(layout.AttrPK, key).Int(layout.AttrAllowance, allowance)
	addExpires(&it, expires)
	return it.Size()
}

// stateItemSize is a breaker state item: pk, state, epoch, reopens
// (written by Transitions; an item a Report created has none),
// open_until and watch_until when set, and each slot that holds a bucket
// (b<i>, r<i>, s<i>, f<i>, n<i>). e must hold a state item.
func stateItemSize(key string, e *breakerEntry) int {
	var it capacity.Item
	it.String(layout.AttrPK, key).
		String(layout.AttrState, e.state.String()).
		Number(layout.AttrEpoch, strconv.FormatUint(e.epoch, 10))
	if e.reopensSet {
		it.Int(layout.AttrReopens, int64(e.reopens))
	}
	if !e.openUntil.IsZero() {
		it.Int(layout.AttrOpenUntil, e.openUntil.UnixMilli())
	}
	if !e.watchUntil.IsZero() {
		it.Int(layout.AttrWatchUntil, e.watchUntil.UnixMilli())
	}
	for i, b := range e.buckets {
		if b.Num == 0 {
			continue
		}
		n := layout.Slots[i]
		it.Int(n.Bucket, b.Num).Int(n.Requests, b.Requests).Int(n.Successes, b.Successes).
			Int(n.Failures, b.Failures).Int(n.Samples, b.Samples)
	}
	return it.Size()
}

// overrideItemSize is an override item: pk, override, and until and
// expires (a day later) for an override that lapses. set is false for an
// override never written: no item.
func overrideItemSize(key string, set bool, o breaker.Override, until time.Time) int {
	if !set {
		return 0
	}
	var it capacity.Item
	it.String(layout.AttrPK, key).String(layout.AttrOverride, o.String())
	if o != breaker.NoOverride && !until.IsZero() {
		it.Int(layout.AttrUntil, until.UnixMilli())
		addExpires(&it, until.Add(layout.CleanupGrace))
	}
	return it.Size()
}

// probeItemSize is a probe slot: pk, epoch, lease_until, expires (a day
// after the lease).
func probeItemSize(key string, p probeSlot) int {
	if !p.taken {
		return 0
	}
	var it capacity.Item
	it.String(layout.AttrPK, key).
		Number(layout.AttrEpoch, strconv.FormatUint(p.epoch, 10)).
		Int(layout.AttrLeaseUntil, p.leaseUntil.UnixMilli())
	addExpires(&it, p.leaseUntil.Add(layout.CleanupGrace))
	return it.Size()
}

// addExpires adds the TTL attribute for exp (none for the zero time, which
// only the in-memory stores accept).
func addExpires(it *capacity.Item, exp time.Time) {
	if !exp.IsZero() {
		it.Int(layout.AttrExpires, layout.TTLSeconds(exp.UnixMilli()))
	}
}

// replicaItemSize is a read replica copied at now from e's state and
// override items: pk, copied_at, expires (a day later), and the two items'
// attributes but their pk and expires. e may be nil (neither item exists).
func replicaItemSize(key, name string, e *breakerEntry, now time.Time) int {
	var it capacity.Item
	it.String(layout.AttrPK, key).Int(layout.AttrCopiedAt, now.UnixMilli())
	addExpires(&it, now.Add(layout.CleanupGrace))
	size := it.Size()
	if st := e.stateSize(name); st > 0 {
		var pk capacity.Item
		size += st - pk.String(layout.AttrPK, layout.StateKey(name)).Size()
	}
	if e != nil && e.overrideSet {
		var ov capacity.Item
		ov.String(layout.AttrOverride, e.override.String())
		if e.override != breaker.NoOverride && !e.overrideUntil.IsZero() {
			ov.Int(layout.AttrUntil, e.overrideUntil.UnixMilli())
		}
		size += ov.Size()
	}
	return size
}
