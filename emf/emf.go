// Package emf records what herdguard does as CloudWatch metrics in Embedded
// Metric Format (EMF): JSON log lines that CloudWatch Logs turns into
// metrics, with no API call and no agent. In AWS Lambda, stdout is the
// function's log, so a Recorder writing to os.Stdout is all it takes.
//
// A Recorder counts in memory, from the hooks of a retry.Executor and a
// breaker.Breaker, and Flush writes what it counted as one EMF object on
// one line, as Powertools for AWS Lambda's metrics utilities do: a
// namespace, one dimension set (the Recorder's Dimensions, such as the
// function and the partner, and the service if one is set), the metrics
// and the metadata as properties of the root, and "_aws" with Timestamp
// (Unix milliseconds, at the flush) and CloudWatchMetrics (Namespace,
// Dimensions, Metrics with Name and Unit). A flush with nothing counted
// writes nothing, so a healthy partner costs no log volume. Besides the
// metrics, the object lists the budgets that refused since the last flush
// in the property ExhaustedBudgets (["local-ratio", "global:payments"]),
// which Logs Insights can query.
//
// As in Powertools, the namespace and the service may come from the
// environment (POWERTOOLS_METRICS_NAMESPACE, POWERTOOLS_SERVICE_NAME); the
// Options set in code take precedence. New checks every name and value as
// CloudWatch would, so that a line CloudWatch would drop is an error at
// start-up rather than a metric that never appears.
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
//   - BudgetExhausted: retries a budget refused by its own decision
//     (OnGiveUp with Reason BudgetExhausted), the budget doing its job.
//   - BreakerRejected: calls or retries the breaker refused, the open state
//     doing its job (OnGiveUp with Reason BreakerOpen).
//   - BudgetStoreErrors, BreakerStoreErrors: faults of the budgets' and the
//     breaker's stores (the table was slow, throttled or unreachable, or an
//     item was malformed), each answered from the local layers or, for a
//     layer that fails closed, by a refusal. A refusal caused by a store
//     fault counts here only, never in BudgetExhausted or BreakerRejected,
//     so that a table problem never looks like a partner outage.
//   - BreakerOpened, BreakerHalfOpened, BreakerClosed: the breaker's state
//     changes this environment saw, whoever made them: with a shared
//     breaker every environment that learns of a fleet transition counts
//     it, so their sum over the fleet is the number of environments told.
//   - BreakerOpenedWritten, BreakerHalfOpenedWritten, BreakerClosedWritten:
//     those of them this environment decided itself rather than followed
//     (StateChange.Origin is not breaker.OriginFollowed): with
//     a shared breaker, one per fleet transition, whatever the fleet's size.
//
// The refusals a budget.Global makes from memory after a throttled write,
// until its next store contact, carry the throttle and count as store
// errors too. One refusal that follows a store fault carries none and
// counts as a refusal: a breaker whose Store fails on the move to
// half-open keeps rejecting calls as the fleet's open state it last read
// (BreakerRejected).
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
	"os"
	"slices"
	"sync"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// The environment variables New reads, as Powertools for AWS Lambda does.
const (
	// EnvNamespace is the namespace when Options.Namespace is empty.
	EnvNamespace = "POWERTOOLS_METRICS_NAMESPACE"
	// EnvService is the service when Options.Service is empty.
	EnvService = "POWERTOOLS_SERVICE_NAME"
)

// serviceDimension is the dimension the service becomes, named as
// Powertools names it.
const serviceDimension = "service"

// Options configures a Recorder. Every name and value is checked at New
// against what CloudWatch accepts (see New).
type Options struct {
	// Namespace is the CloudWatch namespace of every metric, such as
	// "Herdguard". Empty means the environment's
	// POWERTOOLS_METRICS_NAMESPACE; one of them is required.
	Namespace string
	// Service, if not empty, is the value of the dimension "service" of
	// every metric, as in Powertools. Empty means the environment's
	// POWERTOOLS_SERVICE_NAME, unless Dimensions has a "service" of its
	// own, which wins; with none of them there is no service dimension.
	// Setting both Service and Dimensions["service"] is an error.
	Service string
	// Dimensions are the dimensions of every metric, name to value, such as
	// {"FunctionName": ..., "Partner": ...}: at most 30 with the service.
	// An alarm must name exactly these, and "service" when Service or
	// POWERTOOLS_SERVICE_NAME sets one, to see the metrics.
	Dimensions map[string]string
	// Metadata are properties written with every flush, name to any
	// value encoding/json encodes, such as {"Region": "eu-central-1"}: log
	// fields that Logs Insights can query, not dimensions, so they cost
	// no metric. Names follow the rules of dimension names and may not be
	// a dimension's or a metric's. The values are encoded at New.
	Metadata map[string]any
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
	metadata  map[string]json.RawMessage
	now       func() time.Time

	wmu       sync.Mutex          // held while writing a line, so that lines never interleave
	w         io.Writer           // guarded by wmu
	mu        sync.Mutex          // the counts; never held across a write
	counts    map[string]uint64   // guarded by mu
	exhausted map[string]struct{} // names of the budgets that refused; guarded by mu
}

// New returns a Recorder that writes to w (os.Stdout in Lambda), taking
// the namespace and the service from the environment where o leaves them
// empty (see Options). It checks every name and value as CloudWatch would:
//
//   - the namespace: 1 to 255 characters among 0-9A-Za-z . - _ / # :, not
//     starting with ':' nor in AWS/;
//   - at most 30 dimensions, the service included;
//   - a dimension name, or a metadata name: 1 to 250 printable ASCII
//     characters, not only whitespace, not starting with ':', and neither
//     "_aws", nor a metric's name, nor ExhaustedBudgets; a metadata name
//     may not be a dimension's either;
//   - a dimension value, and the service: 1 to 1,024 printable ASCII
//     characters (no control character such as a newline), not only
//     whitespace.
//
// An error matches ErrInvalid and is a *herdguard.ConfigError naming the
// option, or the environment variable, and what is wrong.
func New(w io.Writer, o Options) (*Recorder, error) {
	if w == nil {
		return nil, invalid("emf.New w", "is nil")
	}
	ns, nsField := o.Namespace, "emf.Options.Namespace"
	if ns == "" {
		ns, nsField = os.Getenv(EnvNamespace), EnvNamespace
		if ns == "" {
			return nil, invalid("emf.Options.Namespace", "is empty and %s is not set; want a namespace such as \"Herdguard\"", EnvNamespace)
		}
	}
	if msg := checkNamespace(ns); msg != "" {
		return nil, invalid(nsField, "%s %s", quote(ns), msg)
	}
	dims := maps.Clone(o.Dimensions)
	if dims == nil {
		dims = map[string]string{}
	}
	_, hasService := dims[serviceDimension]
	switch {
	case o.Service != "" && hasService:
		return nil, invalid("emf.Options.Service", "and Dimensions[%q] are both set; set one", serviceDimension)
	case o.Service != "":
		if msg := checkDimensionValue(o.Service); msg != "" {
			return nil, invalid("emf.Options.Service", "%s %s", quote(o.Service), msg)
		}
		dims[serviceDimension] = o.Service
	case !hasService:
		if svc := os.Getenv(EnvService); svc != "" {
			if msg := checkDimensionValue(svc); msg != "" {
				return nil, invalid(EnvService, "%s %s", quote(svc), msg)
			}
			dims[serviceDimension] = svc
		}
	}
	if len(dims) > maxDimensions {
		return nil, invalid("emf.Options.Dimensions", "has %d dimensions (the service included), more than %d", len(dims), maxDimensions)
	}
	names := slices.Sorted(maps.Keys(dims)) // in order, so that the error is the same every time
	for _, k := range names {
		field := fmt.Sprintf("emf.Options.Dimensions[%s]", quote(k))
		if msg := checkPropertyName(k); msg != "" {
			return nil, invalid(field, "name %s", msg)
		}
		if msg := checkDimensionValue(dims[k]); msg != "" {
			return nil, invalid(field, "value %s %s", quote(dims[k]), msg)
		}
	}
	metadata := make(map[string]json.RawMessage, len(o.Metadata))
	for _, k := range slices.Sorted(maps.Keys(o.Metadata)) {
		field := fmt.Sprintf("emf.Options.Metadata[%s]", quote(k))
		if msg := checkPropertyName(k); msg != "" {
			return nil, invalid(field, "name %s", msg)
		}
		if _, ok := dims[k]; ok {
			return nil, invalid(field, "name is a dimension's")
		}
		v, err := json.Marshal(o.Metadata[k])
		if err != nil {
			return nil, invalid(field, "value cannot be encoded as JSON: %v", err)
		}
		metadata[k] = v
	}
	r := &Recorder{
		namespace: ns,
		dims:      names,
		values:    dims,
		metadata:  metadata,
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

// checkPropertyName returns what is wrong with the name of a dimension or
// of metadata, properties of the root of the EMF object.
func checkPropertyName(k string) string {
	if msg := checkDimensionName(k); msg != "" {
		return msg
	}
	switch {
	case k == "_aws":
		return "is _aws, EMF's metadata"
	case slices.Contains(metricOrder, k), k == propExhaustedBudgets:
		return "is a metric's or ExhaustedBudgets"
	}
	return ""
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
// extra metric). A refusal caused by a store fault (a layer that fails
// closed, or a throttled store call: its Cause matches
// budget.ErrUnavailable or breaker.ErrStore) is not counted here: the
// fault was counted as a store error when the layer reported it through
// OnStoreError. Other give-ups are the caller's to count.
func (r *Recorder) giveUp(gu *retry.GiveUpError) {
	if storeFault(gu.Cause) {
		return
	}
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

// storeFault reports whether a refusal's cause is a fault of a budget's
// or the breaker's store rather than the layer's decision.
func storeFault(cause error) bool {
	return errors.Is(cause, budget.ErrUnavailable) || errors.Is(cause, breaker.ErrStore)
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
	doc := make(map[string]any, len(r.values)+len(r.metadata)+len(r.counts)+2)
	for k, v := range r.metadata {
		doc[k] = v
	}
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
