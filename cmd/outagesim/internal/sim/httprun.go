package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"
)

// The HTTP engine: a real net/http partner on loopback, the fleet's calls
// as goroutines, and simulated time running Speed times faster than real
// time (Clock).

// maxConns bounds the fleet's connections to the partner.
const maxConns = 512

// Clock backpressure (see Clock): simulated time stops while more than
// busyHigh requests, responses and not-yet-sent calls are in transit, and
// starts again at busyLow; it advances by at most maxStep of real time
// between two steps, taken every clockTick. maxPause is the watchdog's
// limit.
const (
	busyHigh  = 64
	busyLow   = 16
	clockTick = time.Millisecond
	maxStep   = 5 * time.Millisecond
	maxPause  = 2 * time.Second
	// driverTick is how often the driver starts the calls that are due.
	driverTick = 500 * time.Microsecond
)

var attemptValues = func() []string {
	v := make([]string, 101)
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

// runName names a strategy's shared budget and breaker per strategy and
// per run, so that runs sharing a DynamoDB table (-dynamodb-table) never
// meet.
func runName(info StrategyInfo, start time.Time) string {
	return "outagesim-" + info.Key + "-" + strconv.FormatInt(start.UnixMilli(), 36)
}

func (r *Runner) runHTTP(ctx context.Context, info StrategyInfo) (*Result, error) {
	cfg := r.Config
	wallStart := time.Now()
	clock, err := NewClock(time.Now().Truncate(time.Minute), cfg.Speed)
	if err != nil {
		return nil, err
	}
	clock.SetBackpressure(busyHigh, busyLow)
	clock.SetMaxStep(maxStep)
	clockCtx, stopClock := context.WithCancel(ctx)
	defer stopClock()
	go clock.Run(clockCtx, clockTick, maxPause)
	strategy, err := info.Build(ctx, Deps{Config: cfg, Clock: clock, Backend: r.Backend, Name: runName(info, wallStart)})
	if err != nil {
		return nil, fmt.Errorf("strategy %s: %w", info.Key, err)
	}
	defer func() { _ = strategy.Close(context.WithoutCancel(ctx)) }()

	// Second 0 starts on the first whole simulated second at least 100 ms
	// of real time from now, which leaves time to set the fleet up.
	t0 := clock.Now().Add(time.Duration(float64(100*time.Millisecond) * cfg.Speed)).Truncate(time.Second).Add(time.Second)
	partner, err := NewPartner(clock, t0, partnerConfig(cfg))
	if err != nil {
		return nil, err
	}
	srv, err := Serve(partner)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	// One connection pool for the fleet, bounded so that a burst of retries
	// on a busy machine cannot open thousands of connections and run out of
	// file descriptors. A request holds its connection while the partner
	// serves it (Latency and Slowdown, in simulated time), so the bound is
	// also the most calls the partner serves at once; beyond it requests
	// wait for a connection in real time.
	transport := &http.Transport{
		MaxConnsPerHost:     maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	if r.wrapTransport != nil {
		client.Transport = r.wrapTransport(transport)
	}

	rn := newRun(cfg, clock, clock.Epoch(), strategy, partner, t0)
	rn.goCall = func(f func()) { go f() }
	rn.busy = clock.Busy
	rn.attempt = func(ctx context.Context, n int, due time.Time) (*http.Response, error) {
		return sendHTTP(ctx, client, srv.URL, clock, n, due)
	}
	if err := rn.startFleet(); err != nil {
		return nil, err
	}
	if err := clock.SleepUntil(ctx, t0); err != nil {
		return nil, err
	}

	driveStart := time.Now()
	rn.drive(ctx, r.Progress)
	rn.wg.Wait()
	driveWall := time.Since(driveStart)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rn.finish(ctx, info, clock.Stats(), wallStart, driveWall)
}

// drive starts the new calls on schedule (call k at t0 + k/Rate), in real
// time as the clock runs.
func (rn *run) drive(ctx context.Context, progress func(float64)) {
	clock := rn.clock.(*Clock)
	total := rn.cfg.TotalCalls()
	var lastProgress time.Time
	tick := time.NewTicker(driverTick)
	defer tick.Stop()
	// Simulated time may run at most slack ahead of the next call to start:
	// a driver that is not scheduled holds the clock back.
	slack := max(20*time.Millisecond, time.Duration(4*float64(driverTick)*rn.cfg.Speed))
	clock.SetHorizon(rn.callTime(0).Add(slack))
	defer clock.ClearHorizon()
	for k := int64(0); k < total; {
		el := clock.Now().Sub(rn.t0)
		due := min(total, int64(el.Seconds()*float64(rn.cfg.Rate))+1)
		for ; k < due; k++ {
			rn.startCall(ctx, k)
		}
		clock.SetHorizon(rn.callTime(k).Add(slack))
		if progress != nil && time.Since(lastProgress) > 100*time.Millisecond {
			lastProgress = time.Now()
			progress(float64(k) / float64(total))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	if progress != nil {
		progress(1)
	}
}

// sendHTTP makes one HTTP attempt and returns the response with its body
// read and closed, so the connection goes back to the pool.
//
// From the moment it has a connection until the partner admits it, and
// from the partner's answer until Do returns, the attempt is work in
// transit for the clock's backpressure. Waiting for a free connection is
// not: the requests holding the connections may be in service, sleeping on
// the clock, and counting the waiters would stop the clock for good.
func sendHTTP(ctx context.Context, client *http.Client, url string, clock *Clock, n int, due time.Time) (*http.Response, error) {
	var counted atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		if counted.CompareAndSwap(false, true) {
			clock.Busy(+1)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if n >= 0 && n < len(attemptValues) {
		req.Header[AttemptHeader] = []string{attemptValues[n]}
	} else {
		req.Header.Set(AttemptHeader, strconv.Itoa(n))
	}
	req.Header[DueHeader] = []string{strconv.FormatInt(int64(due.Sub(clock.Epoch())), 10)}
	resp, err := client.Do(req)
	if counted.Load() {
		clock.Busy(-1)
	}
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp, nil
}
