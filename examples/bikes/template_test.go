package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	herdlambda "github.com/herdguard/herdguard/lambda"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// The template's function must run this code as configured: these tests
// check template.yaml against the handler (the table and the IAM policy are
// checked against package dynamo in template_dynamo_test.go).

const repoRoot = "../.."

type samTemplate struct {
	doc        map[string]any
	params     map[string]any
	resources  map[string]map[string]any
	functionID string
	tableID    string
}

func loadTemplate(t *testing.T) *samTemplate {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parseCFN(src)
	if err != nil {
		t.Fatalf("parsing template.yaml: %v", err)
	}
	tpl := &samTemplate{doc: doc, resources: map[string]map[string]any{}}
	tpl.params, _ = doc["Parameters"].(map[string]any)
	rs, _ := doc["Resources"].(map[string]any)
	for id, v := range rs {
		r, _ := v.(map[string]any)
		tpl.resources[id] = r
		switch r["Type"] {
		case "AWS::Serverless::Function":
			if tpl.functionID != "" {
				t.Fatalf("two functions: %s and %s", tpl.functionID, id)
			}
			tpl.functionID = id
		case "AWS::DynamoDB::Table":
			tpl.tableID = id
		}
	}
	if tpl.functionID == "" || tpl.tableID == "" {
		t.Fatalf("template lacks the function (%q) or the table (%q)", tpl.functionID, tpl.tableID)
	}
	return tpl
}

func (tpl *samTemplate) props(id string) map[string]any {
	p, _ := tpl.resources[id]["Properties"].(map[string]any)
	return p
}

// resolve evaluates a value as CloudFormation would with the parameters'
// defaults: a Ref to a parameter gives its default (or dflt[name] when it
// has none), a Ref to the table gives a plausible table name.
func (tpl *samTemplate) resolve(t *testing.T, v any, dflt map[string]string) string {
	t.Helper()
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		ref, ok := x["Ref"].(string)
		if !ok {
			t.Fatalf("cannot evaluate %v", x)
		}
		if ref == tpl.tableID {
			return "herdguard-stack-Table-ABC123"
		}
		p, ok := tpl.params[ref].(map[string]any)
		if !ok {
			t.Fatalf("Ref %s names neither a parameter nor the table", ref)
		}
		if d, ok := p["Default"]; ok {
			return tpl.resolve(t, d, dflt)
		}
		if d, ok := dflt[ref]; ok {
			return d
		}
		t.Fatalf("parameter %s has no default; give the test one", ref)
	}
	t.Fatalf("cannot evaluate %T %v", v, v)
	return ""
}

// functionEnv is the function's environment with the parameters' defaults.
func (tpl *samTemplate) functionEnv(t *testing.T) (raw map[string]any, env map[string]string) {
	t.Helper()
	envProps, _ := tpl.props(tpl.functionID)["Environment"].(map[string]any)
	raw, _ = envProps["Variables"].(map[string]any)
	env = map[string]string{}
	for k, v := range raw {
		env[k] = tpl.resolve(t, v, map[string]string{"PartnerUrl": "https://partner.example.com"})
	}
	env["AWS_LAMBDA_FUNCTION_NAME"] = "stack-BikesFunction-XYZ" // set by Lambda
	env["AWS_REGION"] = "eu-central-1"                          // set by Lambda
	return raw, env
}

func TestTemplateFunctionBuildsThisCode(t *testing.T) {
	tpl := loadTemplate(t)
	fn := tpl.resources[tpl.functionID]
	meta, _ := fn["Metadata"].(map[string]any)
	if meta["BuildMethod"] != "makefile" {
		t.Errorf("Metadata.BuildMethod is %v, want makefile so that sam build runs the Makefile's static build", meta["BuildMethod"])
	}
	p := tpl.props(tpl.functionID)
	for k, want := range map[string]any{"Runtime": "provided.al2023", "Handler": "bootstrap"} {
		if p[k] != want {
			t.Errorf("%s is %v, want %v", k, p[k], want)
		}
	}
	if !equal(p["Architectures"], []any{"arm64"}) {
		t.Errorf("Architectures %v, want [arm64]", p["Architectures"])
	}
	// sam build copies CodeUri and runs `make build-<LogicalId>` in the
	// copy, which must hold the Makefile and every module the build needs:
	// the repository root, since this module replaces herdguard with ../..
	uri, _ := p["CodeUri"].(string)
	if filepath.Clean(uri) != "." {
		t.Errorf("CodeUri %q, want the repository root (./), where the Makefile and the root module are", uri)
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, uri, "Makefile"))
	if err != nil {
		t.Fatalf("CodeUri %q has no Makefile: %v", uri, err)
	}
	if !strings.Contains(string(mk), "\nbuild-"+tpl.functionID+":") {
		t.Errorf("the Makefile has no target build-%s", tpl.functionID)
	}
}

// TestTemplateReservedConcurrencyIsOptional: the parameter defaults to 0,
// which sets no reservation (accounts with a low concurrency quota reject
// one), through a Condition.
func TestTemplateReservedConcurrencyIsOptional(t *testing.T) {
	tpl := loadTemplate(t)
	ifFn, _ := tpl.props(tpl.functionID)["ReservedConcurrentExecutions"].(map[string]any)
	args, _ := ifFn["Fn::If"].([]any)
	if len(args) != 3 {
		t.Fatalf("ReservedConcurrentExecutions is %v, want !If [Condition, !Ref Parameter, !Ref AWS::NoValue]", tpl.props(tpl.functionID)["ReservedConcurrentExecutions"])
	}
	cond, _ := args[0].(string)
	ref, _ := args[1].(map[string]any)
	name, _ := ref["Ref"].(string)
	param, _ := tpl.params[name].(map[string]any)
	if param == nil || param["Type"] != "Number" || param["Default"] != 0 || param["MinValue"] != 0 {
		t.Errorf("parameter %q is %v, want a Number with Default 0 and MinValue 0", name, param)
	}
	if !equal(args[2], map[string]any{"Ref": "AWS::NoValue"}) {
		t.Errorf("the else branch is %v, want !Ref AWS::NoValue", args[2])
	}
	conds, _ := tpl.doc["Conditions"].(map[string]any)
	want := map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": name}, 0}}}}
	if !equal(conds[cond], want) {
		t.Errorf("condition %s is %v, want !Not [!Equals [!Ref %s, 0]]", cond, conds[cond], name)
	}
}

// TestTemplateKeepsState: the table (breaker state, operators' overrides)
// and the log group survive a stack's deletion and a replacement, and the
// function logs to the stack's own, unnamed log group, so that no group
// Lambda created first can make the stack fail.
func TestTemplateKeepsState(t *testing.T) {
	tpl := loadTemplate(t)
	groups := 0
	for id, r := range tpl.resources {
		switch r["Type"] {
		case "AWS::DynamoDB::Table", "AWS::Logs::LogGroup":
		default:
			continue
		}
		for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			if r[k] != "Retain" {
				t.Errorf("%s: %s is %v, want Retain", id, k, r[k])
			}
		}
		if r["Type"] != "AWS::Logs::LogGroup" {
			continue
		}
		groups++
		if n, ok := tpl.props(id)["LogGroupName"]; ok {
			t.Errorf("log group %s is named %v: a group of that name created before the stack (by Lambda, or a retained one) makes the stack fail; let CloudFormation name it", id, n)
		}
		if _, ok := tpl.props(id)["RetentionInDays"].(int); !ok {
			t.Errorf("log group %s has no RetentionInDays", id)
		}
		lc, _ := tpl.props(tpl.functionID)["LoggingConfig"].(map[string]any)
		if !equal(lc["LogGroup"], map[string]any{"Ref": id}) {
			t.Errorf("the function's LoggingConfig.LogGroup is %v, want !Ref %s", lc["LogGroup"], id)
		}
	}
	if groups != 1 {
		t.Errorf("%d log groups, want 1", groups)
	}
}

// TestMakefileBuildsStaticArm64 runs the Makefile's target as sam build
// does and checks the binary: linux/arm64, statically linked, built without
// cgo, with -trimpath and -tags lambda.norpc, from this package.
func TestMakefileBuildsStaticArm64(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the function (about a minute on a cold build cache)")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed to run the Makefile sam build runs: %v", err)
	}
	tpl := loadTemplate(t)
	out := t.TempDir()
	cmd := exec.Command(makeBin, "-C", repoRoot, "build-"+tpl.functionID, "ARTIFACTS_DIR="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build-%s: %v\n%s", tpl.functionID, err, b)
	}
	bin := filepath.Join(out, "bootstrap")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("machine %v, want EM_AARCH64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "github.com/herdguard/herdguard/examples/bikes" {
		t.Errorf("built %s, want examples/bikes", info.Path)
	}
	want := map[string]string{"GOOS": "linux", "GOARCH": "arm64", "CGO_ENABLED": "0", "-trimpath": "true", "-tags": "lambda.norpc"}
	for _, s := range info.Settings {
		if w, ok := want[s.Key]; ok {
			if s.Value != w {
				t.Errorf("build setting %s=%s, want %s", s.Key, s.Value, w)
			}
			delete(want, s.Key)
		}
	}
	for k, v := range want {
		t.Errorf("build setting %s missing, want %s", k, v)
	}
}

func TestTemplateRouteMatchesHandler(t *testing.T) {
	tpl := loadTemplate(t)
	events, _ := tpl.props(tpl.functionID)["Events"].(map[string]any)
	found := 0
	for name, v := range events {
		ev, _ := v.(map[string]any)
		if ev["Type"] != "HttpApi" {
			t.Errorf("event %s is %v; the handler takes HTTP API (payload 2.0) events only", name, ev["Type"])
			continue
		}
		props, _ := ev["Properties"].(map[string]any)
		if props["Path"] != "/stations/{stationId}/bikes" || !strings.EqualFold(fmt.Sprint(props["Method"]), "GET") {
			t.Errorf("event %s routes %v %v, want GET /stations/{stationId}/bikes", name, props["Method"], props["Path"])
		}
		found++
	}
	if found != 1 {
		t.Errorf("%d HTTP API routes, want 1", found)
	}
}

// Names of the function's configuration in template.yaml.
const (
	envTableName = "HERDGUARD_TABLE"
	envName      = "HERDGUARD_NAME"
	envPartner   = "PARTNER_URL"
)

// setEnv sets the function's environment env for the test, and unsets
// every other HERDGUARD_* variable.
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "HERDGUARD_") {
			t.Setenv(k, "")
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// initialise runs what the function runs at init in the environment the
// test set, over in-memory stores instead of the table, with metrics to
// metrics: herdlambda.New, then setup.
func initialise(metrics io.Writer) (*herdlambda.Fleet, error) {
	f, err := herdlambda.New(context.Background(), herdlambda.Config{
		Budgets: local.NewBudgetStore(), Breakers: local.NewBreakerStore(),
		Metrics: metrics, Log: slog.NewJSONHandler(io.Discard, nil),
	})
	if err != nil {
		return nil, err
	}
	_, err = setup(context.Background(), f)
	return f, err
}

func TestTemplateEnvironmentIsValidConfig(t *testing.T) {
	tpl := loadTemplate(t)
	raw, env := tpl.functionEnv(t)
	if !equal(raw[envTableName], map[string]any{"Ref": tpl.tableID}) {
		t.Errorf("%s is %v, want !Ref %s", envTableName, raw[envTableName], tpl.tableID)
	}
	setEnv(t, env)
	if _, err := initialise(io.Discard); err != nil {
		t.Fatalf("the template's environment is not a valid configuration: %v", err)
	}
	// Every variable is read: a bad value fails the initialisation,
	// naming it (the table's name is checked by DynamoDB, not here).
	for k := range raw {
		if k == envTableName {
			continue
		}
		bad := maps.Clone(env)
		bad[k] = "#bad"
		setEnv(t, bad)
		if _, err := initialise(io.Discard); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("with %s=%q the function initialises (%v): is the variable read? (typo?)", k, bad[k], err)
		}
	}
	timeout, ok := tpl.props(tpl.functionID)["Timeout"].(int)
	if !ok {
		t.Fatalf("Timeout is %v, want a number of seconds", tpl.props(tpl.functionID)["Timeout"])
	}
	// herdlambda ends the partner call before the deadline by itself; the
	// timeout must leave room for the worst case so that it does: every
	// attempt running out of its timeout, the longest waits in between, a
	// breaker read and a budget write before each retry, the flush and
	// the reserve.
	num := func(k string) time.Duration {
		v, ok := env["HERDGUARD_"+k]
		if !ok {
			t.Fatalf("template.yaml does not set HERDGUARD_%s, which the worst case needs", k)
		}
		if n, err := strconv.Atoi(v); err == nil {
			return time.Duration(n)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("HERDGUARD_%s=%q: %v", k, v, err)
		}
		return d
	}
	n := num("MAX_ATTEMPTS")
	wc := n*num("ATTEMPT_TIMEOUT") + (n-1)*num("MAX_DELAY") + n*2*num("STORE_TIMEOUT") + num("FLUSH_TIMEOUT") + num("RESERVE")
	if time.Duration(timeout)*time.Second <= wc {
		t.Errorf("function Timeout %d s does not cover the worst case %v", timeout, wc)
	}
}

// emittedMetrics returns the namespace and the dimension names of the
// function's metrics, read from the EMF line of a refused invocation, and
// the names of the metrics package emf writes, every kind of event
// included.
func emittedMetrics(t *testing.T) (namespace string, dims []string, metrics map[string]bool) {
	t.Helper()
	type directive struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		} `json:"_aws"`
	}
	read := func(b []byte) (namespace string, dims []string, metrics []struct{ Name string }) {
		var doc directive
		if err := json.Unmarshal(b, &doc); err != nil || len(doc.AWS.CloudWatchMetrics) != 1 || len(doc.AWS.CloudWatchMetrics[0].Dimensions) != 1 {
			t.Fatalf("the recorder wrote %q (%v); want one EMF object with one directive and one dimension set", b, err)
		}
		d := doc.AWS.CloudWatchMetrics[0]
		return d.Namespace, d.Dimensions[0], d.Metrics
	}

	var fn bytes.Buffer
	f, err := initialise(&fn)
	if err != nil {
		t.Fatal(err)
	}
	h := herdlambda.Wrap(f, func(ctx context.Context, _ struct{}) (struct{}, error) {
		_, err := retry.DoIdempotent(ctx, f.Executor, true, func(context.Context, int) (struct{}, error) {
			return struct{}{}, &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
		})
		return struct{}{}, err
	})
	if _, err := h(context.Background(), struct{}{}); err == nil {
		t.Fatal("a partner answering 503 was not refused")
	}
	namespace, dims, _ = read(bytes.TrimSpace(fn.Bytes()))

	var buf bytes.Buffer
	rec, err := emf.New(&buf, emf.Options{Namespace: namespace, Dimensions: map[string]string{"d": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var rc retry.Config
	var bs breaker.Settings
	rec.Instrument(&rc, &bs)
	rc.OnRetry(retry.RetryEvent{})
	rc.OnGiveUp(&retry.GiveUpError{Reason: retry.BudgetExhausted, Cause: &budget.ExhaustedError{Budget: "local-ratio"}})
	rc.OnStoreError(1, boom)
	bs.OnStoreError("load", boom)
	rc.OnGiveUp(&retry.GiveUpError{Reason: retry.BreakerOpen})
	for _, s := range [][2]breaker.State{{breaker.Closed, breaker.Open}, {breaker.Open, breaker.HalfOpen}, {breaker.HalfOpen, breaker.Closed}} {
		bs.OnStateChange(breaker.StateChange{From: s[0], To: s[1], Origin: breaker.OriginWrote})
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	_, _, ms := read(buf.Bytes())
	metrics = map[string]bool{}
	for _, m := range ms {
		metrics[m.Name] = true
	}
	return namespace, dims, metrics
}

func TestTemplateAlarmsWatchEmittedMetrics(t *testing.T) {
	tpl := loadTemplate(t)
	raw, env := tpl.functionEnv(t)
	setEnv(t, env)
	namespace, dims, emitted := emittedMetrics(t)
	partnerValue := raw[envName]
	alarmed := map[string]bool{}
	for id, r := range tpl.resources {
		if r["Type"] != "AWS::CloudWatch::Alarm" {
			continue
		}
		p := tpl.props(id)
		if _, ok := p["Metrics"]; ok {
			continue // metric math: template_alarms_test.go checks its metrics
		}
		metric, _ := p["MetricName"].(string)
		if p["Namespace"] != namespace {
			t.Errorf("alarm %s: namespace %v, want %s", id, p["Namespace"], namespace)
		}
		if !emitted[metric] {
			t.Errorf("alarm %s watches %q, which the function does not emit (it emits %v)", id, metric, emitted)
			continue
		}
		alarmed[metric] = true
		var names []string
		for _, d := range asList(p["Dimensions"]) {
			dm, _ := d.(map[string]any)
			name, _ := dm["Name"].(string)
			names = append(names, name)
			switch name {
			case "FunctionName":
				if !equal(dm["Value"], map[string]any{"Ref": tpl.functionID}) {
					t.Errorf("alarm %s: %s is %v, want !Ref %s", id, name, dm["Value"], tpl.functionID)
				}
			case "Partner":
				if !equal(dm["Value"], partnerValue) {
					t.Errorf("alarm %s: %s is %v, want the function's %s %v", id, name, dm["Value"], envName, partnerValue)
				}
			}
		}
		// CloudWatch matches a metric only with its exact dimension set.
		sort.Strings(names)
		if strings.Join(names, ",") != strings.Join(dims, ",") {
			t.Errorf("alarm %s: dimensions %v, want exactly %v", id, names, dims)
		}
	}
	for _, m := range []string{"BreakerOpened", "BudgetStoreErrors", "BreakerStoreErrors"} {
		if !alarmed[m] {
			t.Errorf("no alarm on %s", m)
		}
	}
}

// TestTemplateFunctionCannotWriteItsOverride checks the function's policy
// against the name it runs with: the Deny keeps it from writing its own
// breaker's override item (which the stack's BreakerOverrideExample output
// tells an operator to write), and spares every item the function writes.
// template_dynamo_test.go checks the policy's shape against package dynamo.
func TestTemplateFunctionCannotWriteItsOverride(t *testing.T) {
	tpl := loadTemplate(t)
	raw, env := tpl.functionEnv(t)
	name := env[envName]
	if raw[envName] == nil {
		t.Fatalf("the function has no %s", envName)
	}

	var patterns []string
	denied := map[string]bool{}
	for _, p := range asList(tpl.props(tpl.functionID)["Policies"]) {
		pm, _ := p.(map[string]any)
		for _, st := range asList(pm["Statement"]) {
			sm, _ := st.(map[string]any)
			if sm["Effect"] != "Deny" {
				continue
			}
			cond, _ := sm["Condition"].(map[string]any)
			like, _ := cond["ForAnyValue:StringLike"].(map[string]any)
			for _, v := range asList(like["dynamodb:LeadingKeys"]) {
				if s, ok := v.(string); ok {
					patterns = append(patterns, s)
				}
			}
			for _, a := range asList(sm["Action"]) {
				denied[strings.ToLower(fmt.Sprint(a))] = true
			}
		}
	}
	if len(patterns) == 0 {
		t.Fatal("the function's policy has no Deny conditioned on ForAnyValue:StringLike dynamodb:LeadingKeys")
	}
	for _, a := range []string{"dynamodb:putitem", "dynamodb:updateitem", "dynamodb:deleteitem"} {
		if !denied[a] {
			t.Errorf("the Deny does not list %s", a)
		}
	}
	matches := func(key string) bool {
		for _, p := range patterns {
			if ok, err := path.Match(p, key); err == nil && ok { // keys hold no '/'
				return true
			}
		}
		return false
	}

	override := "c#" + name + "#override"
	if !matches(override) {
		t.Errorf("the function may write its breaker's override item %q: the Deny's patterns %v miss it", override, patterns)
	}
	// The items the function writes at run time (package dynamo's layout).
	for _, k := range []string{"b#" + name + "#0#1700000000000", "c#" + name, "c#" + name + "#w#1700000000000", "c#" + name + "#p#0"} {
		if matches(k) {
			t.Errorf("the Deny's patterns %v match %q, which the function writes", patterns, k)
		}
	}

	// The operator's command in the outputs writes that very item.
	outputs, _ := tpl.doc["Outputs"].(map[string]any)
	ex, _ := outputs["BreakerOverrideExample"].(map[string]any)
	sub, _ := ex["Value"].(map[string]any)
	cmd, _ := sub["Fn::Sub"].(string)
	p, _ := tpl.params["HerdguardName"].(map[string]any)
	cmd = strings.ReplaceAll(cmd, "${HerdguardName}", fmt.Sprint(p["Default"]))
	if !strings.Contains(cmd, `{"pk":{"S":"`+override+`"}`) {
		t.Errorf("output BreakerOverrideExample %q does not write %s", cmd, override)
	}
}
