package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/herdguard/herdguard/integration/internal/faultproxy"
	"github.com/herdguard/herdguard/internal/leakcheck"
)

// noLeaks checks, after every other clean-up of the test, that the test left
// no goroutine behind.
func noLeaks(t *testing.T) {
	t.Helper()
	leakcheck.Check(t)
}

// fakeDynamo answers every request with an empty JSON object, which the SDK
// reads as a GetItem that found nothing, and counts what reached it.
func fakeDynamo(t *testing.T) (*httptest.Server, *atomic.Int64) {
	srv, hits, _ := fakeDynamoStatus(t)
	return srv, hits
}

// fakeDynamoStatus is fakeDynamo whose answer's status can be changed: a
// status other than 200 is answered as a ConditionalCheckFailedException.
func fakeDynamoStatus(t *testing.T) (*httptest.Server, *atomic.Int64, *atomic.Int64) {
	var hits, status atomic.Int64
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if s := int(status.Load()); s != http.StatusOK {
			w.Header().Set("X-Amzn-ErrorType", "ConditionalCheckFailedException")
			w.WriteHeader(s)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"no"}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits, &status
}

// sdkClient is a DynamoDB client through the proxy with no SDK retry, so
// that every call is one request.
func sdkClient(t *testing.T, endpoint string) *dynamodb.Client {
	return sdkClientAttempts(t, endpoint, 1)
}

// sdkClientAttempts is a DynamoDB client through the proxy that makes up
// to attempts attempts per call, 1 ms apart.
func sdkClientAttempts(t *testing.T, endpoint string, attempts int) *dynamodb.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("k", "s", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   &http.Client{Transport: tr, Timeout: 5 * time.Second},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		}),
	})
}

func getItem(ctx context.Context, c *dynamodb.Client) error {
	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("t"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
	})
	return err
}

// TestFaults checks that the SDK reads every injected fault as the error a
// failing DynamoDB produces, and that the counters add up.
func TestFaults(t *testing.T) {
	noLeaks(t)
	up, hits := fakeDynamo(t)
	p, err := faultproxy.New(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := sdkClient(t, p.URL())

	cases := []struct {
		fault faultproxy.Fault
		check func(error) bool
		want  string
	}{
		{faultproxy.Fault{}, func(err error) bool { return err == nil }, "success"},
		{faultproxy.Fault{Kind: faultproxy.InternalError}, func(err error) bool {
			var e *types.InternalServerError
			return errors.As(err, &e)
		}, "*types.InternalServerError"},
		{faultproxy.Fault{Kind: faultproxy.Throttling}, func(err error) bool {
			var e *types.ThrottlingException
			return errors.As(err, &e)
		}, "*types.ThrottlingException"},
		{faultproxy.Fault{Kind: faultproxy.ThroughputExceeded}, func(err error) bool {
			var e *types.ProvisionedThroughputExceededException
			var api smithy.APIError
			return errors.As(err, &e) && errors.As(err, &api) && api.ErrorCode() == "ProvisionedThroughputExceededException"
		}, "*types.ProvisionedThroughputExceededException"},
		{faultproxy.Fault{Kind: faultproxy.Drop}, func(err error) bool {
			var api smithy.APIError
			return err != nil && !errors.As(err, &api)
		}, "a network error"},
		{faultproxy.Fault{Kind: faultproxy.Refuse}, func(err error) bool {
			var api smithy.APIError
			return err != nil && !errors.As(err, &api)
		}, "a network error"},
	}
	for _, tc := range cases {
		p.Set(tc.fault)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := getItem(ctx, c)
		cancel()
		if !tc.check(err) {
			t.Errorf("fault %s: GetItem error = %v (%T); want %s", tc.fault, err, err, tc.want)
		}
	}
	p.Set(faultproxy.Fault{})
	if err := getItem(context.Background(), c); err != nil {
		t.Fatalf("after clearing the fault: %v", err)
	}

	s := p.Stats()
	// Refuse resets the connection before a request is read.
	if s.Requests != 6 || s.Forwarded != 2 || s.Succeeded != 2 || s.Injected != 4 || s.Refused < 1 || s.Ops["GetItem"] != 6 ||
		s.Discarded != 0 || s.Replays != 0 {
		t.Errorf("stats = %v; want 6 requests (all GetItem), 2 forwarded and succeeded, 4 injected, at least 1 refused, nothing discarded or replayed", s)
	}
	if hits.Load() != 2 {
		t.Errorf("upstream saw %d requests, want 2", hits.Load())
	}
	if s.Total("GetItem", "UpdateItem") != 6 {
		t.Errorf("Total(GetItem, UpdateItem) = %d, want 6", s.Total("GetItem", "UpdateItem"))
	}
}

// TestLatency checks that latency delays a request and that a client that
// gives up first is not kept waiting.
func TestLatency(t *testing.T) {
	noLeaks(t)
	up, _ := fakeDynamo(t)
	p, err := faultproxy.New(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := sdkClient(t, p.URL())

	p.Set(faultproxy.Fault{Latency: 30 * time.Millisecond})
	start := time.Now()
	if err := getItem(context.Background(), c); err != nil {
		t.Fatalf("GetItem with latency: %v", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("GetItem with 30ms latency took %v", d)
	}

	p.Set(faultproxy.Fault{Latency: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	start = time.Now()
	err = getItem(ctx, c)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GetItem with an hour of latency and a 50ms deadline = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("GetItem with a 50ms deadline took %v", d)
	}
}

// TestUpstreamDown checks that a request the upstream cannot take is a
// reset connection, and that SetUpstream moves the proxy to a new upstream.
func TestUpstreamDown(t *testing.T) {
	noLeaks(t)
	// An upstream that is gone: it accepts connections and resets them
	// at once, before reading a request. (Unlike a port closed after
	// use, nothing else can take its place while the test runs.)
	dead := resettingServer(t)

	p, err := faultproxy.New(dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := sdkClient(t, p.URL())
	err = getItem(context.Background(), c)
	var api smithy.APIError
	if err == nil || errors.As(err, &api) {
		t.Fatalf("GetItem through a dead upstream = %v; want a network error", err)
	}
	if s := p.Stats(); s.UpstreamErrors != 1 {
		t.Errorf("stats = %v; want 1 upstream error", s)
	}

	up, _ := fakeDynamo(t)
	if err := p.SetUpstream(up.URL); err != nil {
		t.Fatal(err)
	}
	if err := getItem(context.Background(), c); err != nil {
		t.Fatalf("GetItem after SetUpstream: %v", err)
	}
	if err := p.SetUpstream("ftp://x"); err == nil {
		t.Error("SetUpstream(ftp://x) = nil, want an error")
	}
	if _, err := faultproxy.New("not a url"); err == nil {
		t.Error("New(not a url) = nil error")
	}
}

// resettingServer returns the URL of a loopback listener that accepts every
// connection and resets it at once. It is closed when the test ends.
func resettingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// TestApplyThenDrop checks that ApplyThenDrop applies a request upstream,
// loses its answer, and counts the SDK's retry of it as a replay; that
// Attempts limits a fault to the first attempts of an SDK call; and that
// a request the upstream refused, or one dropped before it was forwarded,
// is not taken for an applied one.
func TestApplyThenDrop(t *testing.T) {
	noLeaks(t)
	up, hits, status := fakeDynamoStatus(t)
	p, err := faultproxy.New(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := sdkClientAttempts(t, p.URL(), 2) // one SDK retry, as dynamo.NewClient makes

	cases := []struct {
		fault    faultproxy.Fault
		status   int
		wantErr  bool
		upstream int64            // requests that reached the upstream
		want     faultproxy.Stats // the counters that matter; Ops aside
	}{
		// Both attempts applied, both answers lost: the call fails, and
		// the second attempt re-sent a write that was applied.
		{faultproxy.Fault{Kind: faultproxy.ApplyThenDrop}, 200, true, 2,
			faultproxy.Stats{Requests: 2, Forwarded: 2, Succeeded: 2, Injected: 2, Discarded: 2, DiscardedSucceeded: 2, Replays: 1}},
		// The first attempt applied and lost, the retry answered: the
		// caller sees a success for a write applied twice.
		{faultproxy.Fault{Kind: faultproxy.ApplyThenDrop, Attempts: 1}, 200, false, 2,
			faultproxy.Stats{Requests: 2, Forwarded: 2, Succeeded: 2, Injected: 1, Discarded: 1, DiscardedSucceeded: 1, Replays: 1}},
		// Refused upstream (a failed condition): nothing was applied, so
		// the retry is no replay.
		{faultproxy.Fault{Kind: faultproxy.ApplyThenDrop, Attempts: 1}, 400, true, 2,
			faultproxy.Stats{Requests: 2, Forwarded: 2, Injected: 1, Discarded: 1}},
		// Dropped before forwarding: the retry is the first to arrive.
		{faultproxy.Fault{Kind: faultproxy.Drop, Attempts: 1}, 200, false, 1,
			faultproxy.Stats{Requests: 2, Forwarded: 1, Succeeded: 1, Injected: 1}},
		{faultproxy.Fault{Kind: faultproxy.Drop}, 200, true, 0,
			faultproxy.Stats{Requests: 2, Injected: 2}},
	}
	for _, tc := range cases {
		status.Store(int64(tc.status))
		p.Set(tc.fault)
		s0, h0 := p.Stats(), hits.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := getItem(ctx, c)
		cancel()
		d := p.Stats().Sub(s0)
		if gotErr := err != nil; gotErr != tc.wantErr {
			t.Errorf("%s, upstream %d: GetItem error = %v; want an error: %v", tc.fault, tc.status, err, tc.wantErr)
		}
		if n := hits.Load() - h0; n != tc.upstream {
			t.Errorf("%s, upstream %d: the upstream saw %d requests, want %d", tc.fault, tc.status, n, tc.upstream)
		}
		if d.Ops["GetItem"] != d.Requests {
			t.Errorf("%s: ops %v, want every request counted as GetItem", tc.fault, d.Ops)
		}
		d.Ops = nil
		if d.String() != tc.want.String() {
			t.Errorf("%s, upstream %d: stats\n got %v\nwant %v", tc.fault, tc.status, d, tc.want)
		}
	}
	if got := (faultproxy.Fault{Kind: faultproxy.ApplyThenDrop, Attempts: 1}).String(); got != "apply-then-drop(attempts<=1)" {
		t.Errorf("Fault.String() = %q", got)
	}

	// A client that is not the SDK (no invocation identifier) gets the
	// same fault; its requests are never taken for replays.
	p.Set(faultproxy.Fault{Kind: faultproxy.ApplyThenDrop})
	status.Store(http.StatusOK)
	s0, h0 := p.Stats(), hits.Load()
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	for range 2 {
		resp, err := (&http.Client{Transport: tr}).Post(p.URL(), "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("POST through apply-then-drop answered %s, want a reset", resp.Status)
		}
	}
	if d := p.Stats().Sub(s0); hits.Load()-h0 != 2 || d.DiscardedSucceeded != 2 || d.Replays != 0 {
		t.Errorf("plain POSTs through apply-then-drop: upstream saw %d, stats %v; want 2 applied, no replay", hits.Load()-h0, d)
	}
}

// TestCloseIdleConnections checks that the proxy closes a client
// connection that waits for its next request.
func TestCloseIdleConnections(t *testing.T) {
	noLeaks(t)
	up, _ := fakeDynamo(t)
	p, err := faultproxy.New(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The server marks the connection idle once it has written the
	// answer, which may be a moment after the client has read it: ask
	// until the connection is closed.
	closed := false
	for deadline := time.Now().Add(5 * time.Second); !closed && time.Now().Before(deadline); {
		p.CloseIdleConnections()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := br.ReadByte()
		var ne net.Error
		closed = err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	if !closed {
		t.Fatal("the idle client connection was still open after CloseIdleConnections")
	}
}
