package retry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/leakcheck"
	"github.com/herdguard/herdguard/internal/pipenet"
	"github.com/herdguard/herdguard/retry"
)

// partner is a loopback HTTP server answering from a script, recording what
// it received and counting the connections it accepted.
type partner struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
	conns    atomic.Int64
}

type seen struct {
	method, attempt, key, body string
}

// newPartner serves handler(n, w, r) for the n-th request (from 1).
func newPartner(t *testing.T, handler func(n int, w http.ResponseWriter, r *http.Request)) *partner {
	t.Helper()
	p := &partner{}
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.requests = append(p.requests, seen{r.Method, r.Header.Get(retry.DefaultAttemptHeader), r.Header.Get("Idempotency-Key"), string(body)})
		n := len(p.requests)
		p.mu.Unlock()
		handler(n, w, r)
	}))
	p.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.conns.Add(1)
		}
	}
	p.Start()
	t.Cleanup(p.Close)
	return p
}

func (p *partner) seen() []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.requests...)
}

// failFirst answers code (with a body and extra headers) to the first n
// requests and 200 "ok" afterwards.
func failFirst(n, code int, hdr ...string) func(int, http.ResponseWriter, *http.Request) {
	return func(i int, w http.ResponseWriter, _ *http.Request) {
		if i <= n {
			for j := 0; j < len(hdr); j += 2 {
				w.Header().Set(hdr[j], hdr[j+1])
			}
			w.WriteHeader(code)
			_, _ = w.Write(bytes.Repeat([]byte("x"), 1024))
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
}

func newClient(t *testing.T, cfg retry.Config, o retry.TransportOptions, base http.RoundTripper) *http.Client {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = newFakeClock()
	}
	tr, err := retry.NewTransport(mustNew(t, cfg), base, o)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

func TestTransportRetriesAndReplaysBody(t *testing.T) {
	p := newPartner(t, failFirst(2, 503))
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := newClient(t, retry.Config{}, retry.TransportOptions{}, base)
	req, _ := http.NewRequest(http.MethodPost, p.URL, strings.NewReader(`{"kg":25}`))
	req.Header.Set("Idempotency-Key", "order-17")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 200 || got != "ok" {
		t.Fatalf("response %d %q; want 200 ok", resp.StatusCode, got)
	}
	want := []seen{
		{"POST", "1", "order-17", `{"kg":25}`},
		{"POST", "2", "order-17", `{"kg":25}`},
		{"POST", "3", "order-17", `{"kg":25}`},
	}
	if got := p.seen(); !slices.Equal(got, want) {
		t.Errorf("partner saw %+v, want %+v", got, want)
	}
	if req.Header.Get(retry.DefaultAttemptHeader) != "" {
		t.Errorf("the caller's request was modified: %v", req.Header)
	}
}

func TestTransportGeneratesIdempotencyKey(t *testing.T) {
	p := newPartner(t, failFirst(1, 500))
	var mu sync.Mutex
	var keys []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		keys = append(keys, r.Header.Get("X-Request-Key"))
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})
	c := newClient(t, retry.Config{}, retry.TransportOptions{GenerateIdempotencyKey: true, IdempotencyKeyHeader: "x-request-key"}, base)
	req, _ := http.NewRequest(http.MethodPatch, p.URL, strings.NewReader("patch"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("X-Request-Key on the attempts = %q; want one generated key, sent twice", keys)
	}
	if got := p.seen(); len(got) != 2 || got[0].key != "" || got[1].body != "patch" {
		t.Errorf("partner saw %+v; want 2 PATCHes with the body and the key under the configured name only", got)
	}
	if len(req.Header) != 0 {
		t.Errorf("the caller's request was modified: %v", req.Header)
	}

	// A key the caller set is kept, not replaced.
	keys = nil
	req, _ = http.NewRequest(http.MethodPost, p.URL, strings.NewReader("post"))
	req.Header.Set("X-Request-Key", "mine")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if len(keys) != 1 || keys[0] != "mine" {
		t.Errorf("keys = %q, want [mine]", keys)
	}
}

func TestTransportKeyReusedOnEveryAttempt(t *testing.T) {
	var keys []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	c := newClient(t, retry.Config{}, retry.TransportOptions{GenerateIdempotencyKey: true}, nil)
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if len(keys) != 4 || keys[0] != keys[1] || keys[1] != keys[2] || keys[2] == keys[3] {
		t.Fatalf("keys = %q; want one key for the 3 attempts of the first call and another for the second", keys)
	}
	for _, k := range keys {
		if !uuid.MatchString(k) {
			t.Errorf("key %q is not a UUIDv4", k)
		}
	}
}

func TestTransportAttemptHeaderStyles(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("X-Attempt"))
		if len(got) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c := newClient(t, retry.Config{}, retry.TransportOptions{AttemptHeader: "x-attempt"}, nil)
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if want := []string{"1", "2", "3"}; !slices.Equal(got, want) {
		t.Errorf("attempt headers = %q, want %q", got, want)
	}

	// "-" sends no attempt header.
	p := newPartner(t, failFirst(0, 200))
	c = newClient(t, retry.Config{}, retry.TransportOptions{AttemptHeader: "-"}, nil)
	resp, err = c.Get(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if s := p.seen(); len(s) != 1 || s[0].attempt != "" {
		t.Errorf("partner saw %+v; want no attempt header", s)
	}
}

// Failed responses are drained and closed before the next attempt, so the
// connection is reused: 200 calls that each fail once make one connection.
func TestTransportDrainsSoConnectionsAreReused(t *testing.T) {
	var n atomic.Int64
	p := newPartner(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(bytes.Repeat([]byte("e"), 8<<10))
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := newClient(t, retry.Config{Budgets: noBudget}, retry.TransportOptions{}, base)
	const calls = 200
	for range calls {
		resp, err := c.Get(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("body %q", got)
		}
	}
	if got := len(p.seen()); got != 2*calls {
		t.Errorf("partner saw %d requests, want %d", got, 2*calls)
	}
	if got := p.conns.Load(); got != 1 {
		t.Errorf("partner accepted %d connections for %d sequential calls, want 1 (a failed body was not drained)", got, calls)
	}
}

func TestTransportGivesBackLastResponse(t *testing.T) {
	p := newPartner(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "busy")
	})
	c := newClient(t, retry.Config{}, retry.TransportOptions{}, nil)
	resp, err := c.Get(p.URL)
	if err != nil {
		t.Fatalf("Get = %v; want the last 503 with a nil error", err)
	}
	if resp.StatusCode != 503 || readAll(t, resp) != "busy" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("response %d %v; want the partner's 503 unchanged", resp.StatusCode, resp.Header)
	}
	if got := len(p.seen()); got != 3 {
		t.Errorf("partner saw %d requests, want 3", got)
	}
	// A 404 is not retried and is returned as is.
	p404 := newPartner(t, failFirst(10, 404))
	resp, err = c.Get(p404.URL)
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("Get = %v, %v; want the 404", resp, err)
	}
	if readAll(t, resp); len(p404.seen()) != 1 {
		t.Errorf("a 404 was sent %d times", len(p404.seen()))
	}
}

func TestTransportHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []string
		want time.Duration
	}{
		{"Retry-After seconds", []string{"Retry-After", "2"}, 2 * time.Second},
		{"x-amz-retry-after", []string{"X-Amz-Retry-After", "1500"}, 1500 * time.Millisecond},
		{"HTTP date", []string{"Retry-After", "@date+3s"}, 3 * time.Second},
		{"garbage", []string{"Retry-After", "soon"}, 0},
		{"negative", []string{"Retry-After", "-4"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			hdr := slices.Clone(tc.hdr)
			if hdr[1] == "@date+3s" {
				// HTTP dates have whole seconds: put the clock on one.
				clk.Set(clk.Now().Truncate(time.Second))
				hdr[1] = clk.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
			}
			p := newPartner(t, failFirst(1, 429, hdr...))
			c := newClient(t, retry.Config{Clock: clk, Rand: constRand(0)}, retry.TransportOptions{}, nil)
			resp, err := c.Get(p.URL)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{tc.want}) {
				t.Errorf("sleeps = %v, want [%v]", got, tc.want)
			}
		})
	}
}

func TestTransportHostileRetryAfterAgainstDeadline(t *testing.T) {
	p := newPartner(t, failFirst(10, 503, "Retry-After", "999999999"))
	clk := newFakeClock()
	c := newClient(t, retry.Config{Clock: clk}, retry.TransportOptions{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do = %v, %v; want the 503 at once", resp, err)
	}
	readAll(t, resp)
	if len(p.seen()) != 1 || len(clk.Sleeps()) != 0 {
		t.Errorf("%d requests, sleeps %v; want 1 request and no wait", len(p.seen()), clk.Sleeps())
	}
}

// A Retry-After the executor would honour (10 s is under MaxRetryAfter) but
// that does not fit the caller's 5 s deadline ends the call at once with the
// partner's answer, without sleeping: the deadline check, not the
// MaxRetryAfter cap, decides.
func TestTransportRetryAfterPastDeadline(t *testing.T) {
	p := newPartner(t, failFirst(10, 503, "Retry-After", "10"))
	clk := newFakeClock()
	var gaveUp []*retry.GiveUpError
	c := newClient(t, retry.Config{Clock: clk, OnGiveUp: func(ev *retry.GiveUpError) { gaveUp = append(gaveUp, ev) }},
		retry.TransportOptions{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do = %v, %v; want the 503 at once", resp, err)
	}
	readAll(t, resp)
	if len(p.seen()) != 1 || len(clk.Sleeps()) != 0 {
		t.Errorf("%d requests, sleeps %v; want 1 request and no wait", len(p.seen()), clk.Sleeps())
	}
	if len(gaveUp) != 1 || gaveUp[0].Reason != retry.DeadlineTooClose {
		t.Errorf("give-ups %+v; want one with Reason DeadlineTooClose", gaveUp)
	}
}

// hangUp closes the connection after reading the request: the partner may
// have acted on it, but no response comes.
func hangUp(_ int, w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestTransportPostWithoutKeyNotRetriedAfterReset(t *testing.T) {
	p := newPartner(t, hangUp)
	br := mustBreaker(t)
	c := newClient(t, retry.Config{Breaker: br, Budgets: noBudget}, retry.TransportOptions{}, nil)
	_, err := c.Post(p.URL, "text/plain", strings.NewReader("charge 10 EUR"))
	if err == nil {
		t.Fatal("Post succeeded against a partner that hangs up")
	}
	if got := len(p.seen()); got != 1 {
		t.Errorf("partner saw %d requests, want 1: a POST without key must not be repeated", got)
	}
	if counts := br.Counts(); counts.Failures != 1 {
		t.Errorf("breaker counts = %+v; want the hang-up counted as a failure", counts)
	}

	// The same with a key, or a GET, is retried.
	p2 := newPartner(t, hangUp)
	req, _ := http.NewRequest(http.MethodPost, p2.URL, strings.NewReader("charge 10 EUR"))
	req.Header.Set("Idempotency-Key", "charge-1")
	_, _ = c.Do(req)
	p3 := newPartner(t, hangUp)
	_, _ = c.Get(p3.URL)
	if len(p2.seen()) != 3 || len(p3.seen()) != 3 {
		t.Errorf("partner saw %d keyed POSTs and %d GETs, want 3 each", len(p2.seen()), len(p3.seen()))
	}
}

func TestTransportPostWithoutKeyNotRetriedAfter503(t *testing.T) {
	p := newPartner(t, failFirst(10, 503))
	c := newClient(t, retry.Config{}, retry.TransportOptions{}, nil)
	resp, err := c.Post(p.URL, "text/plain", strings.NewReader("charge"))
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Post = %v, %v; want the 503", resp, err)
	}
	readAll(t, resp)
	if got := len(p.seen()); got != 1 {
		t.Errorf("partner saw %d requests, want 1", got)
	}
}

func TestTransportPostWithoutKeyRetriedWhenNeverSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	var attempts []int
	c := newClient(t, retry.Config{OnRetry: func(ev retry.RetryEvent) { attempts = append(attempts, ev.Attempt) }}, retry.TransportOptions{}, nil)
	_, err = c.Post("http://"+addr, "text/plain", strings.NewReader("charge"))
	if err == nil {
		t.Fatal("Post succeeded with nothing listening")
	}
	if !slices.Equal(attempts, []int{1, 2}) {
		t.Errorf("retried after attempts %v, want [1 2]: a refused dial never reached the partner", attempts)
	}
}

// closeTracker is a body that records its Close and counts the bytes
// read from it.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
	read   atomic.Int64
}

func (c *closeTracker) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

func TestTransportBodyWithoutGetBodyIsSentOnce(t *testing.T) {
	p := newPartner(t, failFirst(10, 503))
	c := newClient(t, retry.Config{}, retry.TransportOptions{}, nil)
	body := &closeTracker{Reader: strings.NewReader("stream")}
	req, _ := http.NewRequest(http.MethodPut, p.URL, body) // no GetBody for a custom reader
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do = %v, %v; want the 503", resp, err)
	}
	readAll(t, resp)
	if got := len(p.seen()); got != 1 {
		t.Errorf("partner saw %d requests, want 1: the body cannot be replayed", got)
	}
}

// trackingTransport wraps response bodies to record whether they were
// closed, and counts round trips.
type trackingTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*closeTracker
	ctxs   []context.Context
}

func (tt *trackingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := tt.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ct := &closeTracker{Reader: bytes.NewReader(b)}
	resp.Body = ct
	tt.mu.Lock()
	tt.bodies = append(tt.bodies, ct)
	tt.ctxs = append(tt.ctxs, r.Context())
	tt.mu.Unlock()
	return resp, nil
}

func TestTransportRefusalsCloseTheResponse(t *testing.T) {
	// A refused retry after the partner answered returns that answer, as
	// Do's *GiveUpError carries it; OnGiveUp sees the refusal.
	for _, tc := range []struct {
		name  string
		cfg   func(*retry.Config) *breaker.Breaker
		want  retry.Reason
		bytes int
	}{
		{"budget", func(c *retry.Config) *breaker.Breaker {
			c.Budgets = []budget.Budget{&fakeBudget{refuse: &budget.ExhaustedError{Budget: "local"}}}
			return nil
		}, retry.BudgetExhausted, 1024},
		{"breaker rejects a retry", func(c *retry.Config) *breaker.Breaker {
			c.Breaker = mustBreaker(t)
			return c.Breaker
		}, retry.BreakerOpen, 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg retry.Config
			br := tc.cfg(&cfg)
			var gaveUp []retry.Reason
			cfg.OnGiveUp = func(gu *retry.GiveUpError) { gaveUp = append(gaveUp, gu.Reason) }
			p := newPartner(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if br != nil {
					br.Override(breaker.ForcedOpen) // the fleet's breaker opens while the partner answers 503
				}
				failFirst(10, 503)(n, w, r)
			})
			tt := &trackingTransport{base: http.DefaultTransport}
			c := newClient(t, cfg, retry.TransportOptions{}, tt)
			resp, err := c.Get(p.URL)
			if err != nil || resp == nil || resp.StatusCode != 503 {
				t.Fatalf("Get = %v, %v; want the partner's 503", resp, err)
			}
			if got := readAll(t, resp); len(got) != tc.bytes {
				t.Errorf("body of %d bytes, want the partner's %d", len(got), tc.bytes)
			}
			if len(tt.bodies) != 1 || !tt.bodies[0].closed.Load() {
				t.Errorf("%d responses, the 503's body closed: %v", len(tt.bodies), len(tt.bodies) == 1 && tt.bodies[0].closed.Load())
			}
			if !slices.Equal(gaveUp, []retry.Reason{tc.want}) {
				t.Errorf("OnGiveUp saw %v, want [%v]", gaveUp, tc.want)
			}
		})
	}
	t.Run("breaker rejects the first attempt", func(t *testing.T) {
		br := mustBreaker(t)
		br.Override(breaker.ForcedOpen)
		c := newClient(t, retry.Config{Breaker: br}, retry.TransportOptions{}, nil)
		body := &closeTracker{Reader: strings.NewReader("x")}
		req, _ := http.NewRequest(http.MethodPut, "http://127.0.0.1:1", body)
		_, err := c.Do(req)
		var oe *breaker.OpenError
		if !errors.As(err, &oe) {
			t.Fatalf("Do = %v; want *breaker.OpenError", err)
		}
		if !body.closed.Load() {
			t.Errorf("the request body was not closed")
		}
	})
	t.Run("context ends during the wait", func(t *testing.T) {
		p := newPartner(t, failFirst(10, 503))
		tt := &trackingTransport{base: http.DefaultTransport}
		clk := newFakeClock()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clk.OnSleep = cancel
		c := newClient(t, retry.Config{Clock: clk}, retry.TransportOptions{}, tt)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
		resp, err := c.Do(req)
		if !errors.Is(err, context.Canceled) || resp != nil {
			t.Fatalf("Do = %v, %v; want context.Canceled", resp, err)
		}
		if len(tt.bodies) != 1 || !tt.bodies[0].closed.Load() {
			t.Errorf("the 503's body was not closed")
		}
	})
}

// TestTransportAttemptTimeout runs in a synctest bubble over an in-memory
// network (internal/pipenet), so the 20 ms AttemptTimeout is exact: the first
// attempt hangs past it, the second answers in no time at all, whatever
// the machine's load.
func TestTransportAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release) // before the server closes, which waits for the handlers
		var n atomic.Int64
		var firstGaveUp atomic.Int64 // bubble time since the start at which the server saw the first attempt go
		start := time.Now()
		base, stop := pipenet.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the client hanging up
			if n.Add(1) == 1 {
				select { // slower than the attempt timeout
				case <-r.Context().Done():
					firstGaveUp.Store(int64(time.Since(start)))
				case <-release:
				}
				return
			}
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(stop)
		tt := &trackingTransport{base: base}
		c := newClient(t, retry.Config{AttemptTimeout: 20 * time.Millisecond}, retry.TransportOptions{}, tt)
		resp, err := c.Get(pipenet.URL)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "ok" || n.Load() != 2 {
			t.Fatalf("body %q after %d requests; want ok after 2", got, n.Load())
		}
		// Fake time: the call took the timed-out attempt's 20 ms, no more
		// (the backoff waits are on the test's fake clock).
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Errorf("the call took %v of the bubble's time; want exactly the 20ms attempt timeout", took)
		}
		synctest.Wait() // the server has noticed the first attempt go
		if gone := time.Duration(firstGaveUp.Load()); gone != 20*time.Millisecond {
			t.Errorf("the partner saw the first attempt go after %v; want when its 20ms timeout ended it", gone)
		}
		// The successful attempt's context lives until the body is closed.
		if len(tt.ctxs) != 1 || tt.ctxs[0].Err() == nil {
			t.Errorf("the attempt context was not released when the body was closed")
		}

		// Not idempotent: a POST without key that timed out is not repeated.
		n.Store(0)
		_, err = c.Post(pipenet.URL, "text/plain", strings.NewReader("x"))
		if !errors.Is(err, context.DeadlineExceeded) || n.Load() != 1 || !strings.Contains(err.Error(), "attempt timed out after 20ms") {
			t.Errorf("Post = %v after %d requests; want an attempt timeout after 1", err, n.Load())
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("the attempt timeout %v is not a net.Error timeout", err)
		}
	})
}

func TestTransportBodyOutlivesAttemptContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "payload")
	}))
	defer srv.Close()
	var attemptCtx context.Context
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		attemptCtx = r.Context()
		return http.DefaultTransport.RoundTrip(r)
	})
	c := newClient(t, retry.Config{AttemptTimeout: time.Hour}, retry.TransportOptions{}, base)
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if attemptCtx.Err() != nil {
		t.Fatalf("attempt context ended before the body was read: %v", attemptCtx.Err())
	}
	if got := readAll(t, resp); got != "payload" {
		t.Errorf("body %q", got)
	}
	if attemptCtx.Err() == nil {
		t.Errorf("attempt context still alive after Close")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNewTransportValidates(t *testing.T) {
	e := mustNew(t, retry.Config{})
	for _, tc := range []struct {
		name string
		e    *retry.Executor
		o    retry.TransportOptions
		want string
	}{
		{"nil executor", nil, retry.TransportOptions{}, "retry.NewTransport e"},
		{"bad attempt header", e, retry.TransportOptions{AttemptHeader: "X Attempt"}, "retry.TransportOptions.AttemptHeader"},
		{"bad key header", e, retry.TransportOptions{IdempotencyKeyHeader: "Key:"}, "retry.TransportOptions.IdempotencyKeyHeader"},
		{"negative drain", e, retry.TransportOptions{DrainLimit: -1}, "retry.TransportOptions.DrainLimit"},
	} {
		_, err := retry.NewTransport(tc.e, nil, tc.o)
		var ce *herdguard.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.want || !strings.HasPrefix(err.Error(), "herdguard: "+tc.want+" ") {
			t.Errorf("%s: NewTransport error = %v; want a *herdguard.ConfigError naming %s", tc.name, err, tc.want)
		}
	}
}

// TestTransportLeaksNoGoroutines runs in a synctest bubble over an
// in-memory network, so that the 50 ms AttemptTimeout fires on the slow
// answers only, never on a fast one a loaded machine happened to delay;
// leakcheck then checks, outside the bubble, that nothing was left behind
// (the bubble itself would fail the test if a goroutine of it were left
// blocked).
func TestTransportLeaksNoGoroutines(t *testing.T) {
	leakcheck.Check(t)
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		base, stop := pipenet.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			switch n.Add(1) % 4 {
			case 1: // slower than the attempt timeout
				<-r.Context().Done()
			case 2:
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write(bytes.Repeat([]byte("z"), 100<<10)) // above the drain limit
			default:
				_, _ = io.WriteString(w, "ok")
			}
		}))
		t.Cleanup(stop)
		c := newClient(t, retry.Config{AttemptTimeout: 50 * time.Millisecond, MaxAttempts: 4, Budgets: noBudget}, retry.TransportOptions{}, base)
		defer c.CloseIdleConnections() // through Transport to its base
		for range 20 {
			resp, err := c.Get(pipenet.URL)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
	})
}

type idleCloser struct {
	roundTripFunc
	closed int
}

func (c *idleCloser) CloseIdleConnections() { c.closed++ }

func TestTransportForwardsCloseIdleConnections(t *testing.T) {
	base := &idleCloser{roundTripFunc: http.DefaultTransport.RoundTrip}
	c := newClient(t, retry.Config{}, retry.TransportOptions{}, base)
	c.CloseIdleConnections()
	if base.closed != 1 {
		t.Errorf("base CloseIdleConnections called %d times, want 1", base.closed)
	}
	// A base without the method is fine too.
	newClient(t, retry.Config{}, retry.TransportOptions{}, roundTripFunc(http.DefaultTransport.RoundTrip)).CloseIdleConnections()
}
