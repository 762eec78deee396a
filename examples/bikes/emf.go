package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// Names of the CloudWatch metrics the function emits in Embedded Metric
// Format. template.yaml puts its alarms on them; keep the two in step.
const (
	metricNamespace          = "Herdguard"
	metricBudgetExhausted    = "BudgetExhausted"
	metricBreakerStateChange = "BreakerStateChange"

	dimFunction = "FunctionName"
	dimPartner  = "Partner"
	dimState    = "State"
)

// The dimension set of each metric. An alarm must name exactly these.
var metricDimensions = map[string][]string{
	metricBudgetExhausted:    {dimFunction, dimPartner},
	metricBreakerStateChange: {dimFunction, dimPartner, dimState},
}

// metrics writes CloudWatch Embedded Metric Format records
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html),
// one JSON object per line. In Lambda, stdout goes to CloudWatch Logs, which
// extracts the metrics without any API call from the function.
//
// It is called from herdguard's hooks, which may run on several goroutines.
type metrics struct {
	function string
	partner  string
	now      func() time.Time

	mu sync.Mutex // serialises writes so that lines never interleave
	w  io.Writer  // guarded by mu
}

func newMetrics(w io.Writer, function, partner string, now func() time.Time) *metrics {
	return &metrics{w: w, function: function, partner: partner, now: now}
}

// budgetExhausted records one retry refused by a budget. layer names the
// budget that refused ("local", "global", ...); it is a property, not a
// dimension, so it costs no extra metric.
func (m *metrics) budgetExhausted(layer string) {
	m.emit(metricBudgetExhausted, map[string]any{
		"Budget": layer,
	})
}

// breakerStateChange records a transition this environment observed, made
// here or learned from the table. The new state is a dimension so that an
// alarm can watch openings alone.
func (m *metrics) breakerStateChange(from, to breaker.State) {
	m.emit(metricBreakerStateChange, map[string]any{
		dimState: to.String(),
		"From":   from.String(),
	})
}

func (m *metrics) emit(metric string, props map[string]any) {
	rec := make(map[string]any, len(props)+4)
	for k, v := range props {
		rec[k] = v
	}
	rec[dimFunction] = m.function
	rec[dimPartner] = m.partner
	rec[metric] = 1
	rec["_aws"] = map[string]any{
		"Timestamp": m.now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace":  metricNamespace,
			"Dimensions": [][]string{metricDimensions[metric]},
			"Metrics":    []map[string]string{{"Name": metric, "Unit": "Count"}},
		}},
	}
	line, err := json.Marshal(rec)
	if err != nil {
		// Only strings, ints and string slices go in: cannot happen.
		return
	}
	line = append(line, '\n')
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(line)
}
