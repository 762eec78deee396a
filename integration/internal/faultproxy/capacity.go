package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/herdguard/herdguard/internal/capacity"
)

// Capacity is the proxy's model of DynamoDB's capacity (SetCapacity).
//
// With a Meter, the proxy bills every item request it forwards (GetItem,
// BatchGetItem, UpdateItem, PutItem, DeleteItem; other operations pass
// unbilled) with the Meter's rules, item by item, and with
// capacity.Config.Throttle it throttles like DynamoDB: a request that would
// take an item past 1,000 write units or 3,000 read units in one second is
// answered HTTP 400 ProvisionedThroughputExceededException, in DynamoDB's
// JSON error body, without being forwarded. A BatchGetItem some of whose
// items are throttled is forwarded without them, and they come back in
// UnprocessedKeys, as DynamoDB does (all throttled: the exception).
//
// The decision to throttle is taken before forwarding, so it rests on the
// item's last known size (none yet: an empty item). What the request is
// billed is settled from the answer:
//
//   - a write that succeeded: the ConsumedCapacity DynamoDB Local reports
//     (the client must ask for it with ReturnConsumedCapacity TOTAL, as the
//     dynamo stores do), which DynamoDB Local computes from the item's size
//     before and after; without it, from the sizes the proxy knows;
//   - a write refused by its condition: ceil(size / 1 KB) of the item as it
//     stands, sized from the ALL_OLD item in the error body (no item with
//     ALL_OLD asked for: a missing item, 1 unit);
//   - GetItem and BatchGetItem: from the sizes of the items returned, each
//     item rounded up separately, a missing item billed as an empty one
//     (DynamoDB Local reports 0 for those in a BatchGetItem; DynamoDB bills
//     them);
//   - anything else (a validation error, a throttle, no answer): nothing.
//
// The item sizes the proxy learns (from ALL_NEW and ALL_OLD items, PutItem
// items and read answers) are the next requests' estimates; Stats counts
// the requests whose units it could also compute from sizes it knew exactly
// and how many of them disagreed with DynamoDB Local's ConsumedCapacity.
type Capacity struct {
	// Meter bills and throttles; nil turns the model off.
	Meter *capacity.Meter
	// Now is the Meter's clock (the second a request is billed in); nil
	// means time.Now. A test on virtual time passes its clock, so that
	// units per second are per virtual second.
	Now func() time.Time
	// KeyAttributes names the table's key attributes, which PutItem's item
	// and BatchGetItem's answers are matched by; nil means {"pk"},
	// herdguard's table.
	KeyAttributes []string
}

// SetCapacity puts c in force for the requests that arrive from now on.
func (p *Proxy) SetCapacity(c Capacity) {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.KeyAttributes == nil {
		c.KeyAttributes = []string{"pk"}
	}
	p.capacity.Store(&c)
}

// itemSize is what the proxy knows of an item's size.
type itemSize struct {
	bytes int
	exact bool // read from an item; otherwise a lower bound from units
}

// maxSizes bounds the proxy's memory of item sizes; past it, it starts
// afresh (items are then estimated as empty until seen again).
const maxSizes = 1 << 16

func (p *Proxy) sizeOf(key string) itemSize {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sizes[key]
}

func (p *Proxy) setSize(key string, s itemSize) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sizes) >= maxSizes {
		clear(p.sizes)
	}
	p.sizes[key] = s
}

// charge is one item of an admitted request.
type charge struct {
	key        string // table + "/" + canonical key
	res        *capacity.Reservation
	before     itemSize
	consistent bool // a strongly consistent read
}

// admission is what admit decided for one request, for settle.
type admission struct {
	op           string
	projected    bool     // the read asked for some attributes only
	putSize      int      // PutItem: the new item's size
	oldOnFailure bool     // ReturnValuesOnConditionCheckFailure ALL_OLD
	returnNew    bool     // ReturnValues ALL_NEW
	items        []charge // one per item, in request order
	// BatchGetItem: the admitted keys by table and, for the keys
	// throttled here, the UnprocessedKeys entry to add to the answer.
	batchKeys   map[string][]map[string]json.RawMessage
	unprocessed map[string]map[string]json.RawMessage
}

type admissionKey struct{}

func admissionOf(ctx context.Context) *admission {
	a, _ := ctx.Value(admissionKey{}).(*admission)
	return a
}

// refund settles every item of a request that consumed nothing.
func (a *admission) refund() {
	if a == nil {
		return
	}
	for _, c := range a.items {
		c.res.Settle(0)
	}
}

// admit applies the capacity model to r before it is forwarded. It
// returns the request to forward (its body rewritten for a BatchGetItem
// with throttled keys, its context carrying the admission), or false when
// it has answered w itself (throttled, or a body it could not read).
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, op string) (*http.Request, bool) {
	cfg := p.capacity.Load()
	if cfg == nil || cfg.Meter == nil {
		return r, true
	}
	switch op {
	case "GetItem", "BatchGetItem", "UpdateItem", "PutItem", "DeleteItem":
	default:
		return r, true
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		hijackReset(w) // the client went away mid-request
		return nil, false
	}
	a := &admission{op: op}
	now := cfg.Now()
	var throttledKey string
	switch op {
	case "GetItem", "UpdateItem", "PutItem", "DeleteItem":
		var in struct {
			TableName                           string
			Key, Item                           map[string]json.RawMessage
			ConsistentRead                      bool
			ProjectionExpression                string
			AttributesToGet                     []string
			ReturnValues                        string
			ReturnValuesOnConditionCheckFailure string
		}
		if err := json.Unmarshal(body, &in); err != nil {
			break // DynamoDB Local will answer the malformed request
		}
		key := in.Key
		if op == "PutItem" {
			key = project(in.Item, cfg.KeyAttributes)
			if a.putSize, err = capacity.ItemSizeJSON(in.Item); err != nil {
				break
			}
		}
		k, err := itemKey(in.TableName, key)
		if err != nil {
			break
		}
		a.projected = in.ProjectionExpression != "" || len(in.AttributesToGet) > 0
		a.returnNew = in.ReturnValues == "ALL_NEW"
		a.oldOnFailure = in.ReturnValuesOnConditionCheckFailure == "ALL_OLD"
		before := p.sizeOf(k)
		var c charge
		if op == "GetItem" {
			c, err = reserve(cfg.Meter, k, now, false, capacity.ReadUnits(before.bytes, in.ConsistentRead), before)
			c.consistent = in.ConsistentRead
		} else {
			after := before.bytes
			if op == "PutItem" {
				after = a.putSize
			}
			c, err = reserve(cfg.Meter, k, now, true, capacity.WriteUnits(before.bytes, after), before)
		}
		if err != nil {
			throttledKey = k
			break
		}
		a.items = append(a.items, c)
	case "BatchGetItem":
		var in struct {
			RequestItems map[string]map[string]json.RawMessage
		}
		if err := json.Unmarshal(body, &in); err != nil {
			break
		}
		body, throttledKey = p.admitBatch(a, cfg, now, body, in.RequestItems)
	}
	if throttledKey != "" {
		a.refund()
		p.capThrottled.Add(1)
		writeError(w, http.StatusBadRequest, typeThroughputExceeded, "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded. "+
				"Consider increasing your provisioning level with the UpdateTable API. (faultproxy capacity model: item "+throttledKey+")")
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r.WithContext(context.WithValue(r.Context(), admissionKey{}, a)), true
}

// admitBatch reserves a BatchGetItem's items, table by table in name order.
// It returns the body to forward (rewritten without the throttled keys), or
// a throttled key when every key was throttled.
func (p *Proxy) admitBatch(a *admission, cfg *Capacity, now time.Time, body []byte, tables map[string]map[string]json.RawMessage) ([]byte, string) {
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	sort.Strings(names)
	a.batchKeys = map[string][]map[string]json.RawMessage{}
	var lastThrottled string
	throttled := 0
	for _, table := range names {
		var spec struct {
			Keys           []map[string]json.RawMessage
			ConsistentRead bool
		}
		if err := json.Unmarshal(tables[table]["Keys"], &spec.Keys); err != nil {
			return body, ""
		}
		if cr, ok := tables[table]["ConsistentRead"]; ok {
			_ = json.Unmarshal(cr, &spec.ConsistentRead)
		}
		var refused []map[string]json.RawMessage
		for _, key := range spec.Keys {
			k, err := itemKey(table, key)
			if err != nil {
				return body, ""
			}
			before := p.sizeOf(k)
			c, err := reserve(cfg.Meter, k, now, false, capacity.ReadUnits(before.bytes, spec.ConsistentRead), before)
			c.consistent = spec.ConsistentRead
			if err != nil {
				refused = append(refused, key)
				lastThrottled = k
				throttled++
				continue
			}
			a.items = append(a.items, c)
			a.batchKeys[table] = append(a.batchKeys[table], key)
		}
		if len(refused) > 0 {
			if a.unprocessed == nil {
				a.unprocessed = map[string]map[string]json.RawMessage{}
			}
			entry := clone(tables[table])
			entry["Keys"] = mustJSON(refused)
			a.unprocessed[table] = entry
		}
	}
	if throttled == 0 {
		return body, ""
	}
	if len(a.items) == 0 {
		return body, lastThrottled
	}
	p.capUnprocessed.Add(int64(throttled))
	requestItems := map[string]map[string]json.RawMessage{}
	for table, keys := range a.batchKeys {
		entry := clone(tables[table])
		entry["Keys"] = mustJSON(keys)
		requestItems[table] = entry
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(body, &in); err != nil {
		return body, ""
	}
	in["RequestItems"] = mustJSON(requestItems)
	return mustJSON(in), ""
}

func reserve(m *capacity.Meter, key string, now time.Time, write bool, estimate float64, before itemSize) (charge, error) {
	var res *capacity.Reservation
	var err error
	if write {
		res, err = m.ReserveWrite(key, now, estimate)
	} else {
		res, err = m.ReserveRead(key, now, estimate)
	}
	return charge{key: key, res: res, before: before}, err
}

// settle bills an admitted request from its answer, and for a BatchGetItem
// that had throttled keys adds them to the answer's UnprocessedKeys. It
// runs as the reverse proxy's ModifyResponse.
func (p *Proxy) settle(resp *http.Response) error {
	a := admissionOf(resp.Request.Context())
	if a == nil {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		a.refund()
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	switch {
	case resp.StatusCode == http.StatusOK:
		if out := p.settleOK(a, body); out != nil {
			body = out
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
			resp.Header.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
		}
	case resp.StatusCode == http.StatusBadRequest && len(a.items) == 1 && a.op != "GetItem":
		var e struct {
			Type string `json:"__type"`
			Item map[string]json.RawMessage
		}
		if json.Unmarshal(body, &e) != nil || !strings.HasSuffix(e.Type, "#ConditionalCheckFailedException") {
			a.refund()
			break
		}
		c := a.items[0]
		size := c.before
		switch {
		case e.Item != nil:
			if n, err := capacity.ItemSizeJSON(e.Item); err == nil {
				size = itemSize{bytes: n, exact: true}
			}
		case a.oldOnFailure: // ALL_OLD asked for and none came: no item
			size = itemSize{exact: true}
		}
		p.setSize(c.key, size)
		c.res.Settle(capacity.WriteUnits(size.bytes, size.bytes))
	default:
		a.refund()
	}
	return nil
}

// settleOK bills a successful answer. It returns a new body when it must
// change the answer (UnprocessedKeys to add), nil otherwise.
func (p *Proxy) settleOK(a *admission, body []byte) []byte {
	var out struct {
		Attributes       map[string]json.RawMessage
		Item             map[string]json.RawMessage
		Responses        map[string][]map[string]json.RawMessage
		ConsumedCapacity json.RawMessage
	}
	if err := json.Unmarshal(body, &out); err != nil {
		a.refund()
		return nil
	}
	reported, haveReported := consumedUnits(out.ConsumedCapacity)
	switch a.op {
	case "UpdateItem", "PutItem", "DeleteItem":
		c := a.items[0]
		after := itemSize{bytes: c.before.bytes}
		switch {
		case a.op == "PutItem":
			after = itemSize{bytes: a.putSize, exact: true}
		case a.op == "DeleteItem":
			after = itemSize{exact: true}
		case a.returnNew && out.Attributes != nil:
			if n, err := capacity.ItemSizeJSON(out.Attributes); err == nil {
				after = itemSize{bytes: n, exact: true}
			}
		}
		units := capacity.WriteUnits(c.before.bytes, after.bytes)
		if c.before.exact && after.exact && haveReported {
			p.compareUnits(units, reported)
		}
		if haveReported {
			units = reported
			if !after.exact && capacity.WriteUnits(after.bytes, after.bytes) < units {
				// The item grew past what the proxy knew: at least this.
				after.bytes = (int(units)-1)*capacity.WriteUnitBytes + 1
			}
		}
		p.setSize(c.key, after)
		c.res.Settle(units)
	case "GetItem":
		c := a.items[0]
		size := 0
		if out.Item != nil {
			size, _ = capacity.ItemSizeJSON(out.Item)
		}
		units := capacity.ReadUnits(size, c.consistent)
		if a.projected { // only some attributes came back: DynamoDB's figure
			if haveReported {
				units = reported
			}
		} else {
			p.setSize(c.key, itemSize{bytes: size, exact: true})
			if haveReported {
				p.compareUnits(units, reported)
			}
		}
		c.res.Settle(units)
	case "BatchGetItem":
		return p.settleBatch(a, body, out.Responses, reported, haveReported)
	}
	return nil
}

// settleBatch bills each item a BatchGetItem asked for, found or not.
func (p *Proxy) settleBatch(a *admission, body []byte, responses map[string][]map[string]json.RawMessage, reported float64, haveReported bool) []byte {
	found := map[string]int{}
	for table, items := range responses {
		keys := a.batchKeys[table]
		if len(keys) == 0 {
			continue
		}
		names := make([]string, 0, len(keys[0])) // the table's key attributes
		for n := range keys[0] {
			names = append(names, n)
		}
		for _, item := range items {
			if k, err := itemKey(table, project(item, names)); err == nil {
				found[k], _ = capacity.ItemSizeJSON(item)
			}
		}
	}
	var total float64
	allFound := true
	for _, c := range a.items {
		size, ok := found[c.key]
		allFound = allFound && ok
		units := capacity.ReadUnits(size, c.consistent)
		total += units
		p.setSize(c.key, itemSize{bytes: size, exact: true})
		c.res.Settle(units)
	}
	if allFound && haveReported {
		p.compareUnits(total, reported)
	}
	if a.unprocessed == nil {
		return nil
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(body, &out); err != nil {
		return nil
	}
	unprocessed := map[string]map[string]json.RawMessage{}
	_ = json.Unmarshal(out["UnprocessedKeys"], &unprocessed)
	for table, entry := range a.unprocessed {
		if prev, ok := unprocessed[table]; ok {
			var keys []json.RawMessage
			_ = json.Unmarshal(prev["Keys"], &keys)
			var more []json.RawMessage
			_ = json.Unmarshal(entry["Keys"], &more)
			entry = clone(entry)
			entry["Keys"] = mustJSON(append(keys, more...))
		}
		unprocessed[table] = entry
	}
	out["UnprocessedKeys"] = mustJSON(unprocessed)
	return mustJSON(out)
}

// compareUnits counts a request whose units the proxy computed from sizes
// it knew exactly, and whether DynamoDB Local reported the same.
func (p *Proxy) compareUnits(model, reported float64) {
	p.capChecked.Add(1)
	if model != reported {
		p.capDisagreed.Add(1)
	}
}

// consumedUnits reads ConsumedCapacity (one object, or a list of them for
// batch operations) and adds up CapacityUnits.
func consumedUnits(raw json.RawMessage) (float64, bool) {
	type cc struct{ CapacityUnits *float64 }
	if len(raw) == 0 {
		return 0, false
	}
	var list []cc
	if json.Unmarshal(raw, &list) != nil {
		var one cc
		if json.Unmarshal(raw, &one) != nil {
			return 0, false
		}
		list = []cc{one}
	}
	var total float64
	ok := false
	for _, c := range list {
		if c.CapacityUnits != nil {
			total += *c.CapacityUnits
			ok = true
		}
	}
	return total, ok
}

// itemKey names an item for the Meter: the table and the key, as
// "table/value" for a single string key such as herdguard's pk, and with
// every key attribute's name and value, in name order, otherwise.
func itemKey(table string, key map[string]json.RawMessage) (string, error) {
	if len(key) == 0 {
		return "", errors.New("no key")
	}
	if len(key) == 1 {
		for _, v := range key {
			var s struct{ S *string }
			if json.Unmarshal(v, &s) == nil && s.S != nil {
				return table + "/" + *s.S, nil
			}
		}
	}
	names := make([]string, 0, len(key))
	for n := range key {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(table)
	for _, n := range names {
		var v any
		if err := json.Unmarshal(key[n], &v); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "/%s=%s", n, mustJSON(v)) // encoding/json sorts map keys: canonical
	}
	return b.String(), nil
}

// project returns the attributes of item named in names.
func project(item map[string]json.RawMessage, names []string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(names))
	for _, n := range names {
		if v, ok := item[n]; ok {
			out[n] = v
		}
	}
	return out
}

func clone(m map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("faultproxy: %v", err)) // only values decoded from JSON are marshalled
	}
	return b
}
