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
// The scheduler has no goroutine of its own: whoever gives up control (a
// proc parking or ending, or Run starting) runs it, handling arrivals
// inline until the next event is a proc's wake-up, and then hands control
// straight to that proc (or keeps it, when the proc is itself), one
// channel operation per switch. Exactly one goroutine holds control at a
// time; the hand-offs are channel operations, which order every access to
// the simulation's state for the race detector too.
type Clock struct {
	start int64 // Unix nanoseconds of simulated time zero
	now   int64 // Unix nanoseconds
	until int64 // the scheduler stops before events after it
	seq   uint64
	q     eventQueue
	done  chan struct{} // control goes back to Run
	cur   *proc         // the proc holding control, nil in Run
	// stopped makes every Sleep return at once with an error (the run is
	// being torn down).
	stopped bool
	events  int64 // events processed
	// free holds procs whose work ended, waiting for more: reusing their
	// goroutines saves growing a fresh stack for every invocation.
	free []*proc
}

// proc is one simulated goroutine.
type proc struct {
	wake chan struct{}
	job  func() // the work it runs next; nil ends the goroutine
}

func newClock(start time.Time) *Clock {
	n := start.UnixNano()
	return &Clock{start: n, now: n, done: make(chan struct{})}
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
	if !c.schedule(p) {
		<-p.wake
	}
	if c.stopped {
		return context.Canceled
	}
	return ctx.Err()
}

// spawn has f run on a proc (a free one, or a new one) at the current
// time, after the events already due then.
func (c *Clock) spawn(f func()) {
	var p *proc
	if n := len(c.free); n > 0 {
		p = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		p = &proc{wake: make(chan struct{})}
		go c.loop(p)
	}
	p.job = f
	c.push(event{at: c.now, p: p})
}

// loop is a proc's goroutine: it runs one job each time it gets control
// with one, and returns when it gets control without.
func (c *Clock) loop(p *proc) {
	<-p.wake
	for {
		job := p.job
		if job == nil {
			return
		}
		p.job = nil
		job()
		c.free = append(c.free, p)
		if !c.schedule(p) {
			<-p.wake
		}
	}
}

// schedule runs the scheduler for self, the goroutine giving up control
// (nil for Run): it processes events until one wakes a proc and reports
// whether that proc is self (which then just goes on). Otherwise it has
// handed control to that proc, or back to Run when no event is due, and
// self must wait for its wake-up.
func (c *Clock) schedule(self *proc) bool {
	for {
		if c.stopped || len(c.q) == 0 || c.q[0].at > c.until {
			c.cur = nil
			c.done <- struct{}{}
			return false
		}
		ev := c.q.pop()
		c.now = ev.at
		c.events++
		if ev.fn != nil {
			ev.fn()
			continue
		}
		c.cur = ev.p
		if ev.p == self {
			return true
		}
		ev.p.wake <- struct{}{}
		return false
	}
}

// at schedules fn to run in the scheduler at simulated time t (Unix
// nanoseconds). fn must not park.
func (c *Clock) at(t int64, fn func()) { c.push(event{at: t, fn: fn}) }

// runUntil processes events up to and including simulated time until
// (Unix nanoseconds). It is called by Run only.
func (c *Clock) runUntil(until int64) {
	c.until = until
	go func() { c.schedule(nil) }()
	<-c.done
}

// stop wakes every parked proc with Sleep returning an error, so that its
// work ends (the executor gives up when its Sleep fails), drops the
// remaining callbacks and ends every proc's goroutine. The clock stays
// where it is. It is called by Run only, after runUntil.
func (c *Clock) stop() {
	c.stopped = true
	for len(c.q) > 0 {
		ev := c.q.pop()
		if ev.p != nil {
			c.events++
			c.cur = ev.p
			ev.p.wake <- struct{}{}
			<-c.done
		}
	}
	for _, p := range c.free {
		p.wake <- struct{}{} // no job: the goroutine returns
	}
	c.free = nil
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
