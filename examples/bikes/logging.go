package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// logKeyRequestID is the log field of the invocation's request id, named as
// in Lambda's own JSON logs.
const logKeyRequestID = "requestId"

// requestID returns the Lambda request id ctx carries, or "".
func requestID(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.AwsRequestID
	}
	return ""
}

// invocations tracks the request ids of the invocations in progress, for
// log records made without their context: herdguard's hooks (store faults,
// breaker state changes) get none.
type invocations struct {
	mu  sync.Mutex
	ids map[string]int
}

// begin records an invocation in progress and returns the function that
// ends it.
func (in *invocations) begin(id string) (end func()) {
	if id == "" {
		return func() {}
	}
	in.mu.Lock()
	if in.ids == nil {
		in.ids = map[string]int{}
	}
	in.ids[id]++
	in.mu.Unlock()
	return func() {
		in.mu.Lock()
		if in.ids[id]--; in.ids[id] <= 0 {
			delete(in.ids, id)
		}
		in.mu.Unlock()
	}
}

// only returns the request id of the invocation in progress when there is
// exactly one, as there is in a Lambda execution environment that serves
// one invocation at a time; "" otherwise, since with several (Lambda
// Managed Instances) a record made without its context cannot say whose
// it is.
func (in *invocations) only() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.ids) != 1 {
		return ""
	}
	for id := range in.ids {
		return id
	}
	return ""
}

// withRequestID wraps h so that every record carries the request id of its
// invocation: the one its context carries (lambdacontext), or else the one
// invocation in progress.
func withRequestID(h slog.Handler, inflight *invocations) slog.Handler {
	return requestIDHandler{Handler: h, inflight: inflight}
}

type requestIDHandler struct {
	slog.Handler
	inflight *invocations
}

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	id := requestID(ctx)
	if id == "" {
		id = h.inflight.only()
	}
	if id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String(logKeyRequestID, id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{Handler: h.Handler.WithAttrs(as), inflight: h.inflight}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{Handler: h.Handler.WithGroup(name), inflight: h.inflight}
}
