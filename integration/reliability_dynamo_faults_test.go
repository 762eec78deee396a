package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/integration/faultproxy"
)

// Bounds the DynamoDB fault tests hold herdguard to. They are what README's
// "Reliability" section promises.
const (
	// relOverrunBound is how long past its context's deadline an Executor
	// call may return, whatever DynamoDB does: the time to notice the
	// deadline and unwind on a busy two-core machine under the race
	// detector. herdguard itself never waits past a deadline: every store
	// call runs under the caller's context.
	relOverrunBound = 50 * time.Millisecond
	// relPaceInterval is the time between two calls of one environment in
	// the fault tests (100 calls/s per environment).
	relPaceInterval = 10 * time.Millisecond
	// relMinDeadline and relMaxDeadline bound the per-call deadlines, drawn
	// at random: the shortest are shorter than a store timeout, so that
	// some calls reach their deadline inside a store call.
	relMinDeadline = 20 * time.Millisecond
	relMaxDeadline = 300 * time.Millisecond
	// relResumeSlack is added to the promised resumption time (CacheTTL
	// after DynamoDB returns, plus one StoreTimeout for a request that was
	// already on its way when it did) for the next call that needs the
	// layer to come along: a few calls' worth at relPaceInterval, and
	// scheduling on a loaded machine.
	relResumeSlack = 400 * time.Millisecond
	// relPartnerFailure is the share of attempts the simulated partner
	// fails during the fault tests: enough for every environment to ask
	// for retries all the time, below the breaker's FailureRatio (0.5), so
	// that the global layers keep being asked.
	relPartnerFailure = 0.3
)

// relFaultRow is one line of the fault tests' summary.
type relFaultRow struct {
	fault                 string
	tot                   relTotals
	ddbRequests, injected int64
	resumeBudget          time.Duration
	resumeBreaker         time.Duration
	seconds               float64
}

func relFaultTable(rows []relFaultRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-22s %6s %7s %8s %9s %9s %9s %8s %8s %9s %9s %9s %9s %9s\n",
		"fault", "calls", "calls/s", "retries", "loc.grant", "loc.refus", "glob.gr", "abstain", "ddb.req", "injected", "add.p99", "add.worst", "overrun", "resume")
	for _, r := range rows {
		resume := "-"
		if r.resumeBudget > 0 || r.resumeBreaker > 0 {
			resume = max(r.resumeBudget, r.resumeBreaker).Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "%-22s %6d %7.0f %8d %9d %9d %9d %8d %8d %9d %9s %9s %9s %9s\n",
			r.fault, r.tot.calls, float64(r.tot.calls)/r.seconds, r.tot.retries, r.tot.local.granted-r.tot.local.returned, r.tot.local.refused,
			r.tot.globalGranted, r.tot.globalAbstain, r.ddbRequests, r.injected,
			r.tot.p99Added.Round(100*time.Microsecond), r.tot.worstAdded.Round(100*time.Microsecond), r.tot.worstOverrun.Round(100*time.Microsecond), resume)
	}
	return b.String()
}

// TestReliabilityDynamoFaults runs a fleet of four environments (each its
// own Executor, local ratio budget, Global and Breaker, 100 calls/s each,
// against a partner failing 30% of attempts) through a fault proxy in front
// of DynamoDB Local, and injects in turn: latency below and above the store
// timeout, dropped connections, HTTP 500, ThrottlingException and
// ProvisionedThroughputExceededException. During each fault it asserts:
//
//   - every call returns by its deadline plus relOverrunBound;
//   - every retry made was granted by the local budget, and the local
//     budget refused retries (it keeps limiting while the global layer
//     abstains);
//   - the global layer granted nothing new from the table and abstained;
//   - a failing table is not hammered: each environment makes at most two
//     requests per layer per CacheTTL (the breaker's degraded mode and the
//     Global's FaultCooldown), plus one for each call whose own deadline
//     ended inside a store request;
//
// and after the fault, that each environment's breaker and Global work
// against the table again within CacheTTL + StoreTimeout + relResumeSlack.
// No panic, no goroutine leak. It prints the figures of every phase.
func TestReliabilityDynamoFaults(t *testing.T) {
	requireDynamoDB(t)
	relNoLeaks(t)
	table := newTable(t)
	proxy, err := faultproxy.New(dynamoEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	api := relStoreClient(t, proxy.URL())
	fleet := newRelFleet(t, api, table, relFleetConfig{Envs: 4})
	cfg := fleet.cfg
	partner := &relPartner{}
	partner.setFailure(relPartnerFailure)
	ctx := t.Context()

	const (
		faultFor    = 1500 * time.Millisecond
		recoveryFor = 1500 * time.Millisecond
	)
	var rows []relFaultRow
	warm := fleet.run(ctx, "healthy", time.Second, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
	wt := warm.totals()
	rows = append(rows, relFaultRow{fault: "none (warm-up)", tot: wt, ddbRequests: wt.budgetReqs + wt.breakerReqs, seconds: warm.duration.Seconds()})
	t.Logf("warm-up: %v", wt)

	faults := []struct {
		f       faultproxy.Fault
		failing bool // store calls fail during the fault
	}{
		{faultproxy.Fault{Latency: 30 * time.Millisecond}, false},
		{faultproxy.Fault{Latency: 4 * cfg.StoreTimeout}, true},
		{faultproxy.Fault{Kind: faultproxy.Drop}, true},
		{faultproxy.Fault{Kind: faultproxy.InternalError}, true},
		{faultproxy.Fault{Kind: faultproxy.Throttling}, true},
		{faultproxy.Fault{Kind: faultproxy.ThroughputExceeded}, true},
	}
	for _, fc := range faults {
		t.Run(fc.f.String(), func(t *testing.T) {
			p0 := proxy.Stats()
			proxy.Set(fc.f)
			ph := fleet.run(ctx, fc.f.String(), faultFor, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
			proxy.Set(faultproxy.Fault{})
			back := time.Now()
			p1 := proxy.Stats()
			for _, e := range fleet.envs {
				e.budgetW.watchFrom(back)
				e.brkW.watchFrom(back)
			}
			tot := ph.totals()
			t.Logf("fault %s for %v: %v; DynamoDB HTTP requests %d (%d answered by the fault)", fc.f, faultFor, tot, p1.Requests-p0.Requests, p1.Injected-p0.Injected)

			relCheckCalls(t, ph)
			for i := range fleet.envs {
				b, a := ph.before[i], ph.after[i]
				l := a.local.sub(b.local)
				retries := a.retries - b.retries
				if retries > l.granted {
					t.Errorf("env %d made %d retries but its local budget granted only %d: a retry bypassed the local layer", i, retries, l.granted)
				}
				if l.refused == 0 {
					t.Errorf("env %d: the local budget refused no retry during the fault (granted %d): it is not limiting", i, l.granted)
				}
				if !fc.failing {
					continue
				}
				if leases := a.global.Leases - b.global.Leases; leases != 0 {
					t.Errorf("env %d: the global layer took %d leases from a failing table", i, leases)
				}
				if a.globalAbstain == b.globalAbstain && a.global.Refused == b.global.Refused {
					t.Errorf("env %d: the global layer neither abstained nor refused during the fault", i)
				}
				// Not hammered: the Global makes at most two calls per
				// FaultCooldown, the breaker one Load per CacheTTL while
				// degraded, plus the write in flight when the fault began.
				// A request cut short by its caller's own deadline is not
				// taken for a table fault (the caller, not the table, may
				// be to blame), so each call that ran into its deadline may
				// add one request per layer.
				cut := int64(0)
				for _, c := range ph.calls {
					if c.env == i && c.reachedDeadline() {
						cut++
					}
				}
				periods := int64(faultFor/cfg.CacheTTL) + 1
				limit := 2*periods + 1 + cut
				if n := a.budgetReqs - b.budgetReqs; n > limit {
					t.Errorf("env %d made %d budget store requests during a %v fault; want at most %d (2 per FaultCooldown + 1 + %d calls that reached their deadline)", i, n, faultFor, limit, cut)
				}
				if n := a.breakerReqs - b.breakerReqs; n > limit {
					t.Errorf("env %d made %d breaker store requests during a %v fault; want at most %d (2 per CacheTTL + 1 + %d calls that reached their deadline)", i, n, faultFor, limit, cut)
				}
			}

			rec := fleet.run(ctx, "recovery", recoveryFor, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
			relCheckCalls(t, rec)
			bound := cfg.CacheTTL + cfg.StoreTimeout + relResumeSlack
			row := relFaultRow{fault: fc.f.String(), tot: tot, ddbRequests: p1.Requests - p0.Requests, injected: p1.Injected - p0.Injected, seconds: ph.duration.Seconds()}
			for i, e := range fleet.envs {
				db, okB := e.budgetW.resumedAfter(back)
				dc, okC := e.brkW.resumedAfter(back)
				if !okB || db > bound {
					t.Errorf("env %d: the Global's first successful table request came %v after DynamoDB returned (found: %v); want within %v", i, db, okB, bound)
				}
				if !okC || dc > bound {
					t.Errorf("env %d: the breaker's first successful table request came %v after DynamoDB returned (found: %v); want within %v", i, dc, okC, bound)
				}
				row.resumeBudget = max(row.resumeBudget, db)
				row.resumeBreaker = max(row.resumeBreaker, dc)
			}
			rt := rec.totals()
			if rt.globalLeases == 0 {
				t.Errorf("after the fault the global layer took no lease in %v of recovery: %v", recoveryFor, rt)
			}
			t.Logf("recovery: global and breaker back after at most %v and %v (bound %v); %v",
				row.resumeBudget.Round(time.Millisecond), row.resumeBreaker.Round(time.Millisecond), bound, rt)
			rows = append(rows, row)
		})
	}
	t.Logf("DynamoDB faults, %d environments, %v per fault, partner failing %.0f%% of attempts, StoreTimeout %v, CacheTTL = FaultCooldown = %v:%s",
		cfg.Envs, faultFor, relPartnerFailure*100, cfg.StoreTimeout, cfg.CacheTTL, relFaultTable(rows))
}

// relCheckCalls checks that no call of a phase overran its deadline by more
// than relOverrunBound and that each made at most MaxAttempts attempts.
func relCheckCalls(t *testing.T, ph relPhase) {
	t.Helper()
	bad := 0
	for _, c := range ph.calls {
		if c.overrun() > relOverrunBound {
			if bad < 5 {
				t.Errorf("%s: a call with a %v deadline returned after %v (%d attempts, %v): %v past its deadline, bound %v",
					ph.name, c.deadline, c.elapsed, c.attempts, c.err, c.overrun(), relOverrunBound)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d calls in all overran their deadline by more than %v", ph.name, bad, relOverrunBound)
	}
	if len(ph.calls) == 0 {
		t.Errorf("%s: no call was made", ph.name)
	}
}
