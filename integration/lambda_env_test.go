package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Messages the bikes function logs (herdlambda.MsgBudgetStoreUnavailable and
// herdlambda.MsgBreakerStoreUnavailable); the fleet test counts them. This
// module does not require the lambda module, hence the copies.
const (
	msgBudgetStoreUnavailable  = "retry budget store unavailable; the layer abstained"
	msgBreakerStoreUnavailable = "breaker store failed; using local state"
)

// buildBikes compiles examples/bikes (a module of its own, next to this
// one) into dir and returns the binary's path, named bootstrap as on
// provided.al2023.
func buildBikes(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bootstrap")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "examples", "bikes")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/bikes: %v\n%s", err, out)
	}
	return bin
}

// goTool returns the go command of the toolchain running the tests, so
// that the function is built with the same Go whatever the PATH holds (a
// PATH may hold another version, or none). runtime.GOROOT is deprecated
// because the root it names is meaningless for a binary copied to another
// machine; a test binary runs where it was built, and the go command is
// used only if it exists there, "go" from the PATH otherwise.
func goTool() string {
	if root := runtime.GOROOT(); root != "" {
		if p := filepath.Join(root, "bin", "go"+exeSuffix()); fileExists(p) {
			return p
		}
	}
	return "go"
}

// exeSuffix is ".exe" on Windows.
func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}

// fileExists reports whether p names a regular file.
func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// lambdaEnv is one execution environment: a bikes process and the Runtime
// API it polls.
type lambdaEnv struct {
	name string
	api  *runtimeAPI
	cmd  *exec.Cmd

	exited  chan struct{} // closed when the process has exited
	waitErr error         // set before exited is closed

	mu         sync.Mutex
	emf        []map[string]any // EMF records from stdout
	logTail    []string         // last lines of stderr
	budgetDown int              // msgBudgetStoreUnavailable lines
	breakerErr int              // msgBreakerStoreUnavailable lines
	readers    sync.WaitGroup
}

const logTailLines = 60

// startLambdaEnv starts bin with its own Runtime API and the environment
// env (plus AWS_LAMBDA_RUNTIME_API). The process is killed when the test
// ends.
func startLambdaEnv(t *testing.T, bin, name string, env []string) *lambdaEnv {
	t.Helper()
	api, err := newRuntimeAPI()
	if err != nil {
		t.Fatal(err)
	}
	e := &lambdaEnv{name: name, api: api, exited: make(chan struct{})}
	e.cmd = exec.Command(bin)
	e.cmd.Env = append(append([]string(nil), env...),
		"AWS_LAMBDA_RUNTIME_API="+api.Addr(),
		"AWS_LAMBDA_LOG_STREAM_NAME=2026/11/30/[$LATEST]"+name,
	)
	stdout, err := e.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := e.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		api.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	e.readers.Add(2)
	go e.readStdout(stdout)
	go e.readStderr(stderr)
	go func() {
		e.readers.Wait() // Wait must not run before the pipes are drained
		e.waitErr = e.cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() {
		e.kill()
		api.Close()
	})
	return e
}

// kill ends the process (SIGKILL, as Lambda does to an environment it
// discards) and waits for it.
func (e *lambdaEnv) kill() {
	select {
	case <-e.exited:
		return
	default:
	}
	_ = e.cmd.Process.Kill()
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
	}
}

func (e *lambdaEnv) readStdout(r io.Reader) {
	defer e.readers.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["_aws"] != nil {
			e.mu.Lock()
			e.emf = append(e.emf, rec)
			e.mu.Unlock()
			continue
		}
		e.addLog("stdout: " + string(line))
	}
}

func (e *lambdaEnv) readStderr(r io.Reader) {
	defer e.readers.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			e.mu.Lock()
			switch rec.Msg {
			case msgBudgetStoreUnavailable:
				e.budgetDown++
			case msgBreakerStoreUnavailable:
				e.breakerErr++
			}
			e.mu.Unlock()
		}
		e.addLog(line)
	}
}

func (e *lambdaEnv) addLog(line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.logTail = append(e.logTail, line)
	if len(e.logTail) > logTailLines {
		e.logTail = e.logTail[len(e.logTail)-logTailLines:]
	}
}

// logs returns the last lines the process wrote, for failure messages.
func (e *lambdaEnv) logs() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.logTail, "\n")
}

// storeFaults returns the counts of budget abstentions and breaker store
// faults the process logged.
func (e *lambdaEnv) storeFaults() (budget, breaker int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.budgetDown, e.breakerErr
}

// emfCount counts the EMF records of metric whose properties match.
func (e *lambdaEnv) emfCount(metric string, match map[string]string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
next:
	for _, r := range e.emf {
		if _, ok := r[metric]; !ok {
			continue
		}
		for k, v := range match {
			if r[k] != v {
				continue next
			}
		}
		n++
	}
	return n
}

// waitReady waits until the process has initialised and asks for its
// first invocation, or fails the test with the process's output.
func (e *lambdaEnv) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for e.api.Polls() == 0 {
		select {
		case <-e.exited:
			t.Fatalf("%s exited during init (%v); init error %v; output:\n%s", e.name, e.waitErr, e.api.InitError(), e.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not ask for an invocation within %v; output:\n%s", e.name, timeout, e.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answer is one invocation's outcome as a client of the HTTP API sees it.
type answer struct {
	status     int
	retryAfter string
	reason     string
	body       string
	took       time.Duration
}

// invoke sends GET /stations/{station}/bikes as an API Gateway v2 event
// with an invocation deadline of timeout.
func (e *lambdaEnv) invoke(ctx context.Context, station string, timeout time.Duration) (answer, error) {
	req := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "GET /stations/{stationId}/bikes",
		RawPath:        "/stations/" + station + "/bikes",
		Headers:        map[string]string{"accept": "application/json"},
		PathParameters: map[string]string{"stationId": station},
	}
	req.RequestContext.HTTP.Method = http.MethodGet
	req.RequestContext.HTTP.Path = req.RawPath
	req.RequestContext.RequestID = station + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	payload, err := json.Marshal(req)
	if err != nil {
		return answer{}, err
	}
	start := time.Now()
	ictx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	out, err := e.api.Invoke(ictx, payload, start.Add(timeout))
	if err != nil {
		return answer{}, fmt.Errorf("%s: %w", e.name, err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return answer{}, fmt.Errorf("%s: response %q: %w", e.name, out, err)
	}
	a := answer{status: resp.StatusCode, retryAfter: resp.Headers["Retry-After"], body: resp.Body, took: time.Since(start)}
	if resp.StatusCode != http.StatusOK {
		var b struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &b)
		a.reason = b.Reason
	}
	return a, nil
}

// partnerStub is the loopback partner: healthy (200 with JSON) or down
// (503 to every call). It counts arrivals by attempt number.
type partnerStub struct {
	srv      *httptest.Server
	down     atomic.Bool
	firsts   atomic.Int64 // attempt 1
	retries  atomic.Int64 // attempt 2 and later
	unmarked atomic.Int64 // no attempt header (must stay 0)
}

func newPartnerStub(t *testing.T) *partnerStub {
	p := &partnerStub{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch a := r.Header.Get("X-Herdguard-Attempt"); {
		case a == "1":
			p.firsts.Add(1)
		case a == "":
			p.unmarked.Add(1)
		default:
			p.retries.Add(1)
		}
		if p.down.Load() {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		station := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/stations/"), "/bikes")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"station":%q,"available":%d}`, station, len(station))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// arrivals returns first attempts and retries so far.
func (p *partnerStub) arrivals() (firsts, retries int64) {
	return p.firsts.Load(), p.retries.Load()
}

// dynamoCounter is a reverse proxy in front of DynamoDB Local that counts
// requests by operation (X-Amz-Target), so the test can report what the
// fleet costs in DynamoDB requests.
type dynamoCounter struct {
	srv *httptest.Server
	mu  sync.Mutex
	ops map[string]int64
}

func newDynamoCounter(t *testing.T, target string) *dynamoCounter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &dynamoCounter{ops: map[string]int64{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = 64
	proxy.Transport = tr
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(op, '.'); i >= 0 {
			op = op[i+1:]
		}
		c.mu.Lock()
		c.ops[op]++
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		c.srv.Close()
		tr.CloseIdleConnections()
	})
	return c
}

// snapshot returns the counts so far.
func (c *dynamoCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.ops))
	for k, v := range c.ops {
		out[k] = v
	}
	return out
}

// ddbUse is the DynamoDB traffic between two snapshots.
type ddbUse struct {
	reads, writes int64
	byOp          map[string]int64
}

// usage returns what happened between before and after. Reads are
// GetItem, BatchGetItem and the like; writes UpdateItem and PutItem.
func usage(before, after map[string]int64) ddbUse {
	u := ddbUse{byOp: map[string]int64{}}
	for op, n := range after {
		d := n - before[op]
		if d == 0 {
			continue
		}
		u.byOp[op] = d
		switch op {
		case "GetItem", "BatchGetItem", "Query", "Scan":
			u.reads += d
		case "UpdateItem", "PutItem", "DeleteItem", "BatchWriteItem":
			u.writes += d
		}
	}
	return u
}
