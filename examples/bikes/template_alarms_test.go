package main

// The alarms and the parameters of template.yaml as a team deploys them:
// refusals page on a sustained rate per invocation, never on one count;
// store faults have alarms of their own; every parameter is checked by
// CloudFormation at deploy time rather than by the function at cold start.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/retry"
)

// alarmMetric is one metric an alarm reads.
type alarmMetric struct {
	id, namespace, name string
	dims                map[string]any // name to value, as written
}

// alarmMetrics returns the metrics an alarm reads (its MetricName, or the
// MetricStat queries of its Metrics) and, for metric math, the expression
// whose data the alarm evaluates.
func alarmMetrics(t *testing.T, id string, p map[string]any) (metrics []alarmMetric, expr string) {
	t.Helper()
	dimsOf := func(v any) map[string]any {
		m := map[string]any{}
		for _, d := range asList(v) {
			dm, _ := d.(map[string]any)
			name, _ := dm["Name"].(string)
			m[name] = dm["Value"]
		}
		return m
	}
	if name, ok := p["MetricName"].(string); ok {
		ns, _ := p["Namespace"].(string)
		return []alarmMetric{{id: "", namespace: ns, name: name, dims: dimsOf(p["Dimensions"])}}, ""
	}
	returned := 0
	for _, q := range asList(p["Metrics"]) {
		qm, _ := q.(map[string]any)
		qid, _ := qm["Id"].(string)
		if e, ok := qm["Expression"].(string); ok {
			if qm["ReturnData"] != false {
				expr = e
				returned++
			}
			continue
		}
		ms, _ := qm["MetricStat"].(map[string]any)
		m, _ := ms["Metric"].(map[string]any)
		ns, _ := m["Namespace"].(string)
		name, _ := m["MetricName"].(string)
		if ms["Period"] != 60 || ms["Stat"] != "Sum" {
			t.Errorf("alarm %s: query %s reads %v of %v s; want the Sum over 60 s", id, qid, ms["Stat"], ms["Period"])
		}
		if qm["ReturnData"] != false {
			returned++
		}
		metrics = append(metrics, alarmMetric{id: qid, namespace: ns, name: name, dims: dimsOf(m["Dimensions"])})
	}
	if returned != 1 || expr == "" {
		t.Errorf("alarm %s: %d queries return data (expression %q); want one expression", id, returned, expr)
	}
	return metrics, expr
}

// alarm is an alarm of the template with the metrics it reads.
type alarm struct {
	id      string
	props   map[string]any
	metrics []alarmMetric
	expr    string
}

func (tpl *samTemplate) alarms(t *testing.T) []alarm {
	t.Helper()
	var as []alarm
	for id, r := range tpl.resources {
		if r["Type"] != "AWS::CloudWatch::Alarm" {
			continue
		}
		p := tpl.props(id)
		ms, expr := alarmMetrics(t, id, p)
		as = append(as, alarm{id: id, props: p, metrics: ms, expr: expr})
	}
	return as
}

func (a alarm) reads(name string) bool {
	for _, m := range a.metrics {
		if m.namespace == metricNamespaceOf(a) && m.name == name {
			return true
		}
	}
	return false
}

// metricNamespaceOf is the namespace of the function's own metrics:
// every namespace an alarm reads but AWS/Lambda.
func metricNamespaceOf(a alarm) string {
	for _, m := range a.metrics {
		if !strings.HasPrefix(m.namespace, "AWS/") {
			return m.namespace
		}
	}
	return ""
}

// emfMetricNames returns the names of the metrics package emf writes for
// refusals and store faults, read back from a flush.
func emfMetricNames(t *testing.T) (refusals, storeErrors []string) {
	t.Helper()
	var buf bytes.Buffer
	rec, err := emf.New(&buf, emf.Options{Namespace: "N"})
	if err != nil {
		t.Fatal(err)
	}
	var rc retry.Config
	var bs breaker.Settings
	rec.Instrument(&rc, &bs)
	names := func(hooks func()) []string {
		buf.Reset()
		hooks()
		if err := rec.Flush(); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct{ Metrics []struct{ Name string } }
			} `json:"_aws"`
		}
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || len(doc.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("emf wrote %q: %v", buf.String(), err)
		}
		var ns []string
		for _, m := range doc.AWS.CloudWatchMetrics[0].Metrics {
			ns = append(ns, m.Name)
		}
		return ns
	}
	refusals = names(func() {
		rc.OnGiveUp(&retry.GiveUpError{Reason: retry.BudgetExhausted, Cause: &budget.ExhaustedError{Budget: "local-ratio"}})
		rc.OnGiveUp(&retry.GiveUpError{Reason: retry.BreakerOpen, Cause: &breaker.OpenError{Name: "p", State: breaker.Open}})
	})
	fault := errors.New("throttled")
	storeErrors = names(func() {
		rc.OnStoreError(1, fmt.Errorf("%w: %w", budget.ErrUnavailable, fault))
		bs.OnStoreError("load", fmt.Errorf("%w: %w", breaker.ErrStore, fault))
	})
	if len(refusals) != 2 || len(storeErrors) != 2 {
		t.Fatalf("emf wrote refusals %v and store errors %v; want two of each", refusals, storeErrors)
	}
	return refusals, storeErrors
}

// numberParam returns the Number parameter v refers to (!Ref), failing the
// test when v is not one.
func (tpl *samTemplate) numberParam(t *testing.T, where string, v any) (name string, p map[string]any) {
	t.Helper()
	ref, _ := v.(map[string]any)
	name, _ = ref["Ref"].(string)
	p, _ = tpl.params[name].(map[string]any)
	if p == nil || p["Type"] != "Number" {
		t.Fatalf("%s is %v; want !Ref to a Number parameter", where, v)
	}
	return name, p
}

func num(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err == nil {
			return f
		}
	}
	return math.NaN()
}

// checkSustained: the alarm fires only when its condition held in every
// one of at least two consecutive 60-second periods, the number a
// parameter a team can change.
func (tpl *samTemplate) checkSustained(t *testing.T, a alarm) {
	t.Helper()
	if !equal(a.props["EvaluationPeriods"], a.props["DatapointsToAlarm"]) {
		t.Errorf("alarm %s: EvaluationPeriods %v, DatapointsToAlarm %v; want the same: every period of the span breaching", a.id, a.props["EvaluationPeriods"], a.props["DatapointsToAlarm"])
	}
	_, p := tpl.numberParam(t, "alarm "+a.id+" EvaluationPeriods", a.props["EvaluationPeriods"])
	if num(p["MinValue"]) < 2 || num(p["Default"]) < 2 {
		t.Errorf("alarm %s: EvaluationPeriods' parameter allows %v (default %v); want at least 2 periods, a sustained condition", a.id, p["MinValue"], p["Default"])
	}
	if a.expr == "" && a.props["Period"] != 60 {
		t.Errorf("alarm %s: Period %v, want 60", a.id, a.props["Period"])
	}
	if a.props["TreatMissingData"] != "notBreaching" {
		t.Errorf("alarm %s: TreatMissingData %v; want notBreaching (EMF writes nothing when nothing happened)", a.id, a.props["TreatMissingData"])
	}
	for _, k := range []string{"AlarmActions", "OKActions"} {
		if _, ok := a.props[k].(map[string]any)["Fn::If"]; !ok {
			t.Errorf("alarm %s: %s is %v; want !If [HasAlarmTopic, ...]", a.id, k, a.props[k])
		}
	}
}

// TestTemplateRefusalAlarmsUseARate: no alarm pages on a count of
// refusals; the refusal alarm reads BudgetExhausted and BreakerRejected
// per invocation of the function, in percent, sustained over AlarmMinutes.
func TestTemplateRefusalAlarmsUseARate(t *testing.T) {
	tpl := loadTemplate(t)
	refusals, _ := emfMetricNames(t)
	covered := map[string]bool{}
	for _, a := range tpl.alarms(t) {
		var refusalIDs []string
		for _, m := range refusals {
			if a.reads(m) {
				covered[m] = true
			}
		}
		for _, m := range a.metrics {
			for _, r := range refusals {
				if m.name == r && !strings.HasPrefix(m.namespace, "AWS/") {
					refusalIDs = append(refusalIDs, m.id)
				}
			}
		}
		if len(refusalIDs) == 0 {
			continue
		}
		if a.expr == "" {
			t.Errorf("alarm %s pages on a count of %v; want a rate per invocation (metric math)", a.id, a.metrics[0].name)
			continue
		}
		inv := ""
		for _, m := range a.metrics {
			if m.namespace == "AWS/Lambda" && m.name == "Invocations" && len(m.dims) == 1 && equal(m.dims["FunctionName"], map[string]any{"Ref": tpl.functionID}) {
				inv = m.id
			}
		}
		if inv == "" {
			t.Errorf("alarm %s reads no AWS/Lambda Invocations of the function (FunctionName !Ref %s)", a.id, tpl.functionID)
			continue
		}
		// The expression is refusals per invocation, in percent: each
		// refusal metric counts, a missing one as zero, and twice the
		// invocations halve it.
		rate := func(vals map[string]float64) float64 {
			v, ok, err := evalExpr(a.expr, vals)
			if err != nil || !ok {
				t.Fatalf("alarm %s: %q with %v: %v (data: %v)", a.id, a.expr, vals, err, ok)
			}
			return v
		}
		all := map[string]float64{inv: 200}
		for i, id := range refusalIDs {
			if got := rate(map[string]float64{id: 3, inv: 100}); got != 3 {
				t.Errorf("alarm %s: 3 %s in 100 invocations, the others missing, give %v; want 3 (%%)", a.id, id, got)
			}
			all[id] = float64(i + 1)
		}
		sum := float64(len(refusalIDs) * (len(refusalIDs) + 1) / 2)
		if got := rate(all); got != 100*sum/200 {
			t.Errorf("alarm %s: %v refusals in 200 invocations give %v; want %v (%%)", a.id, sum, got, 100*sum/200)
		}
		if got := rate(map[string]float64{inv: 100}); got != 0 {
			t.Errorf("alarm %s: a minute of 100 invocations and no refusal gives %v; want 0", a.id, got)
		}
		if _, ok, _ := evalExpr(a.expr, map[string]float64{refusalIDs[0]: 1}); ok {
			t.Errorf("alarm %s: a minute with refusals and no Invocations datum has a value; want none", a.id)
		}
		// The threshold is a percent a team sets, and by default one
		// refusal in a minute of 100 invocations does not breach.
		name, p := tpl.numberParam(t, "alarm "+a.id+" Threshold", a.props["Threshold"])
		if lo, hi := num(p["MinValue"]), num(p["MaxValue"]); !(lo > 0 && hi <= 100) {
			t.Errorf("parameter %s allows [%v, %v]; want a percent in (0, 100]", name, p["MinValue"], p["MaxValue"])
		}
		if one := rate(map[string]float64{refusalIDs[0]: 1, inv: 100}); one >= num(p["Default"]) {
			t.Errorf("alarm %s: one refusal in 100 invocations (%v%%) reaches the default threshold %v", a.id, one, p["Default"])
		}
		if a.props["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" && a.props["ComparisonOperator"] != "GreaterThanThreshold" {
			t.Errorf("alarm %s: ComparisonOperator %v", a.id, a.props["ComparisonOperator"])
		}
		tpl.checkSustained(t, a)
	}
	for _, m := range refusals {
		if !covered[m] {
			t.Errorf("no alarm reads %s", m)
		}
	}
}

// TestTemplateAlarmsOnStoreErrors: BudgetStoreErrors and BreakerStoreErrors
// have alarms of their own, on the same metrics as the function writes
// (its dimensions), sustained over AlarmMinutes.
func TestTemplateAlarmsOnStoreErrors(t *testing.T) {
	tpl := loadTemplate(t)
	_, storeErrors := emfMetricNames(t)
	alarms := tpl.alarms(t)
	// The function's dimension set, as the single-metric alarms give it
	// (TestTemplateAlarmsWatchEmittedMetrics checks them against the
	// function's metrics).
	var want map[string]any
	for _, a := range alarms {
		if a.expr == "" && !a.reads(storeErrors[0]) && !a.reads(storeErrors[1]) {
			want = a.metrics[0].dims
		}
	}
	for _, name := range storeErrors {
		n := 0
		for _, a := range alarms {
			if !a.reads(name) {
				continue
			}
			n++
			for _, m := range a.metrics {
				if !strings.HasPrefix(m.namespace, "AWS/") && want != nil && !equal(m.dims, want) {
					t.Errorf("alarm %s: %s has dimensions %v; want the function's %v", a.id, m.name, m.dims, want)
				}
			}
			if a.expr == "" {
				tpl.numberParam(t, "alarm "+a.id+" Threshold", a.props["Threshold"])
			}
			tpl.checkSustained(t, a)
		}
		if n == 0 {
			t.Errorf("no alarm reads %s", name)
		}
	}
}

// TestTemplateParametersValidatedAtDeploy: CloudFormation rejects a bad
// parameter when the stack is deployed: every Number has bounds around
// its default, every String a pattern its default matches, and the
// durations' pattern takes Go durations and rejects the usual typos.
func TestTemplateParametersValidatedAtDeploy(t *testing.T) {
	tpl := loadTemplate(t)
	durations := 0
	for name, v := range tpl.params {
		p, _ := v.(map[string]any)
		switch p["Type"] {
		case "Number":
			lo, hi := num(p["MinValue"]), num(p["MaxValue"])
			if _, ok := p["MinValue"]; !ok {
				t.Errorf("parameter %s has no MinValue", name)
			}
			if _, ok := p["MaxValue"]; !ok {
				t.Errorf("parameter %s has no MaxValue", name)
			}
			if d := num(p["Default"]); !(lo <= d && d <= hi) {
				t.Errorf("parameter %s: default %v outside [%v, %v]", name, p["Default"], p["MinValue"], p["MaxValue"])
			}
		case "String":
			pat, _ := p["AllowedPattern"].(string)
			if pat == "" {
				t.Errorf("parameter %s has no AllowedPattern", name)
				continue
			}
			re, err := regexp.Compile(`^(?:` + pat + `)$`) // CloudFormation matches the whole value
			if err != nil {
				t.Errorf("parameter %s: AllowedPattern %q: %v", name, pat, err)
				continue
			}
			d, hasDefault := p["Default"]
			if hasDefault && !re.MatchString(fmt.Sprint(d)) {
				t.Errorf("parameter %s: default %q does not match its AllowedPattern %q", name, d, pat)
			}
			if _, err := time.ParseDuration(fmt.Sprint(d)); !hasDefault || err != nil {
				continue
			}
			durations++
			for _, s := range []string{"100ms", "10s", "1.5s", "1m30s", "2h", "0.5m"} {
				if !re.MatchString(s) {
					t.Errorf("duration parameter %s rejects %q", name, s)
				}
			}
			for _, s := range []string{"", "10", "10 s", " 10s", "10sec", "1d", "-1s", "1.5", "s", "10S", "1h 30m", "1.s"} {
				if re.MatchString(s) {
					t.Errorf("duration parameter %s accepts %q", name, s)
				}
			}
			// Whatever the pattern accepts parses as a Go duration.
			for _, s := range []string{"1h1m1s1ms", "00010ms", "2.25h", "1ms1ms"} {
				if _, err := time.ParseDuration(s); re.MatchString(s) && err != nil {
					t.Errorf("duration parameter %s accepts %q, which the function rejects: %v", name, s, err)
				}
			}
		default:
			t.Errorf("parameter %s has type %v", name, p["Type"])
		}
	}
	if durations < 3 {
		t.Errorf("%d duration parameters found; want RetryWindow, BreakerOpenDuration and BreakerCacheTTL at least", durations)
	}
	topic, _ := tpl.params["AlarmTopicArn"].(map[string]any)
	if pat, _ := topic["AllowedPattern"].(string); pat != "" {
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		for s, ok := range map[string]bool{"": true, "arn:aws:sns:eu-central-1:123456789012:alarms": true,
			"arn:aws-cn:sns:cn-north-1:123456789012:on-call_1": true, "alarms": false, "arn:aws:sqs:eu-central-1:123456789012:q": false} {
			if re.MatchString(s) != ok {
				t.Errorf("AlarmTopicArn's pattern on %q: %v, want %v", s, !ok, ok)
			}
		}
	}
}

// evalExpr evaluates a CloudWatch metric-math expression made of numbers,
// query ids, + - * /, parentheses, SUM([...]) and FILL(x, number) for one
// period: vals holds the queries that have a datum. ok is false when the
// result has none (a query without a datum outside FILL or SUM, or a
// division by zero).
func evalExpr(expr string, vals map[string]float64) (v float64, ok bool, err error) {
	e := &exprParser{src: expr, vals: vals}
	v, ok = e.sum()
	e.space()
	if e.err == nil && e.pos != len(e.src) {
		e.fail("unexpected %q", e.src[e.pos:])
	}
	return v, ok, e.err
}

type exprParser struct {
	src  string
	pos  int
	vals map[string]float64
	err  error
}

func (e *exprParser) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("at %d: "+format, append([]any{e.pos}, args...)...)
	}
}

func (e *exprParser) space() {
	for e.pos < len(e.src) && e.src[e.pos] == ' ' {
		e.pos++
	}
}

func (e *exprParser) peek() byte {
	e.space()
	if e.pos < len(e.src) {
		return e.src[e.pos]
	}
	return 0
}

func (e *exprParser) expect(c byte) {
	if e.peek() != c {
		e.fail("want %q", c)
		return
	}
	e.pos++
}

// binary parses operands joined by the operators in ops, left to right.
func (e *exprParser) binary(ops string, operand func() (float64, bool)) (float64, bool) {
	v, ok := operand()
	for e.err == nil && e.peek() != 0 && strings.IndexByte(ops, e.peek()) >= 0 {
		op := e.src[e.pos]
		e.pos++
		w, wok := operand()
		switch op {
		case '+':
			v += w
		case '-':
			v -= w
		case '*':
			v *= w
		case '/':
			ok = ok && w != 0
			v /= w
		}
		ok = ok && wok
	}
	return v, ok
}

func (e *exprParser) sum() (float64, bool)     { return e.binary("+-", e.product) }
func (e *exprParser) product() (float64, bool) { return e.binary("*/", e.operand) }

func (e *exprParser) word() string {
	e.space()
	start := e.pos
	for e.pos < len(e.src) {
		c := rune(e.src[e.pos])
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '_' && c != '.' {
			break
		}
		e.pos++
	}
	return e.src[start:e.pos]
}

func (e *exprParser) operand() (float64, bool) {
	if e.peek() == '(' {
		e.pos++
		v, ok := e.sum()
		e.expect(')')
		return v, ok
	}
	w := e.word()
	switch {
	case w == "":
		e.fail("want an operand")
		return 0, false
	case w == "SUM":
		// SUM([a, b, ...]): the sum of those with a datum; none if none has.
		e.expect('(')
		e.expect('[')
		var sum float64
		some := false
		for e.err == nil {
			v, ok := e.sum()
			if ok {
				sum += v
				some = true
			}
			if e.peek() != ',' {
				break
			}
			e.pos++
		}
		e.expect(']')
		e.expect(')')
		return sum, some
	case w == "FILL":
		e.expect('(')
		v, ok := e.sum()
		e.expect(',')
		fill, fok := e.sum()
		e.expect(')')
		if !ok {
			return fill, fok
		}
		return v, true
	case w[0] >= '0' && w[0] <= '9':
		f, err := strconv.ParseFloat(w, 64)
		if err != nil {
			e.fail("number %q: %v", w, err)
		}
		return f, true
	}
	if e.peek() == '(' {
		e.fail("function %s is not modelled", w)
		return 0, false
	}
	v, ok := e.vals[w]
	return v, ok
}
