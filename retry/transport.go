package retry

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/internal/hint"
)

// DefaultAttemptHeader is the header a Transport sends the attempt number
// in ("1", "2", ...) unless TransportOptions.AttemptHeader names another.
const DefaultAttemptHeader = "X-Herdguard-Attempt"

// Defaults of TransportOptions.
const (
	// defaultIdempotencyKeyHeader is the header whose presence makes a
	// POST or PATCH retryable (the IETF httpapi draft's name, which
	// net/http also honours for its own replays).
	defaultIdempotencyKeyHeader = "Idempotency-Key"
	// defaultDrainLimit is how much of a failed response's body is read
	// before closing it, so the connection can be reused.
	defaultDrainLimit = 64 << 10
)

// TransportOptions configures a Transport. The zero value means the
// defaults.
type TransportOptions struct {
	// AttemptHeader names the header carrying the attempt number, "1" for
	// the first attempt (default DefaultAttemptHeader). "-" sends none.
	AttemptHeader string
	// IdempotencyKeyHeader names the idempotency-key header (default
	// "Idempotency-Key", the IETF httpapi draft's name, which net/http also
	// honours for its own replays).
	IdempotencyKeyHeader string
	// GenerateIdempotencyKey gives a request whose method is not idempotent
	// (POST, PATCH, ...) and that has no key a random one (UUID version 4
	// from crypto/rand), sent unchanged on every attempt, which makes it
	// retryable. The caller's request is not modified.
	GenerateIdempotencyKey bool
	// DrainLimit is how many bytes of a retried response's body are read
	// before it is closed, so that its connection can be reused (default
	// 64 KiB); they are kept in memory during the backoff wait. A longer
	// body is closed without draining further (the connection is then
	// dropped), and its response cannot be returned after the wait.
	DrainLimit int64
}

// Transport is an http.RoundTripper that sends each request through an
// Executor: `&http.Client{Transport: t}` gets the breaker, the budgets, full
// jitter, Retry-After and the deadline handling.
//
//   - GET, HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent, and so is
//     a request of another method (POST, PATCH) that carries an idempotency
//     key (or gets one from TransportOptions.GenerateIdempotencyKey). A
//     request that is not idempotent is retried only when the partner
//     provably did not do the work: a failed dial or a refused connection,
//     a 429, a 503 with Retry-After; never after a timeout, a reset, or
//     another 5xx, as for Do (see the package documentation).
//   - A request body is replayed through Request.GetBody (set by
//     http.NewRequest for in-memory bodies). A body without GetBody is sent
//     once: no retry after the first attempt.
//   - Each attempt is a clone of the request (the caller's is never
//     modified) with the attempt header and, if generated, the key.
//   - A response with status 400 or above is a *StatusError for the
//     classification (Retry-After and x-amz-retry-after read from it).
//     Before a retry the failed response's body is read (up to
//     DrainLimit, kept in memory) and closed, so that its connection is
//     reused during the wait; a longer body is closed unread and its
//     response dropped.
//   - A call ends one way, whatever stopped it (see "Do and Transport" in
//     the package documentation): when the partner answered the last
//     attempt, that response is returned with a nil error, as a plain
//     http.Client would have returned it, even when a budget or the
//     breaker refused the retry (OnGiveUp sees the refusal); otherwise
//     (no answer, the breaker rejected the first attempt, the context
//     ended, or a body above DrainLimit was dropped before a wait) the
//     response is nil and the error is the *GiveUpError Do would have
//     returned.
//   - Config.AttemptTimeout bounds each attempt until its response
//     headers arrive; reading the returned body is bounded by the
//     request's context (or http.Client.Timeout), as without herdguard.
//   - The request's context bounds everything, waits included.
type Transport struct {
	e          *Executor
	base       http.RoundTripper
	attemptHdr string // "" = none
	keyHdr     string
	generate   bool
	drainLimit int64
}

// NewTransport returns a Transport sending through e, with base doing the
// actual round trips (nil means http.DefaultTransport).
func NewTransport(e *Executor, base http.RoundTripper, o TransportOptions) (*Transport, error) {
	bad := func(field, format string, args ...any) error {
		return &herdguard.ConfigError{Field: "retry." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if e == nil {
		return nil, bad("NewTransport e", "is nil")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{e: e, base: base, generate: o.GenerateIdempotencyKey, drainLimit: o.DrainLimit}
	switch o.AttemptHeader {
	case "":
		t.attemptHdr = DefaultAttemptHeader
	case "-":
	default:
		if !validHeaderName(o.AttemptHeader) {
			return nil, bad("TransportOptions.AttemptHeader", "%q is not a valid header name", o.AttemptHeader)
		}
		t.attemptHdr = http.CanonicalHeaderKey(o.AttemptHeader)
	}
	switch {
	case o.IdempotencyKeyHeader == "":
		t.keyHdr = defaultIdempotencyKeyHeader
	case !validHeaderName(o.IdempotencyKeyHeader):
		return nil, bad("TransportOptions.IdempotencyKeyHeader", "%q is not a valid header name", o.IdempotencyKeyHeader)
	default:
		t.keyHdr = http.CanonicalHeaderKey(o.IdempotencyKeyHeader)
	}
	switch {
	case o.DrainLimit < 0:
		return nil, bad("TransportOptions.DrainLimit", "is negative (%d)", o.DrainLimit)
	case o.DrainLimit == 0:
		t.drainLimit = defaultDrainLimit
	}
	return t, nil
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	hasBody := req.Body != nil && req.Body != http.NoBody
	rt := &roundTrip{t: t, req: req, hasBody: hasBody}
	idempotent := isIdempotentMethod(req.Method)
	if !idempotent {
		switch {
		case req.Header.Get(t.keyHdr) != "":
			idempotent = true
		case t.generate:
			rt.key = newIdempotencyKey()
			idempotent = true
		}
	}
	c := call{idempotent: idempotent, ownTimeout: true, beforeWait: rt.park}
	if hasBody && req.GetBody == nil {
		c.maxAttempts = 1 // the body cannot be sent twice
	}
	resp, err := run(req.Context(), t.e, c, rt.attempt)
	if err == nil {
		return resp, nil
	}
	if held := rt.held; held != nil {
		rt.held = nil
		var gu *GiveUpError
		if errors.As(err, &gu) && gu.Reason != ContextDone {
			return held, nil // the partner's last answer, whatever stopped the retry
		}
		rt.drainClose(held)
	}
	if hasBody && !rt.bodySent {
		req.Body.Close() // RoundTrip always closes the request body
	}
	return nil, err
}

// CloseIdleConnections closes the base transport's idle connections, if it
// has any (http.Client.CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// roundTrip is the state of one RoundTrip across its attempts.
type roundTrip struct {
	t        *Transport
	req      *http.Request
	key      string         // generated idempotency key, if any
	hasBody  bool           // req has a body to send
	bodySent bool           // req.Body was handed to the base transport
	held     *http.Response // last failed response, not yet drained
}

func (rt *roundTrip) attempt(ctx context.Context, n int) (*http.Response, error) {
	rt.discard()
	t := rt.t
	var (
		timer  *time.Timer
		cancel context.CancelFunc
	)
	if d := t.e.attemptTimeout; d > 0 {
		ctx, cancel = context.WithCancel(ctx)
		timer = time.AfterFunc(d, cancel)
	}
	r := rt.req.Clone(ctx)
	if rt.hasBody {
		if rt.bodySent {
			body, err := rt.req.GetBody()
			if err != nil {
				if cancel != nil {
					timer.Stop()
					cancel()
				}
				return nil, fmt.Errorf("herdguard: replaying the request body: %w", err)
			}
			r.Body = body
		}
		rt.bodySent = true
	}
	if t.attemptHdr != "" {
		r.Header.Set(t.attemptHdr, strconv.Itoa(n))
	}
	if rt.key != "" {
		r.Header.Set(t.keyHdr, rt.key)
	}

	resp, err := t.base.RoundTrip(r)
	if timer != nil {
		fired := !timer.Stop()
		if fired && err == nil {
			// The timer fired as the headers arrived: the body is being
			// canceled under us. Count it as the timeout it is.
			resp.Body.Close()
			resp, err = nil, context.Canceled
		}
		if err != nil {
			cancel()
			if fired && rt.req.Context().Err() == nil {
				err = &attemptTimeoutError{d: t.e.attemptTimeout, err: err}
			}
		} else {
			resp.Body = wrapCancel(resp.Body, cancel)
		}
	}
	if err != nil {
		if resp != nil && resp.Body != nil { // a RoundTripper breaking its contract
			resp.Body.Close()
		}
		return nil, err
	}
	if resp.StatusCode >= 400 {
		rt.held = resp
		d, _ := hint.FromHeader(resp.Header, t.e.clock.Now())
		return resp, &StatusError{StatusCode: resp.StatusCode, RetryAfter: d, Status: resp.Status, Header: resp.Header}
	}
	return resp, nil
}

// park frees the held failed response's connection before the backoff
// wait: it reads the body, up to DrainLimit, and closes it. A body that fit
// is kept in memory, so that the response can still be returned should the
// call end after the wait (the breaker rejects the retry); a longer one is
// dropped with its response.
func (rt *roundTrip) park() {
	resp := rt.held
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, rt.t.drainLimit+1))
	resp.Body.Close()
	if err != nil || int64(len(b)) > rt.t.drainLimit {
		rt.held = nil
		return
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
}

// discard drains and closes the held failed response, if any.
func (rt *roundTrip) discard() {
	if rt.held != nil {
		rt.drainClose(rt.held)
		rt.held = nil
	}
}

func (rt *roundTrip) drainClose(resp *http.Response) {
	if resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, rt.t.drainLimit)
	resp.Body.Close()
}

func isIdempotentMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// newIdempotencyKey returns a random UUID (version 4, RFC 9562).
func newIdempotencyKey() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand crashes the program instead)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '!', c == '#', c == '$', c == '%', c == '&', c == '\'', c == '*', c == '+',
			c == '-', c == '.', c == '^', c == '_', c == '`', c == '|', c == '~':
		default:
			return false
		}
	}
	return true
}

// attemptTimeoutError is an attempt of a Transport that ran out of
// AttemptTimeout. It is a timeout (net.Error) that unwraps to
// context.DeadlineExceeded only, so it is classified as a timeout and not
// as the cancellation that implemented it.
type attemptTimeoutError struct {
	d   time.Duration
	err error
}

func (e *attemptTimeoutError) Error() string {
	return "herdguard: attempt timed out after " + e.d.String() + ": " + e.err.Error()
}
func (e *attemptTimeoutError) Unwrap() error   { return context.DeadlineExceeded }
func (e *attemptTimeoutError) Timeout() bool   { return true }
func (e *attemptTimeoutError) Temporary() bool { return true }

// wrapCancel makes closing body also release the attempt's context.
func wrapCancel(body io.ReadCloser, cancel context.CancelFunc) io.ReadCloser {
	if rwc, ok := body.(io.ReadWriteCloser); ok { // 101 Switching Protocols
		return &cancelRWC{ReadWriteCloser: rwc, cancel: cancel}
	}
	return &cancelRC{ReadCloser: body, cancel: cancel}
}

type cancelRC struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelRC) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

type cancelRWC struct {
	io.ReadWriteCloser
	cancel context.CancelFunc
}

func (b *cancelRWC) Close() error {
	err := b.ReadWriteCloser.Close()
	b.cancel()
	return err
}
