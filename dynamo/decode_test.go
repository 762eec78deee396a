package dynamo

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
)

type attrs = map[string]types.AttributeValue

// wrongTypes are values of every type other than N and S, plus nil (a
// fake or a future SDK could hand the stores anything).
var wrongTypes = map[string]types.AttributeValue{
	"B":    &types.AttributeValueMemberB{Value: []byte("1")},
	"BOOL": &types.AttributeValueMemberBOOL{Value: true},
	"NULL": &types.AttributeValueMemberNULL{Value: true},
	"SS":   &types.AttributeValueMemberSS{Value: []string{"1"}},
	"NS":   &types.AttributeValueMemberNS{Value: []string{"1"}},
	"BS":   &types.AttributeValueMemberBS{Value: [][]byte{{1}}},
	"L":    &types.AttributeValueMemberL{Value: []types.AttributeValue{nAV("1")}},
	"M":    &types.AttributeValueMemberM{Value: attrs{"n": nAV("1")}},
	"nil":  nil,
}

// badNumbers are N values the stores must not accept as integers.
var badNumbers = []string{"", "abc", "1.5", "1e3", "-1", "NaN", "Infinity", "0x10", "9223372036854775808", strings.Repeat("9", 38)}

func wantMalformed(t *testing.T, what string, err error, key, attr string) {
	t.Helper()
	var m *MalformedItemError
	if !errors.As(err, &m) {
		t.Fatalf("%s: error %v, want a *MalformedItemError", what, err)
	}
	if m.Key != key || m.Attribute != attr {
		t.Fatalf("%s: MalformedItemError{Key: %q, Attribute: %q}, want %q, %q (%v)", what, m.Key, m.Attribute, key, attr, err)
	}
	if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), attr) {
		t.Fatalf("%s: message %q does not name the item and the attribute", what, err)
	}
}

func TestDecodeState(t *testing.T) {
	const key = "c#x"
	snap, err := decodeState(key, nil)
	if err != nil || snap != (breaker.Snapshot{}) {
		t.Fatalf("decodeState(no item) = %+v, %v; want the zero snapshot", snap, err)
	}
	snap, err = decodeState(key, attrs{"pk": sAV(key), "state": sAV("half-open"), "epoch": nAV("7"), "open_until": nAV("1700000030000"), "reopens": nAV("3"), "extra": sAV("ignored")})
	want := breaker.Snapshot{State: breaker.HalfOpen, Epoch: 7, OpenUntil: time.UnixMilli(1_700_000_030_000), Reopens: 3}
	if err != nil || snap.State != want.State || snap.Epoch != want.Epoch || !snap.OpenUntil.Equal(want.OpenUntil) || snap.Reopens != want.Reopens {
		t.Fatalf("decodeState = %+v, %v; want %+v", snap, err, want)
	}
	// Optional attributes may be absent.
	snap, err = decodeState(key, attrs{"state": sAV("closed"), "epoch": nAV("0")})
	if err != nil || snap != (breaker.Snapshot{}) {
		t.Fatalf("decodeState(closed, 0) = %+v, %v; want the zero snapshot", snap, err)
	}

	valid := func() attrs {
		return attrs{"state": sAV("open"), "epoch": nAV("2"), "open_until": nAV("1700000030000"), "reopens": nAV("1")}
	}
	type bad struct {
		name, attr string
		edit       func(attrs)
	}
	cases := []bad{
		{"state missing", "state", func(a attrs) { delete(a, "state") }},
		{"state unknown", "state", func(a attrs) { a["state"] = sAV("ajar") }},
		{"state upper case", "state", func(a attrs) { a["state"] = sAV("OPEN") }},
		{"state number", "state", func(a attrs) { a["state"] = nAV("1") }},
		{"epoch missing", "epoch", func(a attrs) { delete(a, "epoch") }},
		{"epoch string", "epoch", func(a attrs) { a["epoch"] = sAV("2") }},
		{"epoch above max", "epoch", func(a attrs) { a["epoch"] = nAV("9007199254740993") }},
		{"open_until negative", "open_until", func(a attrs) { a["open_until"] = nAV("-1") }},
		{"open_until year 10000", "open_until", func(a attrs) { a["open_until"] = nAV("253402300800000") }},
		{"reopens negative", "reopens", func(a attrs) { a["reopens"] = nAV("-1") }},
		{"reopens above int32", "reopens", func(a attrs) { a["reopens"] = nAV("2147483648") }},
	}
	for _, attr := range []string{"state", "epoch", "open_until", "reopens"} {
		for typ, av := range wrongTypes {
			cases = append(cases, bad{attr + " " + typ, attr, func(a attrs) { a[attr] = av }})
		}
	}
	for _, attr := range []string{"epoch", "open_until", "reopens"} {
		for _, n := range badNumbers {
			cases = append(cases, bad{attr + " " + n, attr, func(a attrs) { a[attr] = nAV(n) }})
		}
	}
	for _, c := range cases {
		a := valid()
		c.edit(a)
		_, err := decodeState(key, a)
		wantMalformed(t, c.name, err, key, c.attr)
	}
}

func TestDecodeOverride(t *testing.T) {
	const key = "c#x#override"
	for _, c := range []struct {
		attrs attrs
		o     breaker.Override
		until time.Time
	}{
		{nil, breaker.NoOverride, time.Time{}},
		{attrs{"override": sAV("none")}, breaker.NoOverride, time.Time{}},
		{attrs{"override": sAV("")}, breaker.NoOverride, time.Time{}},
		{attrs{"override": sAV("force-open")}, breaker.ForcedOpen, time.Time{}},
		{attrs{"override": sAV("force-closed"), "until": nAV("1700000000000")}, breaker.ForcedClosed, time.UnixMilli(1_700_000_000_000)},
		{attrs{"override": sAV("disabled"), "until": nAV("0"), "expires": sAV("whatever")}, breaker.Disabled, time.UnixMilli(0)},
	} {
		o, until, err := decodeOverride(key, c.attrs)
		if err != nil || o != c.o || !until.Equal(c.until) {
			t.Errorf("decodeOverride(%v) = %v, %v, %v; want %v, %v", c.attrs, o, until, err, c.o, c.until)
		}
	}
	for _, c := range []struct {
		name, attr string
		attrs      attrs
	}{
		{"override missing", "override", attrs{"until": nAV("1")}},
		{"override typo", "override", attrs{"override": sAV("force_open")}},
		{"override number", "override", attrs{"override": nAV("1")}},
		{"override nil", "override", attrs{"override": nil}},
		{"until string", "until", attrs{"override": sAV("force-open"), "until": sAV("1")}},
		{"until negative", "until", attrs{"override": sAV("force-open"), "until": nAV("-5")}},
		{"until fraction", "until", attrs{"override": sAV("force-open"), "until": nAV("1.5")}},
	} {
		_, _, err := decodeOverride(key, c.attrs)
		wantMalformed(t, c.name, err, key, c.attr)
	}
}

func TestDecodeStateSlots(t *testing.T) {
	const key = "c#x"
	full := attrs{"state": sAV("closed"), "epoch": nAV("3"), "watch_until": nAV("1700000020000"), "stray": sAV("ignored")}
	var want breaker.Snapshot
	want.Epoch, want.WatchUntil = 3, time.UnixMilli(1_700_000_020_000)
	for i := range int64(breaker.FleetSlots) {
		if i == 6 {
			continue // an empty slot
		}
		num := 1_700_000_000 + i
		full[fmt.Sprint("b", i)] = nAV(fmt.Sprint(num))
		full[fmt.Sprint("r", i)] = nAV(fmt.Sprint(10 * i))
		full[fmt.Sprint("s", i)] = nAV(fmt.Sprint(i))
		full[fmt.Sprint("f", i)] = nAV(fmt.Sprint(2 * i))
		full[fmt.Sprint("n", i)] = nAV(fmt.Sprint(3 * i))
		want.Buckets[i] = breaker.Bucket{Num: num, Requests: 10 * i, Successes: i, Failures: 2 * i, Samples: 3 * i}
	}
	// Counts left in a slot without its bucket number are no bucket.
	full["r6"] = sAV("stale")
	snap, err := decodeState(key, full)
	if err != nil || snap.Epoch != want.Epoch || !snap.WatchUntil.Equal(want.WatchUntil) || snap.Buckets != want.Buckets {
		t.Fatalf("decodeState = %+v, %v; want %+v", snap, err, want)
	}

	type bad struct {
		name, attr string
		edit       func(attrs)
	}
	cases := []bad{
		{"watch_until negative", "watch_until", func(a attrs) { a["watch_until"] = nAV("-1") }},
		{"b3 zero", "b3", func(a attrs) { a["b3"] = nAV("0") }},
		{"b3 in slot 4", "b3", func(a attrs) { a["b3"] = nAV("1700000004") }},
		{"b3 above the last bucket", "b3", func(a attrs) { a["b3"] = nAV("253402300800003") }},
		{"r3 missing", "r3", func(a attrs) { delete(a, "r3") }},
		{"n3 missing", "n3", func(a attrs) { delete(a, "n3") }},
		{"s3 above int64", "s3", func(a attrs) { a["s3"] = nAV("9223372036854775808") }},
	}
	for _, attr := range []string{"watch_until", "b3", "r3", "s3", "f3", "n3"} {
		for typ, av := range wrongTypes {
			cases = append(cases, bad{attr + " " + typ, attr, func(a attrs) { a[attr] = av }})
		}
		for _, n := range badNumbers {
			cases = append(cases, bad{attr + " " + n, attr, func(a attrs) { a[attr] = nAV(n) }})
		}
	}
	for _, c := range cases {
		a := maps.Clone(full)
		c.edit(a)
		_, err := decodeState(key, a)
		wantMalformed(t, c.name, err, key, c.attr)
	}
}

func TestAllowanceOf(t *testing.T) {
	const key = "b#x#0#0"
	for _, c := range []struct {
		attrs attrs
		floor int64
		want  int64
	}{
		{nil, 7, 7},
		{attrs{"expires": nAV("1")}, 7, 7},
		{attrs{"allowance": nAV("0")}, 7, 0},
		{attrs{"allowance": nAV("12")}, -1, 12},
		{attrs{"allowance": nAV("9007199254740992")}, -1, maxAmount},
	} {
		got, err := allowanceOf(key, c.attrs, c.floor)
		if err != nil || got != c.want {
			t.Errorf("allowanceOf(%v, floor %d) = %d, %v; want %d", c.attrs, c.floor, got, err, c.want)
		}
	}
	_, err := allowanceOf(key, attrs{"expires": nAV("1")}, -1)
	wantMalformed(t, "missing after update", err, key, "allowance")
	for typ, av := range wrongTypes {
		_, err := allowanceOf(key, attrs{"allowance": av}, 5)
		wantMalformed(t, "allowance "+typ, err, key, "allowance")
	}
	for _, n := range append(badNumbers, "9007199254740993") {
		_, err := allowanceOf(key, attrs{"allowance": nAV(n)}, 5)
		wantMalformed(t, "allowance "+n, err, key, "allowance")
	}
}

func TestMalformedMessagesStayShort(t *testing.T) {
	huge := strings.Repeat("9", 10_000)
	_, err := allowanceOf("b#x#0#0", attrs{"allowance": nAV(huge)}, 0)
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("error for a 10,000-digit allowance is %d bytes long, want a short one: %.200q", len(err.Error()), err)
	}
	if got := quoteNumber(strings.Repeat("é", 40)); !strings.HasSuffix(got, `..."`) || !strings.Contains(got, "é") {
		t.Errorf("quoteNumber cut a long UTF-8 string badly: %s", got)
	}
}
