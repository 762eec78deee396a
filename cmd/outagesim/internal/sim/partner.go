package sim

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// AttemptHeader is the request header carrying the attempt number (1 for a
// first attempt). The partner uses it to count first attempts apart from
// retries; it plays no part in admission.
const AttemptHeader = "X-Outagesim-Attempt"

// DueHeader is the request header carrying the simulated time (nanoseconds
// since the clock's epoch) at which the attempt was due: a first attempt's
// scheduled start, a retry's end of backoff. The partner measures how late
// attempts arrive (Lag), which tells whether the machine kept up.
const DueHeader = "X-Outagesim-Due"

// SlotLength is the resolution of the partner's fine-grained counters
// (Slots): the failure ratio the fleet saw over a breaker window is
// computed from them.
const SlotLength = 100 * time.Millisecond

// LateAfter is the lag past which an arrival counts as late: a tenth of the
// partner's capacity second. A run whose attempts arrive that late is not
// the scenario that was asked for.
const LateAfter = 100 * time.Millisecond

// Schedule is the partner's capacity over time: Normal calls per simulated
// second, dropping to Outage calls per second for the seconds in
// [OutageStart, OutageStart+OutageLength).
type Schedule struct {
	Normal       int
	Outage       int
	OutageStart  time.Duration
	OutageLength time.Duration
	// Slot, if positive and under a second, is the period capacity is
	// enforced over: each Slot of a second serves the second's capacity ×
	// Slot / 1 s calls (rounded, at least one if the capacity is not 0),
	// first come first served, a smoother limit that turns calls away when
	// they bunch up within a second under its capacity. 0: a second.
	Slot time.Duration
}

// Validate checks that capacities are not negative and that the outage
// starts and lasts a whole number of seconds, so that capacity changes on a
// second boundary.
func (s Schedule) Validate() error {
	switch {
	case s.Normal < 0:
		return fmt.Errorf("normal capacity %d is negative", s.Normal)
	case s.Outage < 0:
		return fmt.Errorf("outage capacity %d is negative", s.Outage)
	case s.OutageStart < 0 || s.OutageStart%time.Second != 0:
		return fmt.Errorf("outage start %v must be a non-negative whole number of seconds", s.OutageStart)
	case s.OutageLength < 0 || s.OutageLength%time.Second != 0:
		return fmt.Errorf("outage length %v must be a non-negative whole number of seconds", s.OutageLength)
	case s.Slot < 0 || s.Slot > time.Second || (s.Slot > 0 && (s.Slot < time.Millisecond || time.Second%s.Slot != 0)):
		return fmt.Errorf("capacity slot %v must be 0 (a second) or a whole fraction of a second, at least 1ms", s.Slot)
	}
	return nil
}

// InOutage reports whether simulated second sec (counted from 0) is part of
// the outage.
func (s Schedule) InOutage(sec int) bool {
	t := time.Duration(sec) * time.Second
	return t >= s.OutageStart && t < s.OutageStart+s.OutageLength
}

// Capacity returns the number of calls the partner serves in second sec.
func (s Schedule) Capacity(sec int) int {
	if s.InOutage(sec) {
		return s.Outage
	}
	return s.Normal
}

// slotCapacity returns the calls one Slot of second sec serves.
func (s Schedule) slotCapacity(sec int) int64 {
	c := s.Capacity(sec)
	if c == 0 {
		return 0
	}
	return max(1, int64(math.Round(float64(c)*s.Slot.Seconds())))
}

// PartnerConfig configures a Partner.
type PartnerConfig struct {
	Schedule Schedule
	// Seconds is the number of per-second counters kept; arrivals after the
	// last one are counted in it.
	Seconds int
	// RejectStatus is the status of a call beyond capacity: 503 or 429.
	RejectStatus int
	// RetryAfter is sent with every rejection as Retry-After (whole seconds,
	// rounded up) and as x-amz-retry-after (milliseconds). Zero sends
	// neither header.
	RetryAfter time.Duration
	// Latency is the simulated service time of every call.
	Latency time.Duration
	// Slowdown, if positive, makes the partner slower under overload: each
	// call in a second whose arrivals have exceeded capacity takes an
	// extra Slowdown × min(arrivals/capacity − 1, 10). With the partner
	// counting arrivals as they come, the slowdown grows through the second.
	Slowdown time.Duration
}

// Second is what the partner saw in one simulated second.
type Second struct {
	// Arrivals counts every call that reached the partner.
	Arrivals int64 `json:"arrivals"`
	// FirstAttempts counts arrivals that were first attempts.
	FirstAttempts int64 `json:"first_attempts"`
	// FirstAttemptsByDue counts first attempts by the second they were
	// due in (their call's scheduled start, from DueHeader), whenever
	// they arrived. A second's calls are scheduled evenly, Rate of them,
	// so FirstAttemptsByDue against Rate is the share of that second's
	// calls the fleet sent, which FirstAttempts is not over HTTP: an
	// attempt that arrives late is counted there in a later second.
	FirstAttemptsByDue int64 `json:"first_attempts_by_due"`
	// Served counts arrivals within capacity (answered 200).
	Served int64 `json:"served"`
}

type secondCounters struct {
	arrivals      atomic.Int64
	firstAttempts atomic.Int64
	firstByDue    atomic.Int64
	served        atomic.Int64
}

// Slot is what the partner saw in one SlotLength of simulated time.
type Slot struct {
	Arrivals int64
	Rejected int64
}

type slotCounters struct {
	arrivals atomic.Int64
	rejected atomic.Int64
}

// Lag tells how late attempts reached the partner after they were due
// (DueHeader), in simulated time: by the machine's delays, not by the
// scenario. First attempts and retries are counted apart.
type Lag struct {
	// Measured counts arrivals that carried their due time.
	Measured      int64 `json:"measured"`
	FirstMeasured int64 `json:"first_attempts_measured"`
	// Late counts those that arrived more than LateAfter after they were
	// due; LateFirst the first attempts among them.
	Late      int64 `json:"late"`
	LateFirst int64 `json:"late_first_attempts"`
	// Max is the largest lag seen, Mean the mean.
	Max  Duration `json:"max_seconds"`
	Mean Duration `json:"mean_seconds"`
}

type lagCounters struct {
	measured, firstMeasured, late, lateFirst, max, sum atomic.Int64
}

// Partner is the overloaded partner API: a net/http handler that serves at
// most Schedule.Capacity(s) calls in simulated second s (spread over
// Schedule.Slot if it is under a second) and rejects the rest with
// RejectStatus and Retry-After.
//
// Admission is exact: arrivals in a second are numbered by one atomic
// counter, and arrival n is served if and only if n ≤ capacity, so a second
// serves min(arrivals, capacity) calls however many arrive concurrently.
type Partner struct {
	cfg     PartnerConfig
	clock   TimeSource
	epoch   time.Time         // the clock's epoch: DueHeader counts from it
	busy    func(delta int64) // the HTTP clock's backpressure (Clock.Busy); nil in process
	start   time.Time         // simulated time of second 0
	seconds []secondCounters
	slots   []slotCounters // SlotLength each, over the same span as seconds
	admit   []atomic.Int64 // arrivals per Schedule.Slot, over the same span, when it is under a second
	lag     lagCounters
}

// NewPartner returns a partner whose second 0 starts at start on clock,
// to serve over HTTP (ServeHTTP).
func NewPartner(clock *Clock, start time.Time, cfg PartnerConfig) (*Partner, error) {
	p, err := NewInprocPartner(clock, start, cfg)
	if err != nil {
		return nil, err
	}
	p.epoch, p.busy = clock.Epoch(), clock.Busy
	return p, nil
}

// NewInprocPartner returns a partner whose second 0 starts at start on
// clock, to call in process (Answer).
func NewInprocPartner(clock TimeSource, start time.Time, cfg PartnerConfig) (*Partner, error) {
	if err := cfg.Schedule.Validate(); err != nil {
		return nil, fmt.Errorf("sim: partner: %w", err)
	}
	switch {
	case cfg.Seconds < 1:
		return nil, fmt.Errorf("sim: partner: Seconds %d must be at least 1", cfg.Seconds)
	case cfg.RejectStatus != http.StatusServiceUnavailable && cfg.RejectStatus != http.StatusTooManyRequests:
		return nil, fmt.Errorf("sim: partner: RejectStatus %d must be 503 or 429", cfg.RejectStatus)
	case cfg.RetryAfter < 0:
		return nil, fmt.Errorf("sim: partner: RetryAfter %v is negative", cfg.RetryAfter)
	case cfg.Latency < 0:
		return nil, fmt.Errorf("sim: partner: Latency %v is negative", cfg.Latency)
	case cfg.Slowdown < 0:
		return nil, fmt.Errorf("sim: partner: Slowdown %v is negative", cfg.Slowdown)
	}
	p := &Partner{cfg: cfg, clock: clock, epoch: start, start: start, seconds: make([]secondCounters, cfg.Seconds),
		slots: make([]slotCounters, cfg.Seconds*int(time.Second/SlotLength))}
	if sl := cfg.Schedule.Slot; sl > 0 && sl < time.Second {
		p.admit = make([]atomic.Int64, cfg.Seconds*int(time.Second/sl))
	}
	return p, nil
}

// Decision is the partner's answer to one arrival.
type Decision struct {
	Second  int           // the simulated second the call arrived in
	Served  bool          // within capacity
	Latency time.Duration // simulated time to take before answering
}

// Admit counts one arrival at simulated time now and decides it. first
// tells whether the call is a first attempt.
func (p *Partner) Admit(now time.Time, first bool) Decision {
	sec := p.secondOf(now)
	c := &p.seconds[sec]
	n := c.arrivals.Add(1)
	if first {
		c.firstAttempts.Add(1)
	}
	capacity := int64(p.cfg.Schedule.Capacity(sec))
	d := Decision{Second: sec, Served: n <= capacity, Latency: p.cfg.Latency}
	if p.admit != nil {
		d.Served = p.admit[p.admitSlotOf(now)].Add(1) <= p.cfg.Schedule.slotCapacity(sec)
	}
	if d.Served {
		c.served.Add(1)
	}
	slot := &p.slots[p.slotOf(now)]
	slot.arrivals.Add(1)
	if !d.Served {
		slot.rejected.Add(1)
	}
	if p.cfg.Slowdown > 0 && n > capacity {
		over := 10.0
		if capacity > 0 {
			over = min(float64(n)/float64(capacity)-1, 10)
		}
		d.Latency += time.Duration(over * float64(p.cfg.Slowdown))
	}
	return d
}

func (p *Partner) secondOf(now time.Time) int {
	el := now.Sub(p.start)
	if el < 0 {
		return 0
	}
	return min(int(el/time.Second), len(p.seconds)-1)
}

// admitSlotOf returns the index of now's Schedule.Slot in p.admit.
func (p *Partner) admitSlotOf(now time.Time) int {
	el := now.Sub(p.start)
	if el < 0 {
		return 0
	}
	return min(int(el/p.cfg.Schedule.Slot), len(p.admit)-1)
}

func (p *Partner) slotOf(now time.Time) int {
	el := now.Sub(p.start)
	if el < 0 {
		return 0
	}
	return min(int(el/SlotLength), len(p.slots)-1)
}

// RecordLag counts an arrival at now of an attempt that was due at due,
// and a first attempt in FirstAttemptsByDue of its due second.
func (p *Partner) RecordLag(now, due time.Time, first bool) {
	lag := now.Sub(due)
	p.lag.measured.Add(1)
	p.lag.sum.Add(int64(lag))
	if first {
		p.lag.firstMeasured.Add(1)
		p.seconds[p.secondOf(due)].firstByDue.Add(1)
	}
	if lag > LateAfter {
		p.lag.late.Add(1)
		if first {
			p.lag.lateFirst.Add(1)
		}
	}
	for {
		m := p.lag.max.Load()
		if int64(lag) <= m || p.lag.max.CompareAndSwap(m, int64(lag)) {
			return
		}
	}
}

// Lag returns the lag counters so far.
func (p *Partner) Lag() Lag {
	return Lag{
		Measured: p.lag.measured.Load(), FirstMeasured: p.lag.firstMeasured.Load(),
		Late: p.lag.late.Load(), LateFirst: p.lag.lateFirst.Load(),
		Max: Duration(p.lag.max.Load()), Mean: Duration(p.lag.sum.Load() / max(p.lag.measured.Load(), 1)),
	}
}

// Slots returns a snapshot of the SlotLength counters, from the start of
// second 0.
func (p *Partner) Slots() []Slot {
	out := make([]Slot, len(p.slots))
	for i := range p.slots {
		out[i] = Slot{Arrivals: p.slots[i].arrivals.Load(), Rejected: p.slots[i].rejected.Load()}
	}
	return out
}

// Seconds returns a snapshot of the per-second counters.
func (p *Partner) Seconds() []Second {
	out := make([]Second, len(p.seconds))
	for i := range p.seconds {
		a := p.seconds[i].arrivals.Load()
		out[i] = Second{
			Arrivals:           a,
			FirstAttempts:      p.seconds[i].firstAttempts.Load(),
			FirstAttemptsByDue: p.seconds[i].firstByDue.Load(),
			Served:             p.seconds[i].served.Load(),
		}
	}
	return out
}

// Answer is one attempt reaching the partner in process: it admits it
// (first tells whether it is a first attempt, due when it was due), waits
// its simulated latency and returns the partner's answer, with no body. It
// returns ctx's error if ctx ends during the wait.
func (p *Partner) Answer(ctx context.Context, first bool, due time.Time) (*http.Response, error) {
	status, h, err := p.answer(ctx, first, due, true)
	if err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Body: http.NoBody}, nil
}

func (p *Partner) answer(ctx context.Context, first bool, due time.Time, hasDue bool) (int, http.Header, error) {
	now := p.clock.Now()
	d := p.Admit(now, first)
	if hasDue {
		p.RecordLag(now, due, first)
	}
	if d.Latency > 0 {
		if err := p.clock.Sleep(ctx, d.Latency); err != nil {
			return 0, nil, err // the client went away
		}
	}
	h := http.Header{}
	if d.Served {
		return http.StatusOK, h, nil
	}
	if ra := p.cfg.RetryAfter; ra > 0 {
		secs := int64((ra + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		h.Set("X-Amz-Retry-After", strconv.FormatInt(ra.Milliseconds(), 10))
	}
	return p.cfg.RejectStatus, h, nil
}

// ServeHTTP admits the call, waits its simulated latency and answers 200,
// or RejectStatus with Retry-After.
//
// The request has arrived: from here until the response is written the
// call is in service, which takes simulated time, not in transit, which
// the clock's backpressure counts (see Clock.Busy).
func (p *Partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.busy != nil {
		p.busy(-1)
		defer p.busy(+1)
	}
	first := r.Header.Get(AttemptHeader) == "1"
	var due time.Time
	v := r.Header.Get(DueHeader)
	ns, perr := strconv.ParseInt(v, 10, 64)
	hasDue := v != "" && perr == nil
	if hasDue {
		due = p.epoch.Add(time.Duration(ns))
	}
	status, h, err := p.answer(r.Context(), first, due, hasDue)
	if err != nil {
		return
	}
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
}

// Server is a Partner listening on loopback.
type Server struct {
	URL string
	srv *http.Server
	ln  net.Listener
}

// Serve starts an HTTP server for h on 127.0.0.1 on a free port.
func Serve(h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sim: partner listen: %w", err)
	}
	s := &Server{
		URL: "http://" + ln.Addr().String() + "/",
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		ln:  ln,
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and closes its connections.
func (s *Server) Close() error { return s.srv.Close() }
