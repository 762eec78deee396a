package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
)

// The in-process engine (-partner inproc): the same fleet, partner,
// strategies and accounting as over HTTP, on internal/fleetsim's
// discrete-event scheduler. Calls are simulated goroutines that run one at
// a time and park only in the clock's Sleep (backoffs, Retry-After, the
// partner's latency); virtual time jumps to the next event. Nothing waits
// in real time, so a run takes the computation it needs, and a seed gives
// the same run every time (the AWS SDK strategy's jitter aside).

// inprocStart is simulated time zero of an in-process run: a whole number
// of minutes since the Unix epoch, as every window the library aligns to
// the epoch.
var inprocStart = fleetsim.DefaultStart

func (r *Runner) runInproc(ctx context.Context, info StrategyInfo) (*Result, error) {
	cfg := r.Config
	wallStart := time.Now()
	clock := fleetsim.NewClock(inprocStart)
	defer clock.Stop()
	// The shared stores answer at once; their real-time timeouts must not
	// decide anything in virtual time, on however busy a machine.
	deps := cfg
	if deps.StoreTimeout == 0 {
		deps.StoreTimeout = fleetsim.SimStoreTimeout
	}
	strategy, err := info.Build(ctx, Deps{Config: deps, Clock: clock, Backend: r.Backend, Name: runName(info, inprocStart)})
	if err != nil {
		return nil, fmt.Errorf("strategy %s: %w", info.Key, err)
	}
	defer func() { _ = strategy.Close(context.WithoutCancel(ctx)) }()

	// Over HTTP, second 0 falls wherever the wall clock puts it in the
	// library's 10 s windows (which are aligned to the Unix epoch); here
	// the seed decides.
	offset := time.Duration(rand.New(rand.NewPCG(cfg.Seed, 1<<63)).IntN(10)) * time.Second
	t0 := inprocStart.Add(time.Minute + offset)
	partner, err := NewInprocPartner(clock, t0, partnerConfig(cfg))
	if err != nil {
		return nil, err
	}
	rn := newRun(cfg, clock, inprocStart, strategy, partner, t0)
	rn.goCall = clock.Go
	rn.attempt = func(ctx context.Context, n int, due time.Time) (*http.Response, error) {
		return partner.Answer(ctx, n == 1, due)
	}
	if err := rn.startFleet(); err != nil {
		return nil, err
	}

	total := cfg.TotalCalls()
	var k int64
	var next func()
	next = func() {
		rn.startCall(ctx, k)
		if k++; k < total {
			clock.At(rn.callTime(k), next)
		}
	}
	clock.At(rn.callTime(0), next)

	driveStart := time.Now()
	end := t0.Add(cfg.Duration + tailSeconds*time.Second)
	for t := t0; ; t = t.Add(time.Second) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		more := clock.RunUntil(t)
		if r.Progress != nil {
			r.Progress(float64(k) / float64(total))
		}
		if !more || !t.Before(end) {
			break
		}
	}
	unfinished := total - rn.outcomes()
	clock.Stop() // ends the calls still running, if any: they count as failed (other)
	driveWall := time.Since(driveStart)
	res, err := rn.finish(ctx, info, ClockStats{}, wallStart, driveWall)
	if err != nil {
		return nil, err
	}
	if unfinished > 0 {
		res.KeepUp.Problems = append(res.KeepUp.Problems,
			fmt.Sprintf("%d calls were still running %ds after the last one started; they were ended and counted as failed", unfinished, tailSeconds))
	}
	return res, nil
}

// outcomes returns the number of calls that ended (throttled included).
func (rn *run) outcomes() int64 {
	var n int64
	for p := range rn.tally.outcomes {
		for o := range rn.tally.outcomes[p] {
			n += rn.tally.outcomes[p][o].Load()
		}
	}
	return n
}
