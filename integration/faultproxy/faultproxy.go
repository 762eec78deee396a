package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
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
	// answer: the client cannot know whether the request was applied.
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
}

// String describes the fault, such as "throttling" or "none+200ms".
func (f Fault) String() string {
	if f.Latency > 0 {
		return fmt.Sprintf("%s+%s", f.Kind, f.Latency)
	}
	return f.Kind.String()
}

// DynamoDB's JSON protocol (awsJson1_0) error bodies. The SDK reads the
// error code from the X-Amzn-ErrorType header, falling back to __type,
// and strips the namespace before '#'.
const (
	typeInternalError      = "com.amazonaws.dynamodb.v20120810#InternalServerError"
	typeThroughputExceeded = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
	typeThrottling         = "com.amazon.coral.availability#ThrottlingException"
)

// Stats are the proxy's cumulative counters.
type Stats struct {
	// Requests counts requests received (Refuse'd connections carry none).
	Requests int64
	// Forwarded counts requests passed to the upstream.
	Forwarded int64
	// Injected counts requests answered or dropped by a fault.
	Injected int64
	// Refused counts connections reset by Refuse.
	Refused int64
	// UpstreamErrors counts forwarded requests the upstream did not answer
	// (it was down); the proxy resets the client's connection for them.
	UpstreamErrors int64
	// Ops counts requests received by DynamoDB operation (the part of
	// X-Amz-Target after the dot, such as "UpdateItem").
	Ops map[string]int64
}

// Total returns the number of requests received for the given operations.
func (s Stats) Total(ops ...string) int64 {
	var n int64
	for _, op := range ops {
		n += s.Ops[op]
	}
	return n
}

// String lists the counters, operations sorted by name.
func (s Stats) String() string {
	names := make([]string, 0, len(s.Ops))
	for op := range s.Ops {
		names = append(names, op)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d forwarded=%d injected=%d refused=%d upstream-errors=%d", s.Requests, s.Forwarded, s.Injected, s.Refused, s.UpstreamErrors)
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
	rp        *httputil.ReverseProxy
	url       string
	closed    chan struct{}
	closeOnce sync.Once

	upstream atomic.Pointer[url.URL]
	fault    atomic.Pointer[Fault]

	requests, forwarded, injected, refused, upstreamErrors atomic.Int64

	mu    sync.Mutex
	ops   map[string]int64      // guarded by mu
	conns map[net.Conn]struct{} // open client connections; guarded by mu
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
		closed: make(chan struct{}),
		ops:    map[string]int64{},
		conns:  map[net.Conn]struct{}{},
		url:    "http://" + ln.Addr().String(),
	}
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
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(p.upstream.Load())
			r.Out.Host = r.In.Host // DynamoDB signs the Host header: keep it
		},
		Transport:    p.transport,
		ErrorHandler: p.upstreamFailed,
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
		p.mu.Lock()
		conns := make([]net.Conn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		p.mu.Unlock()
		for _, c := range conns {
			reset(c)
		}
		p.transport.CloseIdleConnections()
	}
}

// Fault returns the fault in force.
func (p *Proxy) Fault() Fault { return *p.fault.Load() }

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	s := Stats{
		Requests:       p.requests.Load(),
		Forwarded:      p.forwarded.Load(),
		Injected:       p.injected.Load(),
		Refused:        p.refused.Load(),
		UpstreamErrors: p.upstreamErrors.Load(),
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
// the waits of injected latency, and closes the idle connections to the
// upstream. It returns once the server has stopped accepting.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
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
	p.mu.Lock()
	p.ops[op]++
	p.mu.Unlock()

	f := *p.fault.Load()
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
		f = *p.fault.Load() // the fault may have changed while waiting
	}
	switch f.Kind {
	case None:
		p.forwarded.Add(1)
		p.rp.ServeHTTP(w, r)
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
	case http.StateNew:
		p.conns[c] = struct{}{}
	case http.StateHijacked, http.StateClosed:
		delete(p.conns, c)
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
