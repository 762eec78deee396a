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

// stateItemSize is a breaker state item: pk, state, epoch, reopens, and
// open_until when set. Epoch 0 is a state never written: no item.
func stateItemSize(key string, state breaker.State, epoch uint64, reopens int, openUntil time.Time) int {
	if epoch == 0 {
		return 0
	}
	var it capacity.Item
	it.String(layout.AttrPK, key).
		String(layout.AttrState, state.String()).
		Number(layout.AttrEpoch, strconv.FormatUint(epoch, 10)).
		Int(layout.AttrReopens, int64(reopens))
	if !openUntil.IsZero() {
		it.Int(layout.AttrOpenUntil, openUntil.UnixMilli())
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

// windowItemSize is a breaker fleet window: pk, successes, failures, envs
// (a string set whose elements add up to envBytes), expires.
func windowItemSize(key string, successes, failures int64, envBytes int, expires time.Time) int {
	var it capacity.Item
	it.String(layout.AttrPK, key).
		Int(layout.AttrSuccesses, successes).
		Int(layout.AttrFailures, failures).
		Raw(layout.AttrEnvs, envBytes)
	addExpires(&it, expires)
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
