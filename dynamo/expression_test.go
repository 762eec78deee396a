package dynamo

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"

	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/slothint"
)

var placeholder = regexp.MustCompile(`[#:][A-Za-z0-9_]+`)

// render substitutes an expression's name and value placeholders, so that
// a test can compare it with the expression the documentation shows. It
// does not evaluate anything.
func render(t *testing.T, s *string, expr expression.Expression) string {
	t.Helper()
	return renderWith(t, s, expr.Names(), expr.Values())
}

// renderWith is render with the placeholders' names and values given as a
// request carries them.
func renderWith(t *testing.T, s *string, names map[string]string, values map[string]types.AttributeValue) string {
	t.Helper()
	used := map[string]bool{}
	out := placeholder.ReplaceAllStringFunc(aws.ToString(s), func(p string) string {
		used[p] = true
		if p[0] == '#' {
			n, ok := names[p]
			if !ok {
				t.Fatalf("expression %q uses the undefined name %s", aws.ToString(s), p)
			}
			return n
		}
		v, ok := values[p]
		if !ok {
			t.Fatalf("expression %q uses the undefined value %s", aws.ToString(s), p)
		}
		switch v := v.(type) {
		case *types.AttributeValueMemberN:
			return v.Value
		case *types.AttributeValueMemberS:
			return strconv.Quote(v.Value)
		case *types.AttributeValueMemberSS:
			return fmt.Sprintf("SS%q", v.Value)
		default:
			t.Fatalf("unexpected value type %T", v)
			return ""
		}
	})
	return strings.Join(strings.Fields(out), " ")
}

// renderAll renders the update and the condition of expr.
func renderAll(t *testing.T, expr expression.Expression) (update, cond string) {
	t.Helper()
	update = render(t, expr.Update(), expr)
	cond = render(t, expr.Condition(), expr)
	// Every placeholder defined is used by one of them (DynamoDB refuses
	// unused ones).
	all := aws.ToString(expr.Update()) + " " + aws.ToString(expr.Condition())
	for p := range expr.Names() {
		if !strings.Contains(all, p) {
			t.Fatalf("name placeholder %s unused in %q", p, all)
		}
	}
	for p := range expr.Values() {
		if !regexp.MustCompile(regexp.QuoteMeta(p) + `\b`).MatchString(all) {
			t.Fatalf("value placeholder %s unused in %q", p, all)
		}
	}
	return update, cond
}

func TestApplyExpression(t *testing.T) {
	exp := time.UnixMilli(1_700_000_020_001) // TTL rounds up to 1700000021
	const max = "9007199254740992"
	for _, c := range []struct {
		u          budget.Update
		update     string
		conditions string
	}{
		{ // the floor covers the take: a missing item may be created
			budget.Update{Floor: 5, Take: 1, Expires: exp},
			"SET allowance = if_not_exists(allowance, 5) + -1, expires = 1700000021",
			"(attribute_not_exists (allowance)) OR (allowance BETWEEN 1 AND " + max + ")",
		},
		{ // it does not: only an existing allowance can pay
			budget.Update{Floor: 2, Deposit: 1, Take: 4, Expires: exp},
			"SET allowance = if_not_exists(allowance, 2) + -3, expires = 1700000021",
			"allowance BETWEEN 3 AND " + max,
		},
		{ // a deposit only checks that the stored allowance is sane
			budget.Update{Floor: 5, Deposit: 3, Expires: exp},
			"SET allowance = if_not_exists(allowance, 5) + 3, expires = 1700000021",
			"(attribute_not_exists (allowance)) OR (allowance BETWEEN 0 AND " + max + ")",
		},
		{ // a deposit covering the take likewise
			budget.Update{Deposit: 3, Take: 3, Expires: exp},
			"SET allowance = if_not_exists(allowance, 0) + 0, expires = 1700000021",
			"(attribute_not_exists (allowance)) OR (allowance BETWEEN 0 AND " + max + ")",
		},
	} {
		e, err := applyExpression(c.u)
		if err != nil {
			t.Fatalf("applyExpression(%+v): %v", c.u, err)
		}
		if up, cond := renderAll(t, e); up != c.update || cond != c.conditions {
			t.Errorf("applyExpression(%+v) =\n  %s\n  %s\nwant\n  %s\n  %s", c.u, up, cond, c.update, c.conditions)
		}
	}
}

func TestApplyExpressionRejects(t *testing.T) {
	exp := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		u    budget.Update
		want string
	}{
		{budget.Update{Floor: -1, Expires: exp}, "Floor is -1"},
		{budget.Update{Deposit: -1, Expires: exp}, "Deposit is -1"},
		{budget.Update{Take: -1, Expires: exp}, "Take is -1"},
		{budget.Update{Take: maxAmount + 1, Expires: exp}, "Take is 9007199254740993"},
		{budget.Update{Take: 1}, "Expires is the zero time"},
		{budget.Update{Take: 1, Expires: time.UnixMilli(-1000)}, "outside the years"},
	} {
		if _, err := applyExpression(c.u); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("applyExpression(%+v) error = %v, want one containing %q", c.u, err, c.want)
		}
	}
}

func TestReportExpression(t *testing.T) {
	watch := time.UnixMilli(1_700_000_020_001)
	r := breaker.Report{Epoch: 3, Bucket: 1_700_000_004, Requests: 8, Successes: 2, Failures: 5, Samples: 7}
	r0 := r
	r0.Epoch = 0
	rw := r
	rw.WatchUntil = watch
	for _, c := range []struct {
		r          breaker.Report
		f          slothint.Form
		update     string
		conditions string
	}{
		{r, slothint.Add, "ADD r4 8, s4 2, f4 5, n4 7",
			`(epoch = 3) AND ((b4 = 1700000004) AND (attribute_type (r4, "N")) AND (attribute_type (s4, "N")) AND (attribute_type (f4, "N")) AND (attribute_type (n4, "N")))`},
		{rw, slothint.Add, "ADD r4 8, s4 2, f4 5, n4 7 SET watch_until = 1700000020001",
			`(epoch = 3) AND ((b4 = 1700000004) AND (attribute_type (r4, "N")) AND (attribute_type (s4, "N")) AND (attribute_type (f4, "N")) AND (attribute_type (n4, "N")))`},
		{r0, slothint.Add, "ADD r4 8, s4 2, f4 5, n4 7",
			`(((attribute_not_exists (epoch)) AND (attribute_not_exists (state))) OR (epoch = 0)) AND ((b4 = 1700000004) AND (attribute_type (r4, "N")) AND (attribute_type (s4, "N")) AND (attribute_type (f4, "N")) AND (attribute_type (n4, "N")))`},
		{r, slothint.Reset, "SET b4 = 1700000004, r4 = 8, s4 = 2, f4 = 5, n4 = 7",
			"(epoch = 3) AND ((attribute_not_exists (b4)) OR (b4 < 1700000004))"},
		{rw, slothint.Reset, "SET b4 = 1700000004, r4 = 8, s4 = 2, f4 = 5, n4 = 7, watch_until = 1700000020001",
			"(epoch = 3) AND ((attribute_not_exists (b4)) OR (b4 < 1700000004))"},
		// The first report of a breaker creates its state item, closed
		// at epoch 0, unless a transition already made one.
		{r0, slothint.Reset, `SET b4 = 1700000004, r4 = 8, s4 = 2, f4 = 5, n4 = 7, state = if_not_exists(state, "closed"), epoch = if_not_exists(epoch, 0)`,
			"(((attribute_not_exists (epoch)) AND (attribute_not_exists (state))) OR (epoch = 0)) AND ((attribute_not_exists (b4)) OR (b4 < 1700000004))"},
		{rw, slothint.Late, "SET watch_until = 1700000020001",
			"(epoch = 3) AND (b4 > 1700000004)"},
	} {
		e, err := reportExpression(c.r, c.f)
		if err != nil {
			t.Fatalf("reportExpression(%+v, %s): %v", c.r, c.f, err)
		}
		if up, cond := renderAll(t, e); up != c.update || cond != c.conditions {
			t.Errorf("reportExpression(%+v, %s) =\n  %s\n  %s\nwant\n  %s\n  %s", c.r, c.f, up, cond, c.update, c.conditions)
		}
	}
	// Slot i is bucket mod FleetSlots.
	for n := int64(1); n <= 25; n++ {
		e, err := reportExpression(breaker.Report{Bucket: n, Requests: 1}, slothint.Reset)
		if err != nil {
			t.Fatal(err)
		}
		if up, _ := renderAll(t, e); !strings.HasPrefix(up, fmt.Sprintf("SET b%d = %d, r%d = 1,", n%10, n, n%10)) {
			t.Errorf("bucket %d updates %s", n, up)
		}
	}
}

func TestValidateReport(t *testing.T) {
	ok := breaker.Report{Epoch: maxEpoch, Bucket: maxBucket, Requests: maxAmount, Successes: maxAmount, Failures: maxAmount, Samples: maxAmount, WatchUntil: time.UnixMilli(maxUnixMilli)}
	if err := validateReport("x", ok); err != nil {
		t.Fatalf("validateReport(%+v) = %v", ok, err)
	}
	if err := validateReport("x", breaker.Report{Bucket: 1}); err != nil {
		t.Fatalf("validateReport(bucket 1, no counts) = %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*breaker.Report)
		want string
	}{
		{"a#b", func(*breaker.Report) {}, "'#'"},
		{"x", func(r *breaker.Report) { r.Epoch = maxEpoch + 1 }, "epoch"},
		{"x", func(r *breaker.Report) { r.Bucket = 0 }, "bucket 0"},
		{"x", func(r *breaker.Report) { r.Bucket = -3 }, "bucket -3"},
		{"x", func(r *breaker.Report) { r.Bucket = maxBucket + 1 }, "bucket"},
		{"x", func(r *breaker.Report) { r.Requests = -1 }, "requests -1"},
		{"x", func(r *breaker.Report) { r.Successes = -1 }, "successes -1"},
		{"x", func(r *breaker.Report) { r.Failures = maxAmount + 1 }, "failures"},
		{"x", func(r *breaker.Report) { r.Samples = -1 }, "samples -1"},
		{"x", func(r *breaker.Report) { r.WatchUntil = time.UnixMilli(-1) }, "watch-until"},
	} {
		r := ok
		c.edit(&r)
		if err := validateReport(c.name, r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validateReport(%q, %+v) = %v, want an error containing %q", c.name, r, err, c.want)
		}
	}
}

func TestTransitionExpression(t *testing.T) {
	until := time.UnixMilli(1_700_000_020_001)
	// Every slot of fleet counts is emptied; watch_until is kept.
	const slots = "b0, r0, s0, f0, n0, b1, r1, s1, f1, n1, b2, r2, s2, f2, n2, b3, r3, s3, f3, n3, b4, r4, s4, f4, n4, " +
		"b5, r5, s5, f5, n5, b6, r6, s6, f6, n6, b7, r7, s7, f7, n7, b8, r8, s8, f8, n8, b9, r9, s9, f9, n9"
	for _, c := range []struct {
		prev       uint64
		next       breaker.Snapshot
		update     string
		conditions string
	}{
		{
			0, breaker.Snapshot{State: breaker.Open, Epoch: 1, OpenUntil: until, Reopens: 2},
			`REMOVE ` + slots + ` SET state = "open", epoch = 1, reopens = 2, open_until = 1700000020001`,
			"(attribute_not_exists (epoch)) OR (epoch = 0)",
		},
		{
			4, breaker.Snapshot{State: breaker.Closed, Epoch: 5, Override: breaker.ForcedOpen, OverrideUntil: until},
			`REMOVE open_until, ` + slots + ` SET state = "closed", epoch = 5, reopens = 0`,
			"epoch = 4",
		},
		{
			1, breaker.Snapshot{State: breaker.HalfOpen, Epoch: 2, OpenUntil: until},
			`REMOVE ` + slots + ` SET state = "half-open", epoch = 2, reopens = 0, open_until = 1700000020001`,
			"epoch = 1",
		},
	} {
		key, e, err := transitionExpression("payments", c.prev, c.next)
		if err != nil {
			t.Fatalf("transitionExpression(%d, %+v): %v", c.prev, c.next, err)
		}
		if key != "c#payments" {
			t.Errorf("key = %q", key)
		}
		// The override and the watch are never written by a transition.
		for _, n := range e.Names() {
			if n == layout.AttrOverride || n == layout.AttrUntil || n == layout.AttrWatchUntil {
				t.Errorf("transition expression names %q", n)
			}
		}
		if up, cond := renderAll(t, e); up != c.update || cond != c.conditions {
			t.Errorf("transitionExpression(%d, %+v) =\n  %s\n  %s\nwant\n  %s\n  %s", c.prev, c.next, up, cond, c.update, c.conditions)
		}
	}
	for _, c := range []struct {
		prev uint64
		next breaker.Snapshot
		want string
	}{
		{0, breaker.Snapshot{Epoch: 0}, "must be previous epoch 0 + 1"},
		{3, breaker.Snapshot{Epoch: 5}, "must be previous epoch 3 + 1"},
		{maxEpoch, breaker.Snapshot{Epoch: maxEpoch + 1}, "below"},
		{1<<64 - 1, breaker.Snapshot{Epoch: 0}, "below"},
		{0, breaker.Snapshot{Epoch: 1, State: breaker.State(7)}, "breaker.State(7)"},
		{0, breaker.Snapshot{Epoch: 1, Reopens: -1}, "reopens -1"},
		{0, breaker.Snapshot{Epoch: 1, OpenUntil: time.UnixMilli(-5)}, "open-until"},
	} {
		if _, _, err := transitionExpression("x", c.prev, c.next); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("transitionExpression(%d, %+v) error = %v, want one containing %q", c.prev, c.next, err, c.want)
		}
	}
}

func TestProbeExpression(t *testing.T) {
	now := time.UnixMilli(1_700_000_020_001)
	e, err := probeExpression("payments", 3, 2, now, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	up, cond := renderAll(t, e)
	if want := "SET epoch = 3, lease_until = 1700000021001, expires = 1700086422"; up != want {
		t.Errorf("update = %s\nwant     %s", up, want)
	}
	if want := `(attribute_not_exists (pk)) OR (NOT (attribute_type (epoch, "N"))) OR (epoch <> 3) OR ` +
		`(NOT (attribute_type (lease_until, "N"))) OR (lease_until < 1700000020001)`; cond != want {
		t.Errorf("condition = %s\nwant        %s", cond, want)
	}
	for _, c := range []struct {
		epoch      uint64
		limit      int
		now, lease time.Time
		want       string
	}{
		{1, -1, now, now.Add(time.Second), "probe limit -1"},
		{1, maxProbeSlots + 1, now, now.Add(time.Second), "probe limit 65"},
		{maxEpoch + 1, 1, now, now.Add(time.Second), "epoch"},
		{1, 1, now, now, "is not after now"},
		{1, 1, now, now.Add(-time.Second), "is not after now"},
		{1, 1, now, now.Add(time.Microsecond), "is not after now"}, // the same millisecond
		{1, 1, time.Time{}, now, "now is the zero time"},
	} {
		if _, err := probeExpression("x", c.epoch, c.limit, c.now, c.lease); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("probeExpression(%d, %d, %v, %v) error = %v, want one containing %q", c.epoch, c.limit, c.now, c.lease, err, c.want)
		}
	}
}

func TestOverrideExpression(t *testing.T) {
	until := time.UnixMilli(1_700_003_600_000)
	for _, c := range []struct {
		o      breaker.Override
		until  time.Time
		update string
	}{
		// Without an end, an earlier end and its TTL are removed, so that
		// the override neither lapses nor is deleted.
		{breaker.ForcedOpen, time.Time{}, `REMOVE until, expires SET override = "force-open"`},
		{breaker.ForcedClosed, until, `SET override = "force-closed", until = 1700003600000, expires = 1700090000`},
		{breaker.Disabled, until, `SET override = "disabled", until = 1700003600000, expires = 1700090000`},
		// NoOverride has no end: it reads like a missing item.
		{breaker.NoOverride, until, `REMOVE until, expires SET override = "none"`},
	} {
		key, e, err := overrideExpression("p", c.o, c.until)
		if err != nil {
			t.Fatalf("overrideExpression(%v): %v", c.o, err)
		}
		if key != "c#p#override" {
			t.Errorf("key = %q", key)
		}
		if e.Condition() != nil {
			t.Errorf("overrideExpression(%v) has a condition %q; the write is unconditional", c.o, aws.ToString(e.Condition()))
		}
		if up, _ := renderAll(t, e); up != c.update {
			t.Errorf("overrideExpression(%v, %v) =\n  %s\nwant\n  %s", c.o, c.until, up, c.update)
		}
		// What is written reads back as written, over an item holding
		// stale values of every attribute.
		it := map[string]types.AttributeValue{"pk": sAV(key), "override": sAV("force-open"), "until": sAV("stale"), "expires": nAV("1"), "note": sAV("kept")}
		applySimpleUpdate(t, e, it)
		if _, ok := it["expires"]; ok != (c.o != breaker.NoOverride && !c.until.IsZero()) {
			t.Errorf("overrideExpression(%v, %v) leaves the item %v", c.o, c.until, it)
		}
		if it["note"] == nil {
			t.Errorf("overrideExpression(%v, %v) removed an attribute it does not name", c.o, c.until)
		}
		o, u, err := decodeOverride(key, it)
		if err != nil || o != c.o || (c.o != breaker.NoOverride && !u.Equal(c.until)) || (c.o == breaker.NoOverride && !u.IsZero()) {
			t.Errorf("decodeOverride(after overrideExpression(%v, %v)) = %v, %v, %v", c.o, c.until, o, u, err)
		}
	}
	for _, c := range []struct {
		name  string
		o     breaker.Override
		until time.Time
		want  string
	}{
		{"p", breaker.Override(9), time.Time{}, "unknown breaker override"},
		{"p", breaker.ForcedOpen, time.UnixMilli(-1), "outside the years"},
		{"a#b", breaker.ForcedOpen, time.Time{}, "'#'"},
	} {
		if _, _, err := overrideExpression(c.name, c.o, c.until); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("overrideExpression(%q, %v, %v) error = %v, want one containing %q", c.name, c.o, c.until, err, c.want)
		}
	}
}

// applySimpleUpdate applies an update expression made only of
// "SET #n = :v, ..." and "REMOVE #n, ..." clauses to item, as DynamoDB
// would.
func applySimpleUpdate(t *testing.T, e expression.Expression, item map[string]types.AttributeValue) {
	t.Helper()
	for _, clause := range strings.Split(strings.TrimSpace(aws.ToString(e.Update())), "\n") {
		verb, list, _ := strings.Cut(clause, " ")
		for _, part := range strings.Split(list, ", ") {
			switch verb {
			case "SET":
				n, v, ok := strings.Cut(part, " = ")
				if !ok || e.Names()[n] == "" || e.Values()[v] == nil {
					t.Fatalf("SET action %q is not #name = :value", part)
				}
				item[e.Names()[n]] = e.Values()[v]
			case "REMOVE":
				if e.Names()[part] == "" {
					t.Fatalf("REMOVE action %q is not #name", part)
				}
				delete(item, e.Names()[part])
			default:
				t.Fatalf("update clause %q is neither SET nor REMOVE", clause)
			}
		}
	}
}
