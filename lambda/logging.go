package herdlambda

import (
	"context"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Log fields Fleet.Logger adds: the request id as Lambda's JSON logs name
// it, and the cold-start flag.
const (
	logKeyRequestID = "requestId"
	logKeyColdStart = "coldStart"
)

// invocation is what a log record says about its invocation.
type invocation struct {
	id   string
	cold bool
}

type invocationKey struct{}

// begin records an invocation in progress and returns its context, which
// carries its cold-start flag, and the function that ends it.
func (f *Fleet) begin(ctx context.Context) (context.Context, func()) {
	inv := invocation{cold: f.started.Add(1) == 1}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		inv.id = lc.AwsRequestID
	}
	ctx = context.WithValue(ctx, invocationKey{}, inv)
	return ctx, f.inflight.add(inv)
}

// invocations tracks the invocations in progress, for records made
// without their context: herdguard's hooks (store faults, breaker state
// changes) get none.
type invocations struct {
	mu  sync.Mutex
	ids map[invocation]int
}

func (in *invocations) add(inv invocation) (end func()) {
	in.mu.Lock()
	if in.ids == nil {
		in.ids = map[invocation]int{}
	}
	in.ids[inv]++
	in.mu.Unlock()
	return func() {
		in.mu.Lock()
		if in.ids[inv]--; in.ids[inv] <= 0 {
			delete(in.ids, inv)
		}
		in.mu.Unlock()
	}
}

// only returns the invocation in progress when there is exactly one, as in
// an execution environment that serves one invocation at a time; with
// several (Lambda Managed Instances) a record made without its context
// cannot say whose it is.
func (in *invocations) only() (invocation, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.ids) == 1 {
		for inv := range in.ids {
			return inv, true
		}
	}
	return invocation{}, false
}

// invocationHandler adds the request id and the cold-start flag of a
// record's invocation: the one its context carries, or else the one in
// progress.
type invocationHandler struct {
	slog.Handler
	inflight *invocations
}

func (h *invocationHandler) Handle(ctx context.Context, r slog.Record) error {
	inv, ok := ctx.Value(invocationKey{}).(invocation)
	if !ok {
		inv, ok = h.inflight.only()
	}
	if lc, lok := lambdacontext.FromContext(ctx); lok && inv.id == "" {
		inv.id, ok = lc.AwsRequestID, true
	}
	if ok {
		r = r.Clone()
		if inv.id != "" {
			r.AddAttrs(slog.String(logKeyRequestID, inv.id))
		}
		r.AddAttrs(slog.Bool(logKeyColdStart, inv.cold))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *invocationHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &invocationHandler{Handler: h.Handler.WithAttrs(as), inflight: h.inflight}
}

func (h *invocationHandler) WithGroup(name string) slog.Handler {
	return &invocationHandler{Handler: h.Handler.WithGroup(name), inflight: h.inflight}
}
