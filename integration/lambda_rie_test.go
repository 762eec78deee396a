//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The AWS Lambda Runtime Interface Emulator (RIE) is the Runtime API that
// AWS's own base images run for local tests. TestLambdaUnderRIE runs
// examples/bikes under it, as a new user would, instead of under this
// package's own Runtime API (lambda_runtime_test.go). The emulator is built
// from its Go module at a pinned version; it runs on Linux only.
const (
	rieModule  = "github.com/aws/aws-lambda-runtime-interface-emulator"
	rieVersion = "v0.0.0-20261030222936-bef5c4ba774d"
	// rieInvokePath is the emulator's invoke endpoint.
	rieInvokePath = "/2015-03-31/functions/function/invocations"
	// rieFunctionTimeout is AWS_LAMBDA_FUNCTION_TIMEOUT, template.yaml's 6 s.
	rieFunctionTimeout = 6 * time.Second
)

// buildRIE builds the emulator's command into dir with go install
// module@version (from the module cache, or the module proxy) and returns
// its path. It fails the test, never skips it, when the build fails.
func buildRIE(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "install", rieModule+"/cmd/aws-lambda-rie@"+rieVersion)
	cmd.Dir = dir // outside this module: go install pkg@version uses the emulator's own go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the Runtime Interface Emulator (go install %s/cmd/aws-lambda-rie@%s): %v\n%s", rieModule, rieVersion, err, out)
	}
	return filepath.Join(dir, "aws-lambda-rie")
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free a
// moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// rieEnv is one emulator process running the function: one execution
// environment.
type rieEnv struct {
	name   string
	invoke string // the invoke URL
	cmd    *exec.Cmd
	exited chan struct{}

	mu     sync.Mutex
	stdout []string // the function's output (EMF and logs) and the emulator's START/END/REPORT lines
	stderr []string // the emulator's own logs
}

// startRIE starts the emulator on loopback, running bin with env (the
// emulator passes its environment on to the function), and waits until it
// accepts invocations. The emulator and the function are killed, as a
// process group, when the test ends.
func startRIE(t *testing.T, rie, bin, name string, env []string) *rieEnv {
	t.Helper()
	invokeAddr := freeLoopbackAddr(t)
	e := &rieEnv{name: name, invoke: "http://" + invokeAddr + rieInvokePath, exited: make(chan struct{})}
	// Without --runtime-api-address the emulator serves the Runtime API on
	// its default port, 9001, which another test or process may hold.
	e.cmd = exec.Command(rie,
		"--runtime-interface-emulator-address", invokeAddr,
		"--runtime-api-address", freeLoopbackAddr(t),
		bin)
	e.cmd.Dir = filepath.Dir(bin)
	e.cmd.Env = append(append([]string(nil), env...),
		"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(rieFunctionTimeout/time.Second)),
		"AWS_LAMBDA_LOG_STREAM_NAME=2026/12/01/[$LATEST]"+name)
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := e.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := e.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("starting the emulator for %s: %v", name, err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go e.read(&readers, stdout, &e.stdout)
	go e.read(&readers, stderr, &e.stderr)
	go func() {
		readers.Wait()
		_ = e.cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL) // the emulator and the function
		select {
		case <-e.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the emulator did not exit after SIGKILL", name)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", invokeAddr, time.Second)
		if err == nil {
			_ = c.Close()
			return e
		}
		select {
		case <-e.exited:
			t.Fatalf("%s: the emulator exited at start; output:\n%s", name, e.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the emulator did not listen on %s within 20 s: %v; output:\n%s", name, invokeAddr, err, e.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *rieEnv) read(wg *sync.WaitGroup, r io.Reader, into *[]string) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		e.mu.Lock()
		*into = append(*into, sc.Text())
		e.mu.Unlock()
	}
}

// logs returns the last lines of both streams, for failure messages.
func (e *rieEnv) logs() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	tail := func(ls []string) []string { return ls[max(len(ls)-40, 0):] }
	return "stdout:\n" + strings.Join(tail(e.stdout), "\n") + "\nstderr:\n" + strings.Join(tail(e.stderr), "\n")
}

// jsonLines returns the JSON objects among the lines of both streams (the
// emulator writes the function's stdout and stderr to its own stdout).
func (e *rieEnv) jsonLines() []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []map[string]any
	for _, l := range append(append([]string(nil), e.stdout...), e.stderr...) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// rieAnswer is one invocation's answer and the request id it was sent with.
type rieAnswer struct {
	answer
	requestID string
}

// call invokes the function with GET /stations/{station}/bikes, as API
// Gateway (payload 2.0) would, with a request id of its own.
func (e *rieEnv) call(t *testing.T, station string) rieAnswer {
	t.Helper()
	req := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "GET /stations/{stationId}/bikes",
		RawPath:        "/stations/" + station + "/bikes",
		PathParameters: map[string]string{"stationId": station},
	}
	req.RequestContext.HTTP.Method = http.MethodGet
	req.RequestContext.HTTP.Path = req.RawPath
	payload, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%s-%s-%d", e.name, station, time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), rieFunctionTimeout+10*time.Second)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, e.invoke, bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("X-Amzn-RequestId", id)
	start := time.Now()
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatalf("%s: invoking: %v; output:\n%s", e.name, err, e.logs())
	}
	defer hresp.Body.Close()
	body, err := io.ReadAll(hresp.Body)
	if err != nil || hresp.StatusCode != http.StatusOK {
		t.Fatalf("%s: the emulator answered %d %q (%v); output:\n%s", e.name, hresp.StatusCode, body, err, e.logs())
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(body, &resp); err != nil || resp.StatusCode == 0 {
		t.Fatalf("%s: the function returned %q, not an HTTP API response (%v); output:\n%s", e.name, body, err, e.logs())
	}
	a := rieAnswer{answer: answer{status: resp.StatusCode, retryAfter: resp.Headers["Retry-After"], body: resp.Body, took: time.Since(start)}, requestID: id}
	var b struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal([]byte(resp.Body), &b)
	a.reason = b.Reason
	return a
}

// withEnv returns env with the given variables set, replacing earlier
// values.
func withEnv(env []string, set ...string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for _, s := range set {
			if sk, _, _ := strings.Cut(s, "="); sk == k {
				replaced = true
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// TestLambdaUnderRIE runs examples/bikes under the Runtime Interface
// Emulator, on loopback, against the loopback partner and DynamoDB Local:
// healthy, it answers 200; with the partner down, 503 with a Retry-After
// until the shared breaker opens; and a second emulator started afterwards
// answers 503 from the open state in the table, without calling the
// partner.
func TestLambdaUnderRIE(t *testing.T) {
	requireDynamoDB(t)
	dir := t.TempDir()
	rie := buildRIE(t, dir)
	bin := buildBikes(t, dir)
	table := newTable(t)
	partner := newPartnerStub(t)
	api := newAPI(t)
	// One environment trips the fleet's breaker on its own (its samples are
	// the fleet's), and the breaker must stay open long enough for the
	// second emulator to start and ask (30 s, template.yaml's default).
	// Store calls get a generous timeout: this test is about the function
	// under the emulator, not about DynamoDB Local's latency on a busy
	// machine, and a store call that times out sends the breaker to its
	// local state machine, whose state the second environment cannot read.
	env := withEnv(fleetEnvironment(table, dynamoEndpoint, partner.srv.URL),
		"HERDGUARD_BREAKER_MIN_REQUESTS=6", "HERDGUARD_BREAKER_OPEN_DURATION=30s",
		"HERDGUARD_STORE_TIMEOUT=1500ms", "HERDGUARD_FLUSH_TIMEOUT=1500ms")

	first := startRIE(t, rie, bin, "rie-1", env)

	// Healthy: 200 with the partner's JSON.
	a := first.call(t, "nord-3")
	if want := `{"station":"nord-3","available":6}`; a.status != http.StatusOK || a.body != want {
		t.Fatalf("healthy: %d %q, want 200 %q; output:\n%s", a.status, a.body, want, first.logs())
	}

	// Partner down: 502s and 503s, every 503 with a Retry-After, until the
	// breaker opens, in the table (reports reach it at most once a second,
	// so this takes a few seconds).
	partner.down.Store(true)
	var open rieAnswer
	statuses := map[string]int{}
	for deadline := time.Now().Add(60 * time.Second); open.status == 0 || readBreakerState(t, api, table).state != "open"; {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not open in the table within 60 s of the partner being down (answers %v); output:\n%s", statuses, first.logs())
		}
		a := first.call(t, "sud-"+strconv.Itoa(len(statuses)))
		statuses[strconv.Itoa(a.status)+" "+a.reason]++
		switch {
		case a.status == http.StatusServiceUnavailable:
			if secs, err := strconv.Atoi(a.retryAfter); err != nil || secs < 1 {
				t.Errorf("503 %s with Retry-After %q, want whole seconds, at least 1", a.reason, a.retryAfter)
			}
			if a.reason == "breaker-open" {
				open = a
			}
		case a.status != http.StatusBadGateway:
			t.Fatalf("partner down: %d %q, want 502 or 503; output:\n%s", a.status, a.body, first.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("partner down: answers %v before the breaker opened", statuses)
	if secs, _ := strconv.Atoi(open.retryAfter); secs > 36 {
		t.Errorf("503 breaker-open with Retry-After %d s, more than the 30 s open period + 20%% jitter", secs)
	}

	// The function's log records carry the invocation's request id (the
	// one the emulator was invoked with), and its metrics reach stdout as
	// Embedded Metric Format, one object per invocation that had any.
	logged := false
	for _, rec := range first.jsonLines() {
		if rec["msg"] == "partner unavailable" && rec["requestId"] == open.requestID {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no \"partner unavailable\" record with requestId %q; output:\n%s", open.requestID, first.logs())
	}
	metrics := map[string]float64{}
	for _, rec := range first.jsonLines() {
		if rec["_aws"] == nil {
			continue
		}
		for _, m := range []string{"BreakerOpened", "BudgetExhausted", "Retries"} {
			if v, ok := rec[m].(float64); ok {
				metrics[m] += v
			}
		}
	}
	if metrics["BreakerOpened"] < 1 || metrics["BudgetExhausted"] < 1 {
		t.Errorf("EMF metrics on stdout %v; want BreakerOpened and BudgetExhausted", metrics)
	}

	// A second execution environment, started now, learns the open state
	// from the table: 503 breaker-open, and the partner sees nothing.
	second := startRIE(t, rie, bin, "rie-2", env)
	firsts, retries := partner.arrivals()
	b := second.call(t, "ost-1")
	if b.status != http.StatusServiceUnavailable || b.reason != "breaker-open" {
		t.Fatalf("second environment: %d %q, want 503 breaker-open; output:\n%s", b.status, b.body, second.logs())
	}
	if secs, err := strconv.Atoi(b.retryAfter); err != nil || secs < 1 || secs > 36 {
		t.Errorf("second environment: Retry-After %q, want 1 to 36 seconds", b.retryAfter)
	}
	if f2, r2 := partner.arrivals(); f2 != firsts || r2 != retries {
		t.Errorf("the second environment called the partner (%d first attempts, %d retries) while the table said open", f2-firsts, r2-retries)
	}
}
