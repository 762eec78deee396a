package integration

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// A loaded machine now and then leaves this process's goroutines waiting
// for a CPU: with a CPU hog on one core and other work on the other, waits
// of 100-400 ms were seen under the race detector. A call that happens to
// be in such a wait when its deadline passes returns that much later,
// which says nothing about herdguard. relStalls measures those waits, so
// that the deadline tests (relOverruns, the soak) can tell them apart
// from time herdguard itself kept a call: a goroutine of its own sleeps
// relStallTick over and over and records every stretch it should have run
// but did not (woke later than asked). TestMain starts it before any test,
// so that the goroutine leak checks ignore it.

// relStallTick is the monitor's sleep; lateness under relStallMin is timer
// noise and is not recorded.
const (
	relStallTick = 2 * time.Millisecond
	relStallMin  = time.Millisecond
	// relStallKeep is how long a record is kept: longer than any test
	// phase whose calls are judged after it.
	relStallKeep = 10 * time.Minute
)

// stallMonitor records the stretches its goroutine waited for a CPU.
type stallMonitor struct {
	base time.Time // offsets are from it, on the monotonic clock
	mu   sync.Mutex
	recs []stallRec // in order of to
}

// stallRec is one stretch [from, to) the monitor should have been running
// in, as offsets from base.
type stallRec struct{ from, to time.Duration }

// relStalls is the binary's monitor; startStallMonitor runs it.
var relStalls = &stallMonitor{base: time.Now()}

// startStallMonitor runs relStalls until the returned function is called.
func startStallMonitor() (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		m := relStalls
		for {
			asked := time.Since(m.base) + relStallTick
			select {
			case <-done:
				return
			case <-time.After(relStallTick):
			}
			if woke := time.Since(m.base); woke-asked >= relStallMin {
				m.add(stallRec{from: asked, to: woke})
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

func (m *stallMonitor) add(r stallRec) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
	if cut := r.to - relStallKeep; len(m.recs) > 0 && m.recs[0].to < cut {
		i := sort.Search(len(m.recs), func(i int) bool { return m.recs[i].to >= cut })
		m.recs = append(m.recs[:0], m.recs[i:]...)
	}
}

// during returns how long, between from and to, the monitor waited for a
// CPU it should have had: the machine's share of a call's time, not
// herdguard's.
func (m *stallMonitor) during(from, to time.Time) time.Duration {
	f, t := from.Sub(m.base), to.Sub(m.base)
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum time.Duration
	for i := sort.Search(len(m.recs), func(i int) bool { return m.recs[i].to > f }); i < len(m.recs) && m.recs[i].from < t; i++ {
		sum += min(m.recs[i].to, t) - max(m.recs[i].from, f)
	}
	return sum
}

// TestStallMonitorDuring checks the arithmetic of during: overlaps of
// records with the asked span are summed, partial ones cut. It needs no
// DynamoDB.
func TestStallMonitorDuring(t *testing.T) {
	base := time.Unix(1000, 0)
	ms := time.Millisecond
	m := &stallMonitor{base: base}
	for _, r := range []stallRec{{10 * ms, 20 * ms}, {50 * ms, 150 * ms}, {200 * ms, 201 * ms}} {
		m.add(r)
	}
	at := func(d time.Duration) time.Time { return base.Add(d) }
	for _, c := range []struct {
		from, to, want time.Duration
	}{
		{0, 5 * ms, 0},
		{0, time.Second, 111 * ms},
		{15 * ms, 60 * ms, 15 * ms},
		{100 * ms, 120 * ms, 20 * ms},
		{150 * ms, 200 * ms, 0},
		{120 * ms, 200*ms + 500*time.Microsecond, 30*ms + 500*time.Microsecond},
	} {
		if got := m.during(at(c.from), at(c.to)); got != c.want {
			t.Errorf("during(%v, %v) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
