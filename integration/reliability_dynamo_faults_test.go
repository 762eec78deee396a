package integration

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/integration/internal/faultproxy"
)

// Bounds the DynamoDB fault tests hold herdguard to. They are what README's
// "Reliability" section promises; relOverrunBound and relResumeTolerance,
// which depend on the race detector, are in reliability_norace_test.go and
// reliability_race_test.go.
const (
	// relOverrunShare is the share of a test's calls that may return more
	// than relOverrunBound after their deadline: on a busy two-core machine
	// a goroutine now and then waits for a CPU longer than the bound, which
	// says nothing about herdguard. The share is rounded up, so a test of
	// fewer than 1,000 calls may have one such call (a test that small
	// cannot tell a 0.1% tail from none). None may exceed
	// relOverrunCeiling.
	relOverrunShare = 0.001
	// relOverrunCeiling is how long past its deadline no call may ever
	// return: far beyond scheduling noise, the mark of a call that waited
	// for something it should not have.
	relOverrunCeiling = time.Second
	// relPaceInterval is the time between two calls of one environment in
	// the fault tests (100 calls/s per environment).
	relPaceInterval = 10 * time.Millisecond
	// relMinDeadline and relMaxDeadline bound the per-call deadlines, drawn
	// at random: the shortest are shorter than a store timeout, so that
	// some calls reach their deadline inside a store call.
	relMinDeadline = 20 * time.Millisecond
	relMaxDeadline = 300 * time.Millisecond
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
	resume                relResume
	seconds               float64
}

func relFaultTable(rows []relFaultRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-30s %6s %7s %8s %9s %9s %8s %8s %8s %9s %9s %9s %9s %9s %9s %9s %9s\n",
		"fault", "calls", "calls/s", "retries", "loc.grant", "loc.refus", "glob.gr", "abstain", "ddb.req", "injected", "add.p99", "add.worst", "overrun",
		"glob.try", "brk.try", "glob.ok", "brk.ok")
	ms := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(time.Millisecond).String()
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "%-30s %6d %7.0f %8d %9d %9d %8d %8d %8d %9d %9s %9s %9s %9s %9s %9s %9s\n",
			r.fault, r.tot.calls, float64(r.tot.calls)/r.seconds, r.tot.retries, r.tot.local.granted-r.tot.local.returned, r.tot.local.refused,
			r.tot.globalGranted, r.tot.globalAbstain, r.ddbRequests, r.injected,
			r.tot.p99Added.Round(100*time.Microsecond), r.tot.worstAdded.Round(100*time.Microsecond), r.tot.worstOverrun.Round(100*time.Microsecond),
			ms(r.resume.budgetAttempt), ms(r.resume.breakerAttempt), ms(r.resume.budgetSuccess), ms(r.resume.breakerSuccess))
	}
	b.WriteString("glob.try/brk.try: worst time, over the environments, from DynamoDB's return to the first store request the Global/breaker started; glob.ok/brk.ok: to its first success.\n")
	return b.String()
}

// TestReliabilityDynamoFaults runs a fleet of four environments (each its
// own Executor, local ratio budget, Global and Breaker, 100 calls/s each,
// against a partner failing 30% of attempts) through a fault proxy in front
// of DynamoDB Local, and injects in turn: latency below and above the store
// timeout, dropped connections, writes applied whose answer is lost (on
// every attempt, and on the first attempt only, the SDK's retry being
// answered), HTTP 500, ThrottlingException and
// ProvisionedThroughputExceededException. During each fault it asserts:
//
//   - calls return by their deadline plus relOverrunBound (at most
//     relOverrunShare of them later, none later than relOverrunCeiling),
//     judged over every call of the test;
//   - every retry made was granted by the local budget (asked first; with
//     the Global failing closed, which layer refuses first while the table
//     works is incidental: both hold 10%);
//   - the global layer granted nothing new from a failing table, refused
//     (it fails closed by default) and reported the fault;
//   - a failing table is not hammered: each environment makes at most two
//     requests per layer per CacheTTL (the breaker's degraded mode and the
//     Global's FaultCooldown; a throttled Global waits for its next
//     contact, at least DepositInterval/2 later), plus one for each call
//     whose own deadline ended inside a store request;
//
// and after the fault, with every layer of every environment asked for a
// decision every relProbeInterval (probeLayers), that each environment's
// Global starts a store request within FaultCooldown + relResumeTolerance
// of DynamoDB's return and its breaker within CacheTTL +
// relResumeTolerance, and that both then work again (the time of their
// first success is printed). No panic, no goroutine leak. It prints the
// figures of every phase.
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
	relWarmTable(t, api, table)
	fleet := newRelFleet(t, api, table, relFleetConfig{Envs: 4})
	cfg := fleet.cfg
	partner := &relPartner{}
	partner.setFailure(relPartnerFailure)
	ctx := t.Context()
	var overruns relOverruns

	const (
		faultFor    = 1500 * time.Millisecond
		recoveryFor = 1500 * time.Millisecond
	)
	var rows []relFaultRow
	warm := fleet.run(ctx, "healthy", time.Second, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
	relCheckCalls(t, warm, &overruns)
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
		{faultproxy.Fault{Kind: faultproxy.ApplyThenDrop}, true},
		// The SDK's retry is answered: the stores succeed, some writes
		// twice (the property tests bound what that does to the counts).
		{faultproxy.Fault{Kind: faultproxy.ApplyThenDrop, Attempts: 1}, false},
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
			back := fleet.watchFrom(time.Now())
			stopProbes := fleet.probeLayers(ctx)
			pd := proxy.Stats().Sub(p0)
			tot := ph.totals()
			t.Logf("fault %s for %v: %v; DynamoDB HTTP requests: %v", fc.f, faultFor, tot, pd)

			relCheckCalls(t, ph, &overruns)
			for i := range fleet.envs {
				b, a := ph.before[i], ph.after[i]
				l := a.local.sub(b.local)
				retries := a.retries - b.retries
				if retries > l.granted {
					t.Errorf("env %d made %d retries but its local budget granted only %d: a retry bypassed the local layer", i, retries, l.granted)
				}
				if !fc.failing {
					continue
				}
				if leases := a.global.Leases - b.global.Leases; leases != 0 {
					t.Errorf("env %d: the global layer took %d leases from a failing table", i, leases)
				}
				if a.global.Refused == b.global.Refused && a.globalAbstain == b.globalAbstain {
					t.Errorf("env %d: the global layer neither refused nor reported a fault during the fault", i)
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
				budgetLimit := 2*(int64(faultFor/cfg.FaultCooldown)+1) + 1 + cut
				if fc.f.Kind == faultproxy.Throttling || fc.f.Kind == faultproxy.ThroughputExceeded {
					// A throttle is a refusal, not a fault: the Global
					// writes again at its next contact, DepositInterval ×
					// U(0.5, 1.5) later.
					d := fleet.envs[i].global.Config().DepositInterval / 2
					budgetLimit = int64(faultFor/d) + 1 + 1 + cut
				}
				breakerLimit := 2*(int64(faultFor/cfg.CacheTTL)+1) + 1 + cut
				if n := a.budgetReqs - b.budgetReqs; n > budgetLimit {
					t.Errorf("env %d made %d budget store requests during a %v fault; want at most %d (2 per FaultCooldown + 1 + %d calls that reached their deadline)", i, n, faultFor, budgetLimit, cut)
				}
				if n := a.breakerReqs - b.breakerReqs; n > breakerLimit {
					t.Errorf("env %d made %d breaker store requests during a %v fault; want at most %d (2 per CacheTTL + 1 + %d calls that reached their deadline)", i, n, faultFor, breakerLimit, cut)
				}
			}

			// Recovery lasts recoveryFor, and until every layer has worked
			// against the table again, for at most resumeWithin.
			recStart := time.Now()
			resumed, endResumed := becomes(10*time.Millisecond, func() bool {
				return time.Since(recStart) >= recoveryFor && fleet.allResumed()
			})
			rec := fleet.runUntil(ctx, "recovery", max(recoveryFor, fleet.resumeWithin()), resumed, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
			endResumed()
			probeGrants := stopProbes()
			relCheckCalls(t, rec, &overruns)
			row := relFaultRow{fault: fc.f.String(), tot: tot, ddbRequests: pd.Requests, injected: pd.Injected, seconds: ph.duration.Seconds()}
			row.resume = relCheckResume(t, fleet, back)
			rt := rec.totals()
			// The probes' grants (each given back at once) may come from
			// leases of their own: the fleet's calls must have taken more.
			if rt.globalLeases <= probeGrants {
				t.Errorf("after the fault the global layer took %d leases in %v of recovery, no more than the %d grants the probes received: %v", rt.globalLeases, recoveryFor, probeGrants, rt)
			}
			t.Logf("recovery: %v", rt)
			rows = append(rows, row)
		})
	}
	overruns.check(t, "all phases")
	t.Logf("DynamoDB faults, %d environments, %v per fault, partner failing %.0f%% of attempts, StoreTimeout %v, CacheTTL %v, FaultCooldown %v; "+
		"resumption bounds: Global FaultCooldown + %v, breaker CacheTTL + %v (race detector: %v):%s",
		cfg.Envs, faultFor, relPartnerFailure*100, cfg.StoreTimeout, cfg.CacheTTL, cfg.FaultCooldown,
		relResumeTolerance, relResumeTolerance, relRaceEnabled, relFaultTable(rows))
}

// watchFrom marks back, the moment DynamoDB returned, in every
// environment's store watches, and returns it.
func (f *relFleet) watchFrom(back time.Time) time.Time {
	for _, e := range f.envs {
		e.budgetW.watchFrom(back)
		e.brkW.watchFrom(back)
	}
	return back
}

// relResume is how long, at worst over a fleet's environments, each layer
// took after DynamoDB returned to start a store request (what herdguard
// controls: its FaultCooldown or CacheTTL) and to get a first success
// (which also depends on DynamoDB's own speed).
type relResume struct {
	budgetAttempt, breakerAttempt time.Duration
	budgetSuccess, breakerSuccess time.Duration
}

// relWarmTable sends a few budget writes and breaker reads to table with a
// generous timeout, on items no environment uses. A freshly started
// DynamoDB Local answers its first requests slower than the fleet's
// StoreTimeout; the Global, failing closed, would then refuse every retry
// of the healthy warm-up phase (and the breakers, counting unretried
// failures on their own, could trip), which is not what the phase is for.
func relWarmTable(t *testing.T, api dynamo.API, table string) {
	t.Helper()
	bs, err := dynamo.NewBudgetStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		now := time.Now()
		_, aerr := bs.Apply(ctx, budget.Key{Name: "warm-up", Window: now.Truncate(time.Second)},
			budget.Update{Floor: budget.AllowancePerRetry, Expires: now.Add(time.Minute)})
		_, lerr := cs.Load(ctx, "warm-up")
		cancel()
		if aerr != nil || lerr != nil {
			t.Fatalf("warming DynamoDB Local, request %d: %v, %v", i, aerr, lerr)
		}
	}
}

// relCheckResume checks that every environment's Global and breaker
// resumed within their bounds (relFleet.resumeBounds: FaultCooldown and
// CacheTTL, + relResumeTolerance) of back: the first time probeLayers
// asked a layer with a now past its bound, the layer had started a store
// request by the time the ask returned. The check is on the time herdguard
// was given, not on when a loaded machine got round to asking, so
// scheduling delays cannot fail it; the wall-clock figures (first request,
// first success) are printed. Both layers must also have worked again. The
// layers must have been asked all along (probeLayers).
func relCheckResume(t *testing.T, f *relFleet, back time.Time) relResume {
	t.Helper()
	var r relResume
	budgetBound, breakerBound := f.resumeBounds()
	check := func(i int, layer string, w *relStoreWatch, bound time.Duration) (attempt, success time.Duration) {
		a, okA := w.attemptedAfter(back)
		s, okS := w.resumedAfter(back)
		if !okA {
			t.Errorf("env %d: the %s never started a store request after DynamoDB returned", i, layer)
		} else if due := w.due.Load(); due != 0 && w.attempted.Load() > due {
			t.Errorf("env %d: the %s was asked at %v or later after DynamoDB returned (its bound) and had not started a store request when the ask returned, %v after the return; its first request started %v after it",
				i, layer, bound, time.Unix(0, due).Sub(back).Round(time.Millisecond), a.Round(time.Millisecond))
		}
		if !okS {
			t.Errorf("env %d: the %s never worked against the table again after DynamoDB returned", i, layer)
		}
		return a, s
	}
	for i, e := range f.envs {
		ba, bs := check(i, "Global", &e.budgetW, budgetBound)
		ca, cs := check(i, "breaker", &e.brkW, breakerBound)
		r.budgetAttempt, r.breakerAttempt = max(r.budgetAttempt, ba), max(r.breakerAttempt, ca)
		r.budgetSuccess, r.breakerSuccess = max(r.budgetSuccess, bs), max(r.breakerSuccess, cs)
	}
	t.Logf("resumption after DynamoDB returned, worst of %d environments: Global tried the table after %v (bound %v = FaultCooldown + %v), breaker after %v (bound %v = CacheTTL + %v); first successes after %v and %v",
		len(f.envs), r.budgetAttempt.Round(time.Millisecond), budgetBound, relResumeTolerance, r.breakerAttempt.Round(time.Millisecond), breakerBound, relResumeTolerance,
		r.budgetSuccess.Round(time.Millisecond), r.breakerSuccess.Round(time.Millisecond))
	return r
}

// relOverruns judges the deadline bound over every call of a test: at
// most relOverrunShare of the calls may return more than relOverrunBound
// after their deadline, and none more than relOverrunCeiling. What a call
// ran past its deadline is first reduced by the time this process waited
// for a CPU during the call (relStalls), which is the machine's, not
// herdguard's; the ceiling applies to the overrun as measured.
type relOverruns struct {
	calls, over int
	worst       relCall       // the largest overrun as measured
	worstNet    time.Duration // the largest overrun less the stalls during its call
	stalled     time.Duration // the most stall time taken off one call's overrun
}

// add counts the calls of a phase.
func (o *relOverruns) add(ph relPhase) {
	for _, c := range ph.calls {
		o.addCall(c)
	}
}

// addCall counts one call: its deadline is the time by which herdguard
// promises it ends, relOverrunBound aside.
func (o *relOverruns) addCall(c relCall) {
	o.calls++
	net, stall := relNetOverrun(c)
	if net > relOverrunBound {
		o.over++
	}
	o.worstNet = max(o.worstNet, net)
	if c.overrun() > 0 {
		o.stalled = max(o.stalled, stall)
	}
	if c.overrun() > o.worst.overrun() {
		o.worst = c
	}
}

// relNetOverrun returns how long c ran past its deadline less the time
// the process waited for a CPU during the call (relStalls), and that time.
func relNetOverrun(c relCall) (net, stall time.Duration) {
	over := c.overrun()
	if over <= 0 {
		return 0, 0
	}
	stall = relStalls.during(c.start, c.start.Add(c.elapsed))
	return max(over-stall, 0), stall
}

// allowed is the number of calls that may overrun relOverrunBound:
// relOverrunShare of them, rounded up.
func (o *relOverruns) allowed() int { return relAllowedLate(int64(o.calls)) }

// relAllowedLate is relOverrunShare of calls, rounded up.
func relAllowedLate(calls int64) int { return int(math.Ceil(relOverrunShare * float64(calls))) }

func (o *relOverruns) String() string {
	return fmt.Sprintf("%d calls; worst overrun %v (a call with a %v deadline that took %v in %d attempts: %v); worst less the machine's stalls during the call %v (stall time taken off one call: up to %v); %d beyond the bound %v (allowed %d, %.1f%% rounded up; race detector: %v); ceiling %v",
		o.calls, o.worst.overrun().Round(10*time.Microsecond), o.worst.deadline, o.worst.elapsed.Round(10*time.Microsecond), o.worst.attempts, o.worst.err,
		o.worstNet.Round(10*time.Microsecond), o.stalled.Round(10*time.Microsecond),
		o.over, relOverrunBound, o.allowed(), relOverrunShare*100, relRaceEnabled, relOverrunCeiling)
}

// check asserts the bound and logs the figures.
func (o *relOverruns) check(t testing.TB, what string) {
	t.Helper()
	t.Logf("deadline overruns, %s: %v", what, o)
	if o.over > o.allowed() {
		t.Errorf("%s: %d of %d calls returned more than %v after their deadline (less the machine's stalls during each); at most %d (%.1f%%) may", what, o.over, o.calls, relOverrunBound, o.allowed(), relOverrunShare*100)
	}
	if o.worst.overrun() > relOverrunCeiling {
		t.Errorf("%s: a call returned %v after its deadline, beyond the ceiling %v", what, o.worst.overrun(), relOverrunCeiling)
	}
}

// relCheckCalls checks that a phase made calls, and adds them to the
// test's overrun tally (judged at the end of the test, by check). A call
// beyond relOverrunCeiling fails the test at once.
func relCheckCalls(t *testing.T, ph relPhase, o *relOverruns) {
	t.Helper()
	if len(ph.calls) == 0 {
		t.Errorf("%s: no call was made", ph.name)
	}
	for _, c := range ph.calls {
		if c.overrun() > relOverrunCeiling {
			t.Errorf("%s: a call with a %v deadline returned after %v (%d attempts, %v): %v past its deadline, beyond the ceiling %v",
				ph.name, c.deadline, c.elapsed, c.attempts, c.err, c.overrun(), relOverrunCeiling)
		}
	}
	o.add(ph)
}
