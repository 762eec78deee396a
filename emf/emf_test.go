package emf_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/retry"
)

// emfObject is the part of an EMF object CloudWatch reads.
type emfObject struct {
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

// parse validates one line against the EMF specification (one directive,
// every dimension a string at the root, every metric a number at the root)
// and returns the metrics' values by name and the root.
func parse(t *testing.T, line string) (emfObject, map[string]float64, map[string]any) {
	t.Helper()
	var obj emfObject
	var root map[string]any
	if err := json.Unmarshal([]byte(line), &obj); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if err := json.Unmarshal([]byte(line), &root); err != nil {
		t.Fatal(err)
	}
	if len(obj.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("%d directives, want 1: %s", len(obj.AWS.CloudWatchMetrics), line)
	}
	d := obj.AWS.CloudWatchMetrics[0]
	if len(d.Dimensions) != 1 {
		t.Fatalf("%d dimension sets, want 1", len(d.Dimensions))
	}
	for _, dim := range d.Dimensions[0] {
		if s, ok := root[dim].(string); !ok || s == "" {
			t.Errorf("dimension %s has no string value at the root: %v", dim, root[dim])
		}
	}
	values := map[string]float64{}
	for _, m := range d.Metrics {
		v, ok := root[m.Name].(float64)
		if !ok || m.Unit != "Count" {
			t.Errorf("metric %s: root value %v, unit %q; want a number in Count", m.Name, root[m.Name], m.Unit)
		}
		values[m.Name] = v
	}
	return obj, values, root
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSuffix(buf.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func newRecorder(t *testing.T, w *bytes.Buffer, at time.Time) *emf.Recorder {
	t.Helper()
	r, err := emf.New(w, emf.Options{Namespace: "Herdguard",
		Dimensions: map[string]string{"Partner": "payments", "FunctionName": "fn"},
		Now:        func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFlushIsOneEMFObject(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_123)
	var buf bytes.Buffer
	r := newRecorder(t, &buf, at)
	boom := errors.New("boom")
	hooksOf(r).Retry(retry.RetryEvent{})
	hooksOf(r).Retry(retry.RetryEvent{})
	hooksOf(r).GiveUp(&retry.GiveUpError{Reason: retry.BudgetExhausted, Cause: &budget.ExhaustedError{Budget: "local-ratio"}})
	hooksOf(r).StoreError(1, boom)
	hooksOf(r).BreakerStoreError("load", boom)
	hooksOf(r).GiveUp(&retry.GiveUpError{Reason: retry.BreakerOpen})
	hooksOf(r).GiveUp(&retry.GiveUpError{Reason: retry.AttemptsExhausted}) // not counted
	hooksOf(r).StateChange(breaker.StateChange{From: breaker.Closed, To: breaker.Open, Origin: breaker.OriginWrote})
	hooksOf(r).StateChange(breaker.StateChange{From: breaker.Closed, To: breaker.Open, Origin: breaker.OriginFollowed})
	hooksOf(r).StateChange(breaker.StateChange{From: breaker.Open, To: breaker.HalfOpen, Origin: breaker.OriginFollowed})
	hooksOf(r).StateChange(breaker.StateChange{From: breaker.Open, To: breaker.Open, Origin: breaker.OriginWrote}) // no change
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	ls := lines(&buf)
	if len(ls) != 1 {
		t.Fatalf("%d lines, want 1:\n%s", len(ls), buf.String())
	}
	obj, values, root := parse(t, ls[0])
	if obj.AWS.Timestamp != at.UnixMilli() {
		t.Errorf("Timestamp %d, want %d (Unix ms at the flush)", obj.AWS.Timestamp, at.UnixMilli())
	}
	d := obj.AWS.CloudWatchMetrics[0]
	if d.Namespace != "Herdguard" || strings.Join(d.Dimensions[0], ",") != "FunctionName,Partner" {
		t.Errorf("namespace %q, dimensions %v", d.Namespace, d.Dimensions)
	}
	if root["FunctionName"] != "fn" || root["Partner"] != "payments" {
		t.Errorf("dimension values %v, %v", root["FunctionName"], root["Partner"])
	}
	if got, _ := json.Marshal(root["ExhaustedBudgets"]); string(got) != `["local-ratio"]` {
		t.Errorf("ExhaustedBudgets %s, want [\"local-ratio\"]", got)
	}
	want := map[string]float64{
		"Retries": 2, "BudgetExhausted": 1, "BudgetStoreErrors": 1, "BreakerStoreErrors": 1, "BreakerRejected": 1,
		"BreakerOpened": 2, "BreakerOpenedWritten": 1, "BreakerHalfOpened": 1,
	}
	if len(values) != len(want) {
		t.Errorf("metrics %v, want %v", values, want)
	}
	for k, v := range want {
		if values[k] != v {
			t.Errorf("%s = %v, want %v", k, values[k], v)
		}
	}

	// Counting starts again from zero, and an empty flush writes nothing.
	buf.Reset()
	if err := r.Flush(); err != nil || buf.Len() != 0 {
		t.Errorf("empty flush wrote %q (%v)", buf.String(), err)
	}
	hooksOf(r).StateChange(breaker.StateChange{From: breaker.HalfOpen, To: breaker.Closed, Origin: breaker.OriginLocal})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	_, values, root = parse(t, lines(&buf)[0])
	if len(values) != 2 || values["BreakerClosed"] != 1 || values["BreakerClosedWritten"] != 1 {
		t.Errorf("second flush %v, want BreakerClosed and BreakerClosedWritten at 1", values)
	}
	if _, ok := root["ExhaustedBudgets"]; ok {
		t.Errorf("second flush lists exhausted budgets %v; none refused since the first", root["ExhaustedBudgets"])
	}
}

// TestNoDimensions: a Recorder with no dimension writes an empty
// dimension set, [[]], never [null]. (rules_test.go has New's checks.)
func TestNoDimensions(t *testing.T) {
	t.Setenv(emf.EnvService, "")
	var buf bytes.Buffer
	r, err := emf.New(&buf, emf.Options{Namespace: "N"})
	if err != nil {
		t.Fatal(err)
	}
	hooksOf(r).Retry(retry.RetryEvent{})
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if obj, _, _ := parse(t, lines(&buf)[0]); obj.AWS.CloudWatchMetrics[0].Dimensions[0] == nil {
		t.Errorf("no dimensions gave %s; want [[]]", buf.String())
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFlushReportsWriteErrors(t *testing.T) {
	r, err := emf.New(failingWriter{}, emf.Options{Namespace: "N"})
	if err != nil {
		t.Fatal(err)
	}
	hooksOf(r).Retry(retry.RetryEvent{})
	if err := r.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Flush = %v, want the writer's error", err)
	}
}

// TestConcurrentCountsAndFlushes: hooks run on many goroutines while
// flushes happen; no count is lost or doubled and lines never interleave.
func TestConcurrentCountsAndFlushes(t *testing.T) {
	var buf bytes.Buffer
	r := newRecorder(t, &buf, time.Now())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 500; j++ {
				hooksOf(r).Retry(retry.RetryEvent{})
				o := breaker.OriginFollowed
				if j%2 == 0 {
					o = breaker.OriginWrote
				}
				hooksOf(r).StateChange(breaker.StateChange{From: breaker.Closed, To: breaker.Open, Origin: o})
			}
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if err := r.Flush(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	var retries, opened, written float64
	for _, l := range lines(&buf) {
		_, values, _ := parse(t, l)
		retries += values["Retries"]
		opened += values["BreakerOpened"]
		written += values["BreakerOpenedWritten"]
	}
	if retries != 4000 || opened != 4000 || written != 2000 {
		t.Errorf("totals: Retries %v, BreakerOpened %v, BreakerOpenedWritten %v; want 4000, 4000, 2000", retries, opened, written)
	}
}

// TestHooksOfAnExecutor wires a Recorder into a real Executor and breaker
// with Instrument: what the Executor reports through its hooks is what the
// flush counts, and the hooks set before Instrument still see it all.
func TestHooksOfAnExecutor(t *testing.T) {
	var buf bytes.Buffer
	r := newRecorder(t, &buf, time.Now())
	var seen []string
	s := breaker.Settings{ConsecutiveFailures: 3,
		OnStateChange: func(c breaker.StateChange) { seen = append(seen, "change:"+c.To.String()) }}
	cfg := retry.Config{MaxAttempts: 3, Idempotent: true, TransientBase: time.Microsecond, MaxDelay: time.Microsecond,
		OnRetry:  func(retry.RetryEvent) { seen = append(seen, "retry") },
		OnGiveUp: func(gu *retry.GiveUpError) { seen = append(seen, "giveup:"+gu.Reason.String()) }}
	r.Instrument(&cfg, &s)
	br, err := breaker.New("payments", s)
	if err != nil {
		t.Fatal(err)
	}
	refusing := &budget.ExhaustedError{Budget: "test"}
	granted := 0
	b := budgetFunc(func() error {
		if granted == 1 {
			return refusing
		}
		granted++
		return nil
	})
	cfg.Budgets, cfg.Breaker = []budget.Budget{b}, br
	exec, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context, int) error { return &retry.StatusError{StatusCode: 503} }
	ctx := context.Background()
	_ = exec.Do(ctx, fail) // attempt, retry (granted), retry refused: 2 failures
	_ = exec.Do(ctx, fail) // the third failure trips the breaker, which rejects the retry before the budget is asked
	_ = exec.Do(ctx, fail) // rejected by the open breaker at once
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	_, values, _ := parse(t, lines(&buf)[0])
	want := map[string]float64{"Retries": 1, "BudgetExhausted": 1, "BreakerOpened": 1, "BreakerOpenedWritten": 1, "BreakerRejected": 2}
	for k, v := range want {
		if values[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, values[k], v, values)
		}
	}
	wantSeen := []string{"retry", "giveup:budget exhausted", "change:open", "giveup:breaker open", "giveup:breaker open"}
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("the hooks set before Instrument saw %q, want %q", seen, wantSeen)
	}
}

// budgetFunc is a budget whose AcquireRetry answers f().
type budgetFunc func() error

func (budgetFunc) RecordRequest(time.Time) {}
func (budgetFunc) RecordSuccess(time.Time) {}
func (f budgetFunc) AcquireRetry(context.Context, time.Time, budget.Kind) (budget.Release, error) {
	if err := f(); err != nil {
		return nil, err
	}
	return nil, nil
}

// recHooks are the hooks Recorder.Instrument installs in an empty
// configuration, called by the names of the metrics they feed.
type recHooks struct {
	c retry.Config
	s breaker.Settings
}

func hooksOf(r *emf.Recorder) *recHooks {
	h := &recHooks{}
	r.Instrument(&h.c, &h.s)
	return h
}

func (h *recHooks) Retry(ev retry.RetryEvent)              { h.c.OnRetry(ev) }
func (h *recHooks) GiveUp(gu *retry.GiveUpError)           { h.c.OnGiveUp(gu) }
func (h *recHooks) StoreError(layer int, err error)        { h.c.OnStoreError(layer, err) }
func (h *recHooks) BreakerStoreError(op string, err error) { h.s.OnStoreError(op, err) }
func (h *recHooks) StateChange(c breaker.StateChange)      { h.s.OnStateChange(c) }
