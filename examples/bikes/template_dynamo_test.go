package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/herdguard/herdguard/dynamo"
)

// These tests check template.yaml's table and IAM policy against package
// dynamo: the table's key schema, billing mode and TTL against dynamo.Spec(),
// and the function's policy against dynamo.Actions() and the Deny of writes
// to override items. They decode the template with parseCFN (cfn_test.go).

// cfnResource is one entry of Resources.
type cfnResource struct {
	id    string
	typ   string
	props map[string]any
}

func cfnResources(doc map[string]any) ([]cfnResource, error) {
	rs, ok := doc["Resources"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no Resources mapping")
	}
	var out []cfnResource
	for id, v := range rs {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("resource %s is not a mapping", id)
		}
		typ, _ := m["Type"].(string)
		props, _ := m["Properties"].(map[string]any)
		out = append(out, cfnResource{id: id, typ: typ, props: props})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

// checkDynamoTemplate compares a parsed template with what package dynamo
// expects, and returns every disagreement.
func checkDynamoTemplate(doc map[string]any) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	rs, err := cfnResources(doc)
	if err != nil {
		return []error{err}
	}
	var tables []cfnResource
	for _, r := range rs {
		if r.typ == "AWS::DynamoDB::Table" {
			tables = append(tables, r)
		}
	}
	if len(tables) != 1 {
		fail("template declares %d DynamoDB tables, want exactly 1", len(tables))
		return errs
	}
	table := tables[0]
	spec := dynamo.Spec()

	// Key schema: exactly the hash key, declared with its type and nothing else.
	wantKeys := []any{map[string]any{"AttributeName": spec.PartitionKey, "KeyType": "HASH"}}
	if !equal(table.props["KeySchema"], wantKeys) {
		fail("table %s: KeySchema is %v, want %v", table.id, table.props["KeySchema"], wantKeys)
	}
	wantDefs := []any{map[string]any{"AttributeName": spec.PartitionKey, "AttributeType": string(spec.PartitionKeyType)}}
	if !equal(table.props["AttributeDefinitions"], wantDefs) {
		fail("table %s: AttributeDefinitions is %v, want %v", table.id, table.props["AttributeDefinitions"], wantDefs)
	}
	if got := table.props["BillingMode"]; got != string(spec.BillingMode) {
		fail("table %s: BillingMode is %v, want %s", table.id, got, spec.BillingMode)
	}
	wantTTL := map[string]any{"AttributeName": spec.TTLAttribute, "Enabled": true}
	if !equal(table.props["TimeToLiveSpecification"], wantTTL) {
		fail("table %s: TimeToLiveSpecification is %v, want %v", table.id, table.props["TimeToLiveSpecification"], wantTTL)
	}

	// IAM: every grant of a DynamoDB action is an unconditional Allow of
	// exactly dynamo.Actions() on exactly the table's ARN, and every role
	// granting them carries the Deny that keeps it from writing override
	// items (and no other Deny of DynamoDB actions).
	wantResource := map[string]any{"Fn::GetAtt": []any{table.id, "Arn"}}
	functions := 0
	for _, r := range rs {
		var docs []any
		switch r.typ {
		case "AWS::Serverless::Function":
			functions++
			policies, _ := r.props["Policies"].([]any)
			if len(policies) == 0 {
				fail("function %s has no Policies; it needs %v on the table", r.id, dynamo.Actions())
			}
			for i, p := range policies {
				pm, ok := p.(map[string]any)
				if !ok || pm["Statement"] == nil {
					// A managed policy name or a SAM policy template
					// (DynamoDBCrudPolicy, ...) grants actions this test
					// cannot see: only inline documents are allowed.
					fail("function %s: Policies[%d] is %v; use an inline policy document so the granted actions can be checked", r.id, i, p)
					continue
				}
				docs = append(docs, pm)
			}
		case "AWS::IAM::Role":
			if ps, ok := r.props["Policies"].([]any); ok {
				for _, p := range ps {
					if pm, ok := p.(map[string]any); ok {
						docs = append(docs, pm["PolicyDocument"])
					}
				}
			}
		case "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy":
			docs = append(docs, r.props["PolicyDocument"])
		}
		granted := map[string]int{}
		var denied []string // actions of the override Deny
		overrideDenies := 0
		for _, d := range docs {
			dm, _ := d.(map[string]any)
			for _, st := range asList(dm["Statement"]) {
				sm, ok := st.(map[string]any)
				if !ok {
					fail("%s: a policy statement is %v, not a mapping", r.id, st)
					continue
				}
				var dyn []string
				for _, a := range asList(sm["Action"]) {
					s, _ := a.(string)
					if s == "*" || strings.HasPrefix(strings.ToLower(s), "dynamodb:") {
						dyn = append(dyn, s)
					}
				}
				if sm["NotAction"] != nil {
					fail("%s: NotAction grants everything not listed; list the DynamoDB actions instead", r.id)
				}
				if len(dyn) == 0 {
					continue
				}
				if sm["NotResource"] != nil {
					fail("%s: a statement of DynamoDB actions %v uses NotResource; name the table's ARN", r.id, dyn)
				}
				res := asList(sm["Resource"])
				switch sm["Effect"] {
				case "Allow":
					for _, a := range dyn {
						granted[a]++
					}
					if len(res) != 1 || !equal(res[0], wantResource) {
						fail("%s: DynamoDB actions %v are granted on %v, want only the table's ARN %v", r.id, dyn, sm["Resource"], wantResource)
					}
					if sm["Condition"] != nil {
						fail("%s: the Allow of %v has a Condition %v; the stores need their actions on every item they write", r.id, dyn, sm["Condition"])
					}
				case "Deny":
					if !isOverrideDenyCondition(sm["Condition"]) {
						fail("%s: a Deny of DynamoDB actions %v with condition %v; the only Deny allowed is the one of writes to override items, with condition %v", r.id, dyn, sm["Condition"], overrideDenyCondition())
						continue
					}
					overrideDenies++
					denied = append(denied, dyn...)
					if len(res) != 1 || !equal(res[0], wantResource) {
						fail("%s: the Deny of writes to override items is on %v, want the table's ARN %v", r.id, sm["Resource"], wantResource)
					}
				default:
					fail("%s: a statement of DynamoDB actions %v has Effect %v", r.id, dyn, sm["Effect"])
				}
			}
		}
		if r.typ != "AWS::Serverless::Function" && len(granted) == 0 {
			continue
		}
		var got []string
		for a, n := range granted {
			got = append(got, a)
			if n > 1 {
				fail("%s grants %s %d times", r.id, a, n)
			}
		}
		sort.Strings(got)
		want := dynamo.Actions()
		for _, a := range want {
			if granted[a] == 0 {
				fail("%s does not grant %s, which the dynamo stores call", r.id, a)
			}
		}
		for _, a := range got {
			if !slices.Contains(want, a) {
				fail("%s grants %s, which the dynamo stores never call (want exactly %v)", r.id, a, want)
			}
		}
		switch {
		case overrideDenies == 0:
			fail("%s has no Deny of writes to override items (%v on the table with condition %v): its role could write an operator override", r.id, overrideWriteActions, overrideDenyCondition())
		case overrideDenies > 1:
			fail("%s has %d Denies of writes to override items, want one", r.id, overrideDenies)
		}
		if overrideDenies > 0 {
			covers := func(a string) bool {
				return slices.ContainsFunc(denied, func(p string) bool { return actionMatches(p, a) })
			}
			for _, a := range overrideWriteActions {
				if !covers(a) {
					fail("%s: the Deny of writes to override items does not cover %s", r.id, a)
				}
			}
			// The stores read override items (Load, Transition): the
			// Deny must leave every other action of theirs alone.
			for _, a := range want {
				if !slices.Contains(overrideWriteActions, a) && covers(a) {
					fail("%s: the Deny of writes to override items also covers %s, which the stores call on them", r.id, a)
				}
			}
		}
	}
	if functions == 0 {
		fail("template declares no AWS::Serverless::Function")
	}
	return errs
}

// overrideWriteActions are the item writes the function's role must be
// denied on override items: PutItem and UpdateItem write one, DeleteItem
// clears one (undoing an operator's force-open), BatchWriteItem does either
// (TransactWriteItems is authorised through these).
var overrideWriteActions = []string{"dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}

// overrideDenyCondition is the condition of the Deny of writes to override
// items: dynamodb:LeadingKeys holds the partition keys of the items a
// request touches, and ForAnyValue:StringLike holds when any of them
// matches (ForAllValues would let a batch mixing other keys through).
func overrideDenyCondition() map[string]any {
	return map[string]any{"ForAnyValue:StringLike": map[string]any{"dynamodb:LeadingKeys": []any{dynamo.OverrideKeyPattern}}}
}

// isOverrideDenyCondition reports whether c is overrideDenyCondition(),
// allowing a single pattern to be written without a list.
func isOverrideDenyCondition(c any) bool {
	cm, ok := c.(map[string]any)
	if !ok || len(cm) != 1 {
		return false
	}
	op, ok := cm["ForAnyValue:StringLike"].(map[string]any)
	if !ok || len(op) != 1 {
		return false
	}
	return equal(asList(op["dynamodb:LeadingKeys"]), []any{dynamo.OverrideKeyPattern})
}

// actionMatches reports whether the IAM action pattern p (case-insensitive,
// with '*' and '?' wildcards) covers the action a.
func actionMatches(p, a string) bool {
	ok, err := path.Match(strings.ToLower(p), strings.ToLower(a)) // actions have no '/'
	return err == nil && ok
}

// readTemplateSource returns template.yaml at the top of the repository.
func readTemplateSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "template.yaml"))
	if err != nil {
		t.Fatalf("reading the SAM template: %v", err)
	}
	return string(b)
}

func TestTemplateDynamoMatchesCode(t *testing.T) {
	doc, err := parseCFN([]byte(readTemplateSource(t)))
	if err != nil {
		t.Fatalf("parsing %s: %v", "template.yaml", err)
	}
	for _, err := range checkDynamoTemplate(doc) {
		t.Error(err)
	}
	if len(dynamo.Actions()) == 0 {
		t.Fatal("dynamo.Actions() is empty")
	}
}

func TestCFNParserHandlesShortTags(t *testing.T) {
	doc, err := parseCFN([]byte(`
Conditions:
  C: !Not [!Equals [!Ref P, ""]]
X:
  a: !Ref Table
  b: !GetAtt Table.Arn
  c: !Sub "arn:${AWS::Partition}:x"
  d: !If [C, [!Ref P], !Ref "AWS::NoValue"]
  e: !Join ["", [a, !GetAtt [T, Arn]]]
  f: !Ref 123
`))
	if err != nil {
		t.Fatal(err)
	}
	x := doc["X"].(map[string]any)
	for k, want := range map[string]any{
		"a": map[string]any{"Ref": "Table"},
		"b": map[string]any{"Fn::GetAtt": []any{"Table", "Arn"}},
		"c": map[string]any{"Fn::Sub": "arn:${AWS::Partition}:x"},
		"d": map[string]any{"Fn::If": []any{"C", []any{map[string]any{"Ref": "P"}}, map[string]any{"Ref": "AWS::NoValue"}}},
		"e": map[string]any{"Fn::Join": []any{"", []any{"a", map[string]any{"Fn::GetAtt": []any{"T", "Arn"}}}}},
		"f": map[string]any{"Ref": "123"},
	} {
		if !equal(x[k], want) {
			t.Errorf("%s: got %#v, want %#v", k, x[k], want)
		}
	}
	cond := doc["Conditions"].(map[string]any)["C"]
	if !equal(cond, map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "P"}, ""}}}}) {
		t.Errorf("condition: %#v", cond)
	}
	for _, bad := range []string{"a: !Reff X", "a: !GetAtt NoDot", "a: 1\na: 2"} {
		if _, err := parseCFN([]byte(bad)); err == nil {
			t.Errorf("parseCFN(%q) succeeded", bad)
		}
	}
}

// TestTemplateDynamoCheckCatchesDrift mutates the real template and checks that
// each mutation is reported: the check can fail.
func TestTemplateDynamoCheckCatchesDrift(t *testing.T) {
	src := readTemplateSource(t)
	actions := dynamo.Actions()
	const item = "                - "
	last := actions[len(actions)-1]
	// The Allow statement, anchored on its Sid so that mutations never
	// touch the Deny below it, which lists some of the same actions.
	allow := "            - Sid: HerdguardTable\n              Effect: Allow\n              Action:\n"
	for _, a := range actions {
		allow += item + a + "\n"
	}
	allowRes := allow + "              Resource: !GetAtt Table.Arn\n"
	deny := "            - Sid: HerdguardNoOverrideWrites\n              Effect: Deny\n              Action:\n"
	for _, a := range overrideWriteActions {
		deny += item + a + "\n"
	}
	denyRes := deny + "              Resource: !GetAtt Table.Arn\n"
	denyAll := denyRes + "              Condition:\n                ForAnyValue:StringLike:\n                  dynamodb:LeadingKeys:\n                    - \"c#*#override\"\n"
	without := func(block, a string) string { return strings.Replace(block, item+a+"\n", "", 1) }

	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"other key", "        - AttributeName: pk\n          KeyType: HASH", "        - AttributeName: id\n          KeyType: HASH", "KeySchema"},
		{"other key type", "          AttributeType: S", "          AttributeType: B", "AttributeDefinitions"},
		{"provisioned", "BillingMode: PAY_PER_REQUEST", "BillingMode: PROVISIONED", "BillingMode"},
		{"other TTL", "        AttributeName: expires\n", "        AttributeName: ttl\n", "TimeToLiveSpecification"},
		{"TTL off", "        Enabled: true\n", "        Enabled: false\n", "TimeToLiveSpecification"},

		{"missing action", allow, without(allow, last), "does not grant " + last},
		{"extra action", allow, allow + item + "dynamodb:Scan\n", "grants dynamodb:Scan"},
		{"PutItem again", allow, allow + item + "dynamodb:PutItem\n", "grants dynamodb:PutItem, which the dynamo stores never call"},
		{"wildcard", allow, allow + item + "dynamodb:*\n", "grants dynamodb:*"},
		{"duplicate", allow, allow + item + last + "\n", "times"},
		{"any resource", allowRes, allow + "              Resource: \"*\"\n", "want only the table's ARN"},
		{"index resource", allowRes, allow + "              Resource:\n                - !GetAtt Table.Arn\n                - !Sub \"${Table.Arn}/index/*\"\n", "want only the table's ARN"},
		{"conditional allow", allowRes, allowRes + "              Condition:\n                Bool:\n                  aws:SecureTransport: true\n", "has a Condition"},
		{"policy template", "      Policies:\n", "      Policies:\n        - DynamoDBCrudPolicy:\n            TableName: !Ref Table\n", "inline policy document"},

		{"no deny", denyAll, "", "no Deny of writes to override items"},
		{"deny without UpdateItem", deny, without(deny, "dynamodb:UpdateItem"), "does not cover dynamodb:UpdateItem"},
		{"deny without PutItem", deny, without(deny, "dynamodb:PutItem"), "does not cover dynamodb:PutItem"},
		{"deny without DeleteItem", deny, without(deny, "dynamodb:DeleteItem"), "does not cover dynamodb:DeleteItem"},
		{"deny of all values", denyAll, strings.Replace(denyAll, "ForAnyValue:", "ForAllValues:", 1), "no Deny of writes to override items"},
		{"deny pattern too narrow", denyAll, strings.Replace(denyAll, "c#*#override", "c#payments#override", 1), "no Deny of writes to override items"},
		{"deny pattern too wide", denyAll, strings.Replace(denyAll, "c#*#override", "c#*", 1), "the only Deny allowed"},
		{"deny on the index", denyRes, deny + "              Resource: !Sub \"${Table.Arn}/index/*\"\n", "Deny of writes to override items is on"},
		{"deny unconditional", denyAll, denyRes, "the only Deny allowed"},
		{"deny of reads", deny, deny + item + "dynamodb:BatchGetItem\n", "also covers dynamodb:BatchGetItem"},
		{"deny of every item action", deny, deny + item + "dynamodb:*Item\n", "also covers dynamodb:BatchGetItem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(src, tc.old) {
				t.Fatalf("template.yaml no longer contains %q; update the mutation", tc.old)
			}
			doc, err := parseCFN([]byte(strings.Replace(src, tc.old, tc.new, 1)))
			if err != nil {
				t.Fatal(err)
			}
			errs := checkDynamoTemplate(doc)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("mutation not reported with %q; errors: %v", tc.want, errs)
		})
	}

	// A Deny written with wildcard actions, more write actions and a single
	// pattern (not a list) is as good: the check reads IAM, not the
	// template's spelling.
	alt := strings.Replace(src, denyAll, "            - Sid: HerdguardNoOverrideWrites\n              Effect: Deny\n              Action:\n"+
		item+"dynamodb:Put*\n"+item+"dynamodb:update*\n"+item+"dynamodb:Delete*\n"+item+"dynamodb:BatchWrite*\n"+item+"dynamodb:PartiQLUpdate\n"+
		"              Resource: !GetAtt Table.Arn\n              Condition:\n                ForAnyValue:StringLike:\n"+
		"                  dynamodb:LeadingKeys: \"c#*#override\"\n", 1)
	if alt == src {
		t.Fatal("template.yaml no longer contains the Deny statement; update the test")
	}
	doc, err := parseCFN([]byte(alt))
	if err != nil {
		t.Fatal(err)
	}
	if errs := checkDynamoTemplate(doc); len(errs) > 0 {
		t.Errorf("an equivalent Deny (wildcard actions, a single pattern) is reported: %v", errs)
	}
}
