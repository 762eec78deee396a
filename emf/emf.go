// Package emf records what herdguard does as CloudWatch metrics in Embedded
// Metric Format (EMF): JSON log lines that CloudWatch Logs turns into
// metrics, with no API call and no agent. In AWS Lambda, stdout is the
// function's log, so a Recorder writing to os.Stdout is all it takes.
//
// A Recorder counts in memory, from the hooks of a retry.Executor and a
// breaker.Breaker, and Flush writes what it counted as one EMF object on
// one line, as AWS Lambda Powertools' metrics utilities do: a namespace, one
// dimension set (the Recorder's Dimensions, such as the function and the
// partner), the metrics as properties of the root, and "_aws" with
// Timestamp (Unix milliseconds, at the flush) and CloudWatchMetrics
// (Namespace, Dimensions, Metrics with Name and Unit). A flush with nothing
// counted writes nothing, so a healthy partner costs no log volume. Besides
// the metrics, the object lists the budgets that refused since the last
// flush in the property ExhaustedBudgets (["local-ratio", "global:payments"]),
// which Logs Insights can query.
//
//	rec, err := emf.New(os.Stdout, emf.Options{Namespace: "Herdguard",
//		Dimensions: map[string]string{"FunctionName": fn, "Partner": "payments"}})
//	cfg := fleet.Config{}
//	rec.Instrument(&cfg.Retry, &cfg.Breaker) // or a retry.Config and breaker.Settings of your own
//	exec, err := fleet.New(ctx, api, table, "payments", cfg)
//	// at the end of every invocation, after exec.Flush:
//	err = rec.Flush()
//
// The metrics, all of unit Count and summed over the flush:
//
//   - Retries: retries the budgets granted (OnRetry).
//   - BudgetExhausted: retries a budget refused (OnGiveUp with Reason
//     BudgetExhausted).
//   - BreakerRejected: calls or retries the breaker refused, the open state
//     doing its job (OnGiveUp with Reason BreakerOpen).
//   - BudgetStoreErrors, BreakerStoreErrors: faults of the budgets' and the
//     breaker's stores (the table was slow, throttled or unreachable, or an
//     item was malformed), each answered from the local layers.
//   - BreakerOpened, BreakerHalfOpened, BreakerClosed: the breaker's state
//     changes this environment saw, whoever made them: with a shared
//     breaker every environment that learns of a fleet transition counts
//     it, so their sum over the fleet is the number of environments told.
//   - BreakerOpenedWritten, BreakerHalfOpenedWritten, BreakerClosedWritten:
//     those of them this environment decided itself rather than followed
//     (StateChange.Origin is not breaker.OriginFollowed): with
//     a shared breaker, one per fleet transition, whatever the fleet's size.
//
// A Recorder is safe for concurrent use. Keep one per partner, like its
// Executor, and flush it where the Executor is flushed.
package emf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// Limits CloudWatch puts on EMF (see the EMF specification).
const (
	// maxDimensions is the number of dimensions a dimension set may hold.
	maxDimensions = 30
	// maxNameLen bounds a namespace, a dimension name or value (CloudWatch
	// allows 255 characters for each of them; 256 for a namespace).
	maxNameLen = 255
)

// Options configures a Recorder.
type Options struct {
	// Namespace is the CloudWatch namespace of every metric, such as
	// "Herdguard" (required).
	Namespace string
	// Dimensions are the dimensions of every metric, name to value, such as
	// {"FunctionName": ..., "Partner": ...}: at most 30 (EMF's limit), names and
	// values non-empty. An alarm must name exactly these to see the metrics.
	Dimensions map[string]string
	// Now is the clock of the flush's Timestamp (default time.Now).
	Now func() time.Time
}

// propExhaustedBudgets lists the budgets that refused since the last flush.
const propExhaustedBudgets = "ExhaustedBudgets"

// metric names, in the order a flush lists them.
const (
	mRetries            = "Retries"
	mBudgetExhausted    = "BudgetExhausted"
	mBreakerRejected    = "BreakerRejected"
	mBudgetStoreErrors  = "BudgetStoreErrors"
	mBreakerStoreErrors = "BreakerStoreErrors"
)

var (
	// transitionNames[to][wrote] names the metric of a change to state to.
	transitionNames = map[breaker.State][2]string{
		breaker.Open:     {"BreakerOpened", "BreakerOpenedWritten"},
		breaker.HalfOpen: {"BreakerHalfOpened", "BreakerHalfOpenedWritten"},
		breaker.Closed:   {"BreakerClosed", "BreakerClosedWritten"},
	}
	metricOrder = []string{mRetries, mBudgetExhausted, mBreakerRejected, mBudgetStoreErrors, mBreakerStoreErrors,
		"BreakerOpened", "BreakerOpenedWritten", "BreakerHalfOpened", "BreakerHalfOpenedWritten",
		"BreakerClosed", "BreakerClosedWritten"}
)

// Recorder counts herdguard's events and writes them as EMF; see the
// package documentation.
type Recorder struct {
	namespace string
	dims      []string // sorted dimension names
	values    map[string]string
	now       func() time.Time

	wmu       sync.Mutex          // held while writing a line, so that lines never interleave
	w         io.Writer           // guarded by wmu
	mu        sync.Mutex          // the counts; never held across a write
	counts    map[string]uint64   // guarded by mu
	exhausted map[string]struct{} // names of the budgets that refused; guarded by mu
}

// New returns a Recorder that writes to w (os.Stdout in Lambda). A nil w
// or Options CloudWatch would reject is a *herdguard.ConfigError.
func New(w io.Writer, o Options) (*Recorder, error) {
	bad := func(field, format string, args ...any) error {
		return &herdguard.ConfigError{Field: "emf." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case w == nil:
		return nil, bad("New w", "is nil")
	case o.Namespace == "" || len(o.Namespace) > maxNameLen:
		return nil, bad("Options.Namespace", "is %q; want 1 to %d characters", o.Namespace, maxNameLen)
	case len(o.Dimensions) > maxDimensions:
		return nil, bad("Options.Dimensions", "has %d entries, more than EMF's %d", len(o.Dimensions), maxDimensions)
	}
	for k, v := range o.Dimensions {
		switch {
		case k == "" || len(k) > maxNameLen || k == "_aws":
			return nil, bad("Options.Dimensions", "has a name %q; want 1 to %d characters, not _aws", k, maxNameLen)
		case slices.Contains(metricOrder, k) || k == propExhaustedBudgets:
			return nil, bad("Options.Dimensions", "has a name %q that is a metric's", k)
		case v == "" || len(v) > maxNameLen:
			return nil, bad("Options.Dimensions", "[%q] is %q; want 1 to %d characters", k, v, maxNameLen)
		}
	}
	r := &Recorder{
		namespace: o.Namespace,
		dims:      slices.Sorted(maps.Keys(o.Dimensions)),
		values:    maps.Clone(o.Dimensions),
		now:       o.Now,
		w:         w,
		counts:    map[string]uint64{},
		exhausted: map[string]struct{}{},
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.dims == nil {
		r.dims = []string{} // a dimension set with no dimension: [[]], never [null]
	}
	return r, nil
}

// Instrument makes the Recorder count what the hooks of an Executor's
// configuration and of a breaker's settings report, before it is built:
// cfg's OnRetry (Retries), OnGiveUp (BreakerRejected, BudgetExhausted and
// the refusing budgets) and OnStoreError (BudgetStoreErrors); s's
// OnStateChange (BreakerOpened, ...) and OnStoreError (BreakerStoreErrors).
// A hook already set is kept and called after the Recorder has counted.
// Either argument may be nil. With package fleet:
//
//	cfg := fleet.Config{}
//	rec.Instrument(&cfg.Retry, &cfg.Breaker)
//	exec, err := fleet.New(ctx, api, table, "payments", cfg)
func (r *Recorder) Instrument(cfg *retry.Config, s *breaker.Settings) {
	if cfg != nil {
		onRetry, onGiveUp, onStoreError := cfg.OnRetry, cfg.OnGiveUp, cfg.OnStoreError
		cfg.OnRetry = func(ev retry.RetryEvent) {
			r.add(mRetries)
			if onRetry != nil {
				onRetry(ev)
			}
		}
		cfg.OnGiveUp = func(gu *retry.GiveUpError) {
			r.giveUp(gu)
			if onGiveUp != nil {
				onGiveUp(gu)
			}
		}
		cfg.OnStoreError = func(layer int, err error) {
			r.add(mBudgetStoreErrors)
			if onStoreError != nil {
				onStoreError(layer, err)
			}
		}
	}
	if s != nil {
		onStateChange, onStoreError := s.OnStateChange, s.OnStoreError
		s.OnStateChange = func(c breaker.StateChange) {
			r.stateChange(c)
			if onStateChange != nil {
				onStateChange(c)
			}
		}
		s.OnStoreError = func(op string, err error) {
			r.add(mBreakerStoreErrors)
			if onStoreError != nil {
				onStoreError(op, err)
			}
		}
	}
}

// giveUp counts the calls the breaker refused and the retries a budget
// refused, with the refusing budget's name (listed in the flushed object's
// ExhaustedBudgets property: a log field, not a dimension, so it costs no
// extra metric). Other give-ups are the caller's to count.
func (r *Recorder) giveUp(gu *retry.GiveUpError) {
	switch gu.Reason {
	case retry.BreakerOpen:
		r.add(mBreakerRejected)
	case retry.BudgetExhausted:
		r.mu.Lock()
		defer r.mu.Unlock()
		r.counts[mBudgetExhausted]++
		var ex *budget.ExhaustedError
		if errors.As(gu.Cause, &ex) && ex.Budget != "" {
			r.exhausted[ex.Budget] = struct{}{}
		}
	}
}

// stateChange counts a change of the breaker's state seen by this
// environment. A change this environment decided itself rather than
// followed (Origin OriginWrote: it wrote the fleet's transition; or
// OriginLocal: a breaker without a Store, or one running on its local
// state machine while its Store fails) is also counted in the metric named
// ...Written.
func (r *Recorder) stateChange(c breaker.StateChange) {
	names, ok := transitionNames[c.To]
	if !ok || c.From == c.To {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[names[0]]++
	if c.Origin != breaker.OriginFollowed {
		r.counts[names[1]]++
	}
}

func (r *Recorder) add(metric string) {
	r.mu.Lock()
	r.counts[metric]++
	r.mu.Unlock()
}

// Flush writes what was counted since the last flush as one EMF object on
// one line, and starts counting from zero. It writes nothing when nothing
// was counted. A write error is returned, and the counts are dropped.
func (r *Recorder) Flush() error {
	line, err := r.take()
	if line == nil || err != nil {
		return err
	}
	// The hooks on the call path take mu only: a slow writer holds up the
	// next Flush, not the calls.
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if _, err := r.w.Write(line); err != nil {
		return fmt.Errorf("herdguard: emf: writing: %w", err)
	}
	return nil
}

// take encodes what was counted since the last flush as one line (nil when
// nothing was counted) and starts counting from zero.
func (r *Recorder) take() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) == 0 {
		return nil, nil
	}
	type metricDef struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	type directive struct {
		Namespace  string      `json:"Namespace"`
		Dimensions [][]string  `json:"Dimensions"`
		Metrics    []metricDef `json:"Metrics"`
	}
	doc := make(map[string]any, len(r.values)+len(r.counts)+1)
	for k, v := range r.values {
		doc[k] = v
	}
	d := directive{Namespace: r.namespace, Dimensions: [][]string{r.dims}}
	for _, m := range metricOrder {
		if n, ok := r.counts[m]; ok {
			doc[m] = n
			d.Metrics = append(d.Metrics, metricDef{Name: m, Unit: "Count"})
		}
	}
	if len(r.exhausted) > 0 {
		doc[propExhaustedBudgets] = slices.Sorted(maps.Keys(r.exhausted))
	}
	doc["_aws"] = map[string]any{
		"Timestamp":         r.now().UnixMilli(),
		"CloudWatchMetrics": []directive{d},
	}
	clear(r.counts)
	clear(r.exhausted)
	line, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("herdguard: emf: encoding: %w", err) // strings and integers only: cannot happen
	}
	return append(line, '\n'), nil
}
