package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// The partner fault tests need no DynamoDB: a loopback partner
// (httptest), a retry.Transport in front of it, and the partner's own count
// of what reached it. They run under -short too.

// relPartnerServer is a loopback partner that counts connections and
// requests as the server sees them.
type relPartnerServer struct {
	srv      *httptest.Server
	newConns atomic.Int64 // connections accepted (http.StateNew)
	arrivals atomic.Int64 // requests read in full, body included
	keys     sync.Map     // Idempotency-Key -> *atomic.Int64 arrivals
	handler  atomic.Pointer[http.HandlerFunc]
}

func newRelPartnerServer(t *testing.T, h http.HandlerFunc) *relPartnerServer {
	t.Helper()
	p := &relPartnerServer{}
	p.handler.Store(&h)
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // the request did not arrive in full
		}
		p.arrivals.Add(1)
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			n, _ := p.keys.LoadOrStore(k, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
		(*p.handler.Load())(w, r)
	}))
	p.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.newConns.Add(1)
		}
	}
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// relTransport returns a retry.Transport over a base transport of its own
// (closed when the test ends), with e's settings.
func relTransport(t *testing.T, cfg retry.Config, base *http.Transport) *http.Client {
	t.Helper()
	if base == nil {
		base = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}
	}
	t.Cleanup(base.CloseIdleConnections)
	if cfg.Budgets == nil {
		// These tests count attempts: no budget unless the test gives one,
		// not the Executor's default local ratio.
		cfg.Budgets = []budget.Budget{}
	}
	e, err := retry.New(cfg)
	if err != nil {
		t.Fatalf("retry.New: %v", err)
	}
	tr, err := retry.NewTransport(e, base, retry.TransportOptions{})
	if err != nil {
		t.Fatalf("retry.NewTransport: %v", err)
	}
	return &http.Client{Transport: tr}
}

// relHTTPCall makes one request with a deadline, reads and closes the
// response, and reports how long it took.
func relHTTPCall(c *http.Client, method, url string, body []byte, hdr http.Header, deadline time.Duration) (status int, elapsed time.Duration, err error) {
	return relHTTPCallCtx(context.Background(), c, method, url, body, hdr, deadline)
}

// relHTTPCallCtx is relHTTPCall under parent (which may carry an
// httptrace.ClientTrace).
func relHTTPCallCtx(parent context.Context, c *http.Client, method, url string, body []byte, hdr http.Header, deadline time.Duration) (status int, elapsed time.Duration, err error) {
	ctx, cancel := context.WithTimeout(parent, deadline)
	defer cancel()
	start := time.Now()
	var rb io.Reader
	if body != nil {
		rb = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rb)
	if err != nil {
		return 0, 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status = resp.StatusCode
	}
	return status, time.Since(start), err
}

// relArrivalWait bounds the wait for the partner's own count of what
// reached it to catch up with what the client sent: the server's
// goroutines read a request (or accept a connection) when the machine
// gets round to it, possibly after the client has given up on it. Far
// beyond any scheduling delay; a request never sent never arrives.
const relArrivalWait = 5 * time.Second

// relSleepCtx waits for d or until ctx ends.
func relSleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// TestReliabilityPartnerSlow: a partner slower than the per-attempt
// timeout. Idempotent calls (GET, and POST with an Idempotency-Key) make
// MaxAttempts attempts of AttemptTimeout each and give up; a POST without a
// key, which may have reached the partner, makes one; a deadline shorter
// than the attempts cuts the call at the deadline. Attempts are counted
// where herdguard makes them (OnRetry), and every request the transport
// wrote (httptrace) must reach the partner, none more: on a loaded machine
// an attempt can time out before its request was even written, which is
// the machine's doing, so the partner's count is held to what was written.
// Every call ends by MaxAttempts × (AttemptTimeout + MaxDelay) or its
// deadline, plus relOverrunBound (50 ms; 150 ms under the race detector),
// judged over all the test's calls as relOverruns does (less the machine's
// stalls during each call; relOverrunShare of them, at least one, may
// exceed it, none relOverrunCeiling).
func TestReliabilityPartnerSlow(t *testing.T) {
	relNoLeaks(t)
	const (
		attemptTimeout = 40 * time.Millisecond
		maxDelay       = 20 * time.Millisecond
		maxAttempts    = 3
		slow           = 2 * time.Second // far beyond any attempt; the handler ends when the client goes
		calls          = 10
	)
	p := newRelPartnerServer(t, func(w http.ResponseWriter, r *http.Request) {
		relSleepCtx(r.Context(), slow)
	})
	var retries, written atomic.Int64
	c := relTransport(t, retry.Config{
		MaxAttempts: maxAttempts, AttemptTimeout: attemptTimeout, TransientBase: 5 * time.Millisecond, MaxDelay: maxDelay,
		OnRetry: func(retry.RetryEvent) { retries.Add(1) },
	}, nil)
	traced := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				written.Add(1)
			}
		},
	})
	bound := maxAttempts*(attemptTimeout+maxDelay) + relOverrunBound

	cases := []struct {
		name         string
		method       string
		hdr          http.Header
		deadline     time.Duration
		wantAttempts int64 // per call
		wantBound    time.Duration
	}{
		{"GET", http.MethodGet, nil, time.Second, maxAttempts, bound},
		{"POST with key", http.MethodPost, http.Header{"Idempotency-Key": {"k"}}, time.Second, maxAttempts, bound},
		{"POST without key", http.MethodPost, nil, time.Second, 1, attemptTimeout + relOverrunBound},
		// The deadline leaves room for one attempt only: the executor does
		// not start a retry it cannot finish (DeadlineMargin 100 ms).
		{"GET, 60ms deadline", http.MethodGet, nil, 60 * time.Millisecond, 1, 60*time.Millisecond + relOverrunBound},
	}
	var overruns relOverruns
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a0, r0, w0 := p.arrivals.Load(), retries.Load(), written.Load()
			var worst time.Duration
			for i := range calls {
				hdr := tc.hdr.Clone()
				if hdr != nil {
					hdr.Set("Idempotency-Key", fmt.Sprintf("slow-%s-%d", tc.name, i))
				}
				status, took, err := relHTTPCallCtx(traced, c, tc.method, p.srv.URL, []byte("payload"), hdr, tc.deadline)
				if err == nil {
					t.Fatalf("call %d: status %d, no error; want a timeout", i, status)
				}
				worst = max(worst, took)
				overruns.addCall(relCall{start: time.Now().Add(-took), deadline: tc.wantBound - relOverrunBound, elapsed: took, err: err})
			}
			if n := calls + retries.Load() - r0; n != tc.wantAttempts*calls {
				t.Errorf("herdguard made %d attempts for %d calls; want %d each", n, calls, tc.wantAttempts)
			}
			// The server counts a request once its body is read, and the
			// transport a written one once its goroutine has written it:
			// on a loaded machine either may come after the client gave
			// up. relArrivalWait bounds the wait for them to agree.
			var arr, wr int64
			eventually(t, relArrivalWait, 5*time.Millisecond, func() error {
				if arr, wr = p.arrivals.Load()-a0, written.Load()-w0; arr != wr || wr > tc.wantAttempts*calls {
					return fmt.Errorf("partner saw %d requests; %d were written, for %d calls of at most %d attempts", arr, wr, calls, tc.wantAttempts)
				}
				return nil
			})
			t.Logf("%s against a partner slower than AttemptTimeout %v: %d calls, %d requests written, %d arrivals, worst call %v (bound %v, of which relOverrunBound %v; race detector: %v)",
				tc.name, attemptTimeout, calls, wr, arr, worst.Round(time.Millisecond), tc.wantBound, relOverrunBound, relRaceEnabled)
		})
	}
	overruns.check(t, "calls past MaxAttempts × (AttemptTimeout + MaxDelay) or their deadline")
}

// relResetListener accepts connections and resets each one at once,
// before reading anything.
type relResetListener struct {
	ln      net.Listener
	accepts atomic.Int64
}

func newRelResetListener(t *testing.T) *relResetListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &relResetListener{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepts.Add(1)
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return l
}

// TestReliabilityPartnerResets: connections broken before and after the
// request was written. A POST without an Idempotency-Key is retried only
// when the failure proves the request never left (a refused dial); once it
// may have reached the partner (reset after it was written, or reset by a
// partner that accepted the connection) it is never sent again, which the
// partner's own count of arrivals proves. With a key, or for a GET, it is
// retried.
func TestReliabilityPartnerResets(t *testing.T) {
	relNoLeaks(t)
	const (
		maxAttempts = 3
		calls       = 20
	)
	cfg := retry.Config{MaxAttempts: maxAttempts, TransientBase: time.Millisecond, MaxDelay: 5 * time.Millisecond}

	t.Run("refused dial, then the partner", func(t *testing.T) {
		p := newRelPartnerServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
		dead := relRefusingAddr(t)
		var dials atomic.Int64
		base := &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true, // every attempt dials
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1)%2 == 1 {
					addr = dead // the first attempt of every call meets a closed port
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		}
		c := relTransport(t, cfg, base)
		for i := range calls {
			status, _, err := relHTTPCall(c, http.MethodPost, p.srv.URL, []byte("order"), nil, time.Second)
			if err != nil || status != 200 {
				t.Fatalf("call %d: %d, %v; want 200 after a retry (a refused dial proves the POST never left)", i, status, err)
			}
		}
		if a := p.arrivals.Load(); a != calls {
			t.Errorf("partner saw %d POSTs for %d calls; want exactly one each", a, calls)
		}
		t.Logf("POST without key, first dial refused: %d calls, %d dials, %d arrivals: retried, and never twice at the partner", calls, dials.Load(), p.arrivals.Load())
	})

	t.Run("reset on accept", func(t *testing.T) {
		l := newRelResetListener(t)
		// A reset that lands while connect() is still returning fails the
		// dial: the request provably never left and may be retried. Any
		// other failure of a POST without a key may follow a written
		// request and must not be.
		var retries, afterDial atomic.Int64
		c2 := cfg
		c2.OnRetry = func(ev retry.RetryEvent) {
			retries.Add(1)
			var oe *net.OpError
			if errors.As(ev.Err, &oe) && oe.Op == "dial" {
				afterDial.Add(1)
			}
		}
		c := relTransport(t, c2, nil)
		url := "http://" + l.ln.Addr().String()
		for _, tc := range []struct {
			name   string
			method string
			hdr    http.Header
			want   int64 // herdguard attempts per call, dial failures aside
		}{
			{"POST without key", http.MethodPost, nil, 1},
			{"POST with key", http.MethodPost, http.Header{"Idempotency-Key": {"k-accept"}}, maxAttempts},
			{"GET", http.MethodGet, nil, maxAttempts},
		} {
			a0, r0, d0 := l.accepts.Load(), retries.Load(), afterDial.Load()
			for i := range calls {
				if _, _, err := relHTTPCall(c, tc.method, url, []byte("order"), tc.hdr, time.Second); err == nil {
					t.Fatalf("%s call %d: no error from a partner that resets every connection", tc.name, i)
				}
			}
			r, d := retries.Load()-r0, afterDial.Load()-d0
			// The listener's goroutine counts a connection when it gets
			// round to accepting it, which on a loaded machine can be after
			// the client saw the reset: wait for the fewest the calls made,
			// for at most relArrivalWait.
			lo := calls + r
			var got int64
			eventually(t, relArrivalWait, 5*time.Millisecond, func() error {
				if got = l.accepts.Load() - a0; got < lo {
					return fmt.Errorf("%s: %d connections accepted for %d calls and %d retries", tc.name, got, calls, r)
				}
				return nil
			})
			switch {
			case tc.want == 1 && r != d:
				t.Errorf("%s: herdguard retried %d times, only %d of them after a failed dial: it retried a request that may have been written", tc.name, r, d)
			case tc.want > 1 && r != (tc.want-1)*calls:
				t.Errorf("%s: herdguard retried %d times for %d calls; want %d each", tc.name, r, calls, tc.want-1)
			}
			// One connection per attempt; net/http may add one of its own:
			// it replays a request on a fresh connection when a pooled one
			// turns out dead before anything was written.
			if hi := 2 * (calls + r); got < lo || got > hi {
				t.Errorf("%s: %d connections for %d calls; want %d to %d", tc.name, got, calls, lo, hi)
			}
			t.Logf("%s, partner resets on accept: %d calls, %d herdguard retries (%d after a failed dial), %d connections", tc.name, calls, r, d, got)
		}
	})

	t.Run("reset after the request was written", func(t *testing.T) {
		p := newRelPartnerServer(t, func(w http.ResponseWriter, r *http.Request) {
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		})
		c := relTransport(t, cfg, nil)
		for _, tc := range []struct {
			name   string
			method string
			key    bool
			want   int64 // arrivals per call
		}{
			{"POST without key", http.MethodPost, false, 1},
			{"POST with key", http.MethodPost, true, maxAttempts},
			{"GET", http.MethodGet, false, maxAttempts},
		} {
			a0 := p.arrivals.Load()
			for i := range calls {
				var hdr http.Header
				key := fmt.Sprintf("reset-%s-%d", tc.name, i)
				if tc.key {
					hdr = http.Header{"Idempotency-Key": {key}}
				}
				if _, _, err := relHTTPCall(c, tc.method, p.srv.URL, []byte("order"), hdr, time.Second); err == nil {
					t.Fatalf("%s call %d: no error from a partner that resets after reading", tc.name, i)
				}
				if tc.key {
					n, ok := p.keys.Load(key)
					if !ok || n.(*atomic.Int64).Load() != tc.want {
						t.Errorf("%s call %d: the partner saw its key %v times; want %d, the same key on every attempt", tc.name, i, n, tc.want)
					}
				}
			}
			if got := p.arrivals.Load() - a0; got != tc.want*calls {
				t.Errorf("%s: the partner read %d requests for %d calls; want %d each", tc.name, got, calls, tc.want)
			}
			t.Logf("%s, partner resets after reading the request: %d calls, %d arrivals at the partner", tc.name, calls, p.arrivals.Load()-a0)
		}
	})
}

// TestReliabilityPartnerDrain makes 10,000 calls through a Transport against
// a partner whose failures carry bodies, on the three paths where herdguard
// handles a failed response: drained and closed before a retry, and handed
// back to the caller when the executor gives up, a budget's refusal of the
// retry included. If a body were left unread or open, the connection
// could not go back to the pool and the partner would see a new connection
// for (nearly) every call; it may see no more than the workers' pool, and
// no goroutine may be left over.
func TestReliabilityPartnerDrain(t *testing.T) {
	relNoLeaks(t)
	const (
		calls    = 10_000
		workers  = 8
		bodySize = 4 << 10 // well under the drain limit (64 KiB)
	)
	failBody := strings.Repeat("x", bodySize)
	p := newRelPartnerServer(t, func(w http.ResponseWriter, r *http.Request) {
		attempt, _ := strconv.Atoi(r.Header.Get(retry.DefaultAttemptHeader))
		switch r.URL.Query().Get("path") {
		case "retry": // fails once, then succeeds
			if attempt == 1 {
				http.Error(w, failBody, http.StatusServiceUnavailable)
				return
			}
		case "refused", "exhausted": // fails every time
			http.Error(w, failBody, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	// The "refused" path's budget: floor-only local ratio that refuses
	// nearly every retry.
	refusing, err := local.NewRatio(local.RatioConfig{Ratio: 1e-6, MinRetries: 1, Window: time.Hour, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers}
	normal := relTransport(t, retry.Config{MaxAttempts: 2, TransientBase: 100 * time.Microsecond, MaxDelay: time.Millisecond}, base)
	// A refused retry hands the caller the partner's 503 (as when the
	// attempts are used up); the refusals are counted from OnGiveUp.
	var refused atomic.Int64
	limited := relTransport(t, retry.Config{MaxAttempts: 2, TransientBase: 100 * time.Microsecond, MaxDelay: time.Millisecond, Budgets: []budget.Budget{refusing},
		OnGiveUp: func(gu *retry.GiveUpError) {
			if gu.Reason == retry.BudgetExhausted {
				refused.Add(1)
			}
		}}, base)
	g0 := runtime.NumGoroutine()

	var (
		next                 atomic.Int64
		wg                   sync.WaitGroup
		ok, gaveUp           atomic.Int64
		firstErr             atomic.Pointer[error]
		worst                atomic.Int64
		start                = time.Now()
		pathNames            = [...]string{"retry", "refused", "exhausted"}
		unexpectedStatusSeen atomic.Int64
	)
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= calls {
					return
				}
				path := pathNames[i%3]
				c := normal
				if path == "refused" {
					c = limited
				}
				status, took, err := relHTTPCall(c, http.MethodGet, p.srv.URL+"/?path="+path, nil, nil, 5*time.Second)
				if d := int64(took); d > worst.Load() {
					worst.Store(d)
				}
				switch {
				case path == "retry" && err == nil && status == 200:
					ok.Add(1)
				case path == "refused" && err == nil && status == 503:
					gaveUp.Add(1) // the retry refused, or the floor's one retry used up
				case path == "exhausted" && err == nil && status == 503:
					gaveUp.Add(1)
				default:
					unexpectedStatusSeen.Add(1)
					e := fmt.Errorf("path %s: status %d, err %v", path, status, err)
					firstErr.CompareAndSwap(nil, &e)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := unexpectedStatusSeen.Load(); n > 0 {
		t.Errorf("%d calls ended unexpectedly; first: %v", n, *firstErr.Load())
	}
	if refused.Load() == 0 {
		t.Error("the budget refused no retry: the refusal path was not exercised")
	}
	conns := p.newConns.Load()
	// Two clients share one pool of `workers` idle connections per host;
	// a connection may be replaced when the pool is momentarily full.
	if limit := int64(4 * workers); conns > limit {
		t.Errorf("the partner accepted %d connections for %d calls (%d requests); want at most %d: failed responses are not drained and closed", conns, calls, p.arrivals.Load(), limit)
	}
	base.CloseIdleConnections()
	p.srv.CloseClientConnections()
	// Goroutines come back to where they were (relNoLeaks checks that none
	// is left at all once the server is closed).
	var g1 int
	for range 100 {
		if g1 = runtime.NumGoroutine(); g1 <= g0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g1 > g0 {
		t.Errorf("goroutines: %d before the calls, %d after closing idle connections", g0, g1)
	}
	t.Logf("%d calls (%d requests at the partner) in %v = %.0f calls/s with %d workers: %d succeeded after a drained retry, %d refused by the budget, %d gave up with the 503 handed back; the partner accepted %d connections; worst call %v; goroutines %d before, %d after",
		calls, p.arrivals.Load(), elapsed.Round(time.Millisecond), calls/elapsed.Seconds(), workers, ok.Load(), refused.Load(), gaveUp.Load(), conns,
		time.Duration(worst.Load()).Round(time.Microsecond), g0, g1)
}

// TestReliabilityPartnerRetryAfter sends hostile and broken Retry-After
// values with 503 and 429 answers: huge, negative, in the past, in the year
// 9999, garbage, overflowing, in both Retry-After and x-amz-retry-after.
// Every call must end by its deadline plus relOverrunBound (judged over all
// its calls as relOverruns does), make at most MaxAttempts attempts, and a
// huge value must end the call at once with the partner's answer (not park
// it).
func TestReliabilityPartnerRetryAfter(t *testing.T) {
	relNoLeaks(t)
	const (
		deadline    = 400 * time.Millisecond
		maxAttempts = 3
	)
	values := []struct {
		header, value string
		huge          bool // beyond MaxRetryAfter: give up at once
	}{
		{"Retry-After", "999999999", true},
		{"Retry-After", "99999999999999999999999999", true}, // beyond int64: clamped, not wrapped
		{"Retry-After", "-5", false},
		{"Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT", false},
		{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT", true},
		{"Retry-After", "soon", false},
		{"Retry-After", "1.5", false},
		{"Retry-After", "", false},
		{"Retry-After", "0", false},
		{"Retry-After", "120", true},
		{"X-Amz-Retry-After", "-1", false},
		{"X-Amz-Retry-After", "18446744073709551616", true}, // beyond uint64: clamped
		{"X-Amz-Retry-After", "86400000", true},
		{"X-Amz-Retry-After", "garbage", false},
	}
	var current atomic.Pointer[[2]string]
	var status atomic.Int64
	p := newRelPartnerServer(t, func(w http.ResponseWriter, r *http.Request) {
		h := current.Load()
		w.Header()[h[0]] = []string{h[1]}
		w.WriteHeader(int(status.Load()))
	})
	c := relTransport(t, retry.Config{MaxAttempts: maxAttempts, TransientBase: 5 * time.Millisecond, MaxRetryAfter: 2 * time.Second}, nil)
	var worst time.Duration
	var overruns relOverruns
	for _, code := range []int{503, 429} {
		for _, v := range values {
			current.Store(&[2]string{v.header, v.value})
			status.Store(int64(code))
			a0 := p.arrivals.Load()
			st, took, err := relHTTPCall(c, http.MethodGet, p.srv.URL, nil, nil, deadline)
			arr := p.arrivals.Load() - a0
			worst = max(worst, took)
			overruns.addCall(relCall{start: time.Now().Add(-took), deadline: deadline, elapsed: took, attempts: int(arr), err: err})
			if arr < 1 || arr > maxAttempts {
				t.Errorf("%d with %s: %q: %d attempts reached the partner; want 1 to %d", code, v.header, v.value, arr, maxAttempts)
			}
			if v.huge && (arr != 1 || err != nil || st != code) {
				t.Errorf("%d with %s: %q: %d attempts, status %d, %v; want the partner's %d after one attempt", code, v.header, v.value, arr, st, err, code)
			}
			t.Logf("%d with %s: %-31q -> %d attempt(s), status %d, err %v, %v", code, v.header, v.value, arr, st, err, took.Round(time.Millisecond))
		}
	}
	t.Logf("hostile Retry-After values: every call ended within %v (deadline %v, bound %v; race detector: %v)", worst.Round(time.Millisecond), deadline, deadline+relOverrunBound, relRaceEnabled)
	overruns.check(t, "hostile Retry-After values")
}
