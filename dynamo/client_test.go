package dynamo

import (
	"context"
	"errors"
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
	"github.com/herdguard/herdguard"
)

func TestClientOptionsValidation(t *testing.T) {
	for _, c := range []struct {
		o    ClientOptions
		want string
	}{
		{ClientOptions{MaxAttempts: 3}, "MaxAttempts is 3"},
		{ClientOptions{MaxAttempts: -1}, "MaxAttempts is -1"},
		{ClientOptions{MaxBackoff: -time.Millisecond}, "MaxBackoff"},
		{ClientOptions{MaxBackoff: 2 * time.Second}, "MaxBackoff"},
		{ClientOptions{DialTimeout: -1}, "DialTimeout"},
		{ClientOptions{RequestTimeout: -1}, "RequestTimeout"},
		{ClientOptions{Endpoint: "localhost:8000"}, "Endpoint"},
		{ClientOptions{Endpoint: "ftp://localhost:8000"}, "Endpoint"},
		{ClientOptions{Endpoint: "http://"}, "Endpoint"},
		{ClientOptions{Config: &aws.Config{}}, "Region is empty"},
	} {
		_, err := NewClient(t.Context(), c.o)
		var ce *herdguard.ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "herdguard: dynamo.ClientOptions."+c.want) {
			t.Errorf("NewClient(%+v) error = %v, want a *herdguard.ConfigError starting with dynamo.ClientOptions.%s", c.o, err, c.want)
		}
	}
}

func TestClientDefaults(t *testing.T) {
	c, err := NewClient(t.Context(), ClientOptions{Config: &aws.Config{Region: "eu-west-1"}, Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options()
	if o.Region != "eu-west-1" || aws.ToString(o.BaseEndpoint) != "http://127.0.0.1:1" {
		t.Errorf("region %q endpoint %q", o.Region, aws.ToString(o.BaseEndpoint))
	}
	if got := o.Retryer.MaxAttempts(); got != 2 {
		t.Errorf("MaxAttempts = %d, want 2 (one SDK retry)", got)
	}
	hc, ok := o.HTTPClient.(*http.Client)
	if !ok {
		t.Fatalf("HTTPClient is %T, want *http.Client", o.HTTPClient)
	}
	tr := hc.Transport.(*http.Transport)
	if hc.Timeout != 5*time.Second || tr.ResponseHeaderTimeout != 5*time.Second || tr.TLSHandshakeTimeout != time.Second {
		t.Errorf("timeouts: client %v, response header %v, TLS %v; want 5s, 5s, 1s", hc.Timeout, tr.ResponseHeaderTimeout, tr.TLSHandshakeTimeout)
	}
	hc.CloseIdleConnections()
}

// fakeDynamoDB is an HTTP server answering every request with status and
// a DynamoDB JSON error body, counting requests.
func fakeDynamoDB(t *testing.T, status int, errType string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#` + errType + `","message":"injected"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func testClient(t *testing.T, cfg *aws.Config, endpoint string, o ClientOptions) *dynamodb.Client {
	t.Helper()
	o.Config = cfg
	o.Endpoint = endpoint
	o.Credentials = credentials.NewStaticCredentialsProvider("id", "secret", "")
	c, err := NewClient(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Options().HTTPClient.(*http.Client).CloseIdleConnections)
	return c
}

func getItem(t *testing.T, c *dynamodb.Client) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("herdguard"), Key: keyAttr("c#x")})
	return err
}

// TestClientRetriesOnceWhateverTheConfig checks that the client makes at
// most MaxAttempts attempts even when the application's configuration (or
// AWS_MAX_ATTEMPTS) asks for many more.
func TestClientRetriesOnceWhateverTheConfig(t *testing.T) {
	srv, n := fakeDynamoDB(t, http.StatusInternalServerError, "InternalServerError")
	userCfg := &aws.Config{
		Region:           "us-east-1",
		RetryMaxAttempts: 9,
		Retryer:          func() aws.Retryer { return retry.AddWithMaxAttempts(retry.NewStandard(), 9) },
	}
	for _, c := range []struct {
		maxAttempts int
		want        int64
	}{{0, 2}, {2, 2}, {1, 1}} {
		n.Store(0)
		client := testClient(t, userCfg, srv.URL, ClientOptions{MaxAttempts: c.maxAttempts})
		if err := getItem(t, client); err == nil {
			t.Fatal("GetItem against a failing server: no error")
		}
		if got := n.Load(); got != c.want {
			t.Errorf("MaxAttempts %d: %d requests, want %d", c.maxAttempts, got, c.want)
		}
	}
}

// TestClientRetryQuotaIsOwn checks that each client draws retries from a
// quota of its own: exhausting one client's quota leaves another's (built
// from the same configuration) intact.
func TestClientRetryQuotaIsOwn(t *testing.T) {
	srv, n := fakeDynamoDB(t, http.StatusInternalServerError, "InternalServerError")
	cfg := &aws.Config{Region: "us-east-1"}
	// A quota of 14 tokens pays for exactly one retry after a transient
	// error, and a failed retry refunds nothing.
	a := testClient(t, cfg, srv.URL, ClientOptions{RetryQuota: 14})
	b := testClient(t, cfg, srv.URL, ClientOptions{RetryQuota: 14})
	for _, step := range []struct {
		c    *dynamodb.Client
		name string
		want int64
	}{
		{a, "a, quota full", 2},
		{a, "a, quota spent", 1},
		{b, "b, own quota", 2},
		{b, "b, quota spent", 1},
	} {
		n.Store(0)
		if err := getItem(t, step.c); err == nil {
			t.Fatalf("%s: no error", step.name)
		}
		if got := n.Load(); got != step.want {
			t.Errorf("%s: %d requests, want %d", step.name, got, step.want)
		}
	}
}

// TestClientHonoursDeadline checks that a call to a DynamoDB that never
// answers returns with the caller's deadline, SDK retry included.
func TestClientHonoursDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := testClient(t, &aws.Config{Region: "us-east-1"}, srv.URL, ClientOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("herdguard"), Key: keyAttr("c#x")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetItem against a silent server = %v, want context.DeadlineExceeded", err)
	}
}
