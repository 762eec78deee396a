package main

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Environment variables the function reads. template.yaml sets them; every
// one but TABLE_NAME and PARTNER_URL is optional.
const (
	envTableName        = "TABLE_NAME"        // DynamoDB table shared by the fleet (required)
	envPartnerURL       = "PARTNER_URL"       // partner base URL, http or https (required)
	envDynamoEndpoint   = "DYNAMODB_ENDPOINT" // e.g. http://127.0.0.1:8000 for DynamoDB Local
	envName             = "HERDGUARD_NAME"    // budget and breaker name (one per partner)
	envRegion           = "AWS_REGION"        // set by Lambda
	envFunctionName     = "AWS_LAMBDA_FUNCTION_NAME"
	envLogLevel         = "LOG_LEVEL"
	envMaxAttempts      = "MAX_ATTEMPTS"
	envAttemptTimeout   = "ATTEMPT_TIMEOUT"
	envBaseDelay        = "RETRY_BASE_DELAY"
	envMaxDelay         = "RETRY_MAX_DELAY"
	envRatio            = "RETRY_RATIO"
	envWindow           = "RETRY_WINDOW"
	envFloor            = "RETRY_FLOOR"
	envLocalFloor       = "LOCAL_RETRY_FLOOR"
	envShards           = "BUDGET_SHARDS"
	envFailureRatio     = "BREAKER_FAILURE_RATIO"
	envMinRequests      = "BREAKER_MIN_REQUESTS"
	envBreakerWindow    = "BREAKER_WINDOW"
	envOpenDuration     = "BREAKER_OPEN_DURATION"
	envCacheTTL         = "BREAKER_CACHE_TTL"
	envStoreTimeout     = "STORE_TIMEOUT"
	envFlushTimeout     = "FLUSH_TIMEOUT"
	defaultName         = "bikes-partner"
	defaultFunctionName = "bikes"
)

// Defaults of Config. The attempt timeout and delays are the article's: three
// attempts of 800 ms with full-jitter waits of at most a second fit well
// inside the function's six-second timeout.
const (
	DefaultMaxAttempts    = 3
	DefaultAttemptTimeout = 800 * time.Millisecond
	DefaultBaseDelay      = 100 * time.Millisecond
	DefaultMaxDelay       = time.Second
	DefaultRatio          = 0.1
	DefaultWindow         = 10 * time.Second
	DefaultFloor          = 3
	// DefaultLocalFloor is small on purpose: one environment rarely sees
	// enough requests for the ratio to allow anything, and Lambda adds
	// environments, each with a full floor, exactly when the partner is
	// slow. The fleet-wide floor (DefaultFloor) does not grow with them.
	DefaultLocalFloor    = 1
	DefaultShards        = 1
	DefaultFailureRatio  = 0.5
	DefaultMinRequests   = 20
	DefaultBreakerWindow = 10 * time.Second
	DefaultOpenDuration  = 30 * time.Second
	DefaultCacheTTL      = time.Second
	DefaultStoreTimeout  = 50 * time.Millisecond
	DefaultFlushTimeout  = 100 * time.Millisecond
)

// Config is the function's configuration, read from the environment once
// per execution environment.
type Config struct {
	Table          string
	PartnerURL     *url.URL
	DynamoEndpoint string // empty: the regional endpoint
	Region         string // empty: from the AWS configuration
	Name           string // budget and breaker name
	FunctionName   string // EMF dimension
	LogLevel       string // debug, info, warn or error

	MaxAttempts    int
	AttemptTimeout time.Duration
	BaseDelay      time.Duration
	MaxDelay       time.Duration

	// Ratio, Window and Floor configure both the fleet-wide budget (Floor
	// retries per window for the whole fleet) and each environment's local
	// ratio budget (LocalFloor retries per window).
	Ratio      float64
	Window     time.Duration
	Floor      int
	LocalFloor int
	Shards     int

	FailureRatio  float64
	MinRequests   int64
	BreakerWindow time.Duration
	OpenDuration  time.Duration
	CacheTTL      time.Duration

	StoreTimeout time.Duration
	FlushTimeout time.Duration
}

// WorstCase is the longest an invocation can take: every attempt running
// out of AttemptTimeout, the longest waits in between, a breaker read and a
// budget write before each retry, and the flush. The function's timeout
// must be longer (template_test.go checks template.yaml against it).
func (c Config) WorstCase() time.Duration {
	n := time.Duration(c.MaxAttempts)
	return n*c.AttemptTimeout + (n-1)*c.MaxDelay + n*2*c.StoreTimeout + c.FlushTimeout
}

// loadConfig reads the configuration through lookup (os.LookupEnv in
// production). It reports every bad variable at once, each error naming
// the variable.
func loadConfig(lookup func(string) (string, bool)) (Config, error) {
	r := envReader{lookup: lookup}
	c := Config{
		Table:          r.required(envTableName),
		DynamoEndpoint: r.str(envDynamoEndpoint, ""),
		Region:         r.str(envRegion, ""),
		Name:           r.str(envName, defaultName),
		FunctionName:   r.str(envFunctionName, defaultFunctionName),
		LogLevel:       strings.ToLower(r.str(envLogLevel, "info")),
		MaxAttempts:    r.integer(envMaxAttempts, DefaultMaxAttempts, 1, 10),
		AttemptTimeout: r.duration(envAttemptTimeout, DefaultAttemptTimeout, time.Millisecond, time.Minute),
		BaseDelay:      r.duration(envBaseDelay, DefaultBaseDelay, time.Millisecond, time.Minute),
		MaxDelay:       r.duration(envMaxDelay, DefaultMaxDelay, time.Millisecond, time.Minute),
		Ratio:          r.ratio(envRatio, DefaultRatio),
		Window:         r.duration(envWindow, DefaultWindow, 100*time.Millisecond, time.Hour),
		Floor:          r.integer(envFloor, DefaultFloor, 0, 1_000_000),
		LocalFloor:     r.integer(envLocalFloor, DefaultLocalFloor, 1, 1000),
		Shards:         r.integer(envShards, DefaultShards, 1, 1000),
		FailureRatio:   r.ratio(envFailureRatio, DefaultFailureRatio),
		MinRequests:    int64(r.integer(envMinRequests, DefaultMinRequests, 1, 1_000_000)),
		BreakerWindow:  r.duration(envBreakerWindow, DefaultBreakerWindow, 100*time.Millisecond, time.Hour),
		OpenDuration:   r.duration(envOpenDuration, DefaultOpenDuration, 100*time.Millisecond, time.Hour),
		CacheTTL:       r.duration(envCacheTTL, DefaultCacheTTL, time.Millisecond, time.Minute),
		StoreTimeout:   r.duration(envStoreTimeout, DefaultStoreTimeout, time.Millisecond, 10*time.Second),
		FlushTimeout:   r.duration(envFlushTimeout, DefaultFlushTimeout, time.Millisecond, 10*time.Second),
	}
	if raw := r.required(envPartnerURL); raw != "" {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			r.fail(envPartnerURL, "is not a URL: %v", err)
		case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
			r.fail(envPartnerURL, "is %q; want an absolute http:// or https:// URL", raw)
		case u.RawQuery != "" || u.Fragment != "":
			r.fail(envPartnerURL, "is %q; want a base URL without query or fragment", raw)
		default:
			c.PartnerURL = u
		}
	}
	if c.DynamoEndpoint != "" {
		u, err := url.Parse(c.DynamoEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			r.fail(envDynamoEndpoint, "is %q; want an http:// or https:// URL", c.DynamoEndpoint)
		}
	}
	if c.Table != "" && (len(c.Table) < 3 || len(c.Table) > 255) {
		r.fail(envTableName, "is %q; DynamoDB table names are 3 to 255 characters long", c.Table)
	}
	if !validName.MatchString(c.Name) {
		r.fail(envName, "is %q; want 1 to 128 letters, digits, '-', '_', '.' or ':' (it becomes part of the table's keys)", c.Name)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		r.fail(envLogLevel, "is %q; want debug, info, warn or error", c.LogLevel)
	}
	if c.BaseDelay > c.MaxDelay {
		r.fail(envBaseDelay, "(%v) is above %s (%v)", c.BaseDelay, envMaxDelay, c.MaxDelay)
	}
	if c.Window%time.Millisecond != 0 {
		r.fail(envWindow, "is %v; want a whole number of milliseconds", c.Window)
	}
	if c.BreakerWindow%time.Millisecond != 0 {
		r.fail(envBreakerWindow, "is %v; want a whole number of milliseconds", c.BreakerWindow)
	}
	if c.Shards > 1 && c.Floor > 0 && c.Floor < c.Shards {
		r.fail(envFloor, "is %d, below %s (%d): each shard would hold less than one retry of floor", c.Floor, envShards, c.Shards)
	}
	if err := errors.Join(r.errs...); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// validName is the rule for herdguard's names of budgets and breakers.
var validName = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// envReader parses environment variables, collecting one error per bad
// variable.
type envReader struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (r *envReader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s "+format, append([]any{name}, args...)...))
}

// get returns the trimmed value of name and whether it is set and not
// empty.
func (r *envReader) get(name string) (string, bool) {
	v, ok := r.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (r *envReader) required(name string) string {
	v, ok := r.get(name)
	if !ok {
		r.fail(name, "is not set")
	}
	return v
}

func (r *envReader) str(name, def string) string {
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

func (r *envReader) integer(name string, def, lo, hi int) int {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(name, "is %q; want an integer from %d to %d", v, lo, hi)
		return def
	}
	return n
}

// ratio parses a number in (0, 1].
func (r *envReader) ratio(name string, def float64) float64 {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
		r.fail(name, "is %q; want a number in (0, 1], such as 0.1", v)
		return def
	}
	return f
}

// duration parses a Go duration ("800ms", "10s") in [lo, hi].
func (r *envReader) duration(name string, def, lo, hi time.Duration) time.Duration {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		r.fail(name, "is %q; want a duration from %v to %v, such as %q", v, lo, hi, def.String())
		return def
	}
	return d
}
