package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
	env[envFunctionName] = "stack-BikesFunction-XYZ" // set by Lambda
	env[envRegion] = "eu-central-1"                  // set by Lambda
	return raw, env
}

func TestTemplateFunctionBuildsThisCode(t *testing.T) {
	tpl := loadTemplate(t)
	fn := tpl.resources[tpl.functionID]
	meta, _ := fn["Metadata"].(map[string]any)
	if meta["BuildMethod"] != "go1.x" {
		t.Errorf("Metadata.BuildMethod is %v, want go1.x so that sam build compiles the Go code", meta["BuildMethod"])
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
	uri, _ := p["CodeUri"].(string)
	if _, err := os.Stat(filepath.Join(repoRoot, uri, "main.go")); err != nil || filepath.Clean(uri) != filepath.Join("examples", "bikes") {
		t.Errorf("CodeUri %q does not point at examples/bikes: %v", uri, err)
	}
	rc, _ := p["ReservedConcurrentExecutions"].(map[string]any)
	param, _ := tpl.params[fmt.Sprint(rc["Ref"])].(map[string]any)
	if param == nil || param["Type"] != "Number" {
		t.Errorf("ReservedConcurrentExecutions is %v, want a Ref to a Number parameter", p["ReservedConcurrentExecutions"])
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
		if props["Path"] != "/stations/{"+pathParam+"}/bikes" || !strings.EqualFold(fmt.Sprint(props["Method"]), "GET") {
			t.Errorf("event %s routes %v %v, want GET /stations/{%s}/bikes", name, props["Method"], props["Path"], pathParam)
		}
		found++
	}
	if found != 1 {
		t.Errorf("%d HTTP API routes, want 1", found)
	}
}

func TestTemplateEnvironmentIsValidConfig(t *testing.T) {
	tpl := loadTemplate(t)
	raw, env := tpl.functionEnv(t)
	if !equal(raw[envTableName], map[string]any{"Ref": tpl.tableID}) {
		t.Errorf("%s is %v, want !Ref %s", envTableName, raw[envTableName], tpl.tableID)
	}
	asked := map[string]bool{}
	cfg, err := loadConfig(func(k string) (string, bool) {
		asked[k] = true
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		t.Fatalf("the template's environment is not a valid configuration: %v", err)
	}
	for k := range raw {
		if !asked[k] {
			t.Errorf("environment variable %s is not read by the function (typo?)", k)
		}
	}
	timeout, ok := tpl.props(tpl.functionID)["Timeout"].(int)
	if !ok {
		t.Fatalf("Timeout is %v, want a number of seconds", tpl.props(tpl.functionID)["Timeout"])
	}
	// The handler ends the partner call before the deadline by itself;
	// the timeout must leave room for the worst case so that it does.
	if wc := cfg.WorstCase(); time.Duration(timeout)*time.Second <= wc+responseReserve {
		t.Errorf("function Timeout %d s does not cover the worst case %v (+%v to answer)", timeout, wc, responseReserve)
	}
}

func TestTemplateAlarmsWatchEmittedMetrics(t *testing.T) {
	tpl := loadTemplate(t)
	raw, _ := tpl.functionEnv(t)
	partnerValue := raw[envName]
	if partnerValue == nil {
		partnerValue = defaultName
	}
	alarmed := map[string]bool{}
	for id, r := range tpl.resources {
		if r["Type"] != "AWS::CloudWatch::Alarm" {
			continue
		}
		p := tpl.props(id)
		metric, _ := p["MetricName"].(string)
		if p["Namespace"] != metricNamespace {
			t.Errorf("alarm %s: namespace %v, want %s", id, p["Namespace"], metricNamespace)
		}
		dims, ok := metricDimensions[metric]
		if !ok {
			t.Errorf("alarm %s watches %q, which the function does not emit", id, metric)
			continue
		}
		alarmed[metric] = true
		var names []string
		for _, d := range asList(p["Dimensions"]) {
			dm, _ := d.(map[string]any)
			name, _ := dm["Name"].(string)
			names = append(names, name)
			switch name {
			case dimFunction:
				if !equal(dm["Value"], map[string]any{"Ref": tpl.functionID}) {
					t.Errorf("alarm %s: %s is %v, want !Ref %s", id, name, dm["Value"], tpl.functionID)
				}
			case dimPartner:
				if !equal(dm["Value"], partnerValue) {
					t.Errorf("alarm %s: %s is %v, want the function's %s %v", id, name, dm["Value"], envName, partnerValue)
				}
			case dimState:
				if v := dm["Value"]; v != "open" && v != "half-open" && v != "closed" {
					t.Errorf("alarm %s: State %v is not a breaker state", id, v)
				}
			}
		}
		// CloudWatch matches a metric only with its exact dimension set.
		if strings.Join(names, ",") != strings.Join(dims, ",") {
			t.Errorf("alarm %s: dimensions %v, want exactly %v", id, names, dims)
		}
	}
	for m := range metricDimensions {
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
		name = defaultName
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
