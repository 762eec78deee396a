package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/testcontainers/testcontainers-go"
	tcdynamodb "github.com/testcontainers/testcontainers-go/modules/dynamodb"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables that steer where the integration tests find DynamoDB.
const (
	// envDynamoDBImage names the DynamoDB Local image to start. .ci/test sets
	// it to the image it builds on machines without a registry.
	envDynamoDBImage = "HERDGUARD_DYNAMODB_IMAGE"
	// envDynamoDBEndpoint, when set, is used instead of starting a container
	// (for example a DynamoDB Local started by hand with java -jar). CI never
	// sets it: CI must prove that the testcontainers path works.
	envDynamoDBEndpoint = "HERDGUARD_DYNAMODB_ENDPOINT"
	// envCIRun is set by .ci/test; containers get it as a label so that .ci/test
	// can remove them if this binary dies before its own clean-up runs.
	envCIRun = "HERDGUARD_CI_RUN"
)

const (
	defaultDynamoDBImage = "amazon/dynamodb-local"
	// dynamoDBPort is DynamoDB Local's port inside the container.
	dynamoDBPort = "8000/tcp"
	// startTimeout bounds creating and starting the container, including a
	// first pull of the upstream image (about 500 MB) on a laptop.
	startTimeout = 10 * time.Minute
	// readyTimeout bounds waiting for DynamoDB Local to answer ListTables once
	// its port is open (it answers within a few seconds here).
	readyTimeout = 90 * time.Second
	// terminateTimeout bounds stopping and removing the container.
	terminateTimeout = 2 * time.Minute
)

// dynamoEndpoint is the base URL ("http://host:port") of the DynamoDB Local
// that every integration test in this package shares. TestMain sets it before
// any test runs; it is empty under -short, where tests needing DynamoDB skip.
var dynamoEndpoint string

// TestMain starts one DynamoDB Local for the whole test binary (fewer
// containers coming and going means fewer chances for the network stalls
// that a bridge whose MAC changes causes: see .ci/lib/podman.sh), warms it
// up (warmUpDynamoDB), runs the tests and removes the container.
//
// If DynamoDB Local cannot be started the binary exits 1: the integration
// tests fail, they never skip, so that a CI without a working container engine
// is red. Only -short skips them.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// Before any test, so that the leak checks ignore its goroutine.
	stopStalls := startStallMonitor()
	defer stopStalls()
	if testing.Short() {
		return m.Run()
	}
	start := time.Now()
	endpoint, stop, err := startDynamoDB()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: integration: DynamoDB Local could not be started: %v\n"+
			"  These tests need a container engine (Docker, or Podman serving the Docker API) and a\n"+
			"  DynamoDB Local image (%s, default %s). ./.ci/test sets both up on\n"+
			"  a machine without them; %s=host:port uses a running DynamoDB Local instead;\n"+
			"  -short skips these tests.\n",
			err, envDynamoDBImage, defaultDynamoDBImage, envDynamoDBEndpoint)
		return 1
	}
	dynamoEndpoint = endpoint
	fmt.Fprintf(os.Stderr, "integration: DynamoDB Local ready at %s after %v\n", endpoint, time.Since(start).Round(time.Millisecond))
	// Before any test: a cold JVM would make the first tests measure it
	// (see warmUpDynamoDB). How long it took is printed, not asserted.
	warm, err := warmUpDynamoDB(endpoint)
	fmt.Fprintf(os.Stderr, "integration: DynamoDB Local warm-up: %v\n", warm)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: integration: DynamoDB Local at %s does not work: %v\n", endpoint, err)
		if serr := stop(); serr != nil {
			fmt.Fprintf(os.Stderr, "FAIL: integration: removing DynamoDB Local: %v\n", serr)
		}
		return 1
	}

	code := m.Run()

	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: integration: removing DynamoDB Local: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// startDynamoDB returns the endpoint of a DynamoDB Local that answers
// ListTables, and a function that removes what was started.
func startDynamoDB() (endpoint string, stop func() error, err error) {
	if ep := os.Getenv(envDynamoDBEndpoint); ep != "" {
		endpoint, err := normalizeEndpoint(ep)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", envDynamoDBEndpoint, err)
		}
		if err := waitReady(endpoint, readyTimeout); err != nil {
			return "", nil, fmt.Errorf("%s=%s: %w", envDynamoDBEndpoint, ep, err)
		}
		return endpoint, func() error { return nil }, nil
	}

	image := os.Getenv(envDynamoDBImage)
	if image == "" {
		image = defaultDynamoDBImage
	}
	opts := []testcontainers.ContainerCustomizer{
		// In memory: nothing is written to the container's disk and every
		// container starts empty. One database for all credentials and
		// regions, so a client configured differently still sees the tables.
		testcontainers.WithCmdArgs("-inMemory", "-sharedDb"),
		// No telemetry calls out of the container (CI has no network anyway).
		tcdynamodb.WithDisableTelemetry(),
		// Wait for the mapped port from the host side only. The module's
		// default also checks inside the container with `podman exec`, whose
		// conmon processes linger for minutes; waitReady below is the real
		// readiness check.
		testcontainers.WithWaitStrategy(wait.ForListeningPort(dynamoDBPort).SkipInternalCheck().WithStartupTimeout(readyTimeout)),
	}
	if run := os.Getenv(envCIRun); run != "" {
		opts = append(opts, testcontainers.WithLabels(map[string]string{"herdguard.ci.run": run}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ctr, err := tcdynamodb.Run(ctx, image, opts...)
	terminate := func() error {
		// Ryuk (testcontainers' reaper) is disabled in CI, so this is what
		// removes the container.
		tctx, tcancel := context.WithTimeout(context.Background(), terminateTimeout)
		defer tcancel()
		return testcontainers.TerminateContainer(ctr, testcontainers.StopContext(tctx), testcontainers.StopTimeout(5*time.Second))
	}
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("image %s: %w", image, err), terminate())
	}
	hostPort, err := ctr.ConnectionString(ctx)
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("image %s: endpoint: %w", image, err), terminate())
	}
	endpoint = "http://" + hostPort
	if err := waitReady(endpoint, readyTimeout); err != nil {
		return "", nil, errors.Join(fmt.Errorf("image %s at %s: %w", image, endpoint, err), terminate())
	}
	return endpoint, terminate, nil
}

// normalizeEndpoint accepts "host:port" or a full http(s) URL.
func normalizeEndpoint(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) endpoint", s)
	}
	return u.Scheme + "://" + u.Host, nil
}

// waitReady calls ListTables until it succeeds or timeout passes: an open
// port is not yet a DynamoDB that answers.
func waitReady(endpoint string, timeout time.Duration) error {
	api, closeIdle := newClient(endpoint)
	defer closeIdle()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := api.ListTables(ctx, &dynamodb.ListTablesInput{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering ListTables after %v: %w", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
