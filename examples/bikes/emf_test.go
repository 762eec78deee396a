package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// emfDoc is the part of an Embedded Metric Format record CloudWatch reads.
type emfDoc struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

// checkEMF validates one line against the EMF specification: every
// dimension and metric named in the directive has a value at the root.
func checkEMF(t *testing.T, line string, wantMetric string, wantDims []string, at time.Time) map[string]any {
	t.Helper()
	var doc emfDoc
	var root map[string]any
	if err := json.Unmarshal([]byte(line), &doc); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if err := json.Unmarshal([]byte(line), &root); err != nil {
		t.Fatal(err)
	}
	if doc.AWS.Timestamp != at.UnixMilli() {
		t.Errorf("Timestamp %d, want %d", doc.AWS.Timestamp, at.UnixMilli())
	}
	if len(doc.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("%d metric directives, want 1", len(doc.AWS.CloudWatchMetrics))
	}
	d := doc.AWS.CloudWatchMetrics[0]
	if d.Namespace != metricNamespace {
		t.Errorf("namespace %q", d.Namespace)
	}
	if len(d.Dimensions) != 1 || strings.Join(d.Dimensions[0], ",") != strings.Join(wantDims, ",") {
		t.Errorf("dimensions %v, want [%v]", d.Dimensions, wantDims)
	}
	for _, dim := range d.Dimensions[0] {
		if s, ok := root[dim].(string); !ok || s == "" {
			t.Errorf("dimension %s has no string value at the root: %v", dim, root[dim])
		}
	}
	if len(d.Metrics) != 1 || d.Metrics[0].Name != wantMetric || d.Metrics[0].Unit != "Count" {
		t.Errorf("metrics %+v, want %s in Count", d.Metrics, wantMetric)
	}
	if v, ok := root[wantMetric].(float64); !ok || v != 1 {
		t.Errorf("metric value %v, want 1", root[wantMetric])
	}
	return root
}

func TestMetricsLines(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_123)
	var buf syncBuffer
	m := newMetrics(&buf, "bikes-fn", "bikes-partner", func() time.Time { return at })
	m.budgetExhausted("global:bikes-partner")
	m.breakerStateChange(breaker.Closed, breaker.Open)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	r := checkEMF(t, lines[0], metricBudgetExhausted, []string{dimFunction, dimPartner}, at)
	if r["Budget"] != "global:bikes-partner" || r[dimFunction] != "bikes-fn" || r[dimPartner] != "bikes-partner" {
		t.Errorf("properties %v", r)
	}
	r = checkEMF(t, lines[1], metricBreakerStateChange, []string{dimFunction, dimPartner, dimState}, at)
	if r[dimState] != "open" || r["From"] != "closed" {
		t.Errorf("properties %v", r)
	}
}

func TestMetricsLinesDoNotInterleave(t *testing.T) {
	var buf syncBuffer
	m := newMetrics(&buf, "f", "p", time.Now)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				m.budgetExhausted("local-ratio")
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("broken line %q", l)
		}
	}
}

func TestReportInitError(t *testing.T) {
	type got struct {
		path, errType, body string
	}
	ch := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.URL.Path, r.Header.Get("Lambda-Runtime-Function-Error-Type"), string(b)}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	reportInitError(strings.TrimPrefix(srv.URL, "http://"), errInit("TABLE_NAME is not set"))
	g := <-ch
	if g.path != "/2018-06-01/runtime/init/error" || g.errType != "Runtime.InvalidConfiguration" {
		t.Errorf("posted %+v", g)
	}
	var body struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	if err := json.Unmarshal([]byte(g.body), &body); err != nil || body.Message != "TABLE_NAME is not set" || body.Type != "Runtime.InvalidConfiguration" {
		t.Errorf("body %q: %+v %v", g.body, body, err)
	}
	// Outside Lambda there is nobody to tell; it must not block or panic.
	reportInitError("", errInit("x"))
}

type errInit string

func (e errInit) Error() string { return string(e) }
