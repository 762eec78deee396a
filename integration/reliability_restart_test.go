package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcdynamodb "github.com/testcontainers/testcontainers-go/modules/dynamodb"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/integration/internal/faultproxy"
)

// relOwnDynamo is a DynamoDB Local that one test may stop and start again:
// a container of its own (the shared one must stay up for the other tests),
// or, when HERDGUARD_DYNAMODB_ENDPOINT names a DynamoDB outside any
// container engine, the shared one behind the fault proxy with a stop
// simulated by refusing every connection and deleting the test's table
// (what a restarted -inMemory DynamoDB Local has lost).
type relOwnDynamo struct {
	endpoint  string
	simulated bool
	ctr       *tcdynamodb.DynamoDBContainer
	logf      func(format string, args ...any) // the test's t.Logf
}

// relStartOwnDynamo starts the test's own DynamoDB Local, warms it up
// (warmUpDynamoDB) and removes it when the test ends. Without a container
// engine (HERDGUARD_DYNAMODB_ENDPOINT set) it returns the shared endpoint,
// marked simulated.
func relStartOwnDynamo(t *testing.T) *relOwnDynamo {
	t.Helper()
	if os.Getenv(envDynamoDBEndpoint) != "" {
		return &relOwnDynamo{endpoint: dynamoEndpoint, simulated: true}
	}
	image := os.Getenv(envDynamoDBImage)
	if image == "" {
		image = defaultDynamoDBImage
	}
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmdArgs("-inMemory", "-sharedDb"),
		tcdynamodb.WithDisableTelemetry(),
		testcontainers.WithWaitStrategy(wait.ForListeningPort(dynamoDBPort).SkipInternalCheck().WithStartupTimeout(readyTimeout)),
	}
	if run := os.Getenv(envCIRun); run != "" {
		opts = append(opts, testcontainers.WithLabels(map[string]string{"herdguard.ci.run": run}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ctr, err := tcdynamodb.Run(ctx, image, opts...)
	t.Cleanup(func() {
		tctx, tcancel := context.WithTimeout(context.Background(), terminateTimeout)
		defer tcancel()
		if err := testcontainers.TerminateContainer(ctr, testcontainers.StopContext(tctx), testcontainers.StopTimeout(5*time.Second)); err != nil {
			t.Errorf("removing the test's DynamoDB Local: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("starting a DynamoDB Local of the test's own (image %s): %v", image, err)
	}
	d := &relOwnDynamo{ctr: ctr, logf: t.Logf}
	if d.endpoint, err = d.ready(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// ready returns the endpoint once DynamoDB Local answers and has been
// warmed up: a container started (or started again) is a cold JVM.
func (d *relOwnDynamo) ready(ctx context.Context) (string, error) {
	hostPort, err := d.ctr.ConnectionString(ctx)
	if err != nil {
		return "", fmt.Errorf("DynamoDB Local endpoint: %w", err)
	}
	endpoint := "http://" + hostPort
	if err := waitReady(endpoint, readyTimeout); err != nil {
		return "", fmt.Errorf("DynamoDB Local at %s: %w", endpoint, err)
	}
	warm, err := warmUpDynamoDB(endpoint)
	d.logf("the test's own DynamoDB Local at %s, warm-up: %v", endpoint, warm)
	if err != nil {
		return "", fmt.Errorf("DynamoDB Local at %s: %w", endpoint, err)
	}
	return endpoint, nil
}

// stop stops DynamoDB Local (or, simulated, makes proxy refuse connections
// and deletes table, as the stop of an in-memory DynamoDB Local would).
func (d *relOwnDynamo) stop(ctx context.Context, proxy *faultproxy.Proxy, table string) error {
	if d.simulated {
		proxy.Set(faultproxy.Fault{Kind: faultproxy.Refuse})
		api, closeIdle := newClient(d.endpoint)
		defer closeIdle()
		return dynamo.DeleteTable(ctx, api, table)
	}
	timeout := 5 * time.Second
	return d.ctr.Stop(ctx, &timeout)
}

// start starts it again, warms it up (while the proxy still refuses: for
// the fleet DynamoDB is still away) and points proxy at it. A container
// may come back on another host port.
func (d *relOwnDynamo) start(ctx context.Context, proxy *faultproxy.Proxy) error {
	if d.simulated {
		proxy.Set(faultproxy.Fault{})
		return nil
	}
	if err := d.ctr.Start(ctx); err != nil {
		return err
	}
	endpoint, err := d.ready(ctx)
	if err != nil {
		return err
	}
	d.endpoint = endpoint
	return proxy.SetUpstream(endpoint)
}

// relCreateTable creates herdguard's table at endpoint with a harness client.
func relCreateTable(ctx context.Context, endpoint, table string) error {
	api, closeIdle := newClient(endpoint)
	defer closeIdle()
	return dynamo.CreateTable(ctx, api, table)
}

// relLoadBreaker reads a breaker's fleet state through a store of its own.
func relLoadBreaker(t *testing.T, endpoint, table, name string) (breaker.Snapshot, error) {
	t.Helper()
	api, closeIdle := newClient(endpoint)
	defer closeIdle()
	st, err := dynamo.NewBreakerStore(api, table, dynamo.StoreOptions{})
	if err != nil {
		return breaker.Snapshot{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return st.Load(ctx, name)
}

// relAllIn reports whether every environment's last announced breaker
// state is one of want.
func relAllIn(f *relFleet, want ...breaker.State) bool {
	for _, e := range f.envs {
		st := e.lastState()
		ok := false
		for _, w := range want {
			ok = ok || st == w
		}
		if !ok {
			return false
		}
	}
	return true
}

// relTableIn reports whether the fleet state in the table is one of want,
// and what was read.
func relTableIn(t *testing.T, endpoint, table, name string, want ...breaker.State) (bool, string) {
	snap, err := relLoadBreaker(t, endpoint, table, name)
	if err != nil {
		return false, err.Error()
	}
	for _, w := range want {
		if snap.State == w {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%v at epoch %d", snap.State, snap.Epoch)
}

// relTripWithin bounds how long after the partner goes down the shared
// breaker is open in the table and in every environment of a relFleet
// whose partner fails every call: the first ReportInterval's failures
// (100 calls/s per environment: MinRequests within it) are reported
// (StoreTimeout), the sliding estimate over the breaker Window trips and
// the transition is written (StoreTimeout), and every environment reads it
// within CacheTTL. One store fault on the way (a timed-out report or read
// leaves the environment on its local state machine until it reads the
// fleet again, CacheTTL later) can cost the whole path once more, hence
// twice Window + CacheTTL. With the relFleet defaults: 6.4 s.
func relTripWithin(cfg relFleetConfig) time.Duration {
	return 2*(relBreakerWindow+cfg.CacheTTL) + relReportInterval + 2*cfg.StoreTimeout
}

// TestReliabilityDynamoRestart stops DynamoDB Local in the middle of a run
// and starts it again, empty (an -inMemory DynamoDB Local loses its tables;
// the test recreates the table as an operator would). Three environments
// keep calling a partner that fails 30% of attempts throughout. The fleet
// has a history before the restart: an outage opened and closed the shared
// breaker, so its epoch is past zero.
//
// It asserts that calls return by their deadline plus relOverrunBound
// (judged as in TestReliabilityDynamoFaults) while DynamoDB is gone, that
// the local budget keeps limiting retries, that, with every layer asked
// for a decision every relProbeInterval, each environment's Global starts
// a store request within FaultCooldown + relResumeTolerance of the table's
// return and its breaker within CacheTTL + relResumeTolerance, and both
// then work again (the first success is printed), and that they do their
// job again: a second partner outage opens the breaker fleet-wide (in the
// new table) and it closes after the outage. No goroutine may leak.
func TestReliabilityDynamoRestart(t *testing.T) {
	requireDynamoDB(t)
	relNoLeaks(t)
	own := relStartOwnDynamo(t)
	table := tableName(t)
	setup, cancel := context.WithTimeout(context.Background(), tableOpTimeout)
	defer cancel()
	if err := relCreateTable(setup, own.endpoint, table); err != nil {
		t.Fatalf("create table: %v", err)
	}
	proxy, err := faultproxy.New(own.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	api := relStoreClient(t, proxy.URL())
	// The outages must open the breaker in the table: a working table's
	// store timeout (relWorkingStoreTimeout). While DynamoDB is away the
	// proxy refuses connections, which fails store calls at once.
	fleet := newRelFleet(t, api, table, relFleetConfig{Envs: 3, OpenDuration: 2 * time.Second, StoreTimeout: relWorkingStoreTimeout})
	cfg := fleet.cfg
	partner := &relPartner{}
	ctx := t.Context()
	var overruns relOverruns
	run := func(name string, d time.Duration, stop <-chan struct{}) relPhase {
		ph := fleet.runUntil(ctx, name, d, stop, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
		relCheckCalls(t, ph, &overruns)
		t.Logf("%s (%v): %v", name, ph.duration.Round(time.Millisecond), ph.totals())
		return ph
	}
	// outage opens the breaker in every environment with the partner down,
	// and waits (the fleet calling all along) until the table holds it open
	// too, for at most relTripWithin; then heals the partner and waits until
	// every environment is closed.
	outage := func(name string) {
		partner.setFailure(1)
		tableOpen := func() (bool, string) {
			return relTableIn(t, own.endpoint, table, cfg.Name, breaker.Open, breaker.HalfOpen)
		}
		open, endOpen := becomes(50*time.Millisecond, func() bool {
			if !relAllIn(fleet, breaker.Open, breaker.HalfOpen) {
				return false
			}
			ok, _ := tableOpen()
			return ok
		})
		within := relTripWithin(cfg)
		run(name+": partner down", within, open)
		endOpen()
		for _, e := range fleet.envs {
			if st := e.lastState(); st != breaker.Open && st != breaker.HalfOpen {
				t.Errorf("%s: env %d's breaker is %v after the partner was down for %v; want open", name, e.id, st, within)
			}
		}
		// While the partner is down no probe can succeed, so a table seen
		// open stays open or half-open: this read is the state the wait saw.
		if ok, got := tableOpen(); !ok {
			t.Errorf("%s: the fleet state in the table is %s after the partner was down for %v (relTripWithin); want open", name, got, within)
		}
		partner.setFailure(0)
		// Closed again: the open period (OpenDuration ± 20%) ends, a probe
		// succeeds, every environment reads Closed within CacheTTL; a probe
		// that lost a race re-opens for twice as long. 3 × OpenDuration +
		// 2 s covers one such re-open.
		closed, endClosed := becomes(10*time.Millisecond, func() bool { return relAllIn(fleet, breaker.Closed) })
		run(name+": partner back", 3*cfg.OpenDuration+2*time.Second, closed)
		endClosed()
		for _, e := range fleet.envs {
			if st := e.lastState(); st != breaker.Closed {
				t.Errorf("%s: env %d's breaker is %v after the partner came back; want closed", name, e.id, st)
			}
		}
		snap, err := relLoadBreaker(t, own.endpoint, table, cfg.Name)
		t.Logf("%s: fleet state in the table after it: %v at epoch %d (%v)", name, snap.State, snap.Epoch, err)
	}

	partner.setFailure(0)
	run("warm-up", 500*time.Millisecond, nil)
	outage("outage before the restart")

	// The restart, with the fleet calling all along.
	partner.setFailure(relPartnerFailure)
	stopFleet := make(chan struct{})
	phc := make(chan relPhase, 1)
	go func() {
		phc <- fleet.runUntil(ctx, "restart", time.Minute, stopFleet, relPaceInterval, relMinDeadline, relMaxDeadline, partner)
	}()
	time.Sleep(300 * time.Millisecond) // calls in flight when DynamoDB goes away
	down := time.Now()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), terminateTimeout)
	err = own.stop(stopCtx, proxy, table)
	cancelStop()
	stopped := time.Now()
	if err == nil {
		time.Sleep(time.Second) // DynamoDB stays away for a while
		startCtx, cancelStart := context.WithTimeout(context.Background(), startTimeout)
		err = own.start(startCtx, proxy)
		if err == nil {
			err = relCreateTable(startCtx, own.endpoint, table)
		}
		cancelStart()
	}
	back := fleet.watchFrom(time.Now())
	var probeGrants int64
	if err == nil {
		stopProbes := fleet.probeLayers(ctx)
		// Wait, the fleet calling all along, until every layer of every
		// environment has worked against the new table, for at most
		// resumeWithin.
		resumed, endResumed := becomes(10*time.Millisecond, fleet.allResumed)
		select {
		case <-resumed:
		case <-time.After(fleet.resumeWithin()):
		}
		endResumed()
		probeGrants = stopProbes()
	}
	close(stopFleet)
	ph := <-phc
	if err != nil {
		t.Fatalf("restarting DynamoDB Local: %v", err)
	}
	relCheckCalls(t, ph, &overruns)
	tot := ph.totals()
	how := "container stopped and started"
	if own.simulated {
		how = "simulated: connections refused and the table deleted (no container engine)"
	}
	t.Logf("restart (%s): stop took %v, DynamoDB away for %v; %v", how, stopped.Sub(down).Round(time.Millisecond), back.Sub(down).Round(time.Millisecond), tot)
	for i := range fleet.envs {
		b, a := ph.before[i], ph.after[i]
		if retries, granted := a.retries-b.retries, a.local.granted-b.local.granted; retries > granted {
			t.Errorf("env %d made %d retries but its local budget granted %d", i, retries, granted)
		}
	}
	if tot.globalAbstain == 0 {
		t.Errorf("the global layer never abstained while DynamoDB was away: %v", tot)
	}
	res := relCheckResume(t, fleet, back)
	t.Logf("after the restart: Global tried the table after %v and worked after %v, breaker after %v and %v (the probes received %d grants)",
		res.budgetAttempt.Round(time.Millisecond), res.budgetSuccess.Round(time.Millisecond),
		res.breakerAttempt.Round(time.Millisecond), res.breakerSuccess.Round(time.Millisecond), probeGrants)

	// The global layers do their job again in the new table.
	partner.setFailure(relPartnerFailure)
	rec := run("after the restart", time.Second, nil)
	if rec.totals().globalLeases == 0 {
		t.Errorf("no global lease in the new table after the restart: %v", rec.totals())
	}
	outage("outage after the restart")
	overruns.check(t, "the whole run")

	ps := proxy.Stats()
	t.Logf("DynamoDB HTTP requests over the whole run: %v", ps)
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal("test context canceled")
	}
}
