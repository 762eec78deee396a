// Package leakcheck finds the goroutines a test leaves behind: the tests'
// replacement for go.uber.org/goleak, so that the library's module needs
// no dependency for it. Check(t) at the start of a test fails the test,
// after every clean-up registered after it, if a goroutine started since is
// still running once Wait has passed.
//
// Goroutines the testing package starts (other tests, subtests) and the
// standard library's background goroutines (signal handling) are not
// counted. Goroutine IDs are never reused, so a goroutine that exits and
// another that starts in between cannot be confused.
package leakcheck

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Wait bounds how long Check waits for the goroutines a test started to
// exit: connections just closed and timers just stopped end within it
// even on a loaded machine. Only a failing test waits that long.
const Wait = 10 * time.Second

// Snapshot is the set of goroutines alive when it was taken.
type Snapshot struct {
	ids map[uint64]bool
}

// Take records the goroutines alive now.
func Take() Snapshot {
	s := Snapshot{ids: map[uint64]bool{}}
	for _, g := range goroutines() {
		s.ids[g.id] = true
	}
	return s
}

// Leftovers waits up to wait for every goroutine started since s was
// taken to exit, apart from the testing package's and the runtime's, and
// returns the stacks of those still running then (nil if none).
func (s Snapshot) Leftovers(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		left := s.started()
		if len(left) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			return left
		}
		time.Sleep(min(pause, time.Until(deadline)))
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// started returns the stacks of the goroutines running now that s does not
// hold and that are not ignored.
func (s Snapshot) started() []string {
	var left []string
	for _, g := range goroutines() {
		if !s.ids[g.id] && !ignored(g.stack) {
			left = append(left, g.stack)
		}
	}
	return left
}

// Check takes a snapshot now and registers a clean-up that fails t with
// the stacks of the goroutines started since that are still running Wait
// after the test and its later clean-ups ended.
func Check(t testing.TB) {
	t.Helper()
	check(t, Wait)
}

func check(t testing.TB, wait time.Duration) {
	s := Take()
	t.Cleanup(func() {
		if left := s.Leftovers(wait); len(left) > 0 {
			t.Errorf("%d goroutine(s) still running %v after the test ended:\n\n%s", len(left), wait, strings.Join(left, "\n\n"))
		}
	})
}

type goroutine struct {
	id    uint64
	stack string
}

// goroutines returns every user goroutine's stack but the caller's.
func goroutines() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	// The first block is the calling goroutine's own.
	for i, block := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue
		}
		stack := string(bytes.TrimSpace(block))
		head, _, _ := strings.Cut(stack, " [")
		id, err := strconv.ParseUint(strings.TrimPrefix(head, "goroutine "), 10, 64)
		if err != nil {
			continue // not a goroutine header
		}
		gs = append(gs, goroutine{id, stack})
	}
	return gs
}

// ignored reports whether a goroutine belongs to the testing package (a
// test or subtest running or waiting, the main goroutine) or to the
// standard library's signal handling.
func ignored(stack string) bool {
	_, createdBy, found := strings.Cut(stack, "\ncreated by ")
	if !found {
		return true // the main goroutine
	}
	if strings.HasPrefix(createdBy, "testing.") {
		return true
	}
	for _, f := range []string{"os/signal.signal_recv", "os/signal.loop(", "runtime.ensureSigM"} {
		if strings.Contains(stack, f) {
			return true
		}
	}
	return false
}
