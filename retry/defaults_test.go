package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

// An error nobody recognises is a failure of the partner, as the anchors
// (sony/gobreaker, failsafe-go, resilience4j, Polly) count it: the breaker
// counts every attempt as a failure, and it is retried only when the call
// is idempotent.
func TestUnknownErrorIsAFailure(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		idem     bool
		do       func(e *retry.Executor, op func(context.Context, int) error) error
		attempts int
		reason   retry.Reason
	}{
		{"Do, not idempotent", false, func(e *retry.Executor, op func(context.Context, int) error) error { return e.Do(ctx, op) }, 1, retry.NotRetryable},
		{"Do, Config.Idempotent", true, func(e *retry.Executor, op func(context.Context, int) error) error { return e.Do(ctx, op) }, 3, retry.AttemptsExhausted},
		{"DoIdempotent false", true, func(e *retry.Executor, op func(context.Context, int) error) error {
			return e.DoIdempotent(ctx, false, op)
		}, 1, retry.NotRetryable},
		{"DoIdempotent true", false, func(e *retry.Executor, op func(context.Context, int) error) error {
			return e.DoIdempotent(ctx, true, op)
		}, 3, retry.AttemptsExhausted},
		{"generic Do, idempotent", true, func(e *retry.Executor, op func(context.Context, int) error) error {
			_, err := retry.Do(ctx, e, func(ctx context.Context, n int) (int, error) { return 0, op(ctx, n) })
			return err
		}, 3, retry.AttemptsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := mustBreaker(t)
			var b fakeBudget
			e := mustNew(t, retry.Config{Breaker: br, Idempotent: tc.idem, Budgets: []budget.Budget{&b}, Clock: newFakeClock()})
			calls := 0
			err := tc.do(e, func(context.Context, int) error { calls++; return boom })
			gu := asGiveUp(t, err)
			if calls != tc.attempts || gu.Attempts != tc.attempts || gu.Reason != tc.reason || !errors.Is(err, boom) {
				t.Errorf("%d calls, %v (attempts %d, %v); want %d attempts, %v, the error reachable", calls, err, gu.Attempts, gu.Reason, tc.attempts, tc.reason)
			}
			if c := br.Counts(); c.Failures != int64(tc.attempts) || c.Successes != 0 || c.Excluded != 0 {
				t.Errorf("breaker counts %+v; want %d failures and nothing else", c, tc.attempts)
			}
			if s := b.snapshot(); len(s.acquires) != tc.attempts-1 {
				t.Errorf("budget asked for %d retries, want %d", len(s.acquires), tc.attempts-1)
			}
		})
	}
	t.Run("a classifier's NoRetryExcluded keeps it out of the breaker", func(t *testing.T) {
		br := mustBreaker(t)
		e := mustNew(t, retry.Config{Breaker: br, Idempotent: true, Clock: newFakeClock(), Classifiers: []retry.Classifier{
			func(err error, _ bool) retry.Verdict {
				if errors.Is(err, boom) {
					return retry.NoRetryExcluded
				}
				return retry.NoOpinion
			},
		}})
		calls := 0
		_ = e.Do(ctx, failing(&calls, boom))
		if c := br.Counts(); calls != 1 || c.Excluded != 1 || c.Failures != 0 {
			t.Errorf("%d calls, breaker counts %+v; want one call, excluded", calls, c)
		}
	})
}

func TestRetryEveryError(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want retry.Verdict
	}{
		{errors.New("boom"), retry.RetryTransient},
		{status(404), retry.RetryTransient},
		{status(501), retry.RetryTransient},
		{timeoutError{}, retry.RetryTransient},
		{context.Canceled, retry.NoRetryExcluded},
		{fmt.Errorf("inner: %w", &budget.ExhaustedError{Budget: "inner"}), retry.NoRetryExcluded},
		{&breaker.OpenError{Name: "inner"}, retry.NoRetryExcluded},
	} {
		for _, idem := range []bool{false, true} {
			if got := retry.RetryEveryError(tc.err, idem); got != tc.want {
				t.Errorf("RetryEveryError(%v, %v) = %v, want %v", tc.err, idem, got, tc.want)
			}
		}
	}
	// In the loop: a POST-like call (not idempotent) is retried up to
	// MaxAttempts after a 404 and an unknown error, and the budget still
	// bounds it.
	for _, refuse := range []bool{false, true} {
		b := &fakeBudget{}
		if refuse {
			b.refuse = &budget.ExhaustedError{Budget: "local"}
		}
		e := mustNew(t, retry.Config{MaxAttempts: 4, Budgets: []budget.Budget{b}, Clock: newFakeClock(), Classifiers: []retry.Classifier{retry.RetryEveryError}})
		calls := 0
		err := e.DoIdempotent(ctx, false, failing(&calls, status(404), errors.New("boom"), status(400), status(422)))
		want := 4
		if refuse {
			want = 1
		}
		if calls != want || (refuse != errors.Is(err, budget.ErrExhausted)) {
			t.Errorf("budget refusing %v: %d calls, %v; want %d calls", refuse, calls, err, want)
		}
	}
}

// TestDoAndTransportAgreeOnRefusals runs each way a call can end through
// Do (an op returning retry.NewStatusError) and through a Transport, with
// the same partner and the same settings, and checks that they answer one
// way: the same Reason and attempts; the partner's last response from the
// Transport exactly when Do's *GiveUpError carries the partner's
// *StatusError (the context's end and a body dropped for its size aside);
// otherwise the same *GiveUpError. Every response the Transport does not
// return is closed, after at most DrainLimit+1 bytes were read.
func TestDoAndTransportAgreeOnRefusals(t *testing.T) {
	const drainLimit = 2048
	type setup struct {
		cfg    retry.Config
		method string
		url    string
		ctx    context.Context
	}
	refusing := func() []budget.Budget {
		return []budget.Budget{&fakeBudget{refuse: &budget.ExhaustedError{Budget: "local"}}}
	}
	openDuringWait := func(s *setup) {
		br := mustBreaker(t)
		clk := newFakeClock()
		clk.OnSleep = func() { br.Override(breaker.ForcedOpen) }
		s.cfg.Breaker, s.cfg.Clock = br, clk
	}
	for _, tc := range []struct {
		name     string
		body     int // bytes of the partner's 503 body
		setup    func(s *setup)
		reason   retry.Reason
		attempts int
		response bool // the Transport returns the partner's 503
	}{
		{"attempts exhausted", 100, func(*setup) {}, retry.AttemptsExhausted, 3, true},
		{"not idempotent", 100, func(s *setup) { s.method = http.MethodPost }, retry.NotRetryable, 1, true},
		{"budget refuses", 100, func(s *setup) { s.cfg.Budgets = refusing() }, retry.BudgetExhausted, 1, true},
		{"breaker open before the call", 100, func(s *setup) {
			s.cfg.Breaker = mustBreaker(t)
			s.cfg.Breaker.Override(breaker.ForcedOpen)
		}, retry.BreakerOpen, 0, false},
		{"breaker opens during the wait", 100, openDuringWait, retry.BreakerOpen, 1, true},
		{"breaker opens during the wait, body above DrainLimit", 10 * drainLimit, openDuringWait, retry.BreakerOpen, 1, false},
		{"Retry-After too long", 100, func(s *setup) { s.cfg.MaxRetryAfter = time.Second }, retry.RetryAfterTooLong, 1, true},
		{"no answer, budget refuses", 0, func(s *setup) {
			s.cfg.Budgets = refusing()
			s.url = "http://127.0.0.1:1" // nothing listens: the dial is refused
		}, retry.BudgetExhausted, 1, false},
		{"context ends during the wait", 100, func(s *setup) {
			clk := newFakeClock()
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			clk.OnSleep = cancel
			s.cfg.Clock, s.ctx = clk, ctx
		}, retry.ContextDone, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var partnerSaw atomic.Int64
			p := newPartner(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				partnerSaw.Add(1)
				if tc.reason == retry.RetryAfterTooLong {
					w.Header().Set("Retry-After", "60")
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, strings.Repeat("x", tc.body))
			})
			build := func() setup {
				s := setup{cfg: retry.Config{Budgets: noBudget, Clock: newFakeClock()}, method: http.MethodGet, url: p.URL, ctx: context.Background()}
				tc.setup(&s)
				return s
			}
			check := func(via string, err error, reached bool, attempts int64) *retry.GiveUpError {
				t.Helper()
				gu := asGiveUp(t, err)
				if gu.Reason != tc.reason || gu.Attempts != tc.attempts {
					t.Errorf("%s: %v (%v, %d attempts); want %v after %d", via, err, gu.Reason, gu.Attempts, tc.reason, tc.attempts)
				}
				if reached && attempts != int64(tc.attempts) {
					t.Errorf("%s: the partner saw %d attempts, want %d", via, attempts, tc.attempts)
				}
				return gu
			}

			// Do, with an op that does what the Transport does.
			s := build()
			var doGaveUp []retry.Reason
			s.cfg.OnGiveUp = func(gu *retry.GiveUpError) { doGaveUp = append(doGaveUp, gu.Reason) }
			e := mustNew(t, s.cfg)
			err := e.DoIdempotent(s.ctx, s.method != http.MethodPost, func(ctx context.Context, _ int) error {
				req, _ := http.NewRequestWithContext(ctx, s.method, s.url, nil)
				resp, err := http.DefaultTransport.RoundTrip(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode >= 400 {
					return retry.NewStatusError(resp, time.Now())
				}
				return nil
			})
			gu := check("Do", err, s.url == p.URL, partnerSaw.Swap(0))
			var se *retry.StatusError
			answered := errors.As(err, &se) && se.StatusCode == 503
			if want := tc.attempts > 0 && tc.body > 0; answered != want {
				t.Errorf("Do: the partner's 503 reachable: %v, want %v", answered, want)
			}

			// The Transport.
			s = build()
			var trGaveUp []retry.Reason
			s.cfg.OnGiveUp = func(gu *retry.GiveUpError) { trGaveUp = append(trGaveUp, gu.Reason) }
			ct := &trackingTransport{base: http.DefaultTransport}
			tr, terr := retry.NewTransport(mustNew(t, s.cfg), ct, retry.TransportOptions{DrainLimit: drainLimit})
			if terr != nil {
				t.Fatal(terr)
			}
			req, _ := http.NewRequestWithContext(s.ctx, s.method, s.url, nil)
			resp, err := tr.RoundTrip(req)
			if tc.response {
				if err != nil || resp == nil || resp.StatusCode != 503 {
					t.Fatalf("Transport: %v, %v; want the partner's 503 and a nil error", resp, err)
				}
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr != nil || len(b) != tc.body {
					t.Errorf("Transport: the 503's body: %d bytes, %v; want the partner's %d", len(b), rerr, tc.body)
				}
				if partnerSaw.Swap(0) != int64(tc.attempts) {
					t.Errorf("Transport: the partner saw a different number of attempts than %d", tc.attempts)
				}
			} else {
				if resp != nil {
					resp.Body.Close()
					t.Fatalf("Transport: a %d response; want none, and the *GiveUpError", resp.StatusCode)
				}
				tgu := check("Transport", err, s.url == p.URL, partnerSaw.Swap(0))
				if !errors.Is(tgu.Err, gu.Err) && (tgu.Err == nil) != (gu.Err == nil) {
					t.Errorf("Transport: partner error %v; Do's was %v", tgu.Err, gu.Err)
				}
			}
			if len(doGaveUp) != 1 || len(trGaveUp) != 1 || doGaveUp[0] != trGaveUp[0] {
				t.Errorf("OnGiveUp saw %v for Do and %v for the Transport; want one %v each", doGaveUp, trGaveUp, tc.reason)
			}
			ct.mu.Lock()
			defer ct.mu.Unlock()
			for i, b := range ct.bodies {
				if !b.closed.Load() {
					t.Errorf("Transport: response %d's body was left open", i+1)
				}
				if n := b.read.Load(); n > drainLimit+1 && !(tc.response && i == len(ct.bodies)-1) {
					t.Errorf("Transport: %d bytes read from discarded response %d; want at most DrainLimit+1 = %d", n, i+1, drainLimit+1)
				}
			}
		})
	}
}
