package fleetsim

import (
	"context"
	"errors"
	"time"
)

// errNoProc is what Sleep returns when it is called from a goroutine the
// simulation did not start (the simulation cannot park it).
var errNoProc = errors.New("fleetsim: Clock.Sleep called outside a simulated goroutine")

// Clock is the simulation's virtual clock and scheduler. It implements
// retry.Clock: every layer of the library under test reads its time from
// Now and waits in Sleep.
//
// Simulated goroutines (procs) run one at a time. A proc runs until it
// parks in Sleep or ends; the scheduler then advances the virtual time to
// the earliest pending event (a proc's wake-up, or an arrival of new work)
// and runs it. Ties are broken by the order the events were scheduled in, so
// a run is a deterministic function of its inputs. No real time passes in
// Sleep.
//
// Only the scheduler (Run's goroutine, which handles arrivals) and the proc
// that is running touch the Clock; the hand-offs between them are channel
// operations, which order every access for the race detector too.
type Clock struct {
	start int64 // Unix nanoseconds of simulated time zero
	now   int64 // Unix nanoseconds
	seq   uint64
	q     eventQueue
	park  chan struct{} // the running proc hands control back
	cur   *proc         // the running proc, nil in the scheduler
	// stopped makes every Sleep return at once with an error (the run is
	// being torn down).
	stopped bool
	events  int64 // events processed
}

// proc is one simulated goroutine.
type proc struct {
	wake chan struct{}
	env  *env // the environment it runs for (for attribution)
}

func newClock(start time.Time) *Clock {
	n := start.UnixNano()
	return &Clock{start: n, now: n, park: make(chan struct{})}
}

// Now returns the current simulated time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.now) }

// Elapsed returns the simulated time since the start of the run.
func (c *Clock) Elapsed() time.Duration { return time.Duration(c.now - c.start) }

// Sleep parks the calling proc for d of simulated time. It returns
// ctx.Err() if ctx has ended (before or after the wait) and an error when
// called from a goroutine the simulation did not start or while the run is
// being torn down; otherwise nil. d <= 0 returns at once without yielding.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	p := c.cur
	if p == nil {
		return errNoProc
	}
	if c.stopped {
		return context.Canceled
	}
	c.push(event{at: c.now + int64(d), p: p})
	c.park <- struct{}{}
	<-p.wake
	if c.stopped {
		return context.Canceled
	}
	return ctx.Err()
}

// spawn starts f as a new proc and runs it until it parks or ends. It is
// called by the scheduler only.
func (c *Clock) spawn(e *env, f func()) {
	p := &proc{wake: make(chan struct{}), env: e}
	go func() {
		<-p.wake
		f()
		c.park <- struct{}{}
	}()
	c.resume(p)
}

// resume runs p until it parks or ends.
func (c *Clock) resume(p *proc) {
	c.cur = p
	p.wake <- struct{}{}
	<-c.park
	c.cur = nil
}

// at schedules fn to run in the scheduler at simulated time t (Unix
// nanoseconds). fn must not park.
func (c *Clock) at(t int64, fn func()) { c.push(event{at: t, fn: fn}) }

// runUntil processes events up to and including simulated time until
// (Unix nanoseconds), and reports whether events are left.
func (c *Clock) runUntil(until int64) bool {
	for len(c.q) > 0 {
		if c.q[0].at > until {
			return true
		}
		ev := c.q.pop()
		c.now = ev.at
		c.events++
		if ev.fn != nil {
			ev.fn()
			continue
		}
		c.resume(ev.p)
	}
	return false
}

// stop wakes every parked proc with Sleep returning an error, so that each
// ends (the executor gives up when its Sleep fails), and drops the
// remaining callbacks. The clock stays where it is.
func (c *Clock) stop() {
	c.stopped = true
	for len(c.q) > 0 {
		ev := c.q.pop()
		if ev.p != nil {
			c.events++
			c.resume(ev.p)
		}
	}
}

func (c *Clock) push(ev event) {
	c.seq++
	ev.seq = c.seq
	c.q.push(ev)
}

// event is a proc to wake (p) or a callback to run (fn) at simulated time
// at; seq breaks ties in scheduling order.
type event struct {
	at  int64
	seq uint64
	p   *proc
	fn  func()
}

func (a *event) before(b *event) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// eventQueue is a binary min-heap of events (container/heap without the
// interface calls: the scheduler's hottest path).
type eventQueue []event

func (q *eventQueue) push(ev event) {
	h := append(*q, ev)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].before(&h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	*q = h
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
