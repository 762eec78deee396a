package retry

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/hint"
)

// checkPlan asserts the invariants of Executor.plan: the wait is never
// negative, never shorter than the partner's hint, never longer than the
// hint plus MaxDelay, and never reaches into the deadline's margin; the
// executor gives up only for a hint above MaxRetryAfter or a deadline too
// close.
func checkPlan(t *testing.T, e *Executor, now time.Time, left time.Duration, hasDeadline bool, retry int, kind budget.Kind, hint time.Duration, random float64) {
	t.Helper()
	deadline := now.Add(left)
	wait, reason, ok := e.plan(now, deadline, hasDeadline, retry, kind, hint, random)
	if !ok {
		switch reason {
		case RetryAfterTooLong:
			if hint <= e.maxRetryAfter {
				t.Fatalf("gave up (%v) on hint %v <= MaxRetryAfter %v", reason, hint, e.maxRetryAfter)
			}
		case DeadlineTooClose:
			if !hasDeadline {
				t.Fatalf("gave up (%v) without a deadline", reason)
			}
		default:
			t.Fatalf("plan gave up with reason %v", reason)
		}
		if wait != 0 {
			t.Fatalf("plan gave up with wait %v", wait)
		}
		return
	}
	if wait < 0 {
		t.Fatalf("negative wait %v (hint %v, retry %d, random %v)", wait, hint, retry, random)
	}
	if hint > 0 && wait < hint {
		t.Fatalf("wait %v shorter than the partner's hint %v", wait, hint)
	}
	if hint > e.maxRetryAfter {
		t.Fatalf("waited %v for a hint %v above MaxRetryAfter %v", wait, hint, e.maxRetryAfter)
	}
	if lim := addSat(max(hint, 0), e.maxDelay); wait > lim {
		t.Fatalf("wait %v above hint + MaxDelay = %v", wait, lim)
	}
	if hasDeadline {
		if left := deadline.Sub(now); wait >= subSat(left, e.margin) {
			t.Fatalf("wait %v reaches into the deadline (%v left, margin %v)", wait, left, e.margin)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"120", "0", "007", "-1", "+5", "1.5", " 7 ", "", "soon", "99999999999999999999999",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 30 Nov 2026 12:00:10 GMT", "\x00", "12\n",
	} {
		f.Add(s, "1500", int64(1_796_040_000), int64(10_000), 0.5)
	}
	f.Add("30", "-1", int64(0), int64(10_000), 0.999999)
	f.Add("2", "99999999999999", int64(-62_135_596_800), int64(-5), 1.0)
	f.Fuzz(func(t *testing.T, ra, amz string, nowUnix, leftMs int64, random float64) {
		now := time.Unix(nowUnix, 0)
		d, ok := hint.Parse(ra, now)
		if d < 0 || d > hint.Max || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", ra, d, ok)
		}
		d2, ok2 := hint.ParseAmz(amz)
		if d2 < 0 || d2 > hint.Max || (!ok2 && d2 != 0) {
			t.Fatalf("ParseAmzRetryAfter(%q) = %v, %v", amz, d2, ok2)
		}
		h := http.Header{"Retry-After": {ra}, "X-Amz-Retry-After": {amz}}
		hd, hok := hint.FromHeader(h, now)
		if hok != (ok || ok2) || hd < 0 || hd > hint.Max || (ok && hd < d) || (ok2 && hd < d2) {
			t.Fatalf("RetryAfterFromHeader = %v, %v; parsed %v/%v and %v/%v", hd, hok, d, ok, d2, ok2)
		}

		e, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		left := time.Duration(leftMs%1_000_000_000) * time.Millisecond
		for _, retry := range []int{0, 1, 4, 62, 63, 1 << 40} {
			for _, kind := range []budget.Kind{budget.Transient, budget.Throttling} {
				checkPlan(t, e, now, left, true, retry, kind, hd, random)
				checkPlan(t, e, now, left, false, retry, kind, hd, random)
			}
		}
	})
}

func FuzzConfig(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(0, int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.5, int64(10_000*ms), false)
	f.Add(5, 100*ms, 100*ms, 1000*ms, int64(0), int64(0), int64(0), 3, 2000*ms, 0.999999, int64(10_000*ms), true)
	f.Add(-1, int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.5, int64(0), false)
	f.Add(3, 2000*ms, int64(0), 1000*ms, int64(0), int64(0), int64(0), 0, int64(0), 0.5, int64(0), false)
	f.Add(3, int64(-1), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.5, int64(0), false)
	f.Add(1, int64(1), int64(1), int64(1<<63-1), int64(1), int64(1<<63-1), int64(1<<63-1), 1<<30, int64(1<<63-1), 1.0, int64(1<<63-1), true)
	f.Add(2, int64(0), int64(0), 10*ms, int64(-5), int64(0), int64(0), 0, int64(0), 0.5, int64(0), false)
	f.Fuzz(func(t *testing.T, maxAttempts int, transient, throttling, maxDelay, attemptTimeout, margin, maxRA int64,
		retry int, hint int64, random float64, left int64, throttle bool) {
		cfg := Config{
			MaxAttempts:    maxAttempts,
			TransientBase:  time.Duration(transient),
			ThrottlingBase: time.Duration(throttling),
			MaxDelay:       time.Duration(maxDelay),
			AttemptTimeout: time.Duration(attemptTimeout),
			DeadlineMargin: time.Duration(margin),
			MaxRetryAfter:  time.Duration(maxRA),
		}
		effMax := cfg.MaxDelay
		if effMax == 0 {
			effMax = DefaultMaxDelay
		}
		valid := maxAttempts >= 0 && transient >= 0 && throttling >= 0 && maxDelay >= 0 &&
			attemptTimeout >= 0 && margin >= 0 && maxRA >= 0 &&
			cfg.TransientBase <= effMax && cfg.ThrottlingBase <= effMax

		e, err := New(cfg)
		if err != nil {
			var ce *herdguard.ConfigError
			if !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, "retry.Config.") || ce.Reason == "" {
				t.Fatalf("New error %v is not a *herdguard.ConfigError naming a field", err)
			}
			if valid {
				t.Fatalf("New rejected a valid config %+v: %v", cfg, err)
			}
			return
		}
		if !valid {
			t.Fatalf("New accepted an invalid config %+v", cfg)
		}
		if e.maxAttempts < 1 || e.maxDelay <= 0 || e.transientBase <= 0 || e.throttlingBase <= 0 ||
			e.transientBase > e.maxDelay || e.throttlingBase > e.maxDelay || e.margin <= 0 || e.maxRetryAfter <= 0 {
			t.Fatalf("resolved executor out of range: %+v", e)
		}
		kind := budget.Transient
		if throttle {
			kind = budget.Throttling
		}
		now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		checkPlan(t, e, now, time.Duration(left), true, retry, kind, time.Duration(hint), random)
		checkPlan(t, e, now, time.Duration(left), false, retry, kind, time.Duration(hint), random)
	})
}
