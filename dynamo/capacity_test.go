package dynamo

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/capacity"
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/names"
	"github.com/herdguard/herdguard/internal/readspread"
)

// itemSize returns the size DynamoDB bills for an item of string and
// number attributes.
func itemSize(t *testing.T, a attrs) int {
	t.Helper()
	var it capacity.Item
	for name, v := range a {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			it.String(name, v.Value)
		case *types.AttributeValueMemberN:
			it.Number(name, v.Value)
		default:
			t.Fatalf("attribute %s is %T", name, v)
		}
	}
	return it.Size()
}

// TestItemsUnderOneWriteUnit builds the largest item of every kind the
// stores write and decode (the longest name, every number at the bound
// the decoder accepts, every optional attribute present) and checks that
// it is under 1 KB: each write costs exactly one write unit and each
// read half a read unit, whatever the fleet's size. A read replica, which
// copies the breaker state item (the fleet's counts) and the override, is
// the largest.
func TestItemsUnderOneWriteUnit(t *testing.T) {
	name := strings.Repeat("n", names.MaxLen)
	maxMs := nAV(strconv.FormatInt(maxUnixMilli, 10))

	state := attrs{
		layout.AttrPK:         sAV(layout.StateKey(name)),
		layout.AttrState:      sAV(breaker.HalfOpen.String()),
		layout.AttrEpoch:      nAV(strconv.FormatInt(maxEpoch, 10)),
		layout.AttrOpenUntil:  maxMs,
		layout.AttrReopens:    nAV(strconv.FormatInt(maxReopens, 10)),
		layout.AttrWatchUntil: maxMs,
	}
	for i, n := range layout.Slots {
		state[n.Bucket] = nAV(strconv.FormatInt(maxBucket-maxBucket%breaker.FleetSlots-breaker.FleetSlots+int64(i), 10))
		for _, c := range []string{n.Requests, n.Successes, n.Failures, n.Samples} {
			state[c] = nAV(strconv.FormatInt(maxCount, 10))
		}
	}
	snap, err := decodeState(layout.StateKey(name), state)
	if err != nil {
		t.Fatalf("the largest state item does not decode: %v", err)
	}
	for i, b := range snap.Buckets {
		if b.Num == 0 || b.Samples != maxCount {
			t.Fatalf("slot %d decoded as %+v", i, b)
		}
	}

	override := attrs{
		layout.AttrPK:       sAV(layout.OverrideKey(name)),
		layout.AttrOverride: sAV(breaker.ForcedClosed.String()),
		layout.AttrUntil:    maxMs,
		layout.AttrExpires:  nAV(strconv.FormatInt(maxUnixMilli/1000+1, 10)),
	}
	if _, _, err := decodeOverride(layout.OverrideKey(name), override); err != nil {
		t.Fatalf("the largest override item does not decode: %v", err)
	}
	probe := attrs{
		layout.AttrPK:         sAV(layout.ProbeKey(name, maxProbeSlots-1)),
		layout.AttrEpoch:      nAV(strconv.FormatInt(maxEpoch, 10)),
		layout.AttrLeaseUntil: maxMs,
		layout.AttrExpires:    nAV(strconv.FormatInt(maxUnixMilli/1000+1, 10)),
	}
	bk, err := budgetKey(budget.Key{Name: name, Shard: maxShards - 1, Window: time.UnixMilli(maxUnixMilli)})
	if err != nil {
		t.Fatal(err)
	}
	shard := attrs{
		layout.AttrPK:        sAV(bk),
		layout.AttrAllowance: nAV(strconv.FormatInt(maxAmount, 10)),
		layout.AttrExpires:   nAV(strconv.FormatInt(maxUnixMilli/1000+1, 10)),
	}
	if _, err := allowanceOf(bk, shard, -1); err != nil {
		t.Fatalf("the largest budget item does not decode: %v", err)
	}

	replica := attrs{
		layout.AttrPK:       sAV(layout.ReplicaKey(name, readspread.MaxReplicas-1)),
		layout.AttrCopiedAt: maxMs,
		layout.AttrExpires:  nAV(strconv.FormatInt(maxUnixMilli/1000+1, 10)),
	}
	for k, v := range state {
		if k != layout.AttrPK {
			replica[k] = v
		}
	}
	for _, k := range []string{layout.AttrOverride, layout.AttrUntil} {
		replica[k] = override[k]
	}
	rsnap, _, err := decodeReplica(layout.ReplicaKey(name, 0), replica)
	if err != nil {
		t.Fatalf("the largest read replica does not decode: %v", err)
	}
	if rsnap.Epoch != snap.Epoch || rsnap.Buckets != snap.Buckets || rsnap.Override != breaker.ForcedClosed {
		t.Fatalf("the largest read replica decoded as %+v", rsnap)
	}

	for _, c := range []struct {
		kind string
		item attrs
	}{{"breaker state", state}, {"override", override}, {"probe slot", probe}, {"budget shard", shard}, {"read replica", replica}} {
		size := itemSize(t, c.item)
		t.Logf("largest %s item: %d bytes", c.kind, size)
		if w := capacity.WriteUnits(size, size); w != 1 {
			t.Errorf("the largest %s item is %d bytes: a write costs %v write units, want 1", c.kind, size, w)
		}
		if r := capacity.ReadUnits(size, false); r != 0.5 {
			t.Errorf("the largest %s item is %d bytes: an eventually consistent read costs %v read units, want 0.5", c.kind, size, r)
		}
	}
}
