package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/names"
	"github.com/herdguard/herdguard/internal/readspread"
	"github.com/herdguard/herdguard/internal/slothint"
)

// StoreOptions holds the optional settings of a BudgetStore and a
// BreakerStore. The zero value is ready to use.
type StoreOptions struct {
	// OnRequest, if not nil, is called after every DynamoDB request the
	// store makes, on the caller's goroutine: wire it to metrics to see the
	// table's latency and errors. It must be fast and must not block.
	OnRequest func(RequestInfo)
	// Rand returns a pseudo-random number in [0, 1). A BreakerStore's
	// AcquireProbe uses it to pick the first probe slot it tries, so that
	// environments racing for probes spread over the slots, and Load the
	// first read replica it reads. Nil means math/rand/v2's Float64.
	Rand func() float64
	// Now is the clock by which a BreakerStore dates the read replicas it
	// writes and judges their age (see BreakerStore.Load). Nil means
	// time.Now.
	Now func() time.Time
}

// checkStoreArgs rejects what a store constructor cannot work with.
func checkStoreArgs(constructor string, api API, table string) error {
	if api == nil {
		return &herdguard.ConfigError{Field: "dynamo." + constructor + " api", Reason: "is nil"}
	}
	if msg := checkTableName(table); msg != "" {
		return &herdguard.ConfigError{Field: "dynamo." + constructor + " table", Reason: msg}
	}
	return nil
}

// BreakerStore is a breaker.Store in a DynamoDB table. It is safe for
// concurrent use and holds no lock. Every item it writes stays under 1 KB,
// so each write costs one write unit and each item read half a read unit.
// Its costs, per method:
//
//   - Load: one eventually consistent BatchGetItem of two items; while
//     reads are spread, one of one replica, plus, when it is stale, the
//     two items and one UpdateItem.
//   - Report: one conditional UpdateItem; two after a wrong guess of the
//     slot's form, at most three. No read.
//   - Transition: one conditional UpdateItem.
//   - AcquireProbe: one conditional UpdateItem per slot tried: one when the
//     first is free, limit when all are held (none when limit is 0).
//   - SetOverride: one UpdateItem.
type BreakerStore struct {
	api      API
	table    string
	cfg      StoreOptions
	counters counters
	// hints is what this store last saw of each breaker's slots, to
	// guess Report's first form. It holds no lock.
	hints slothint.Hints
	// spreads decides, per breaker, which items Load reads.
	spreads readspread.Spreads
}

var _ breaker.Store = (*BreakerStore)(nil)

// NewBreakerStore returns a store that keeps breaker state in table, which
// must have the layout CreateTable creates. A nil api or a table name
// DynamoDB would reject is a *herdguard.ConfigError.
func NewBreakerStore(api API, table string, o StoreOptions) (*BreakerStore, error) {
	if err := checkStoreArgs("NewBreakerStore", api, table); err != nil {
		return nil, err
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &BreakerStore{api: api, table: table, cfg: o}
	s.spreads.Offset = int(o.Rand() * readspread.MaxReplicas)
	return s, nil
}

// Stats returns the store's cumulative request counts.
func (s *BreakerStore) Stats() Stats { return s.counters.stats() }

// fail wraps a fault of method op on breaker name so that it satisfies
// errors.Is(err, breaker.ErrStore) and errors.Is/As on its cause.
func (s *BreakerStore) fail(op, name string, err error) error {
	s.counters.countMalformed(err)
	return fmt.Errorf("%w: dynamo %s %q: %w", breaker.ErrStore, op, name, err)
}

// Load reads the state item "c#<name>" and the override item
// "c#<name>#override" with one eventually consistent BatchGetItem. A
// missing state item is the zero Snapshot (closed, epoch 0); a missing
// override item is NoOverride. A partial answer (DynamoDB returning a key
// as unprocessed, which it does under throttling) is an error, never a
// snapshot without its override.
//
// A fleet large enough to have a read throttled spreads its reads: for
// two minutes after a throttled read, this store reads the breaker's read
// replicas "c#<name>#r#<i>" in turn instead, 8 of them at first, 4 times
// more after each further throttle, at most 128. A replica is a copy of
// both items; one copied more than 500 ms ago (by StoreOptions.Now), or
// of an older epoch than this store has seen, is read through: the items
// themselves, then the replica rewritten, unless a later copy is there
// already (one more UpdateItem, whose failure does not fail the Load). See
// "Read replicas" in docs/ARCHITECTURE.md.
func (s *BreakerStore) Load(ctx context.Context, name string) (breaker.Snapshot, error) {
	if err := names.Validate(name); err != nil {
		return breaker.Snapshot{}, s.fail("Load", name, err)
	}
	if err := ctx.Err(); err != nil {
		return breaker.Snapshot{}, s.fail("Load", name, err)
	}
	sp := s.spreads.For(name)
	now := s.cfg.Now()
	replica := sp.Pick(now)
	if replica >= 0 {
		snap, fresh, err := s.readReplica(ctx, name, replica, sp, now)
		if err != nil {
			if errors.Is(err, budget.ErrThrottled) {
				sp.Throttled(now)
			}
			return breaker.Snapshot{}, s.fail("Load", name, err)
		}
		if fresh {
			return snap, nil
		}
	}
	snap, items, err := s.readItems(ctx, name)
	if err != nil {
		if errors.Is(err, budget.ErrThrottled) {
			sp.Throttled(now)
		}
		return breaker.Snapshot{}, s.fail("Load", name, err)
	}
	sp.Read(snap.Epoch)
	if replica >= 0 && ctx.Err() == nil {
		if err := s.writeReplica(ctx, name, replica, items, now); errors.Is(err, budget.ErrThrottled) {
			sp.Throttled(now)
		}
	}
	return snap, nil
}

// batchGet reads keys (of one breaker) with one eventually consistent
// BatchGetItem and returns each key's item (nil for a missing one). A key
// left unprocessed is an error satisfying budget.ErrThrottled.
func (s *BreakerStore) batchGet(ctx context.Context, keys ...string) ([]map[string]types.AttributeValue, error) {
	ka := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		ka[i] = keyAttr(k)
	}
	done := s.counters.instrument(s.cfg.OnRequest, opRead, "BatchGetItem", keys[0])
	out, err := answer(s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
		RequestItems:           map[string]types.KeysAndAttributes{s.table: {Keys: ka, ConsistentRead: aws.Bool(false)}},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}))
	err = markThrottled(err)
	if err == nil {
		for i := range out.ConsumedCapacity {
			s.counters.consumed(opRead, &out.ConsumedCapacity[i])
		}
	}
	done(err)
	if err != nil {
		return nil, fmt.Errorf("BatchGetItem: %w", err)
	}
	if n := len(out.UnprocessedKeys[s.table].Keys); n > 0 {
		s.counters.throttled.Add(1)
		return nil, fmt.Errorf("BatchGetItem left %d of %d keys unprocessed: %w: %w", n, len(keys), budget.ErrThrottled, breaker.ErrThrottled)
	}
	items := make([]map[string]types.AttributeValue, len(keys))
	for _, attrs := range out.Responses[s.table] {
		pk, _, _ := (item{attrs: attrs}).str(layout.AttrPK)
		i := slices.Index(keys, pk)
		if i < 0 {
			return nil, fmt.Errorf("BatchGetItem answered with an item not asked for (pk %q)", pk)
		}
		items[i] = attrs
	}
	return items, nil
}

// readItems reads name's state and override items (items[0] and items[1],
// nil when missing) and decodes them.
func (s *BreakerStore) readItems(ctx context.Context, name string) (breaker.Snapshot, []map[string]types.AttributeValue, error) {
	sk, ovk := layout.StateKey(name), layout.OverrideKey(name)
	items, err := s.batchGet(ctx, sk, ovk)
	if err != nil {
		return breaker.Snapshot{}, nil, err
	}
	snap, err := decodeState(sk, items[0])
	if err != nil {
		return breaker.Snapshot{}, nil, err
	}
	s.hints.For(name).Learn(&snap.Buckets)
	if snap.Override, snap.OverrideUntil, err = decodeOverride(ovk, items[1]); err != nil {
		return breaker.Snapshot{}, nil, err
	}
	return snap, items, nil
}

// readReplica reads replica i of name. fresh is false when the replica is
// missing, malformed or stale (see readspread.Spread.Fresh): then snap is
// not an answer and the items must be read.
func (s *BreakerStore) readReplica(ctx context.Context, name string, i int, sp *readspread.Spread, now time.Time) (snap breaker.Snapshot, fresh bool, err error) {
	key := layout.ReplicaKey(name, i)
	items, err := s.batchGet(ctx, key)
	if err != nil || items[0] == nil {
		return breaker.Snapshot{}, false, err
	}
	snap, copiedAt, err := decodeReplica(key, items[0])
	if err != nil || !sp.Fresh(snap.Epoch, copiedAt, now) {
		// A malformed replica is read through and rewritten, as a stale one.
		return breaker.Snapshot{}, false, nil
	}
	sp.Saw(snap.Epoch)
	s.hints.For(name).Learn(&snap.Buckets)
	return snap, true, nil
}

// replicaAttrs are the attributes a read replica copies: the state item's
// and the override item's, but their pk and expires.
var replicaAttrs = func() []string {
	a := []string{layout.AttrState, layout.AttrEpoch, layout.AttrOpenUntil, layout.AttrReopens, layout.AttrWatchUntil,
		layout.AttrOverride, layout.AttrUntil}
	for _, n := range layout.Slots {
		all := n.All()
		a = append(a, all[:]...)
	}
	return a
}()

// writeReplica writes replica i of name as a copy, dated now, of the state
// and override items read (items[0] and items[1], nil when missing), unless
// the replica holds a copy it may not replace (readspread.Replaces). A
// refusal is no error.
func (s *BreakerStore) writeReplica(ctx context.Context, name string, i int, items []map[string]types.AttributeValue, now time.Time) error {
	expr, err := replicaExpression(items, now)
	if err != nil {
		return err
	}
	key := layout.ReplicaKey(name, i)
	_, err = conditionalUpdate(ctx, s.api, s.table, &s.counters, s.cfg.OnRequest, key, expr)
	if ccf := (*types.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
		return nil
	}
	return err
}

// replicaExpression is the update writing a replica of items dated now.
func replicaExpression(items []map[string]types.AttributeValue, now time.Time) (expression.Expression, error) {
	at := now.UnixMilli()
	upd := expression.Set(expression.Name(layout.AttrCopiedAt), expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(at, 10)})).
		Set(expression.Name(layout.AttrExpires), expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(layout.TTLSeconds(now.Add(layout.CleanupGrace).UnixMilli()), 10)}))
	for _, a := range replicaAttrs {
		var v types.AttributeValue
		for _, it := range items {
			if x, ok := it[a]; ok {
				v = x
			}
		}
		if v != nil {
			upd = upd.Set(expression.Name(a), expression.Value(v))
		} else {
			upd = upd.Remove(expression.Name(a))
		}
	}
	// The condition is readspread.Replaces.
	copied := expression.Name(layout.AttrCopiedAt)
	cond := expression.AttributeNotExists(copied).
		Or(copied.LessThan(expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(at, 10)}))).
		Or(copied.GreaterThan(expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(readspread.MaxAge).UnixMilli(), 10)})))
	return expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
}

// decodeReplica decodes a read replica: the state it copied (the zero
// Snapshot if the state item was missing), its override, and when it was
// copied.
func decodeReplica(key string, attrs map[string]types.AttributeValue) (breaker.Snapshot, time.Time, error) {
	it := item{key: key, attrs: attrs}
	copiedAt, err := it.unixMilli(layout.AttrCopiedAt)
	switch {
	case err != nil:
		return breaker.Snapshot{}, time.Time{}, err
	case copiedAt.IsZero():
		return breaker.Snapshot{}, time.Time{}, it.malformed(layout.AttrCopiedAt, "is missing")
	}
	var snap breaker.Snapshot
	if _, ok := attrs[layout.AttrState]; ok {
		if snap, err = decodeState(key, attrs); err != nil {
			return breaker.Snapshot{}, time.Time{}, err
		}
	} else if _, ok := attrs[layout.AttrEpoch]; ok {
		return breaker.Snapshot{}, time.Time{}, it.malformed(layout.AttrState, "is missing")
	}
	if _, ok := attrs[layout.AttrOverride]; ok {
		if snap.Override, snap.OverrideUntil, err = decodeOverride(key, attrs); err != nil {
			return breaker.Snapshot{}, time.Time{}, err
		}
	}
	return snap, copiedAt, nil
}

// Report adds r's counts to slot r.Bucket mod breaker.FleetSlots of the
// state item "c#<name>" and sets watch_until when r.WatchUntil is not zero,
// with one conditional UpdateItem in the common case and at most three. The
// write is conditioned on the epoch: another epoch is returned with
// breaker.ErrConflict and nothing applied. A report for a bucket older than
// the slot's drops its counts. In the rare case that the slot moves on
// again during the Report (clock skew of a whole rolling window), it returns
// an error satisfying breaker.ErrStore, the counts not applied.
//
// The answer is the state after the write, without the override (Override
// and OverrideUntil zero, see breaker.Store). A malformed item is reported
// as a *MalformedItemError. A Report that
// times out may have been applied, and the SDK's retry after a lost answer
// may apply its counts twice (at most once more per retry).
//
// See "DynamoDB item layout" in docs/ARCHITECTURE.md for the three write
// forms, how the first is guessed, and why three writes suffice.
func (s *BreakerStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	if err := validateReport(name, r); err != nil {
		return breaker.Snapshot{}, s.fail("Report", name, err)
	}
	slot := int(r.Bucket % breaker.FleetSlots)
	h := s.hints.For(name)
	form, newBucket := h.Predict(r)
	for writes := 1; ; writes++ {
		if err := ctx.Err(); err != nil {
			return breaker.Snapshot{}, s.fail("Report", name, err)
		}
		expr, err := reportExpression(r, form)
		if err != nil {
			return breaker.Snapshot{}, s.fail("Report", name, err)
		}
		snap, err, fault := s.writeState(ctx, "Report", name, expr)
		if fault != nil {
			return breaker.Snapshot{}, fault
		}
		if err == nil {
			if newBucket && writes == 1 {
				h.NoteStart(form)
			}
			return snap, nil
		}
		if snap.Epoch != r.Epoch {
			return snap, fmt.Errorf("herdguard: dynamo: breaker %q: epoch is %d, not %d: %w", name, snap.Epoch, r.Epoch, breaker.ErrConflict)
		}
		next := slothint.FormFor(snap.Buckets[slot].Num, r.Bucket)
		if newBucket && writes == 1 {
			h.NoteStart(next) // what the slot held when the first write landed
		}
		switch {
		case next == form:
			// The condition failed, yet the item decodes as meeting it:
			// only a value DynamoDB and the decoder read differently can
			// do that.
			return breaker.Snapshot{}, s.fail("Report", name, fmt.Errorf("UpdateItem refused the %s form although the item calls for it: %w", form, err))
		case next == slothint.Late && r.WatchUntil.IsZero():
			// A late report with no watch to extend: nothing to write.
			return snap, nil
		case writes == maxReportWrites:
			return breaker.Snapshot{}, s.fail("Report", name, fmt.Errorf("slot %d kept moving during the report (now bucket %d, reported %d, %d writes): %w", slot, snap.Buckets[slot].Num, r.Bucket, writes, err))
		}
		form = next
	}
}

// maxReportWrites bounds the writes of one Report (see Report).
const maxReportWrites = 3

// validateReport checks Report's arguments.
func validateReport(name string, r breaker.Report) error {
	if err := names.Validate(name); err != nil {
		return err
	}
	if r.Epoch > maxEpoch {
		return fmt.Errorf("epoch %d above %d", r.Epoch, uint64(maxEpoch))
	}
	if r.Bucket < 1 || r.Bucket > maxBucket {
		return fmt.Errorf("bucket %d must be in [1, %d]", r.Bucket, int64(maxBucket))
	}
	for _, c := range []struct {
		what string
		v    int64
	}{{"requests", r.Requests}, {"successes", r.Successes}, {"failures", r.Failures}, {"samples", r.Samples}} {
		if c.v < 0 || c.v > maxAmount {
			return fmt.Errorf("%s %d must be in [0, %d]", c.what, c.v, int64(maxAmount))
		}
	}
	if !r.WatchUntil.IsZero() {
		if _, err := unixMilli("watch-until", r.WatchUntil); err != nil {
			return err
		}
	}
	return nil
}

// reportExpression builds the update and condition of a Report of r in
// the form f; r must be valid.
func reportExpression(r breaker.Report, f slothint.Form) (expression.Expression, error) {
	n := layout.Slots[r.Bucket%breaker.FleetSlots]
	b := expression.Name(n.Bucket)
	counts := [4]struct {
		name string
		v    int64
	}{{n.Requests, r.Requests}, {n.Successes, r.Successes}, {n.Failures, r.Failures}, {n.Samples, r.Samples}}
	var (
		update expression.UpdateBuilder
		cond   expression.ConditionBuilder
	)
	switch f {
	case slothint.Add:
		var typed []expression.ConditionBuilder
		for _, c := range counts {
			update = update.Add(expression.Name(c.name), numberValue(c.v))
			typed = append(typed, expression.Name(c.name).AttributeType(expression.Number))
		}
		cond = expression.And(b.Equal(numberValue(r.Bucket)), typed[0], typed[1:]...)
	case slothint.Reset:
		update = update.Set(b, numberValue(r.Bucket))
		for _, c := range counts {
			update = update.Set(expression.Name(c.name), numberValue(c.v))
		}
		cond = expression.Or(b.AttributeNotExists(), b.LessThan(numberValue(r.Bucket)))
	case slothint.Late:
		cond = b.GreaterThan(numberValue(r.Bucket))
	}
	if !r.WatchUntil.IsZero() {
		update = update.Set(expression.Name(layout.AttrWatchUntil), numberValue(r.WatchUntil.UnixMilli()))
	}
	if f == slothint.Reset && r.Epoch == 0 {
		// The first report of a breaker never written creates its state
		// item: closed at epoch 0, as Load reads a missing one.
		st, ep := expression.Name(layout.AttrState), expression.Name(layout.AttrEpoch)
		update = update.
			Set(st, expression.IfNotExists(st, stringValue(breaker.Closed.String()))).
			Set(ep, expression.IfNotExists(ep, uintValue(0)))
	}
	epoch := epochCondition(r.Epoch)
	if r.Epoch == 0 {
		// Only an item with neither epoch nor state is a breaker never
		// transitioned: a Report does not make a state without an epoch
		// (a hand-edited item) into one at epoch 0, it reports it.
		e, st := expression.Name(layout.AttrEpoch), expression.Name(layout.AttrState)
		epoch = expression.Or(expression.And(e.AttributeNotExists(), st.AttributeNotExists()), e.Equal(uintValue(0)))
	}
	expr, err := expression.NewBuilder().WithUpdate(update).WithCondition(epoch.And(cond)).Build()
	if err != nil {
		return expression.Expression{}, fmt.Errorf("building the %s update expression: %w", f, err)
	}
	return expr, nil
}

// epochCondition holds when the stored epoch is epoch; a state item
// without one has epoch 0.
func epochCondition(epoch uint64) expression.ConditionBuilder {
	e := expression.Name(layout.AttrEpoch)
	cond := e.Equal(uintValue(epoch))
	if epoch == 0 {
		cond = expression.Or(e.AttributeNotExists(), cond)
	}
	return cond
}

// Transition writes next into the state item "c#<name>" if its epoch is
// still prevEpoch (a breaker never written has epoch 0, as Load reports
// it), emptying the fleet counts of the old epoch and keeping watch_until,
// with one conditional UpdateItem. The override item is neither touched nor
// read: the snapshot returned carries no override (the breaker.Store
// contract). On a conflict the state item as it stands is returned with
// breaker.ErrConflict.
//
// An SDK retry after a lost answer, or an identical transition another
// environment made at the same time, is reported as success, not as a
// conflict. An error wrapping breaker.ErrStore returned after the update was
// sent leaves it unknown whether the transition happened; Load tells.
func (s *BreakerStore) Transition(ctx context.Context, name string, prevEpoch uint64, next breaker.Snapshot) (breaker.Snapshot, error) {
	_, expr, err := transitionExpression(name, prevEpoch, next)
	if err != nil {
		return breaker.Snapshot{}, s.fail("Transition", name, err)
	}
	if err := ctx.Err(); err != nil {
		return breaker.Snapshot{}, s.fail("Transition", name, err)
	}
	snap, err, fault := s.writeState(ctx, "Transition", name, expr)
	if fault != nil {
		return breaker.Snapshot{}, fault
	}
	var conflict error
	if err != nil {
		switch {
		case snap.Epoch == prevEpoch:
			// The condition failed, yet the item holds the expected epoch:
			// only a malformed epoch can do that, and decodeState accepted it.
			return breaker.Snapshot{}, s.fail("Transition", name, fmt.Errorf("UpdateItem refused epoch %d although the item holds it: %w", prevEpoch, err))
		case sameState(snap, next):
			// The item holds exactly next: this write was applied by an
			// attempt whose answer was lost, and the SDK's retry found it
			// done (or another environment decided the very same
			// transition). Either way next is stored: not a conflict.
		default:
			conflict = fmt.Errorf("herdguard: dynamo: breaker %q: epoch is %d, not %d: %w", name, snap.Epoch, prevEpoch, breaker.ErrConflict)
		}
	}
	return snap, conflict
}

// writeState sends a conditional update of name's state item for
// method op and decodes the item answered: the item after the update,
// or, when the condition failed, the item as it stood, with the refusal
// in refused. fault is any other failure, wrapped for op's caller. The
// slots decoded go to name's hint.
func (s *BreakerStore) writeState(ctx context.Context, op, name string, expr expression.Expression) (snap breaker.Snapshot, refused, fault error) {
	key := layout.StateKey(name)
	out, err := conditionalUpdate(ctx, s.api, s.table, &s.counters, s.cfg.OnRequest, key, expr)
	var attrs map[string]types.AttributeValue
	if err == nil {
		attrs = out.Attributes
	} else if ccf := (*types.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
		attrs, refused = ccf.Item, err
	} else {
		return breaker.Snapshot{}, nil, s.fail(op, name, fmt.Errorf("UpdateItem: %w", err))
	}
	if snap, err = decodeState(key, attrs); err != nil {
		return breaker.Snapshot{}, nil, s.fail(op, name, err)
	}
	s.hints.For(name).Learn(&snap.Buckets)
	s.spreads.For(name).Saw(snap.Epoch)
	return snap, refused, nil
}

// transitionExpression validates Transition's arguments and builds its key
// and expressions.
func transitionExpression(name string, prevEpoch uint64, next breaker.Snapshot) (string, expression.Expression, error) {
	var none expression.Expression
	if err := names.Validate(name); err != nil {
		return "", none, err
	}
	if prevEpoch >= maxEpoch || next.Epoch != prevEpoch+1 {
		return "", none, fmt.Errorf("next epoch %d must be previous epoch %d + 1 (and below %d)", next.Epoch, prevEpoch, uint64(maxEpoch))
	}
	if _, ok := parseState(next.State.String()); !ok {
		return "", none, fmt.Errorf("next state %s is not closed, open or half-open", next.State)
	}
	if next.Reopens < 0 || int64(next.Reopens) > maxReopens {
		return "", none, fmt.Errorf("next reopens %d must be in [0, %d]", next.Reopens, maxReopens)
	}
	update := expression.
		Set(expression.Name(layout.AttrState), stringValue(next.State.String())).
		Set(expression.Name(layout.AttrEpoch), uintValue(next.Epoch)).
		Set(expression.Name(layout.AttrReopens), numberValue(int64(next.Reopens)))
	if next.OpenUntil.IsZero() {
		update = update.Remove(expression.Name(layout.AttrOpenUntil))
	} else {
		ms, err := unixMilli("next open-until", next.OpenUntil)
		if err != nil {
			return "", none, err
		}
		update = update.Set(expression.Name(layout.AttrOpenUntil), numberValue(ms))
	}
	for _, n := range layout.Slots {
		for _, a := range n.All() {
			update = update.Remove(expression.Name(a))
		}
	}
	expr, err := expression.NewBuilder().WithUpdate(update).WithCondition(epochCondition(prevEpoch)).Build()
	if err != nil {
		return "", none, fmt.Errorf("building the update expression: %w", err)
	}
	return layout.StateKey(name), expr, nil
}

// AcquireProbe tries the probe slot items "c#<name>#p#<slot>" for slot in
// [0, limit), starting at a random one, each with one conditional UpdateItem
// that takes a lease until leaseUntil if the slot holds no lease of epoch
// that is still running at now (a malformed slot item holds no lease). The
// first write that succeeds returns its slot; when every write is refused,
// AcquireProbe returns breaker.ErrProbeDenied. Leases compare the clocks of
// different environments, so a lease may end early or late by their skew.
func (s *BreakerStore) AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (int, error) {
	expr, err := probeExpression(name, epoch, limit, now, leaseUntil)
	if err != nil {
		return -1, s.fail("AcquireProbe", name, err)
	}
	if limit == 0 {
		return -1, fmt.Errorf("herdguard: dynamo: breaker %q: probe limit is 0: %w", name, breaker.ErrProbeDenied)
	}
	start := int(s.cfg.Rand() * float64(limit))
	if start < 0 || start >= limit {
		start = 0
	}
	for i := range limit {
		slot := (start + i) % limit
		key := layout.ProbeKey(name, slot)
		if err := ctx.Err(); err != nil {
			return -1, s.fail("AcquireProbe", name, err)
		}
		done := s.counters.instrument(s.cfg.OnRequest, opWrite, "UpdateItem", key)
		out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       keyAttr(key),
			UpdateExpression:          expr.Update(),
			ConditionExpression:       expr.Condition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
		})
		err = markThrottled(err)
		if err == nil && out != nil { // the answer is not needed otherwise
			s.counters.consumed(opWrite, out.ConsumedCapacity)
		}
		done(err)
		if err == nil {
			return slot, nil
		}
		if ccf := (*types.ConditionalCheckFailedException)(nil); !errors.As(err, &ccf) {
			return -1, s.fail("AcquireProbe", name, fmt.Errorf("UpdateItem %s: %w", key, err))
		}
	}
	return -1, fmt.Errorf("herdguard: dynamo: breaker %q: all %d probe slots of epoch %d are leased: %w", name, limit, epoch, breaker.ErrProbeDenied)
}

// probeExpression validates AcquireProbe's arguments and builds the
// expressions every slot's update shares.
func probeExpression(name string, epoch uint64, limit int, now, leaseUntil time.Time) (expression.Expression, error) {
	var none expression.Expression
	if err := names.Validate(name); err != nil {
		return none, err
	}
	if epoch > maxEpoch {
		return none, fmt.Errorf("epoch %d above %d", epoch, uint64(maxEpoch))
	}
	if limit < 0 || limit > maxProbeSlots {
		return none, fmt.Errorf("probe limit %d must be in [0, %d]", limit, maxProbeSlots)
	}
	nowMs, err := unixMilli("now", now)
	if err != nil {
		return none, err
	}
	leaseMs, err := unixMilli("lease end", leaseUntil)
	if err != nil {
		return none, err
	}
	if leaseMs <= nowMs {
		return none, fmt.Errorf("lease end %s is not after now %s", leaseUntil.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	exp, err := ttlSeconds("lease end", leaseUntil.Add(layout.CleanupGrace))
	if err != nil {
		return none, err
	}
	e, l := expression.Name(layout.AttrEpoch), expression.Name(layout.AttrLeaseUntil)
	update := expression.
		Set(e, uintValue(epoch)).
		Set(l, numberValue(leaseMs)).
		Set(expression.Name(layout.AttrExpires), numberValue(exp))
	cond := expression.Or(
		expression.Name(layout.AttrPK).AttributeNotExists(),
		e.AttributeType(expression.Number).Not(),
		e.NotEqual(uintValue(epoch)),
		l.AttributeType(expression.Number).Not(),
		l.LessThan(numberValue(nowMs)),
	)
	expr, err := expression.NewBuilder().WithUpdate(update).WithCondition(cond).Build()
	if err != nil {
		return none, fmt.Errorf("building the update expression: %w", err)
	}
	return expr, nil
}

// SetOverride writes the override item "c#<name>#override" with one
// unconditional, idempotent UpdateItem, for operator tooling. NoOverride is
// written as "none" without an end, which reads like a missing item. An
// override with an end gets a TTL a day past it; one without loses any end
// and TTL an earlier override left, so that it neither lapses nor is
// deleted. Other attributes of the item are left as they are.
//
// A deployment's functions should be denied writes to override items
// (SECURITY.md, template.yaml, OverrideKeyPattern); operators can as well
// write the item with put-item (see the package documentation).
func (s *BreakerStore) SetOverride(ctx context.Context, name string, o breaker.Override, until time.Time) error {
	key, expr, err := overrideExpression(name, o, until)
	if err != nil {
		return s.fail("SetOverride", name, err)
	}
	if err := ctx.Err(); err != nil {
		return s.fail("SetOverride", name, err)
	}
	done := s.counters.instrument(s.cfg.OnRequest, opWrite, "UpdateItem", key)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyAttr(key),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	})
	err = markThrottled(err)
	if err == nil && out != nil { // the answer is not needed otherwise
		s.counters.consumed(opWrite, out.ConsumedCapacity)
	}
	done(err)
	if err != nil {
		return s.fail("SetOverride", name, fmt.Errorf("UpdateItem: %w", err))
	}
	return nil
}

// overrideExpression validates SetOverride's arguments and builds its key
// and update expression.
func overrideExpression(name string, o breaker.Override, until time.Time) (string, expression.Expression, error) {
	var none expression.Expression
	if err := names.Validate(name); err != nil {
		return "", none, err
	}
	if _, err := layout.ParseOverride(o.String()); err != nil {
		return "", none, err
	}
	update := expression.Set(expression.Name(layout.AttrOverride), stringValue(o.String()))
	if !until.IsZero() && o != breaker.NoOverride {
		ms, err := unixMilli("override end", until)
		if err != nil {
			return "", none, err
		}
		exp, err := ttlSeconds("override end", until.Add(layout.CleanupGrace))
		if err != nil {
			return "", none, err
		}
		update = update.
			Set(expression.Name(layout.AttrUntil), numberValue(ms)).
			Set(expression.Name(layout.AttrExpires), numberValue(exp))
	} else {
		update = update.
			Remove(expression.Name(layout.AttrUntil)).
			Remove(expression.Name(layout.AttrExpires))
	}
	expr, err := expression.NewBuilder().WithUpdate(update).Build()
	if err != nil {
		return "", none, fmt.Errorf("building the update expression: %w", err)
	}
	return layout.OverrideKey(name), expr, nil
}

// decodeState decodes a state item; nil attrs (no item) is the zero
// Snapshot.
func decodeState(key string, attrs map[string]types.AttributeValue) (breaker.Snapshot, error) {
	var snap breaker.Snapshot
	if attrs == nil {
		return snap, nil
	}
	it := item{key: key, attrs: attrs}
	st, ok, err := it.str(layout.AttrState)
	switch {
	case err != nil:
		return snap, err
	case !ok:
		return snap, it.malformed(layout.AttrState, "is missing")
	}
	if snap.State, ok = parseState(st); !ok {
		return snap, it.malformed(layout.AttrState, "is %q, want \"closed\", \"open\" or \"half-open\"", st)
	}
	epoch, err := it.requiredInt64In(layout.AttrEpoch, 0, maxEpoch)
	if err != nil {
		return snap, err
	}
	snap.Epoch = uint64(epoch)
	reopens, _, err := it.int64In(layout.AttrReopens, 0, maxReopens)
	if err != nil {
		return snap, err
	}
	snap.Reopens = int(reopens)
	if snap.OpenUntil, err = it.unixMilli(layout.AttrOpenUntil); err != nil {
		return snap, err
	}
	if snap.WatchUntil, err = it.unixMilli(layout.AttrWatchUntil); err != nil {
		return snap, err
	}
	for i, n := range layout.Slots {
		if snap.Buckets[i], err = it.bucket(i, n); err != nil {
			return snap, err
		}
	}
	return snap, nil
}

// bucket decodes slot i of a state item: empty without its bucket number,
// otherwise the number (which must belong in slot i) and its four counts.
func (it item) bucket(i int, n layout.SlotNames) (breaker.Bucket, error) {
	num, ok, err := it.int64In(n.Bucket, 1, maxBucket)
	if err != nil || !ok {
		return breaker.Bucket{}, err
	}
	if num%breaker.FleetSlots != int64(i) {
		return breaker.Bucket{}, it.malformed(n.Bucket, "is bucket %d, which belongs in slot %d", num, num%breaker.FleetSlots)
	}
	b := breaker.Bucket{Num: num}
	for _, c := range []struct {
		name string
		v    *int64
	}{{n.Requests, &b.Requests}, {n.Successes, &b.Successes}, {n.Failures, &b.Failures}, {n.Samples, &b.Samples}} {
		if *c.v, err = it.requiredInt64In(c.name, 0, maxCount); err != nil {
			return breaker.Bucket{}, err
		}
	}
	return b, nil
}

// decodeOverride decodes an override item; nil attrs (no item) is
// NoOverride.
func decodeOverride(key string, attrs map[string]types.AttributeValue) (breaker.Override, time.Time, error) {
	if attrs == nil {
		return breaker.NoOverride, time.Time{}, nil
	}
	it := item{key: key, attrs: attrs}
	s, ok, err := it.str(layout.AttrOverride)
	switch {
	case err != nil:
		return breaker.NoOverride, time.Time{}, err
	case !ok:
		return breaker.NoOverride, time.Time{}, it.malformed(layout.AttrOverride, "is missing")
	}
	o, perr := layout.ParseOverride(s)
	if perr != nil {
		return breaker.NoOverride, time.Time{}, it.malformed(layout.AttrOverride, "is %q, want \"none\", \"force-open\", \"force-closed\" or \"disabled\"", s)
	}
	until, err := it.unixMilli(layout.AttrUntil)
	if err != nil {
		return breaker.NoOverride, time.Time{}, err
	}
	return o, until, nil
}

// sameState reports whether the stored state a is next as Transition
// writes it (times to the millisecond; the override is not part of it).
func sameState(a, next breaker.Snapshot) bool {
	return a.State == next.State && a.Epoch == next.Epoch && a.Reopens == next.Reopens &&
		a.OpenUntil.UnixMilli() == next.OpenUntil.UnixMilli()
}

// parseState is the inverse of breaker.State.String for the three states.
func parseState(s string) (breaker.State, bool) {
	for _, st := range []breaker.State{breaker.Closed, breaker.Open, breaker.HalfOpen} {
		if s == st.String() {
			return st, true
		}
	}
	return breaker.Closed, false
}

// uintValue is an expression value holding the integer v.
func uintValue(v uint64) expression.ValueBuilder {
	return expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatUint(v, 10)})
}
