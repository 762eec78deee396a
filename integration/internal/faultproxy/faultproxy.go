package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is the fault the proxy injects into every request while it is set.
type Kind uint8

const (
	// None forwards requests to the upstream (after Fault.Latency, if set).
	None Kind = iota
	// Drop reads the request, then resets the connection without an
	// answer and without forwarding it: the request was not applied, but
	// the client cannot know that.
	Drop
	// InternalError answers HTTP 500 with DynamoDB's InternalServerError.
	InternalError
	// Throttling answers HTTP 400 with a ThrottlingException, as DynamoDB
	// does when control-plane or account limits are exceeded.
	Throttling
	// ThroughputExceeded answers HTTP 400 with a
	// ProvisionedThroughputExceededException, as DynamoDB does when a
	// partition takes more than it can (1,000 writes/s on one key).
	ThroughputExceeded
	// Refuse resets every connection as soon as it is accepted, and the
	// connections open when it is set: what a client sees of a DynamoDB
	// process that stopped behind a load balancer. (A client that dials a
	// stopped process directly gets "connection refused" instead; both are
	// network errors the SDK cannot tell from a lost request.)
	Refuse
	// ApplyThenDrop forwards the request to the upstream, waits for its
	// answer, throws the answer away and resets the client's connection:
	// the request was applied (if the upstream accepted it) and the client
	// never learns it, as with a DynamoDB write whose answer was lost on
	// the way back. A client that retries sends a write again that was
	// already applied; Stats.Replays counts those retries. The upstream
	// call does not depend on the client: it completes even if the client
	// gives up first (the proxy's Close ends it).
	ApplyThenDrop
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case None:
		return "none"
	case Drop:
		return "drop"
	case InternalError:
		return "http-500"
	case Throttling:
		return "throttling"
	case ThroughputExceeded:
		return "throughput-exceeded"
	case Refuse:
		return "refuse"
	case ApplyThenDrop:
		return "apply-then-drop"
	default:
		return fmt.Sprintf("faultproxy.Kind(%d)", uint8(k))
	}
}

// Fault is what the proxy does to requests while it is in force.
type Fault struct {
	// Kind is the fault injected (None forwards).
	Kind Kind
	// Latency is added before the request is forwarded or the fault is
	// injected. The wait ends early when the client goes away (its own
	// timeout) or the proxy closes, so a latency longer than the client's
	// deadline costs no goroutine beyond that deadline.
	Latency time.Duration
	// Attempts, if positive, limits the fault (Kind and Latency) to the
	// first Attempts attempts of each SDK call, as numbered by the
	// Amz-Sdk-Request header the AWS SDK sends ("attempt=N; max=M"; a
	// request without it is attempt 1); later attempts are forwarded
	// untouched. Zero applies the fault to every request. Attempts: 1 with
	// ApplyThenDrop is a write applied, its answer lost, and the SDK's
	// retry answered: the client sees a success, the write was applied
	// twice. Refuse ignores it (connections are refused before a request
	// is read).
	Attempts int
}

// String describes the fault, such as "throttling", "none+200ms" or
// "apply-then-drop(attempts<=1)".
func (f Fault) String() string {
	s := f.Kind.String()
	if f.Latency > 0 {
		s += "+" + f.Latency.String()
	}
	if f.Attempts > 0 {
		s += fmt.Sprintf("(attempts<=%d)", f.Attempts)
	}
	return s
}

// hits reports whether the fault applies to the given attempt.
func (f Fault) hits(attempt int) bool {
	return f.Attempts <= 0 || attempt <= f.Attempts
}

// DynamoDB's JSON protocol (awsJson1_0) error bodies. The SDK reads the
// error code from the X-Amzn-ErrorType header, falling back to __type,
// and strips the namespace before '#'.
const (
	typeInternalError      = "com.amazonaws.dynamodb.v20120810#InternalServerError"
	typeThroughputExceeded = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
	typeThrottling         = "com.amazon.coral.availability#ThrottlingException"
)

// Headers the AWS SDK for Go v2 sets on every attempt: the same
// invocation identifier on all attempts of one call, and the attempt's
// number.
const (
	headerInvocationID = "Amz-Sdk-Invocation-Id"
	headerSDKRequest   = "Amz-Sdk-Request"
)

// Bounds of the memory of invocations whose applied write lost its answer
// (see Stats.Replays): entries older than rememberFor are forgotten once
// more than rememberMax are held. An SDK retries within milliseconds.
const (
	rememberMax = 4096
	rememberFor = time.Minute
)

// Stats are the proxy's cumulative counters.
type Stats struct {
	// Requests counts requests received (Refuse'd connections carry none).
	Requests int64
	// Forwarded counts requests passed to the upstream, ApplyThenDrop's
	// included.
	Forwarded int64
	// Succeeded counts forwarded requests the upstream answered with a
	// 2xx status, whether or not the answer reached the client. For a
	// DynamoDB write, each is one application of the write.
	Succeeded int64
	// Injected counts requests answered, dropped or discarded by a fault.
	Injected int64
	// Discarded counts upstream answers ApplyThenDrop threw away, and
	// DiscardedSucceeded those of them with a 2xx status: writes applied
	// whose client never learnt it.
	Discarded          int64
	DiscardedSucceeded int64
	// Replays counts requests that carry the SDK invocation identifier
	// (Amz-Sdk-Invocation-Id) of an earlier request whose 2xx answer
	// ApplyThenDrop discarded: SDK retries of a write that had been
	// applied. Each may apply the write once more.
	Replays int64
	// Refused counts connections reset by Refuse.
	Refused int64
	// UpstreamErrors counts forwarded requests the upstream did not answer
	// (it was down); the proxy resets the client's connection for them.
	UpstreamErrors int64
	// Ops counts requests received by DynamoDB operation (the part of
	// X-Amz-Target after the dot, such as "UpdateItem").
	Ops map[string]int64

	// With a capacity model (SetCapacity): Throttled counts requests
	// answered ProvisionedThroughputExceededException without being
	// forwarded, and Unprocessed the BatchGetItem keys returned
	// unprocessed while the others were read. Checked counts the requests
	// whose units the model computed from item sizes it knew exactly and
	// could compare with the ConsumedCapacity DynamoDB Local reported, and
	// Disagreed those of them where the two differed.
	Throttled, Unprocessed, Checked, Disagreed int64
}

// Total returns the number of requests received for the given operations.
func (s Stats) Total(ops ...string) int64 {
	var n int64
	for _, op := range ops {
		n += s.Ops[op]
	}
	return n
}

// Sub returns the counters accumulated since earlier, a Stats of the same
// proxy taken before s.
func (s Stats) Sub(earlier Stats) Stats {
	d := Stats{
		Requests:           s.Requests - earlier.Requests,
		Forwarded:          s.Forwarded - earlier.Forwarded,
		Succeeded:          s.Succeeded - earlier.Succeeded,
		Injected:           s.Injected - earlier.Injected,
		Discarded:          s.Discarded - earlier.Discarded,
		DiscardedSucceeded: s.DiscardedSucceeded - earlier.DiscardedSucceeded,
		Replays:            s.Replays - earlier.Replays,
		Refused:            s.Refused - earlier.Refused,
		UpstreamErrors:     s.UpstreamErrors - earlier.UpstreamErrors,
		Ops:                make(map[string]int64, len(s.Ops)),
		Throttled:          s.Throttled - earlier.Throttled,
		Unprocessed:        s.Unprocessed - earlier.Unprocessed,
		Checked:            s.Checked - earlier.Checked,
		Disagreed:          s.Disagreed - earlier.Disagreed,
	}
	for op, n := range s.Ops {
		if n -= earlier.Ops[op]; n != 0 {
			d.Ops[op] = n
		}
	}
	return d
}

// String lists the counters, operations sorted by name.
func (s Stats) String() string {
	names := make([]string, 0, len(s.Ops))
	for op := range s.Ops {
		names = append(names, op)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d forwarded=%d succeeded=%d injected=%d discarded=%d (succeeded %d) replays=%d refused=%d upstream-errors=%d",
		s.Requests, s.Forwarded, s.Succeeded, s.Injected, s.Discarded, s.DiscardedSucceeded, s.Replays, s.Refused, s.UpstreamErrors)
	if s.Throttled+s.Unprocessed+s.Checked > 0 {
		fmt.Fprintf(&b, " throttled=%d unprocessed=%d units-checked=%d units-disagreed=%d", s.Throttled, s.Unprocessed, s.Checked, s.Disagreed)
	}
	for _, op := range names {
		fmt.Fprintf(&b, " %s=%d", op, s.Ops[op])
	}
	return b.String()
}

// Proxy is a fault-injecting reverse proxy on a loopback port. It is safe
// for concurrent use. Create it with New and Close it when done.
type Proxy struct {
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	rp        *httputil.ReverseProxy // forwards, and answers the client
	applyRP   *httputil.ReverseProxy // forwards for ApplyThenDrop, into a discardWriter
	url       string
	closed    chan struct{}
	closeOnce sync.Once
	// base is the context of ApplyThenDrop's upstream calls: independent
	// of the client, canceled by Close.
	base       context.Context
	cancelBase context.CancelFunc

	upstream atomic.Pointer[url.URL]
	fault    atomic.Pointer[Fault]
	capacity atomic.Pointer[Capacity] // nil: no capacity model

	requests, forwarded, succeeded, injected, refused, upstreamErrors atomic.Int64
	discarded, discardedSucceeded, replays                            atomic.Int64
	capThrottled, capUnprocessed, capChecked, capDisagreed            atomic.Int64

	mu      sync.Mutex
	ops     map[string]int64            // guarded by mu
	conns   map[net.Conn]http.ConnState // open client connections and their state; guarded by mu
	applied map[string]time.Time        // invocation id -> when ApplyThenDrop discarded its 2xx answer; guarded by mu
	sizes   map[string]itemSize         // item sizes learnt by the capacity model; guarded by mu
}

// New starts a proxy on 127.0.0.1 forwarding to upstream, an http URL such
// as "http://127.0.0.1:8000", with no fault set.
func New(upstream string) (*Proxy, error) {
	u, err := parseUpstream(upstream)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		closed:  make(chan struct{}),
		ops:     map[string]int64{},
		conns:   map[net.Conn]http.ConnState{},
		applied: map[string]time.Time{},
		sizes:   map[string]itemSize{},
		url:     "http://" + ln.Addr().String(),
	}
	p.base, p.cancelBase = context.WithCancel(context.Background())
	p.upstream.Store(u)
	p.fault.Store(&Fault{})
	p.transport = &http.Transport{
		Proxy:                 nil, // never through an environment proxy
		DialContext:           (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	rewrite := func(r *httputil.ProxyRequest) {
		r.SetURL(p.upstream.Load())
		r.Out.Host = r.In.Host // DynamoDB signs the Host header: keep it
	}
	countSucceeded := func(resp *http.Response) error {
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			p.succeeded.Add(1)
		}
		return p.settle(resp)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      p.transport,
		ModifyResponse: countSucceeded,
		ErrorHandler:   p.upstreamFailed,
	}
	p.applyRP = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      p.transport,
		ModifyResponse: countSucceeded,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, _ error) {
			admissionOf(r.Context()).refund()
			if d, ok := w.(*discardWriter); ok {
				d.failed = true
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.ln = &refusingListener{Listener: ln, p: p}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         p.connState,
		ErrorLog:          nil,
	}
	go func() { _ = p.srv.Serve(p.ln) }()
	return p, nil
}

func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q is not an http(s) URL", s)
	}
	return u, nil
}

// URL returns the proxy's base URL, "http://127.0.0.1:<port>".
func (p *Proxy) URL() string { return p.url }

// SetUpstream points the proxy at another upstream (a DynamoDB Local that
// restarted on another port). Requests in flight finish where they went.
func (p *Proxy) SetUpstream(upstream string) error {
	u, err := parseUpstream(upstream)
	if err != nil {
		return err
	}
	p.upstream.Store(u)
	p.transport.CloseIdleConnections()
	return nil
}

// Set puts f in force for every request from now on. Setting Refuse also
// resets the client connections open at that moment.
func (p *Proxy) Set(f Fault) {
	p.fault.Store(&f)
	if f.Kind == Refuse {
		for _, c := range p.clientConns(false) {
			reset(c)
		}
		p.transport.CloseIdleConnections()
	}
}

// Fault returns the fault in force.
func (p *Proxy) Fault() Fault { return *p.fault.Load() }

// CloseIdleConnections closes the client connections that wait idle for
// their next request and the proxy's idle connections to the upstream, so
// that a test can count goroutines without them. Call it when no request
// is on its way: a client that sends one on a connection as it is closed
// sees a network error.
func (p *Proxy) CloseIdleConnections() {
	for _, c := range p.clientConns(true) {
		_ = c.Close()
	}
	p.transport.CloseIdleConnections()
}

// clientConns returns the open client connections, or only the idle ones.
func (p *Proxy) clientConns(idleOnly bool) []net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c, s := range p.conns {
		if !idleOnly || s == http.StateIdle {
			conns = append(conns, c)
		}
	}
	return conns
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	s := Stats{
		Requests:           p.requests.Load(),
		Forwarded:          p.forwarded.Load(),
		Succeeded:          p.succeeded.Load(),
		Injected:           p.injected.Load(),
		Discarded:          p.discarded.Load(),
		DiscardedSucceeded: p.discardedSucceeded.Load(),
		Replays:            p.replays.Load(),
		Refused:            p.refused.Load(),
		UpstreamErrors:     p.upstreamErrors.Load(),
		Throttled:          p.capThrottled.Load(),
		Unprocessed:        p.capUnprocessed.Load(),
		Checked:            p.capChecked.Load(),
		Disagreed:          p.capDisagreed.Load(),
	}
	p.mu.Lock()
	s.Ops = make(map[string]int64, len(p.ops))
	for k, v := range p.ops {
		s.Ops[k] = v
	}
	p.mu.Unlock()
	return s
}

// Close stops the proxy: it closes the listener and every connection, ends
// the waits of injected latency and ApplyThenDrop's upstream calls, and
// closes the idle connections to the upstream. It returns once the server
// has stopped accepting.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
		p.cancelBase()
		err = p.srv.Close()
		p.transport.CloseIdleConnections()
	})
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	op := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	if op == "" {
		op = "(none)"
	}
	id := r.Header.Get(headerInvocationID)
	p.mu.Lock()
	p.ops[op]++
	_, replay := p.applied[id]
	p.mu.Unlock()
	if replay && id != "" {
		p.replays.Add(1)
	}

	attempt := sdkAttempt(r.Header)
	f := p.faultFor(attempt)
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done(): // the client gave up
			t.Stop()
			return
		case <-p.closed:
			t.Stop()
			return
		}
		f = p.faultFor(attempt) // the fault may have changed while waiting
	}
	switch f.Kind {
	case None:
		if r, ok := p.admit(w, r, op); ok {
			p.forwarded.Add(1)
			p.rp.ServeHTTP(w, r)
		}
	case ApplyThenDrop:
		if r, ok := p.admit(w, r, op); ok {
			p.applyThenDrop(w, r, id)
		}
	case Drop, Refuse:
		p.injected.Add(1)
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)) // the request arrived in full
		hijackReset(w)
	case InternalError:
		p.injected.Add(1)
		writeError(w, http.StatusInternalServerError, typeInternalError, "InternalServerError", "Internal server error (injected by faultproxy)")
	case Throttling:
		p.injected.Add(1)
		writeError(w, http.StatusBadRequest, typeThrottling, "ThrottlingException", "Rate of requests exceeds the allowed throughput (injected by faultproxy)")
	case ThroughputExceeded:
		p.injected.Add(1)
		writeError(w, http.StatusBadRequest, typeThroughputExceeded, "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for the table was exceeded (injected by faultproxy)")
	default:
		p.injected.Add(1)
		http.Error(w, "faultproxy: unknown fault "+f.Kind.String(), http.StatusInternalServerError)
	}
}

// faultFor returns the fault in force for an attempt: the one set, or
// none if the attempt is past Fault.Attempts.
func (p *Proxy) faultFor(attempt int) Fault {
	f := *p.fault.Load()
	if !f.hits(attempt) {
		return Fault{}
	}
	return f
}

// sdkAttempt returns the attempt number the AWS SDK put in the
// Amz-Sdk-Request header ("attempt=2; max=2"), or 1.
func sdkAttempt(h http.Header) int {
	for _, part := range strings.Split(h.Get(headerSDKRequest), ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k != "attempt" {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			return n
		}
	}
	return 1
}

// applyThenDrop forwards r, lets the upstream answer in full, discards the
// answer and resets the client's connection.
func (p *Proxy) applyThenDrop(w http.ResponseWriter, r *http.Request, id string) {
	p.injected.Add(1)
	p.forwarded.Add(1)
	d := &discardWriter{header: http.Header{}}
	ctx := p.base
	if a := admissionOf(r.Context()); a != nil {
		ctx = context.WithValue(ctx, admissionKey{}, a)
	}
	p.applyRP.ServeHTTP(d, r.WithContext(ctx))
	switch {
	case d.failed:
		p.upstreamErrors.Add(1)
	default:
		p.discarded.Add(1)
		if d.status >= 200 && d.status < 300 {
			p.discardedSucceeded.Add(1)
			if id != "" {
				p.remember(id)
			}
		}
	}
	hijackReset(w)
}

// remember notes that the request of SDK invocation id was applied and its
// answer lost, so that its retries are counted as replays.
func (p *Proxy) remember(id string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.applied) >= rememberMax {
		for k, at := range p.applied {
			if now.Sub(at) > rememberFor || len(p.applied) >= rememberMax {
				delete(p.applied, k)
			}
		}
	}
	p.applied[id] = now
}

// discardWriter is the ResponseWriter ApplyThenDrop forwards into: it
// keeps the status and throws the body away.
type discardWriter struct {
	header http.Header
	status int
	failed bool // the upstream did not answer
}

func (d *discardWriter) Header() http.Header { return d.header }

func (d *discardWriter) WriteHeader(status int) {
	if d.status == 0 {
		d.status = status
	}
}

func (d *discardWriter) Write(b []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(b), nil
}

// writeError answers as DynamoDB does with an error: the code in the
// X-Amzn-ErrorType header and, namespaced, in the body's __type.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-ErrorType", code)
	h.Set("X-Amzn-RequestId", "faultproxy")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"__type":%q,"message":%q}`, typ, msg)
}

// upstreamFailed handles a request the upstream did not answer: the
// connection is reset, as if the proxy were the stopped server.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	admissionOf(r.Context()).refund() // whatever happened upstream, the model bills nothing
	if r.Context().Err() != nil {
		return // the client went away; nothing to answer
	}
	p.upstreamErrors.Add(1)
	hijackReset(w)
}

// hijackReset takes the connection over and closes it with a TCP reset.
func hijackReset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // net/http closes the connection
	}
	c, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	reset(c)
}

// reset closes c with SO_LINGER 0, so that the peer gets a RST rather than
// an orderly FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) connState(c net.Conn, s http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case http.StateHijacked, http.StateClosed:
		delete(p.conns, c)
	default:
		p.conns[c] = s
	}
}

// refusingListener resets connections as they are accepted while Refuse is
// in force.
type refusingListener struct {
	net.Listener
	p *Proxy
}

func (l *refusingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.p.fault.Load().Kind != Refuse {
			return c, nil
		}
		l.p.refused.Add(1)
		reset(c)
	}
}
