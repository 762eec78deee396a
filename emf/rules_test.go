package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/herdguard/herdguard"
)

// The rules New enforces, one case per rule and its boundary, from the EMF
// specification and PutMetricData's limits: a name or value CloudWatch
// would reject is an error naming the field, and one it accepts is written.

func dims(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("D%02d", i)] = "v"
	}
	return m
}

func TestNewRules(t *testing.T) {
	const (
		nsField  = "emf.Options.Namespace"
		svcField = "emf.Options.Service"
		dimCount = "emf.Options.Dimensions"
	)
	dimField := func(name string) string { return fmt.Sprintf("emf.Options.Dimensions[%s]", quote(name)) }
	metaField := func(name string) string { return fmt.Sprintf("emf.Options.Metadata[%s]", quote(name)) }
	ns := func(s string) Options { return Options{Namespace: s} }
	dim := func(k, v string) Options { return Options{Namespace: "N", Dimensions: map[string]string{k: v}} }
	meta := func(k string, v any) Options {
		return Options{Namespace: "N", Dimensions: map[string]string{"Partner": "p"}, Metadata: map[string]any{k: v}}
	}
	x := strings.Repeat
	for _, tc := range []struct {
		rule  string
		o     Options
		env   map[string]string // POWERTOOLS_* variables; unset otherwise
		field string            // "" when New accepts
	}{
		// Namespace: 1 to 255 characters of 0-9A-Za-z . - _ / # :, not ':' first, not AWS/.
		{"namespace plain", ns("Herdguard"), nil, ""},
		{"namespace every allowed character", ns("aZ09._/#:-"), nil, ""},
		{"namespace of 255 characters", ns(x("n", 255)), nil, ""},
		{"namespace of 256 characters", ns(x("n", 256)), nil, nsField},
		{"namespace empty, none in the environment", ns(""), nil, nsField},
		{"namespace starting with ':'", ns(":Partner"), nil, nsField},
		{"namespace with a colon inside", ns("Partner:Payments"), nil, ""},
		{"namespace with a space", ns("Herd guard"), nil, nsField},
		{"namespace non-ASCII", ns("Herdgüard"), nil, nsField},
		{"namespace with a newline", ns("Herd\nguard"), nil, nsField},
		{"namespace in AWS/", ns("AWS/Lambda"), nil, nsField},
		{"namespace from the environment, invalid", ns(""), map[string]string{EnvNamespace: ":x"}, EnvNamespace},

		// Dimension names: 1 to 250 printable ASCII, not only whitespace, not ':' first.
		{"dimension name of 250 characters", dim(x("k", 250), "v"), nil, ""},
		{"dimension name of 251 characters", dim(x("k", 251), "v"), nil, dimField(x("k", 251))},
		{"dimension name empty", dim("", "v"), nil, dimField("")},
		{"dimension name only whitespace", dim("   ", "v"), nil, dimField("   ")},
		{"dimension name with a space inside", dim("Partner Name", "v"), nil, ""},
		{"dimension name starting with ':'", dim(":Partner", "v"), nil, dimField(":Partner")},
		{"dimension name with a newline", dim("Part\nner", "v"), nil, dimField("Part\nner")},
		{"dimension name with a tab", dim("Part\tner", "v"), nil, dimField("Part\tner")},
		{"dimension name non-ASCII", dim("Pärtner", "v"), nil, dimField("Pärtner")},
		{"dimension name _aws", dim("_aws", "v"), nil, dimField("_aws")},
		{"dimension name a metric's", dim("Retries", "v"), nil, dimField("Retries")},
		{"dimension name ExhaustedBudgets", dim("ExhaustedBudgets", "v"), nil, dimField("ExhaustedBudgets")},

		// Dimension values: 1 to 1,024 printable ASCII, no control character, not only whitespace.
		{"dimension value of 1,024 characters", dim("Partner", x("v", 1024)), nil, ""},
		{"dimension value of 1,025 characters", dim("Partner", x("v", 1025)), nil, dimField("Partner")},
		{"dimension value of 300 characters", dim("Partner", x("v", 300)), nil, ""},
		{"dimension value empty", dim("Partner", ""), nil, dimField("Partner")},
		{"dimension value only whitespace", dim("Partner", "   "), nil, dimField("Partner")},
		{"dimension value with a newline", dim("Partner", "pay\nments"), nil, dimField("Partner")},
		{"dimension value with DEL", dim("Partner", "pay\x7fments"), nil, dimField("Partner")},
		{"dimension value non-ASCII", dim("Partner", "café"), nil, dimField("Partner")},
		{"dimension value with spaces and ':' first", dim("Partner", ":pay ments"), nil, ""},

		// At most 30 dimensions in the set, the service included.
		{"30 dimensions", Options{Namespace: "N", Dimensions: dims(30)}, nil, ""},
		{"31 dimensions", Options{Namespace: "N", Dimensions: dims(31)}, nil, dimCount},
		{"29 dimensions and the service", Options{Namespace: "N", Service: "s", Dimensions: dims(29)}, nil, ""},
		{"30 dimensions and the service", Options{Namespace: "N", Service: "s", Dimensions: dims(30)}, nil, dimCount},
		{"30 dimensions and the environment's service", Options{Namespace: "N", Dimensions: dims(30)}, map[string]string{EnvService: "s"}, dimCount},

		// The service is a dimension value.
		{"service of 1,024 characters", Options{Namespace: "N", Service: x("s", 1024)}, nil, ""},
		{"service of 1,025 characters", Options{Namespace: "N", Service: x("s", 1025)}, nil, svcField},
		{"service only whitespace", Options{Namespace: "N", Service: " "}, nil, svcField},
		{"service with a newline", Options{Namespace: "N", Service: "bikes\n"}, nil, svcField},
		{"service and Dimensions[service]", Options{Namespace: "N", Service: "a", Dimensions: map[string]string{"service": "b"}}, nil, svcField},
		{"service from the environment, invalid", ns("N"), map[string]string{EnvService: "bikes\n"}, EnvService},

		// Metadata names follow the dimension names' rules and name no other property.
		{"metadata plain", meta("Region", "eu-central-1"), nil, ""},
		{"metadata name of 251 characters", meta(x("m", 251), 1), nil, metaField(x("m", 251))},
		{"metadata name starting with ':'", meta(":Region", 1), nil, metaField(":Region")},
		{"metadata name only whitespace", meta(" ", 1), nil, metaField(" ")},
		{"metadata name with a newline", meta("Re\ngion", 1), nil, metaField("Re\ngion")},
		{"metadata name a dimension's", meta("Partner", "x"), nil, metaField("Partner")},
		{"metadata name _aws", meta("_aws", "x"), nil, metaField("_aws")},
		{"metadata name a metric's", meta("BudgetExhausted", 1), nil, metaField("BudgetExhausted")},
		{"metadata value not JSON", meta("Hook", func() {}), nil, metaField("Hook")},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			t.Setenv(EnvNamespace, tc.env[EnvNamespace])
			t.Setenv(EnvService, tc.env[EnvService])
			var buf bytes.Buffer
			r, err := New(&buf, tc.o)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("New = %v, want it accepted", err)
				}
				r.add(mRetries)
				if err := r.Flush(); err != nil {
					t.Fatal(err)
				}
				var root map[string]any
				if err := json.Unmarshal(buf.Bytes(), &root); err != nil {
					t.Fatalf("the flush wrote %q: %v", buf.String(), err)
				}
				for k, v := range tc.o.Dimensions {
					if root[k] != v {
						t.Errorf("dimension %s is %v at the root, want %q", quote(k), root[k], quote(v))
					}
				}
				return
			}
			var ce *herdguard.ConfigError
			switch {
			case err == nil:
				t.Fatalf("New accepted %+v; want an error naming %s", tc.o, tc.field)
			case !errors.Is(err, ErrInvalid):
				t.Errorf("New = %v; does not match ErrInvalid", err)
			case !errors.As(err, &ce):
				t.Errorf("New = %v; not a *herdguard.ConfigError", err)
			case ce.Field != tc.field || ce.Reason == "":
				t.Errorf("New = %v: Field %q, want %q, with a reason", err, ce.Field, tc.field)
			}
		})
	}
}

func TestNewNilWriter(t *testing.T) {
	var ce *herdguard.ConfigError
	_, err := New(nil, Options{Namespace: "N"})
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ce) || ce.Field != "emf.New w" {
		t.Errorf("New(nil) = %v; want a ConfigError on emf.New w matching ErrInvalid", err)
	}
}

// TestMetricNameRule: a metric name is 1 to 255 printable ASCII
// characters, not only whitespace; every metric the Recorder writes
// satisfies it.
func TestMetricNameRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"Retries", true},
		{strings.Repeat("m", 255), true},
		{strings.Repeat("m", 256), false},
		{"", false},
		{"   ", false},
		{"Budget\nExhausted", false},
		{"Büdget", false},
		{"Budget Exhausted", true},
	} {
		if msg := checkMetricName(tc.name); (msg == "") != tc.ok {
			t.Errorf("checkMetricName(%s) = %q; want ok=%v", quote(tc.name), msg, tc.ok)
		}
	}
	names := append([]string(nil), metricOrder...)
	for _, n := range transitionNames {
		names = append(names, n[:]...)
	}
	for _, n := range names {
		if msg := checkMetricName(n); msg != "" {
			t.Errorf("metric %s %s", n, msg)
		}
	}
}
