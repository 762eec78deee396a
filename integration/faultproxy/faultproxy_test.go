package faultproxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/integration/faultproxy"
)

// noLeaks checks, after every other clean-up of the test, that the test left
// no goroutine behind.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// fakeDynamo answers every request with an empty JSON object, which the SDK
// reads as a GetItem that found nothing, and counts what reached it.
func fakeDynamo(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// sdkClient is a DynamoDB client through the proxy with no SDK retry, so
// that every call is one request.
func sdkClient(t *testing.T, endpoint string) *dynamodb.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("k", "s", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   &http.Client{Transport: tr, Timeout: 5 * time.Second},
		Retryer:      retry.AddWithMaxAttempts(retry.NewStandard(), 1),
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
	if s.Requests != 6 || s.Forwarded != 2 || s.Injected != 4 || s.Refused < 1 || s.Ops["GetItem"] != 6 {
		t.Errorf("stats = %v; want 6 requests (all GetItem), 2 forwarded, 4 injected, at least 1 refused", s)
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
	// A port with nothing listening: listen, note the address, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

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
