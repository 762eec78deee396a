package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/internal/capacity"
)

// Settings of the multi-process fleet test. The function runs with the
// template's defaults except where a test needs shorter times: short backoff
// waits, a breaker open for seconds rather than 30 s, and store timeouts that
// suit DynamoDB Local on a busy two-core machine (its single-item write
// throughput is a fraction of the service's).
const (
	fleetDefaultEnvs   = 8
	fleetEnvsVar       = "HERDGUARD_LAMBDA_ENVS" // overrides fleetDefaultEnvs
	fleetBreakerName   = "bikes-partner"
	fleetRatio         = 0.1
	fleetFloor         = 3
	fleetLocalFloor    = 1
	fleetWindow        = 10 * time.Second
	fleetMinRequests   = 30
	fleetOpenDuration  = 6 * time.Second
	fleetCacheTTL      = 250 * time.Millisecond
	fleetStoreTimeout  = 250 * time.Millisecond
	fleetInvokeTimeout = 3 * time.Second // Lambda-Runtime-Deadline-Ms - now
	fleetHealthyRounds = 20
	fleetHealthyPause  = 50 * time.Millisecond // spreads the healthy phase over several CacheTTLs
	// fleetOutageLimit bounds the outage phase, which ends as soon as every
	// environment has answered 503 breaker-open. Each process reports its
	// sampled breaker counts to the table at most once per ReportInterval
	// (1 s), so the fleet needs a few seconds of rounds to put MinRequests
	// sampled outcomes in the table; the limit leaves room for a loaded
	// machine.
	fleetOutageLimit   = 20 * time.Second
	fleetRecoveryPause = 200 * time.Millisecond
	// fleetFreshMargin is how much of the open period must be left before
	// the open round and the fresh environment's first invocation (one
	// round and one invocation, answered from the breaker's state in
	// milliseconds): with less, the breaker could go half-open under them
	// and let a probe through.
	fleetFreshMargin = 2 * time.Second
)

// fleetEnvironment is the environment of every bikes process but its own
// Runtime API address: only what a real Lambda environment would set, the
// static credentials DynamoDB Local accepts, and the function's
// configuration. Nothing is inherited from the test's environment (no
// proxies, no ~/.aws).
func fleetEnvironment(table, dynamoURL, partnerURL string) []string {
	return []string{
		"AWS_LAMBDA_FUNCTION_NAME=bikes-fleet",
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/bikes-fleet",
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=herdguard",
		"AWS_SECRET_ACCESS_KEY=herdguard",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
		"TZ=UTC",
		"HERDGUARD_TABLE=" + table,
		"HERDGUARD_DYNAMODB_ENDPOINT=" + dynamoURL,
		"PARTNER_URL=" + partnerURL,
		"HERDGUARD_NAME=" + fleetBreakerName,
		"HERDGUARD_MAX_ATTEMPTS=3",
		"HERDGUARD_ATTEMPT_TIMEOUT=500ms",
		"HERDGUARD_BASE_DELAY=5ms",
		"HERDGUARD_MAX_DELAY=20ms",
		"HERDGUARD_RATIO=" + strconv.FormatFloat(fleetRatio, 'f', -1, 64),
		"HERDGUARD_WINDOW=" + fleetWindow.String(),
		"HERDGUARD_FLOOR=" + strconv.Itoa(fleetFloor),
		"HERDGUARD_LOCAL_FLOOR=" + strconv.Itoa(fleetLocalFloor),
		"HERDGUARD_SHARDS=1",
		"HERDGUARD_BREAKER_MIN_REQUESTS=" + strconv.Itoa(fleetMinRequests),
		"HERDGUARD_BREAKER_OPEN_DURATION=" + fleetOpenDuration.String(),
		"HERDGUARD_BREAKER_CACHE_TTL=" + fleetCacheTTL.String(),
		"HERDGUARD_STORE_TIMEOUT=" + fleetStoreTimeout.String(),
		"HERDGUARD_FLUSH_TIMEOUT=300ms",
		"HERDGUARD_LOG_LEVEL=info",
	}
}

func fleetSize(t *testing.T) int {
	t.Helper()
	v := os.Getenv(fleetEnvsVar)
	if v == "" {
		return fleetDefaultEnvs
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 || n > 64 {
		t.Fatalf("%s=%q: want 2 to 64 environments", fleetEnvsVar, v)
	}
	return n
}

// roundResult is what one round of invocations (one per environment, all
// at once) returned.
type roundResult struct {
	answers []answer
	errs    []error
}

// round invokes every environment once, concurrently, and waits for all.
func round(ctx context.Context, envs []*lambdaEnv, n int) roundResult {
	r := roundResult{answers: make([]answer, len(envs)), errs: make([]error, len(envs))}
	var wg sync.WaitGroup
	for i, e := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.answers[i], r.errs[i] = e.invoke(ctx, fmt.Sprintf("st-%d-%d", i, n), fleetInvokeTimeout)
		}()
	}
	wg.Wait()
	return r
}

func (r roundResult) err() error { return errors.Join(r.errs...) }

// phaseFigures are the measurements of one phase.
type phaseFigures struct {
	name            string
	invocations     int
	firsts, retries int64
	ddb             ddbUse
	took            time.Duration
}

func (p phaseFigures) String() string {
	per := func(n int64) string {
		if p.invocations == 0 {
			return "n/a"
		}
		return strconv.FormatFloat(float64(n)/float64(p.invocations), 'f', 3, 64)
	}
	ops := make([]string, 0, len(p.ddb.byOp))
	for op, n := range p.ddb.byOp {
		ops = append(ops, fmt.Sprintf("%s=%d", op, n))
	}
	sort.Strings(ops)
	return fmt.Sprintf("%-9s %4d invocations in %6v: partner first attempts %4d, retries %3d; DynamoDB reads %4d (%s/inv), writes %4d (%s/inv) [%s]",
		p.name, p.invocations, p.took.Round(time.Millisecond), p.firsts, p.retries,
		p.ddb.reads, per(p.ddb.reads), p.ddb.writes, per(p.ddb.writes), strings.Join(ops, " "))
}

// phaseMeter measures a phase from its start.
type phaseMeter struct {
	name          string
	start         time.Time
	firsts, retry int64
	ddb           map[string]int64
	partner       *partnerStub
	counter       *dynamoCounter
}

func startPhase(name string, p *partnerStub, c *dynamoCounter) *phaseMeter {
	f, r := p.arrivals()
	return &phaseMeter{name: name, start: time.Now(), firsts: f, retry: r, ddb: c.snapshot(), partner: p, counter: c}
}

func (m *phaseMeter) end(invocations int) phaseFigures {
	f, r := m.partner.arrivals()
	return phaseFigures{
		name: m.name, invocations: invocations, firsts: f - m.firsts, retries: r - m.retry,
		ddb: usage(m.ddb, m.counter.snapshot()), took: time.Since(m.start),
	}
}

// TestLambdaFleetOverRuntimeAPI runs the bikes function as K real processes,
// each behind its own Lambda Runtime API, sharing one DynamoDB Local table,
// and drives them through a partner outage:
//
//  1. healthy: every environment serves 200; the figures give the DynamoDB
//     requests per invocation on the healthy path;
//  2. outage: the partner answers 503 to everything. The retries that reach
//     it stay within Ratio × requests + Floor per window (+ one retry per
//     logged abstention of the global budget, which then lets the local
//     budget decide); the breaker opens in every process, which then answers
//     503 with Retry-After without calling the partner;
//  3. one process is killed and a fresh one (empty memory) started: its
//     first invocation is refused from the state in the table, without
//     reaching the partner;
//  4. recovery: the partner is healthy again; once the open duration has
//     passed, a probe closes the breaker and every process serves 200.
func TestLambdaFleetOverRuntimeAPI(t *testing.T) {
	table := newTable(t)
	api := newAPI(t)
	k := fleetSize(t)
	bin := buildBikes(t, t.TempDir())
	partner := newPartnerStub(t)
	// DynamoDB's capacity model in front of DynamoDB Local (wall-clock
	// seconds: the processes run on real time).
	meter := capacity.NewMeter(capacity.Config{Throttle: true})
	capProxy := newCapacityProxy(t, meter, nil)
	defer logCapacity(t, "lambda fleet", meter, capProxy)
	counter := newDynamoCounter(t, capProxy.URL())
	env := fleetEnvironment(table, counter.srv.URL, partner.srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	testStart := time.Now()

	initMeter := startPhase("init", partner, counter)
	envs := make([]*lambdaEnv, k)
	for i := range envs {
		envs[i] = startLambdaEnv(t, bin, fmt.Sprintf("env-%d", i), env)
	}
	for _, e := range envs {
		e.waitReady(t, 20*time.Second)
	}
	initFig := initMeter.end(0)
	dump := func() {
		for _, e := range envs {
			t.Logf("--- %s output (last lines):\n%s", e.name, e.logs())
		}
	}

	// 1. Healthy.
	healthy := startPhase("healthy", partner, counter)
	inv := 0
	for n := 0; n < fleetHealthyRounds; n++ {
		r := round(ctx, envs, n)
		if err := r.err(); err != nil {
			dump()
			t.Fatalf("healthy round %d: %v", n, err)
		}
		for i, a := range r.answers {
			want := fmt.Sprintf(`{"station":"st-%d-%d","available":%d}`, i, n, len(fmt.Sprintf("st-%d-%d", i, n)))
			if a.status != http.StatusOK || a.body != want {
				dump()
				t.Fatalf("healthy round %d, %s: %d %q, want 200 %q", n, envs[i].name, a.status, a.body, want)
			}
		}
		inv += k
		time.Sleep(fleetHealthyPause)
	}
	healthyFig := healthy.end(inv)
	if healthyFig.ddb.writes != 0 {
		t.Errorf("healthy phase: %d DynamoDB writes, want 0", healthyFig.ddb.writes)
	}
	// At most one breaker read per environment per CacheTTL (+1 for the
	// read that starts each environment's first period). A process spaces
	// its reads by CacheTTL on its own clock, when it decides to read; the
	// counter sees a read when it arrives, up to StoreTimeout later (a read
	// not sent by then is abandoned), so the reads the counter saw in the
	// phase were decided in the phase's span plus StoreTimeout: a loaded
	// machine that delays a read shifts it, it cannot add one.
	span := healthyFig.took + fleetStoreTimeout
	if maxReads := int64(k) * (int64(span/fleetCacheTTL) + 1); healthyFig.ddb.reads > maxReads {
		t.Errorf("healthy phase: %d DynamoDB reads in %v (+ StoreTimeout %v), more than one per environment per CacheTTL (%d)", healthyFig.ddb.reads, healthyFig.took, fleetStoreTimeout, maxReads)
	}

	// 2. Outage, until every environment refuses from an open breaker.
	partner.down.Store(true)
	outage := startPhase("outage", partner, counter)
	outageStart := time.Now()
	inv = 0
	openSeen := make([]bool, k)
	rounds := 0
	statuses := map[string]int{}
	for outageDeadline := outageStart.Add(fleetOutageLimit); time.Now().Before(outageDeadline); {
		r := round(ctx, envs, 100+rounds)
		if err := r.err(); err != nil {
			dump()
			t.Fatalf("outage round %d: %v", rounds, err)
		}
		rounds++
		inv += k
		all := true
		for i, a := range r.answers {
			statuses[strconv.Itoa(a.status)+" "+a.reason]++
			switch {
			case a.status == http.StatusServiceUnavailable && a.reason == "breaker-open":
				openSeen[i] = true
				if secs, err := strconv.Atoi(a.retryAfter); err != nil || secs < 1 || float64(secs) > fleetOpenDuration.Seconds()*1.2+1 {
					t.Errorf("%s: 503 breaker-open with Retry-After %q, want 1 to %v seconds", envs[i].name, a.retryAfter, fleetOpenDuration)
				}
			case a.status == http.StatusServiceUnavailable && a.reason == "budget-exhausted":
				if secs, err := strconv.Atoi(a.retryAfter); err != nil || secs < 1 {
					t.Errorf("%s: 503 budget-exhausted with Retry-After %q", envs[i].name, a.retryAfter)
				}
			case a.status == http.StatusBadGateway:
			default:
				t.Errorf("%s during the outage: %d %q", envs[i].name, a.status, a.body)
			}
			all = all && openSeen[i]
		}
		if all {
			break
		}
	}
	outageFig := outage.end(inv)
	outageEnd := time.Now()
	for i, seen := range openSeen {
		if !seen {
			dump()
			t.Fatalf("%s never answered 503 breaker-open in %d outage rounds over %v (answers %v)", envs[i].name, rounds, outageEnd.Sub(outageStart).Round(time.Millisecond), statuses)
		}
	}
	// The execution environment of step 3 is started now, while the
	// breaker is open: its first invocation must come before the open
	// period ends, and starting a process can take seconds on a loaded
	// machine. It invokes nothing until step 3, so its memory stays empty
	// (its initialisation reads the breaker item once and throws the answer
	// away, to open the connection).
	fresh := startLambdaEnv(t, bin, "env-fresh", env)

	// The fleet-wide retry ratio. Requests recorded in a window include the
	// healthy phase's if it shares the window, so count every first
	// attempt since the test started; windows are aligned to the epoch.
	requests := initFig.firsts + healthyFig.firsts + outageFig.firsts
	windows := int64(outageEnd.UnixMilli()/fleetWindow.Milliseconds() - testStart.UnixMilli()/fleetWindow.Milliseconds() + 1)
	var abstained, breakerFaults int
	for _, e := range envs {
		b, c := e.storeFaults()
		abstained += b
		breakerFaults += c
	}
	bound := int64(math.Floor(fleetRatio*float64(requests))) + fleetFloor*windows + int64(abstained)
	retries := healthyFig.retries + outageFig.retries
	t.Logf("retry ratio: %d retries reached the partner for %d requests (%.3f per request; without a budget up to 2.0): bound Ratio %.2f × %d + Floor %d × %d window(s) + %d abstention(s) = %d",
		retries, requests, float64(retries)/float64(max(requests, 1)), fleetRatio, requests, fleetFloor, windows, abstained, bound)
	if retries > bound {
		t.Errorf("the fleet made %d retries, above the bound %d", retries, bound)
	}
	if partner.unmarked.Load() != 0 {
		t.Errorf("%d partner calls without an attempt header", partner.unmarked.Load())
	}

	// Open everywhere: a round reaches no partner at all (the open
	// duration has not passed, so no probe either), and every process has
	// logged the transition as an EMF record. The round and step 3 take
	// well under fleetFreshMargin once the fresh environment is ready; a
	// machine slow enough to have used up the open period waits for the
	// next one.
	fresh.waitReady(t, 20*time.Second)
	fleetOpenWithMargin(t, ctx, api, table, envs, fleetFreshMargin)
	open := startPhase("open", partner, counter)
	r := round(ctx, envs, 500)
	if err := r.err(); err != nil {
		t.Fatal(err)
	}
	openFig := open.end(k)
	for i, a := range r.answers {
		if a.status != http.StatusServiceUnavailable || a.reason != "breaker-open" || a.retryAfter == "" {
			t.Errorf("%s while open: %d %q Retry-After %q, want 503 breaker-open with Retry-After", envs[i].name, a.status, a.reason, a.retryAfter)
		}
		if envs[i].emfCount("BreakerOpened", nil) == 0 {
			t.Errorf("%s logged no BreakerOpened EMF record", envs[i].name)
		}
	}
	if openFig.firsts+openFig.retries != 0 {
		t.Errorf("while open, %d calls reached the partner, want 0", openFig.firsts+openFig.retries)
	}
	exhausted := 0
	for _, e := range envs {
		exhausted += e.emfCount("BudgetExhausted", nil)
	}
	if exhausted == 0 {
		t.Errorf("no BudgetExhausted EMF record during the outage")
	}

	// 3. A process dies; a new execution environment starts with empty
	// memory and must learn the open state from the table.
	envs[0].kill()
	freshPhase := startPhase("fresh", partner, counter)
	a, err := fresh.invoke(ctx, "fresh-1", fleetInvokeTimeout)
	if err != nil {
		t.Fatal(err)
	}
	freshFig := freshPhase.end(1)
	if a.status != http.StatusServiceUnavailable || a.reason != "breaker-open" || a.retryAfter == "" {
		t.Errorf("fresh environment's first invocation: %d %q (Retry-After %q), want 503 breaker-open from the table's state\n%s", a.status, a.body, a.retryAfter, fresh.logs())
	}
	if n := freshFig.firsts + freshFig.retries; n != 0 {
		t.Errorf("fresh environment's first invocation reached the partner %d times, want 0", n)
	}
	if freshFig.ddb.reads == 0 {
		t.Errorf("fresh environment's first invocation read nothing from DynamoDB: where did it learn the state?")
	}
	envs[0] = fresh

	// 4. Recovery.
	partner.down.Store(false)
	recovery := startPhase("recovery", partner, counter)
	inv = 0
	recovered := false
	deadline := time.Now().Add(fleetOpenDuration*2 + 10*time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		r := round(ctx, envs, 1000+n)
		if err := r.err(); err != nil {
			dump()
			t.Fatalf("recovery round %d: %v", n, err)
		}
		inv += k
		all := true
		for _, a := range r.answers {
			all = all && a.status == http.StatusOK
		}
		if all {
			recovered = true
			break
		}
		time.Sleep(fleetRecoveryPause)
	}
	if !recovered {
		dump()
		t.Fatalf("the fleet did not serve 200 everywhere within %v of the partner's recovery", fleetOpenDuration*2+10*time.Second)
	}
	// An environment whose Load took longer than StoreTimeout (a loaded
	// machine) follows its local state machine until its next Load
	// succeeds, and may serve calls before the fleet's item moves; the
	// item closes once the environments are back on it.
	final := readBreakerState(t, api, table)
	for n := 0; final.state != "closed" && time.Now().Before(deadline); n++ {
		if err := round(ctx, envs, 3000+n).err(); err != nil {
			dump()
			t.Fatalf("recovery round %d after the fleet served: %v", n, err)
		}
		inv += k
		time.Sleep(fleetRecoveryPause)
		final = readBreakerState(t, api, table)
	}
	recoveryFig := recovery.end(inv)
	if final.state != "closed" {
		faults := 0
		for _, e := range envs {
			_, c := e.storeFaults()
			faults += c
		}
		dump()
		t.Errorf("breaker item %v after the partner's recovery: %+v, want closed (breaker store faults so far: %d)", fleetOpenDuration*2+10*time.Second, final, faults)
	}
	r = round(ctx, envs, 2000)
	for i, a := range r.answers {
		if r.errs[i] != nil || a.status != http.StatusOK {
			t.Errorf("%s after recovery: %d %v", envs[i].name, a.status, r.errs[i])
		}
	}

	t.Logf("fleet of %d processes over the Lambda Runtime API, table %s, outage %v (%d rounds), whole test %v",
		k, table, outageEnd.Sub(outageStart).Round(time.Millisecond), rounds, time.Since(testStart).Round(time.Millisecond))
	for _, f := range []phaseFigures{initFig, healthyFig, outageFig, openFig, freshFig, recoveryFig} {
		t.Logf("%s", f)
	}
	t.Logf("outage answers: %v; BudgetExhausted EMF records: %d; global budget abstentions: %d; breaker store faults: %d",
		statuses, exhausted, abstained, breakerFaults)
}

// fleetOpenWithMargin returns once the breaker's state item is open with at
// least margin of its open period left. The partner is down: if less is
// left (a slow machine took the open period's time), it keeps the fleet
// (envs) invoking until the breaker has gone half-open, its probe has
// failed and it has opened again, for twice as long, and checks again;
// twice at most. It prints what it found.
func fleetOpenWithMargin(t *testing.T, ctx context.Context, api *dynamodb.Client, table string, envs []*lambdaEnv, margin time.Duration) {
	t.Helper()
	for waits := 0; ; waits++ {
		state := readBreakerState(t, api, table)
		if state.state != "open" {
			faults := 0
			for _, e := range envs {
				_, n := e.storeFaults()
				faults += n
			}
			// An environment whose store calls fail (StoreTimeout
			// passed on a loaded machine) trips on its local state
			// machine, not in the table: say how many did.
			t.Fatalf("breaker item in the table: %+v, want state open (breaker store faults logged by the environments: %d)", state, faults)
		}
		left := time.Until(state.openUntil)
		if left >= margin {
			t.Logf("open period (epoch %s): %v left, at least the %v the open round and the fresh environment's check need", state.epoch, left.Round(time.Millisecond), margin)
			return
		}
		if waits == 2 {
			t.Fatalf("the open period ends in %v, less than the %v the open round and the fresh environment's check need, after %d re-opens", left, margin, waits)
		}
		t.Logf("open period (epoch %s): only %v left, less than the %v the open round and the fresh environment's check need: waiting for a failed probe to open the breaker again",
			state.epoch, left.Round(time.Millisecond), margin)
		limit := time.Now().Add(left + time.Duration(float64(fleetOpenDuration)*2.4) + 10*time.Second)
		for n := 0; ; n++ {
			if time.Now().After(limit) {
				t.Fatalf("the breaker did not open again after its open period (epoch %s) ended", state.epoch)
			}
			if now := readBreakerState(t, api, table); now.state == "open" && now.epoch != state.epoch {
				break
			}
			if time.Now().After(state.openUntil) {
				if err := round(ctx, envs, 3000+100*waits+n).err(); err != nil {
					t.Fatalf("invoking while waiting for the breaker to re-open: %v", err)
				}
			}
			time.Sleep(fleetRecoveryPause)
		}
	}
}

// breakerItem is the breaker's state item c#<name> as stored.
type breakerItem struct {
	state     string
	epoch     string
	openUntil time.Time
}

func readBreakerState(t *testing.T, api *dynamodb.Client, table string) breakerItem {
	t.Helper()
	out, err := api.GetItem(callContext(t), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "c#" + fleetBreakerName}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("reading the breaker item: %v", err)
	}
	var b breakerItem
	if s, ok := out.Item["state"].(*types.AttributeValueMemberS); ok {
		b.state = s.Value
	}
	if n, ok := out.Item["epoch"].(*types.AttributeValueMemberN); ok {
		b.epoch = n.Value
	}
	if n, ok := out.Item["open_until"].(*types.AttributeValueMemberN); ok {
		if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			b.openUntil = time.UnixMilli(ms)
		}
	}
	return b
}

// TestLambdaInitErrorReachesRuntimeAPI starts the function without its
// required configuration: it must report an init error to the Runtime API
// and exit, rather than poll for invocations it cannot serve. It needs no
// DynamoDB.
func TestLambdaInitErrorReachesRuntimeAPI(t *testing.T) {
	bin := buildBikes(t, t.TempDir())
	e := startLambdaEnv(t, bin, "env-misconfigured", []string{
		"AWS_LAMBDA_FUNCTION_NAME=bikes-broken",
		"AWS_REGION=us-east-1",
		"PARTNER_URL=http://127.0.0.1:9",
		"HERDGUARD_RATIO=2",
	})
	select {
	case <-e.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("process still running; output:\n%s", e.logs())
	}
	if e.waitErr == nil {
		t.Error("process exited with status 0")
	}
	ie := e.api.InitError()
	if ie == nil {
		t.Fatalf("no init error reported; output:\n%s", e.logs())
	}
	if ie.HeaderType != "Runtime.InvalidConfiguration" || !strings.Contains(ie.Message, "HERDGUARD_TABLE") || !strings.Contains(ie.Message, "HERDGUARD_RATIO") {
		t.Errorf("init error %+v, want Runtime.InvalidConfiguration naming HERDGUARD_TABLE and HERDGUARD_RATIO", ie)
	}
	if e.api.Polls() != 0 {
		t.Errorf("the process asked for %d invocations after failing to initialise", e.api.Polls())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.api.Invoke(ctx, []byte(`{}`), time.Now().Add(time.Second)); !errors.Is(err, errInitFailed) {
		t.Errorf("Invoke after an init error: %v, want errInitFailed", err)
	}
}
