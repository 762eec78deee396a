package emf_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/retry"
)

// flushOne records one retry and returns the namespace, the dimension
// names and the root of the flushed object.
func flushOne(t *testing.T, o emf.Options) (string, string, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	o.Now = func() time.Time { return time.UnixMilli(1) }
	r, err := emf.New(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	hooksOf(r).Retry(retry.RetryEvent{})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	obj, _, root := parse(t, lines(&buf)[0])
	d := obj.AWS.CloudWatchMetrics[0]
	return d.Namespace, strings.Join(d.Dimensions[0], ","), root
}

// TestEnvironment: the namespace and the service come from Powertools'
// variables when the Options leave them empty; the Options override them.
func TestEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name          string
		envNS, envSvc string
		o             emf.Options
		wantNS        string
		wantDims      string
		wantSvc       any // the root's "service"; nil for none
	}{
		{"nothing from the environment", "", "", emf.Options{Namespace: "Code"}, "Code", "", nil},
		{"namespace from the environment", "Env", "", emf.Options{}, "Env", "", nil},
		{"namespace in code wins", "Env", "", emf.Options{Namespace: "Code"}, "Code", "", nil},
		{"service from the environment", "", "env-svc", emf.Options{Namespace: "N",
			Dimensions: map[string]string{"Partner": "p"}}, "N", "Partner,service", "env-svc"},
		{"service in code wins", "", "env-svc", emf.Options{Namespace: "N", Service: "code-svc"}, "N", "service", "code-svc"},
		{"Dimensions[service] in code wins", "", "env-svc", emf.Options{Namespace: "N",
			Dimensions: map[string]string{"service": "dim-svc"}}, "N", "service", "dim-svc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(emf.EnvNamespace, tc.envNS)
			t.Setenv(emf.EnvService, tc.envSvc)
			ns, dims, root := flushOne(t, tc.o)
			if ns != tc.wantNS || dims != tc.wantDims || root["service"] != tc.wantSvc {
				t.Errorf("namespace %q, dimensions [%s], service %v; want %q, [%s], %v", ns, dims, root["service"], tc.wantNS, tc.wantDims, tc.wantSvc)
			}
		})
	}
}

// TestMetadata: metadata are properties of the root, not dimensions nor
// metrics, encoded when New is called (a later change to the caller's
// value is not written), on every flush.
func TestMetadata(t *testing.T) {
	t.Setenv(emf.EnvService, "")
	tags := []string{"blue"}
	var buf bytes.Buffer
	r, err := emf.New(&buf, emf.Options{Namespace: "N", Metadata: map[string]any{"Region": "eu-central-1", "Tags": tags, "Shard": 3}})
	if err != nil {
		t.Fatal(err)
	}
	tags[0] = "green"
	for range 2 {
		hooksOf(r).Retry(retry.RetryEvent{})
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ls := lines(&buf)
	if len(ls) != 2 {
		t.Fatalf("%d lines, want 2", len(ls))
	}
	for _, l := range ls {
		obj, values, root := parse(t, l)
		if root["Region"] != "eu-central-1" || root["Shard"] != float64(3) {
			t.Errorf("Region %v, Shard %v; want eu-central-1, 3", root["Region"], root["Shard"])
		}
		if tg, _ := root["Tags"].([]any); len(tg) != 1 || tg[0] != "blue" {
			t.Errorf("Tags %v, want [blue] as given to New", root["Tags"])
		}
		if d := obj.AWS.CloudWatchMetrics[0].Dimensions[0]; len(d) != 0 || len(values) != 1 {
			t.Errorf("dimensions %v, metrics %v; metadata is neither", d, values)
		}
	}
}
