package retry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

func TestNewValidatesAndNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   retry.Config
		field string
	}{
		{"negative attempts", retry.Config{MaxAttempts: -1}, "MaxAttempts"},
		{"negative transient base", retry.Config{TransientBase: -time.Millisecond}, "TransientBase"},
		{"negative throttling base", retry.Config{ThrottlingBase: -1}, "ThrottlingBase"},
		{"negative max delay", retry.Config{MaxDelay: -time.Second}, "MaxDelay"},
		{"negative attempt timeout", retry.Config{AttemptTimeout: -1}, "AttemptTimeout"},
		{"negative margin", retry.Config{DeadlineMargin: -1}, "DeadlineMargin"},
		{"negative max retry-after", retry.Config{MaxRetryAfter: -1}, "MaxRetryAfter"},
		{"transient base above max delay", retry.Config{TransientBase: 2 * time.Second, MaxDelay: time.Second}, "TransientBase"},
		{"throttling base above max delay", retry.Config{ThrottlingBase: 2 * time.Second, MaxDelay: time.Second}, "ThrottlingBase"},
		{"throttling base above default max delay", retry.Config{ThrottlingBase: time.Minute}, "ThrottlingBase"},
		{"nil budget", retry.Config{Budgets: []budget.Budget{&fakeBudget{}, nil}}, "Budgets[1]"},
		{"nil classifier", retry.Config{Classifiers: []retry.Classifier{nil}}, "Classifiers[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := retry.New(tc.cfg)
			var ce *herdguard.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("New = %v, %v; want a *herdguard.ConfigError", e, err)
			}
			if ce.Field != "retry.Config."+tc.field || !strings.HasPrefix(err.Error(), "herdguard: retry.Config."+tc.field+" ") {
				t.Errorf("error %q names field %q, want retry.Config.%s", err, ce.Field, tc.field)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	e := mustNew(t, retry.Config{})
	if e.MaxAttempts() != retry.DefaultMaxAttempts {
		t.Errorf("MaxAttempts = %d, want %d", e.MaxAttempts(), retry.DefaultMaxAttempts)
	}
	// A defaulted base is lowered to a small MaxDelay instead of failing.
	if _, err := retry.New(retry.Config{MaxDelay: 10 * time.Millisecond}); err != nil {
		t.Errorf("New with MaxDelay 10ms and default bases: %v", err)
	}
}

// The default throttling base is 1 s and the transient one 50 ms.
func TestBackoffBasesPerKind(t *testing.T) {
	clk := newFakeClock()
	e := mustNew(t, retry.Config{Idempotent: true, MaxAttempts: 3, Clock: clk, Rand: constRand(0.5)})
	calls := 0
	if err := e.Do(context.Background(), failing(&calls, status(500), status(429))); err != nil {
		t.Fatal(err)
	}
	// Retry 0 transient: 0.5 × 50 ms; retry 1 throttling: 0.5 × 2 × 1 s.
	if want := []time.Duration{25 * time.Millisecond, time.Second}; !slices.Equal(clk.Sleeps(), want) {
		t.Errorf("sleeps = %v, want %v", clk.Sleeps(), want)
	}
}

func TestBudgetAccounting(t *testing.T) {
	ctx := context.Background()
	t.Run("first attempt success", func(t *testing.T) {
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Clock: newFakeClock()})
		calls := 0
		if err := e.Do(ctx, failing(&calls)); err != nil {
			t.Fatal(err)
		}
		s := b.snapshot()
		if s.requests != 1 || s.successes != 1 || len(s.acquires) != 0 {
			t.Errorf("budget saw %+v; want 1 request, 1 success, no acquire", s)
		}
	})
	t.Run("retry succeeds", func(t *testing.T) {
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{Idempotent: true, Budgets: []budget.Budget{b}, Clock: newFakeClock()})
		calls := 0
		if err := e.Do(ctx, failing(&calls, status(503), status(429))); err != nil {
			t.Fatal(err)
		}
		s := b.snapshot()
		if s.requests != 1 || s.successes != 0 {
			t.Errorf("requests, successes = %d, %d; want 1, 0", s.requests, s.successes)
		}
		if want := []budget.Kind{budget.Transient, budget.Throttling}; !slices.Equal(s.acquires, want) {
			t.Errorf("acquires = %v, want %v", s.acquires, want)
		}
		if want := []budget.Outcome{budget.RetryFailed, budget.RetrySucceeded}; !slices.Equal(s.outcomes, want) {
			t.Errorf("outcomes = %v, want %v", s.outcomes, want)
		}
	})
	t.Run("503 with Retry-After is throttling", func(t *testing.T) {
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{MaxAttempts: 2, Budgets: []budget.Budget{b}, Clock: newFakeClock()})
		calls := 0
		_ = e.Do(ctx, failing(&calls, &retry.StatusError{StatusCode: 503, RetryAfter: time.Second}))
		if s := b.snapshot(); !slices.Equal(s.acquires, []budget.Kind{budget.Throttling}) {
			t.Errorf("acquires = %v, want [throttling]", s.acquires)
		}
	})
	t.Run("deadline checked before budget", func(t *testing.T) {
		b := &fakeBudget{}
		clk := newFakeClock()
		e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Clock: clk})
		dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(time.Second))
		defer cancel()
		calls := 0
		err := e.Do(dctx, failing(&calls, &retry.StatusError{StatusCode: 429, RetryAfter: 5 * time.Second}))
		if gu := asGiveUp(t, err); gu.Reason != retry.DeadlineTooClose {
			t.Errorf("reason = %v", gu.Reason)
		}
		if s := b.snapshot(); len(s.acquires) != 0 {
			t.Errorf("budget asked %d times; want 0", len(s.acquires))
		}
	})
	t.Run("layers in order, refusal gives back earlier grants", func(t *testing.T) {
		first, second := &fakeBudget{}, &fakeBudget{refuse: &budget.ExhaustedError{Budget: "global", RetryAfter: 7 * time.Second}}
		var gaveUp *retry.GiveUpError
		e := mustNew(t, retry.Config{
			Budgets:    []budget.Budget{first, second},
			Clock:      newFakeClock(),
			Idempotent: true,
			OnGiveUp:   func(gu *retry.GiveUpError) { gaveUp = gu },
		})
		calls := 0
		err := e.Do(ctx, failing(&calls, status(502)))
		var ex *budget.ExhaustedError
		var gu *retry.GiveUpError
		if !errors.As(err, &ex) || ex.Budget != "global" || ex.RetryAfter != 7*time.Second ||
			!errors.As(err, &gu) || gu.Reason != retry.BudgetExhausted || gu.Attempts != 1 || gu.Cause != ex {
			t.Fatalf("err = %#v; want global's refusal after 1 attempt with its hint", err)
		}
		if gaveUp != gu {
			t.Errorf("OnGiveUp got %v, want the returned error", gaveUp)
		}
		if s := first.snapshot(); !slices.Equal(s.outcomes, []budget.Outcome{budget.RetryNotUsed}) {
			t.Errorf("first layer outcomes = %v, want [not-used]", s.outcomes)
		}
		if d, ok := retry.RetryAfter(err); !ok || d != 7*time.Second {
			t.Errorf("RetryAfter = %v, %v; want 7s", d, ok)
		}
		// The refusal the backend returned is not the one returned (a
		// backend may share it).
		if r := second.refuse.(*budget.ExhaustedError); r == ex {
			t.Errorf("the backend's error was returned: %+v", r)
		}
	})
	t.Run("refusal without hint carries the planned wait", func(t *testing.T) {
		b := &fakeBudget{refuse: budget.ErrExhausted}
		e := mustNew(t, retry.Config{Budgets: []budget.Budget{b}, Clock: newFakeClock(), Rand: constRand(0.5)})
		calls := 0
		err := e.Do(ctx, failing(&calls, &retry.StatusError{StatusCode: 429, RetryAfter: 3 * time.Second}))
		if d, ok := retry.RetryAfter(err); !ok || d != 3*time.Second+500*time.Millisecond {
			t.Errorf("RetryAfter = %v, %v; want 3.5s", d, ok)
		}
	})
	t.Run("unavailable layer abstains and is reported", func(t *testing.T) {
		storeErr := fmt.Errorf("global: %w: %w", budget.ErrUnavailable, context.DeadlineExceeded)
		down, up := &fakeBudget{refuse: storeErr}, &fakeBudget{}
		var logBuf bytes.Buffer
		var layers []int
		e := mustNew(t, retry.Config{
			Idempotent:   true,
			Budgets:      []budget.Budget{up, down},
			Clock:        newFakeClock(),
			OnStoreError: func(layer int, err error) { layers = append(layers, layer) },
			Logger:       slog.New(slog.NewTextHandler(&logBuf, nil)),
		})
		calls := 0
		if err := e.Do(ctx, failing(&calls, status(500))); err != nil {
			t.Fatalf("Do = %v; want the retry granted by the other layer", err)
		}
		if !slices.Equal(layers, []int{1}) {
			t.Errorf("OnStoreError layers = %v, want [1]", layers)
		}
		if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), "abstained") {
			t.Errorf("log = %q; want a warning about the abstaining layer", logBuf.String())
		}
	})
	t.Run("unavailable layer that fails closed refuses and is reported so", func(t *testing.T) {
		storeErr := &budget.ExhaustedError{Budget: "global:p", Cause: fmt.Errorf("%w: %w", budget.ErrUnavailable, context.DeadlineExceeded)}
		var logBuf bytes.Buffer
		e := mustNew(t, retry.Config{
			Idempotent: true,
			Budgets:    []budget.Budget{&fakeBudget{refuse: storeErr}},
			Clock:      newFakeClock(),
			Logger:     slog.New(slog.NewTextHandler(&logBuf, nil)),
		})
		calls := 0
		if err := e.Do(ctx, failing(&calls, status(500))); !errors.Is(err, budget.ErrExhausted) {
			t.Fatalf("Do = %v; want the refusal", err)
		}
		if !strings.Contains(logBuf.String(), "layer refused") || strings.Contains(logBuf.String(), "abstained") {
			t.Errorf("log = %q; want a warning that the layer refused", logBuf.String())
		}
	})
	t.Run("context ends during the wait", func(t *testing.T) {
		b := &fakeBudget{}
		clk := newFakeClock()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		clk.OnSleep = cancel
		e := mustNew(t, retry.Config{Idempotent: true, Budgets: []budget.Budget{b}, Clock: clk})
		calls := 0
		err := e.Do(cctx, failing(&calls, status(500)))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
		if gu := asGiveUp(t, err); gu.Reason != retry.ContextDone || gu.Attempts != 1 {
			t.Errorf("GiveUpError = %+v", gu)
		}
		var se *retry.StatusError
		if !errors.As(err, &se) {
			t.Errorf("the partner's 500 is not reachable from %v", err)
		}
		if s := b.snapshot(); !slices.Equal(s.outcomes, []budget.Outcome{budget.RetryNotUsed}) {
			t.Errorf("outcomes = %v, want [not-used]", s.outcomes)
		}
	})
}

func TestBreaker(t *testing.T) {
	ctx := context.Background()
	t.Run("open rejects the first attempt", func(t *testing.T) {
		br := mustBreaker(t)
		br.Override(breaker.ForcedOpen)
		b := &fakeBudget{}
		var events []*retry.GiveUpError
		e := mustNew(t, retry.Config{Breaker: br, Budgets: []budget.Budget{b}, Clock: newFakeClock(),
			OnGiveUp: func(ev *retry.GiveUpError) { events = append(events, ev) }})
		calls := 0
		err := e.Do(ctx, failing(&calls))
		var oe *breaker.OpenError
		var gu *retry.GiveUpError
		if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) ||
			!errors.As(err, &gu) || gu.Reason != retry.BreakerOpen || gu.Attempts != 0 || gu.Err != nil || gu.Cause != oe {
			t.Fatalf("err = %v; want a *GiveUpError with Reason BreakerOpen and the *breaker.OpenError as Cause", err)
		}
		if calls != 0 {
			t.Errorf("op called %d times, want 0", calls)
		}
		if s := b.snapshot(); s.requests != 0 {
			t.Errorf("budget recorded %d requests for a call that never went out", s.requests)
		}
		if len(events) != 1 || events[0].Reason != retry.BreakerOpen || events[0].Attempts != 0 {
			t.Errorf("OnGiveUp events = %+v", events)
		}
		if d, ok := retry.RetryAfter(err); oe.RetryAfter > 0 && (!ok || d != oe.RetryAfter) {
			t.Errorf("RetryAfter = %v, %v; want the breaker's %v", d, ok, oe.RetryAfter)
		}
	})
	t.Run("open rejects a retry", func(t *testing.T) {
		br := mustBreaker(t)
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Budgets: []budget.Budget{b}, Clock: newFakeClock()})
		calls := 0
		err := e.Do(ctx, func(context.Context, int) error {
			calls++
			br.Override(breaker.ForcedOpen) // the partner goes down fleet-wide during the call
			return status(503)
		})
		if calls != 1 {
			t.Errorf("calls = %d, want 1", calls)
		}
		gu := asGiveUp(t, err)
		if gu.Reason != retry.BreakerOpen || gu.Attempts != 1 {
			t.Errorf("GiveUpError = %+v", gu)
		}
		var se *retry.StatusError
		if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &se) {
			t.Errorf("err = %v; want both breaker.ErrOpen and the 503 reachable", err)
		}
		// The gate comes before the budgets: the rejected retry was never
		// charged to them.
		if s := b.snapshot(); len(s.acquires) != 0 || len(s.outcomes) != 0 {
			t.Errorf("budget asked %v, outcomes %v; want it never asked", s.acquires, s.outcomes)
		}
	})
	t.Run("a throttling breaker refuses the retry", func(t *testing.T) {
		// Adaptive throttling admits a share of first attempts (all of
		// them with Rand at 0) and refuses every retry: Do asks the
		// breaker for its retries as retries.
		clk := newFakeClock()
		br, err := breaker.New("partner", breaker.Settings{Store: newThrottlingStore(clk.Now()), Adaptive: true,
			Rand: func() float64 { return 0 }, StoreTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		b := &fakeBudget{}
		e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Budgets: []budget.Budget{b}, Clock: clk})
		calls := 0
		err = e.Do(ctx, func(context.Context, int) error {
			calls++
			return status(503)
		})
		var oe *breaker.OpenError
		if gu := asGiveUp(t, err); gu.Reason != retry.BreakerOpen || gu.Attempts != 1 || !errors.As(err, &oe) || !oe.Throttled {
			t.Fatalf("err = %v; want the retry refused by throttling after 1 attempt", err)
		}
		if calls != 1 {
			t.Errorf("calls = %d, want 1", calls)
		}
		if s := b.snapshot(); len(s.outcomes) != 1 || s.outcomes[0] != budget.RetryNotUsed {
			t.Errorf("budget outcomes %v; want the grant given back unused", s.outcomes)
		}
	})
	t.Run("outcomes", func(t *testing.T) {
		errNotTheirs := errors.New("our own config is wrong")
		for _, tc := range []struct {
			name string
			errs []error
			want breaker.Counts
		}{
			{"success", nil, breaker.Counts{Successes: 1}},
			{"retryable fault then success", []error{status(429)}, breaker.Counts{Successes: 1, Failures: 1}},
			{"4xx is a success", []error{status(404)}, breaker.Counts{Successes: 1}},
			{"canceled is excluded", []error{context.Canceled}, breaker.Counts{Excluded: 1}},
			{"unknown error is a failure", []error{errors.New("bug")}, breaker.Counts{Failures: 1}},
			{"caller-marked error is excluded", []error{errNotTheirs}, breaker.Counts{Excluded: 1}},
			{"non-idempotent timeout is a failure", []error{timeoutError{}}, breaker.Counts{Failures: 1}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				br := mustBreaker(t)
				e := mustNew(t, retry.Config{Breaker: br, Clock: newFakeClock(), Classifiers: []retry.Classifier{
					func(err error, _ bool) retry.Verdict {
						if errors.Is(err, errNotTheirs) {
							return retry.NoRetryExcluded
						}
						return retry.NoOpinion
					},
				}})
				calls := 0
				_ = e.Do(ctx, failing(&calls, tc.errs...))
				c := br.Counts()
				if c.Successes != tc.want.Successes || c.Failures != tc.want.Failures || c.Excluded != tc.want.Excluded {
					t.Errorf("counts = %+v; want successes %d, failures %d, excluded %d",
						c, tc.want.Successes, tc.want.Failures, tc.want.Excluded)
				}
			})
		}
	})
}

func TestClassificationInTheLoop(t *testing.T) {
	ctx := context.Background()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name       string
		idempotent bool
		err        error
		wantCalls  int
	}{
		{"timeout, not idempotent", false, timeoutError{}, 1},
		{"timeout, idempotent", true, timeoutError{}, 3},
		{"reset, not idempotent", false, reset, 1},
		{"reset, idempotent", true, reset, 3},
		{"unexpected EOF, not idempotent", false, io.ErrUnexpectedEOF, 1},
		{"refused, not idempotent", false, refused, 3},
		{"DNS temporary, not idempotent", false, &net.DNSError{Err: "server misbehaving", IsTemporary: true}, 3},
		{"DNS no such host", true, &net.DNSError{Err: "no such host", IsNotFound: true}, 1},
		{"canceled", true, context.Canceled, 1},
		{"nested budget refusal", true, &budget.ExhaustedError{}, 1},
		{"nested breaker rejection", true, &breaker.OpenError{}, 1},
		{"unknown, not idempotent", false, errors.New("boom"), 1},
		{"unknown, idempotent", true, errors.New("boom"), 3},
		{"401", true, status(401), 1},
		{"408, not idempotent", false, status(408), 1},
		{"408, idempotent", true, status(408), 3},
		{"501", true, status(501), 1},
		{"504, not idempotent", false, status(504), 1},
		{"504, idempotent", true, status(504), 3},
		{"503, not idempotent", false, status(503), 1},
		{"429, not idempotent", false, status(429), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustNew(t, retry.Config{Clock: newFakeClock()})
			calls := 0
			err := e.DoIdempotent(ctx, tc.idempotent, func(context.Context, int) error { calls++; return tc.err })
			if calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tc.wantCalls)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("err = %v; want the original error reachable", err)
			}
		})
	}
	t.Run("Config.Idempotent is Do's default", func(t *testing.T) {
		e := mustNew(t, retry.Config{Clock: newFakeClock(), Idempotent: true})
		calls := 0
		_ = e.Do(ctx, func(context.Context, int) error { calls++; return timeoutError{} })
		if calls != 3 {
			t.Errorf("calls = %d, want 3", calls)
		}
	})
	t.Run("caller classifiers run first", func(t *testing.T) {
		e := mustNew(t, retry.Config{Clock: newFakeClock(), Classifiers: []retry.Classifier{
			func(err error, _ bool) retry.Verdict {
				var se *retry.StatusError
				if errors.As(err, &se) && se.StatusCode == 409 {
					return retry.RetryTransient
				}
				return retry.NoOpinion
			},
		}})
		calls := 0
		if err := e.Do(ctx, failing(&calls, status(409))); err != nil || calls != 2 {
			t.Errorf("Do = %v after %d calls; want success after 2", err, calls)
		}
	})
}

func TestContextEndsDuringAttempt(t *testing.T) {
	t.Run("canceled", func(t *testing.T) {
		br := mustBreaker(t)
		e := mustNew(t, retry.Config{Breaker: br, Clock: newFakeClock(), Idempotent: true})
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := e.Do(ctx, func(ctx context.Context, _ int) error {
			calls++
			cancel()
			return status(503) // the partner's answer raced the cancellation
		})
		if gu := asGiveUp(t, err); calls != 1 || gu.Reason != retry.NotRetryable || gu.Attempts != 1 {
			t.Errorf("Do = %v after %d calls; want a give-up (not retryable) after 1", err, calls)
		}
		if c := br.Counts(); c.Excluded != 1 || c.Failures != 0 {
			t.Errorf("breaker counts = %+v; want the canceled call excluded", c)
		}
	})
	t.Run("already done", func(t *testing.T) {
		e := mustNew(t, retry.Config{Clock: newFakeClock()})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := 0
		if err := e.Do(ctx, failing(&calls)); !errors.Is(err, context.Canceled) || calls != 0 {
			t.Errorf("Do = %v after %d calls; want context.Canceled and no call", err, calls)
		}
	})
	// In a synctest bubble: the 1 ms deadline passes while the partner
	// hangs, never before Do has made its first attempt, however slow the
	// machine.
	t.Run("deadline while waiting for the partner", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			br := mustBreaker(t)
			e := mustNew(t, retry.Config{Breaker: br, Clock: newFakeClock(), Idempotent: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			calls := 0
			err := e.Do(ctx, func(ctx context.Context, _ int) error {
				calls++
				<-ctx.Done() // the partner hangs
				return ctx.Err()
			})
			if calls != 1 || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Do = %v after %d calls; want DeadlineExceeded after 1", err, calls)
			}
			if c := br.Counts(); c.Failures != 1 {
				t.Errorf("breaker counts = %+v; want a failure", c)
			}
		})
	})
}

func TestAttemptTimeout(t *testing.T) {
	br := mustBreaker(t)
	e := mustNew(t, retry.Config{Breaker: br, Clock: newFakeClock(), AttemptTimeout: time.Millisecond, Idempotent: true})
	calls := 0
	err := e.Do(context.Background(), func(ctx context.Context, attempt int) error {
		calls++
		if attempt == 1 {
			<-ctx.Done() // a partner slower than the attempt timeout
			return errors.New("op returned something unclassifiable")
		}
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("attempt context has no deadline")
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Do = %v after %d calls; want success after 2", err, calls)
	}
	if c := br.Counts(); c.Failures != 1 || c.Successes != 1 {
		t.Errorf("breaker counts = %+v; want 1 failure, 1 success", c)
	}

	// Not idempotent: the timed-out attempt may have reached the partner.
	calls = 0
	err = e.DoIdempotent(context.Background(), false, func(ctx context.Context, attempt int) error {
		calls++
		<-ctx.Done()
		return ctx.Err()
	})
	if calls != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do = %v after %d calls; want a timeout after 1", err, calls)
	}
}

func TestHostileRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hint     time.Duration
		deadline time.Duration // 0: none
		reason   retry.Reason
		calls    int
	}{
		{"huge without deadline", 24 * time.Hour, 0, retry.RetryAfterTooLong, 1},
		{"above MaxRetryAfter", retry.DefaultMaxRetryAfter + time.Second, 0, retry.RetryAfterTooLong, 1},
		{"past the deadline", 20 * time.Second, 10 * time.Second, retry.DeadlineTooClose, 1},
		{"inside the margin", 10*time.Second - 50*time.Millisecond, 10 * time.Second, retry.DeadlineTooClose, 1},
		{"fits", 5 * time.Second, 10 * time.Second, retry.AttemptsExhausted, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			e := mustNew(t, retry.Config{MaxAttempts: 2, Clock: clk, Rand: constRand(0)})
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(tc.deadline))
				defer cancel()
			}
			calls := 0
			err := e.Do(ctx, func(context.Context, int) error {
				calls++
				return &retry.StatusError{StatusCode: 429, RetryAfter: tc.hint}
			})
			if gu := asGiveUp(t, err); gu.Reason != tc.reason || calls != tc.calls {
				t.Errorf("gave up (%v) after %d calls; want %v after %d", gu.Reason, calls, tc.reason, tc.calls)
			}
			for _, s := range clk.Sleeps() {
				if s < tc.hint {
					t.Errorf("waited %v, less than the server's %v", s, tc.hint)
				}
				if tc.deadline > 0 && s >= tc.deadline-retry.DefaultDeadlineMargin {
					t.Errorf("waited %v into the deadline margin", s)
				}
			}
		})
	}
}

func TestHooksAndLogger(t *testing.T) {
	var (
		retries []retry.RetryEvent
		giveUps []*retry.GiveUpError
		logBuf  bytes.Buffer
	)
	clk := newFakeClock()
	e := mustNew(t, retry.Config{
		Idempotent: true,
		Clock:      clk,
		Rand:       constRand(0.5),
		OnRetry:    func(ev retry.RetryEvent) { retries = append(retries, ev) },
		OnGiveUp:   func(ev *retry.GiveUpError) { giveUps = append(giveUps, ev) },
		Logger:     slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	calls := 0
	e503 := &retry.StatusError{StatusCode: 503, RetryAfter: time.Second}
	err := e.Do(context.Background(), failing(&calls, status(500), e503, status(500)))
	if len(retries) != 2 {
		t.Fatalf("OnRetry called %d times, want 2", len(retries))
	}
	want := retry.RetryEvent{Attempt: 2, Delay: 2 * time.Second, // 1 s hint + 0.5 × 2 × 1 s
		RetryAfter: time.Second, Err: e503, Kind: budget.Throttling}
	if retries[1] != want {
		t.Errorf("second RetryEvent = %+v, want %+v", retries[1], want)
	}
	if len(giveUps) != 1 || giveUps[0].Attempts != 3 || giveUps[0].Reason != retry.AttemptsExhausted || error(giveUps[0]) != err {
		t.Errorf("OnGiveUp events = %+v; want one after 3 attempts with the returned error", giveUps)
	}
	if !strings.Contains(logBuf.String(), "level=INFO") || !strings.Contains(logBuf.String(), "attempts exhausted") {
		t.Errorf("log = %q; want the give-up at Info", logBuf.String())
	}
}

func TestLoggerBudgetExhaustedAtWarn(t *testing.T) {
	var logBuf bytes.Buffer
	e := mustNew(t, retry.Config{
		Idempotent: true,
		Clock:      newFakeClock(),
		Budgets:    []budget.Budget{&fakeBudget{refuse: &budget.ExhaustedError{Budget: "local"}}},
		Logger:     slog.New(slog.NewTextHandler(&logBuf, nil)),
	})
	calls := 0
	_ = e.Do(context.Background(), failing(&calls, status(500)))
	if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), "retry budget exhausted") {
		t.Errorf("log = %q; want budget exhaustion at Warn", logBuf.String())
	}
}

func TestGenericDo(t *testing.T) {
	e := mustNew(t, retry.Config{Clock: newFakeClock()})
	n, err := retry.DoIdempotent(context.Background(), e, true, func(_ context.Context, attempt int) (int, error) {
		if attempt == 1 {
			return 99, timeoutError{}
		}
		return attempt * 10, nil
	})
	if err != nil || n != 20 {
		t.Errorf("DoIdempotent = %d, %v; want 20, nil", n, err)
	}
	n, err = retry.Do(context.Background(), e, func(context.Context, int) (int, error) { return 7, status(404) })
	if err == nil || n != 0 {
		t.Errorf("Do = %d, %v; want the zero value and an error", n, err)
	}
}

func TestPanicInOpIsAccounted(t *testing.T) {
	br := mustBreaker(t)
	b := &fakeBudget{}
	e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Budgets: []budget.Budget{b}, Clock: newFakeClock()})
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the op's panic", r)
			}
		}()
		_ = e.Do(context.Background(), func(_ context.Context, attempt int) error {
			if attempt == 2 {
				panic("boom")
			}
			return status(500)
		})
	}()
	if c := br.Counts(); c.Failures != 2 {
		t.Errorf("breaker counts = %+v; want 2 failures (the 500 and the panic)", c)
	}
	if s := b.snapshot(); !slices.Equal(s.outcomes, []budget.Outcome{budget.RetryFailed}) {
		t.Errorf("outcomes = %v; want the panicking retry released as failed", s.outcomes)
	}
}

func TestFlush(t *testing.T) {
	errStore := errors.New("store down")
	a, b := &fakeBudget{}, &fakeBudget{flush: errStore}
	now := time.Unix(1_700_000_000, 0)
	e := mustNew(t, retry.Config{Budgets: []budget.Budget{a, b}, Breaker: mustBreaker(t), Clock: fixedClock{now}})
	if err := e.Flush(context.Background()); !errors.Is(err, errStore) {
		t.Errorf("Flush = %v; want the store error", err)
	}
	if a.flushed != 1 || b.flushed != 1 {
		t.Errorf("flushed %d, %d times; want 1, 1", a.flushed, b.flushed)
	}
	if !a.flushedAt.Equal(now) || !b.flushedAt.Equal(now) {
		t.Errorf("flushed at %v and %v; want the Executor's clock, %v", a.flushedAt, b.flushedAt, now)
	}
}

func TestRetryAfterExtraction(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"nil", nil, 0},
		{"plain", errors.New("x"), 0},
		{"budget", &budget.ExhaustedError{RetryAfter: 3 * time.Second}, 3 * time.Second},
		{"breaker", &breaker.OpenError{RetryAfter: 30 * time.Second}, 30 * time.Second},
		{"status", &retry.StatusError{StatusCode: 503, RetryAfter: time.Second}, time.Second},
		{"give-up", &retry.GiveUpError{Err: &retry.StatusError{StatusCode: 429, RetryAfter: 2 * time.Second}}, 2 * time.Second},
		{"longest wins", &retry.GiveUpError{
			Err:   &retry.StatusError{StatusCode: 503, RetryAfter: 2 * time.Second},
			Cause: &breaker.OpenError{RetryAfter: 20 * time.Second},
		}, 20 * time.Second},
	} {
		d, ok := retry.RetryAfter(tc.err)
		if d != tc.want || ok != (tc.want > 0) {
			t.Errorf("%s: RetryAfter = %v, %v; want %v", tc.name, d, ok, tc.want)
		}
	}
}

func TestConcurrentCalls(t *testing.T) {
	ratio, err := local.NewRatio(local.RatioConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, retry.Config{Breaker: mustBreaker(t), Budgets: []budget.Budget{ratio}, TransientBase: time.Microsecond})
	done := make(chan int)
	for g := range 8 {
		go func() {
			calls := 0
			for i := range 50 {
				_ = e.Do(context.Background(), func(context.Context, int) error {
					calls++
					if (g+i)%5 == 0 {
						return status(503)
					}
					return nil
				})
			}
			done <- calls
		}()
	}
	total := 0
	for range 8 {
		total += <-done
	}
	if total < 400 {
		t.Errorf("made %d calls, want at least 400", total)
	}
}

func TestHealthyPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	ratio, err := local.NewRatio(local.RatioConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, retry.Config{Breaker: mustBreaker(t), Budgets: []budget.Budget{ratio}})
	ctx := context.Background()
	op := func(context.Context, int) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { _ = e.Do(ctx, op) }); n != 0 {
		t.Errorf("Executor.Do allocates %v times per healthy call, want 0", n)
	}
	gop := func(context.Context, int) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(1000, func() { _, _ = retry.Do(ctx, e, gop) }); n != 0 {
		t.Errorf("retry.Do allocates %v times per healthy call, want 0", n)
	}
}
