package dynamo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/herdguard/herdguard"
)

// Defaults of ClientOptions.
const (
	// defaultClientMaxAttempts allows one SDK retry per request. The
	// stores' callers give each request a short deadline (50 ms by
	// default), so a second retry would rarely fit, and herdguard's own
	// layers decide what happens when the table fails.
	defaultClientMaxAttempts = 2
	defaultClientMaxBackoff  = 10 * time.Millisecond
	defaultClientRetryQuota  = retry.DefaultRetryRateTokens
	defaultDialTimeout       = time.Second
	defaultRequestTimeout    = 5 * time.Second
)

// ClientOptions configures NewClient. The zero value loads the default AWS
// configuration (environment, shared files, the Lambda role) and applies the
// defaults the fields document.
type ClientOptions struct {
	// Config is the AWS configuration to start from. Nil loads the default
	// one with config.LoadDefaultConfig. Its retryer, retry settings and
	// HTTP client are never used: the client gets its own, so that
	// herdguard's DynamoDB traffic shares no retry quota and no connection
	// pool limits with the application's AWS clients.
	Config *aws.Config
	// Region overrides the configuration's region.
	Region string
	// Endpoint overrides DynamoDB's endpoint, such as
	// "http://localhost:8000" for DynamoDB Local.
	Endpoint string
	// Credentials overrides the configuration's credentials (DynamoDB Local
	// accepts any static ones).
	Credentials aws.CredentialsProvider
	// MaxAttempts is 1 (no SDK retry) or 2 (one retry). Zero means 2: the
	// stores' callers give each request a short deadline (50 ms by
	// default), so a second retry would rarely fit, and herdguard's own
	// layers decide what happens when the table fails.
	MaxAttempts int
	// MaxBackoff bounds the wait before the SDK retry, at most 1 s. Zero
	// means 10 ms.
	MaxBackoff time.Duration
	// RetryQuota is the capacity of the client's own retry token bucket
	// (the SDK's retry quota: a retry costs 14 tokens, 5 after throttling,
	// and is refunded if it succeeds; a request that succeeds at once adds
	// 1), so that a DynamoDB outage costs at most a few dozen extra
	// requests per client before the SDK stops retrying. Zero means the
	// SDK's default, 500.
	RetryQuota uint
	// DialTimeout bounds connecting (TCP and TLS). Zero means 1 s.
	DialTimeout time.Duration
	// RequestTimeout bounds one HTTP request for callers whose ctx has no
	// deadline (table administration); store calls have their own, much
	// shorter deadline. Zero means 5 s.
	RequestTimeout time.Duration
}

// NewClient returns a DynamoDB client for the stores: at most one SDK
// retry, after at most MaxBackoff, drawn from a retry quota of its own; a
// connection pool of its own with bounded connect and request times.
//
// Each store call also runs under its own short deadline, set by its caller
// (breaker.Settings.StoreTimeout, 50 ms by default, and the Global budget's
// store timeout): the stores honour ctx and never wait past it, SDK retry
// included. The first call of a cold process also pays for the TCP and TLS
// handshake, which can exceed that deadline; it then fails as a store error
// and the caller falls back to its local layers.
func NewClient(ctx context.Context, o ClientOptions) (*dynamodb.Client, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	var cfg aws.Config
	if o.Config != nil {
		cfg = o.Config.Copy()
	} else {
		var err error
		if cfg, err = config.LoadDefaultConfig(ctx); err != nil {
			return nil, fmt.Errorf("herdguard: dynamo.NewClient: loading the AWS configuration: %w", err)
		}
	}
	if o.Region != "" {
		cfg.Region = o.Region
	}
	if cfg.Region == "" {
		return nil, &herdguard.ConfigError{Field: "dynamo.ClientOptions.Region", Reason: "is empty, and so is the AWS configuration's: set it, or AWS_REGION"}
	}
	if o.Credentials != nil {
		cfg.Credentials = o.Credentials
	}
	retryer := retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = o.MaxAttempts
		so.MaxBackoff = o.MaxBackoff
		so.BaseDelay = o.MaxBackoff / 2
		so.RateLimiter = ratelimit.NewTokenRateLimit(o.RetryQuota)
	})
	// The SDK's default transport (TLS 1.2 minimum, proxy from the
	// environment), with our own limits and a pool of its own.
	transport := awshttp.NewBuildableClient().GetTransport()
	transport.DialContext = (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	transport.TLSHandshakeTimeout = o.DialTimeout
	transport.ResponseHeaderTimeout = o.RequestTimeout
	transport.IdleConnTimeout = 60 * time.Second
	httpClient := &http.Client{Transport: transport, Timeout: o.RequestTimeout}
	return dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) {
		do.Retryer = retryer
		// RetryMaxAttempts (from AWS_MAX_ATTEMPTS or the application's
		// configuration) would wrap the retryer with another limit.
		do.RetryMaxAttempts = 0
		do.RetryMode = ""
		do.HTTPClient = httpClient
		if o.Endpoint != "" {
			do.BaseEndpoint = aws.String(o.Endpoint)
		}
	}), nil
}

// fill validates o and replaces zero values with defaults.
func (o *ClientOptions) fill() error {
	bad := func(field, format string, args ...any) error {
		return &herdguard.ConfigError{Field: "dynamo.ClientOptions." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.MaxAttempts < 0 || o.MaxAttempts > 2:
		return bad("MaxAttempts", "is %d; want 1 or 2 (at most one SDK retry), or 0 for the default", o.MaxAttempts)
	case o.MaxBackoff < 0 || o.MaxBackoff > time.Second:
		return bad("MaxBackoff", "is %s; want at most 1s, or 0 for the default", o.MaxBackoff)
	case o.DialTimeout < 0:
		return bad("DialTimeout", "is %s; want a positive duration, or 0 for the default", o.DialTimeout)
	case o.RequestTimeout < 0:
		return bad("RequestTimeout", "is %s; want a positive duration, or 0 for the default", o.RequestTimeout)
	}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("Endpoint", "%q is not an http:// or https:// URL", o.Endpoint)
		}
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultClientMaxAttempts
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = defaultClientMaxBackoff
	}
	if o.RetryQuota == 0 {
		o.RetryQuota = defaultClientRetryQuota
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = defaultRequestTimeout
	}
	return nil
}
