package leakcheck

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockUntil is the leaked goroutine's function, named so that its stack
// can be recognised.
func blockUntil(release <-chan struct{}) { <-release }

// TestLeftoversReportsALeak: a goroutine started after the snapshot and
// still blocked is reported with its stack; once it exits, it no longer is.
func TestLeftoversReportsALeak(t *testing.T) {
	s := Take()
	release := make(chan struct{})
	go blockUntil(release)
	left := s.Leftovers(50 * time.Millisecond)
	if len(left) != 1 || !strings.Contains(left[0], "leakcheck.blockUntil") {
		t.Fatalf("leftovers %q, want the one goroutine in blockUntil", left)
	}
	close(release)
	if left := s.Leftovers(Wait); left != nil {
		t.Errorf("leftovers after the goroutine exited: %q", left)
	}
}

// TestLeftoversWaitsForExit: a goroutine that ends within the bound is not
// a leak, however late in the bound it ends.
func TestLeftoversWaitsForExit(t *testing.T) {
	s := Take()
	release := make(chan struct{})
	go blockUntil(release)
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	if left := s.Leftovers(Wait); left != nil {
		t.Errorf("leftovers %q: the goroutine ends 100 ms in, within the bound", left)
	}
}

// TestLeftoversIgnoresOlderAndTestingGoroutines: goroutines alive at the
// snapshot and the testing package's own (a subtest started later) are not
// counted.
func TestLeftoversIgnoresOlderAndTestingGoroutines(t *testing.T) {
	older := make(chan struct{})
	defer close(older)
	go blockUntil(older)
	s := Take()
	var wg sync.WaitGroup
	wg.Add(1)
	inSubtest := make(chan struct{})
	go func() { // Leftovers runs here while the subtest's goroutine waits
		defer wg.Done()
		<-inSubtest
		if left := s.Leftovers(0); left != nil {
			t.Errorf("leftovers %q: only the older goroutine, the subtest and the caller run", left)
		}
		close(inSubtest)
	}()
	t.Run("sub", func(t *testing.T) {
		inSubtest <- struct{}{}
		<-inSubtest
	})
	wg.Wait()
}

// fakeTB records what Check reports; only the methods Check calls are
// implemented.
type fakeTB struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(s string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(s, args...))
}

// TestCheckFailsTheTest: Check fails a test that leaves a goroutine
// running, naming it, and passes one whose goroutines have ended (with a
// short bound instead of Wait, which only a failing test waits out).
func TestCheckFailsTheTest(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	leaky := &fakeTB{}
	check(leaky, 50*time.Millisecond)
	go blockUntil(release)
	for _, fn := range leaky.cleanups {
		fn()
	}
	if len(leaky.errors) != 1 || !strings.Contains(leaky.errors[0], "leakcheck.blockUntil") {
		t.Errorf("Check reported %q, want one error naming blockUntil", leaky.errors)
	}

	clean := &fakeTB{}
	check(clean, Wait)
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
	for _, fn := range clean.cleanups {
		fn()
	}
	if len(clean.errors) != 0 {
		t.Errorf("Check reported %q for a goroutine that ended", clean.errors)
	}
}
