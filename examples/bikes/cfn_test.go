package main

// The CloudFormation short-tag decoder shared by the template tests of this
// package (template_test.go and template_dynamo_test.go).

import (
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// cfnShortTags are CloudFormation's short-form intrinsic functions. A tag not
// listed here is a typo the test reports.
var cfnShortTags = map[string]string{
	"!Ref": "Ref", "!Condition": "Condition",
	"!GetAtt": "Fn::GetAtt", "!Sub": "Fn::Sub", "!Join": "Fn::Join", "!Select": "Fn::Select",
	"!Split": "Fn::Split", "!If": "Fn::If", "!Equals": "Fn::Equals", "!Not": "Fn::Not",
	"!And": "Fn::And", "!Or": "Fn::Or", "!FindInMap": "Fn::FindInMap", "!Base64": "Fn::Base64",
	"!Cidr": "Fn::Cidr", "!GetAZs": "Fn::GetAZs", "!ImportValue": "Fn::ImportValue",
	"!Transform": "Fn::Transform", "!ToJsonString": "Fn::ToJsonString", "!Length": "Fn::Length",
}

// parseCFN decodes a CloudFormation template into maps, slices and scalars,
// turning short tags into their long forms: `!Ref X` becomes
// {"Ref": "X"}, `!GetAtt T.Arn` becomes {"Fn::GetAtt": ["T", "Arn"]},
// `!Sub s` becomes {"Fn::Sub": "s"}.
func parseCFN(src []byte) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	v, err := cfnValue(&doc)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("template is a %T, not a mapping", v)
	}
	return m, nil
}

func cfnValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, fmt.Errorf("line %d: want one YAML document", n.Line)
		}
		return cfnValue(n.Content[0])
	case yaml.AliasNode:
		return cfnValue(n.Alias)
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		long, ok := cfnShortTags[n.Tag]
		if !ok {
			return nil, fmt.Errorf("line %d: unknown CloudFormation tag %s", n.Line, n.Tag)
		}
		plain := *n
		plain.Tag = ""
		if n.Kind == yaml.ScalarNode {
			plain.Tag = "!!str" // arguments of intrinsic functions are strings
		}
		v, err := cfnValue(&plain)
		if err != nil {
			return nil, err
		}
		if n.Tag == "!GetAtt" {
			if s, ok := v.(string); ok {
				res, attr, found := strings.Cut(s, ".")
				if !found {
					return nil, fmt.Errorf("line %d: !GetAtt %q lacks an attribute", n.Line, s)
				}
				v = []any{res, attr}
			}
		}
		return map[string]any{long: v}, nil
	}
	switch n.Kind {
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := cfnValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping key is not a scalar", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			v, err := cfnValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
}

func asList(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	default:
		return []any{x}
	}
}

// equal compares decoded YAML values.
func equal(a, b any) bool {
	return fmt.Sprintf("%#v", normalise(a)) == fmt.Sprintf("%#v", normalise(b))
}

// normalise makes maps print in a fixed order.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]any, 0, 2*len(keys))
		for _, k := range keys {
			out = append(out, k, normalise(x[k]))
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalise(e)
		}
		return out
	}
	return v
}
