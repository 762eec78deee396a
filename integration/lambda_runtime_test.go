package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runtimeAPI is a minimal AWS Lambda Runtime API
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html) for one
// execution environment, served on loopback. A function process polls
// GET /2018-06-01/runtime/invocation/next; Invoke queues an event there and
// waits for the process to POST .../invocation/{id}/response or .../error.
// An initialisation failure posted to /runtime/init/error is kept and ends
// every pending Invoke.
//
// Like the real service, it hands out one invocation at a time: Invoke
// holds a mutex until the invocation finishes, so an environment never runs
// two invocations at once.
type runtimeAPI struct {
	srv  *http.Server
	addr string

	pending chan *invocation // events waiting for GET .../next (unbuffered)
	one     sync.Mutex       // held by Invoke for the duration of one invocation

	mu       sync.Mutex             // guards inFlight, initErr
	inFlight map[string]*invocation // by request id, between next and response/error
	initErr  *runtimeError

	initFailed chan struct{} // closed when /runtime/init/error arrives
	closed     chan struct{} // closed by Close
	closeOnce  sync.Once
	seq        atomic.Int64
	polls      atomic.Int64 // GET .../next calls received
}

// invocation is one event and, once the function answered, its result.
type invocation struct {
	id       string
	deadline time.Time
	payload  []byte
	done     chan struct{} // closed when result or errResult is set
	result   []byte
	errBody  *runtimeError
}

// runtimeError is the body a runtime posts to .../error and /init/error,
// with the error type header.
type runtimeError struct {
	Type       string `json:"errorType"`
	Message    string `json:"errorMessage"`
	HeaderType string `json:"-"`
}

func (e *runtimeError) Error() string {
	return fmt.Sprintf("lambda %s (%s): %s", e.Type, e.HeaderType, e.Message)
}

// errInitFailed is returned by Invoke once the process reported an
// initialisation error.
var errInitFailed = errors.New("runtime API: function reported an init error")

// newRuntimeAPI starts a Runtime API on a free loopback port.
func newRuntimeAPI() (*runtimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("runtime API: listen: %w", err)
	}
	r := &runtimeAPI{
		addr:       ln.Addr().String(),
		pending:    make(chan *invocation),
		inFlight:   make(map[string]*invocation),
		initFailed: make(chan struct{}),
		closed:     make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", r.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", r.response)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", r.invocationError)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", r.initError)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Addr is the value for AWS_LAMBDA_RUNTIME_API.
func (r *runtimeAPI) Addr() string { return r.addr }

// Polls is how many times the function asked for the next invocation.
func (r *runtimeAPI) Polls() int64 { return r.polls.Load() }

// InitError returns the init error the function reported, if any.
func (r *runtimeAPI) InitError() *runtimeError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initErr
}

// Close stops the server; pending GET .../next calls return 410 Gone.
func (r *runtimeAPI) Close() {
	r.closeOnce.Do(func() { close(r.closed) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	_ = r.srv.Close()
}

// Invoke hands payload to the function with the given deadline and waits for
// its answer. It returns the response body, or a *runtimeError if the
// function answered through .../error. ctx bounds the wait (a process that
// died never answers).
func (r *runtimeAPI) Invoke(ctx context.Context, payload []byte, deadline time.Time) ([]byte, error) {
	r.one.Lock()
	defer r.one.Unlock()
	inv := &invocation{
		id:       fmt.Sprintf("req-%s-%d", strings.ReplaceAll(r.addr, ":", "-"), r.seq.Add(1)),
		deadline: deadline,
		payload:  payload,
		done:     make(chan struct{}),
	}
	select {
	case r.pending <- inv:
	case <-r.initFailed:
		return nil, errInitFailed
	case <-r.closed:
		return nil, errors.New("runtime API closed")
	case <-ctx.Done():
		return nil, fmt.Errorf("runtime API: function did not ask for the invocation: %w", context.Cause(ctx))
	}
	select {
	case <-inv.done:
	case <-r.initFailed:
		return nil, errInitFailed
	case <-r.closed:
		return nil, errors.New("runtime API closed")
	case <-ctx.Done():
		return nil, fmt.Errorf("runtime API: no answer to %s: %w", inv.id, context.Cause(ctx))
	}
	if inv.errBody != nil {
		return nil, inv.errBody
	}
	return inv.result, nil
}

func (r *runtimeAPI) next(w http.ResponseWriter, req *http.Request) {
	r.polls.Add(1)
	var inv *invocation
	select {
	case inv = <-r.pending:
	case <-r.closed:
		http.Error(w, "runtime API closed", http.StatusGone)
		return
	case <-req.Context().Done():
		return
	}
	r.mu.Lock()
	r.inFlight[inv.id] = inv
	r.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:bikes")
	h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(inv.payload)
}

// take removes and returns the in-flight invocation named in the path.
func (r *runtimeAPI) take(w http.ResponseWriter, req *http.Request) *invocation {
	id := req.PathValue("id")
	r.mu.Lock()
	inv := r.inFlight[id]
	delete(r.inFlight, id)
	r.mu.Unlock()
	if inv == nil {
		http.Error(w, "unknown request id "+id, http.StatusBadRequest)
	}
	return inv
}

func (r *runtimeAPI) response(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 6<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	inv := r.take(w, req)
	if inv == nil {
		return
	}
	inv.result = body
	close(inv.done)
	w.WriteHeader(http.StatusAccepted)
}

func (r *runtimeAPI) invocationError(w http.ResponseWriter, req *http.Request) {
	e, err := readRuntimeError(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	inv := r.take(w, req)
	if inv == nil {
		return
	}
	inv.errBody = e
	close(inv.done)
	w.WriteHeader(http.StatusAccepted)
}

func (r *runtimeAPI) initError(w http.ResponseWriter, req *http.Request) {
	e, err := readRuntimeError(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	first := r.initErr == nil
	if first {
		r.initErr = e
	}
	r.mu.Unlock()
	if first {
		close(r.initFailed)
	}
	w.WriteHeader(http.StatusAccepted)
}

func readRuntimeError(req *http.Request) (*runtimeError, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	e := &runtimeError{HeaderType: req.Header.Get("Lambda-Runtime-Function-Error-Type")}
	if len(body) > 0 {
		if err := json.Unmarshal(body, e); err != nil {
			e.Message = string(body)
		}
	}
	return e, nil
}
