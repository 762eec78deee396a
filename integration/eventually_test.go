package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// How the integration tests assert eventual state. Real DynamoDB calls and
// real goroutines take what a machine gives them, so a state the design
// promises "within B" is awaited, polled, for at most B, and B is derived
// from the design (CacheTTL, StoreTimeout, ReportInterval, ...) and stated
// where it is used, never sampled once at an instant the test guessed.

// eventually checks cond every poll until it returns nil or bound has
// passed since the call, and reports whether it held. If it never did, the
// test fails (t.Errorf) with cond's last error and the bound. cond is
// checked once more at the bound, so a bound shorter than poll still
// checks twice.
func eventually(t testing.TB, bound, poll time.Duration, cond func() error) bool {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		err := cond()
		if err == nil {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Errorf("not within %v: %v", bound, err)
			return false
		}
		time.Sleep(min(poll, left))
	}
}

// becomes is eventually for a test that must keep working while it waits
// (a fleet that keeps calling): it checks cond every poll in a goroutine
// and returns a channel closed once cond has returned true, and a function
// that ends the watch (idempotent; call it when the wait is over). The
// test bounds the wait itself and then asserts the state.
func becomes(poll time.Duration, cond func() bool) (<-chan struct{}, func()) {
	held := make(chan struct{})
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			if cond() {
				close(held)
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var closed bool
	return held, func() {
		if !closed {
			closed = true
			close(done)
		}
		<-ended
	}
}

// TestEventually checks the helper itself: a condition that becomes true
// is awaited, one that never does fails with its last error after the
// bound, and the bound is honoured. It needs no DynamoDB.
func TestEventually(t *testing.T) {
	var n int
	if !eventually(t, time.Minute, time.Millisecond, func() error {
		if n++; n < 3 {
			return errTest(n)
		}
		return nil
	}) || n != 3 {
		t.Fatalf("eventually: condition checked %d times, want 3", n)
	}

	ft := &fakeTB{TB: t}
	start := time.Now()
	if eventually(ft, 20*time.Millisecond, 5*time.Millisecond, func() error { return errTest(7) }) {
		t.Fatal("eventually held for a condition that never does")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("eventually gave up after %v, before its bound of 20ms", took)
	}
	if ft.msg == "" || !strings.Contains(ft.msg, "not within 20ms") || !strings.Contains(ft.msg, "state 7") {
		t.Errorf("eventually reported %q; want the bound and the last error", ft.msg)
	}

	held, end := becomes(time.Millisecond, func() bool { return true })
	<-held
	end()
	end()
	never, end := becomes(time.Millisecond, func() bool { return false })
	end()
	select {
	case <-never:
		t.Error("becomes closed its channel for a condition that never held")
	default:
	}
}

type errTest int

func (e errTest) Error() string { return fmt.Sprintf("state %d", int(e)) }

// fakeTB records Errorf instead of failing.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}
