package herdlambda

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/fleet"
)

// Config configures New and Start. A field set in code wins; a zero field
// takes the value of its environment variable (listed in the package
// documentation), and an unset variable the default. Every variable is
// read once, when the function initialises, and a bad value fails
// initialisation with an error naming the variable.
type Config struct {
	// Name is the partner's name: its budget's and breaker's in the table
	// (1 to 128 letters, digits, '-', '_', '.', ':'), and the Partner
	// dimension of the metrics. HERDGUARD_NAME; required.
	Name string
	// Table is the DynamoDB table the fleet shares. HERDGUARD_TABLE;
	// required unless Budgets is set.
	Table string
	// DynamoDBEndpoint replaces DynamoDB's regional endpoint, such as
	// http://127.0.0.1:8000 for DynamoDB Local.
	// HERDGUARD_DYNAMODB_ENDPOINT.
	DynamoDBEndpoint string

	// Fleet configures the Executor (see fleet.Config). Its zero fields
	// take the HERDGUARD_* variables of the package documentation, then
	// fleet.Config's defaults.
	Fleet fleet.Config

	// FlushTimeout bounds the flush of the counts kept in memory after
	// each invocation. HERDGUARD_FLUSH_TIMEOUT; default 100 ms.
	FlushTimeout time.Duration
	// Reserve is kept free before the invocation's deadline, after the
	// flush, to send the response. HERDGUARD_RESERVE; default 50 ms.
	Reserve time.Duration

	// Namespace is the CloudWatch namespace of the metrics.
	// HERDGUARD_METRICS_NAMESPACE, else POWERTOOLS_METRICS_NAMESPACE (as
	// Powertools reads it); default "Herdguard".
	Namespace string
	// Metrics receives the Embedded Metric Format lines; nil means stdout.
	Metrics io.Writer
	// Log is where Fleet.Logger writes; nil means JSON on stderr at the
	// level of HERDGUARD_LOG_LEVEL (debug, info, warn or error; default
	// info).
	Log slog.Handler

	// Budgets and Breakers, when Budgets is set, replace the table (see
	// fleet.NewWithStores): the in-memory stores of package local in
	// tests, or another backend.
	Budgets  budget.Store
	Breakers breaker.Store
}

// Defaults of Config.
const (
	DefaultFlushTimeout = 100 * time.Millisecond
	DefaultReserve      = 50 * time.Millisecond
	DefaultNamespace    = "Herdguard"
)

// settings is a Config with the environment applied, and what New needs
// to name a variable in an error about a value it gave.
type settings struct {
	Config
	logLevel slog.Level
	// fromEnv maps a fleet.Config field (as a *herdguard.ConfigError
	// names it) to the "VARIABLE=value" that set it.
	fromEnv map[string]string
}

// fromEnvironment applies lookup (os.LookupEnv in production) to cfg's zero
// fields. It reports every variable it cannot parse, and every required
// setting missing, at once.
func fromEnvironment(cfg Config, lookup func(string) (string, bool)) (*settings, error) {
	s := &settings{Config: cfg, fromEnv: map[string]string{}}
	r := &envReader{lookup: lookup, s: s}
	parse(r, "HERDGUARD_NAME", "fleet.New name", &s.Name, func(v string) (string, error) { return v, nil }, "")
	r.str("HERDGUARD_TABLE", &s.Table)
	r.str("HERDGUARD_DYNAMODB_ENDPOINT", &s.DynamoDBEndpoint)
	r.str("HERDGUARD_METRICS_NAMESPACE", &s.Namespace)
	f, rc, bs := &s.Fleet, &s.Fleet.Retry, &s.Fleet.Breaker
	r.integer("HERDGUARD_MAX_ATTEMPTS", "Retry.MaxAttempts", &rc.MaxAttempts)
	r.duration("HERDGUARD_ATTEMPT_TIMEOUT", "Retry.AttemptTimeout", &rc.AttemptTimeout)
	r.duration("HERDGUARD_BASE_DELAY", "Retry.TransientBase", &rc.TransientBase)
	r.duration("HERDGUARD_BASE_DELAY", "Retry.ThrottlingBase", &rc.ThrottlingBase)
	r.duration("HERDGUARD_MAX_DELAY", "Retry.MaxDelay", &rc.MaxDelay)
	r.ratio("HERDGUARD_RATIO", "Ratio", &f.Ratio)
	r.duration("HERDGUARD_WINDOW", "Window", &f.Window)
	r.integer("HERDGUARD_FLOOR", "Floor", &f.Floor)
	if v, ok := r.get("HERDGUARD_FLOOR"); ok && v == "0" && cfg.Fleet.Floor == 0 {
		f.Floor = -1 // none; fleet.Config's zero is the default
	}
	r.integer("HERDGUARD_LOCAL_FLOOR", "LocalFloor", &f.LocalFloor)
	r.integer("HERDGUARD_SHARDS", "Shards", &f.Shards)
	r.duration("HERDGUARD_STORE_TIMEOUT", "StoreTimeout", &f.StoreTimeout)
	r.ratio("HERDGUARD_BREAKER_FAILURE_RATIO", "Breaker.FailureRatio", &bs.FailureRatio)
	if bs.MinRequests == 0 {
		var n int
		r.integer("HERDGUARD_BREAKER_MIN_REQUESTS", "Breaker.MinRequests", &n)
		bs.MinRequests = int64(n)
	}
	r.duration("HERDGUARD_BREAKER_WINDOW", "Breaker.Window", &bs.Window)
	r.duration("HERDGUARD_BREAKER_OPEN_DURATION", "Breaker.OpenDuration", &bs.OpenDuration)
	r.duration("HERDGUARD_BREAKER_CACHE_TTL", "Breaker.CacheTTL", &bs.CacheTTL)
	r.duration("HERDGUARD_FLUSH_TIMEOUT", "", &s.FlushTimeout)
	r.duration("HERDGUARD_RESERVE", "", &s.Reserve)
	if v, ok := r.get("HERDGUARD_LOG_LEVEL"); ok {
		if err := s.logLevel.UnmarshalText([]byte(v)); err != nil {
			r.fail("HERDGUARD_LOG_LEVEL", v, "want debug, info, warn or error")
		}
	}

	if s.Name == "" {
		r.errs = append(r.errs, errors.New("herdlambda: HERDGUARD_NAME is not set (nor Config.Name): name the partner"))
	}
	if s.Table == "" && s.Budgets == nil {
		r.errs = append(r.errs, errors.New("herdlambda: HERDGUARD_TABLE is not set (nor Config.Table): name the DynamoDB table"))
	}
	if e := s.DynamoDBEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			r.fail("HERDGUARD_DYNAMODB_ENDPOINT", e, "want an http:// or https:// URL")
		}
	}
	if s.FlushTimeout == 0 {
		s.FlushTimeout = DefaultFlushTimeout
	}
	if s.Reserve == 0 {
		s.Reserve = DefaultReserve
	}
	if s.Namespace == "" {
		ns, _ := lookup(emf.EnvNamespace)
		s.Namespace = cmp.Or(ns, DefaultNamespace)
	}
	return s, errors.Join(r.errs...)
}

// name returns err with the variable that set the rejected field, when
// err is a *herdguard.ConfigError about a fleet.Config field the
// environment set.
func (s *settings) name(err error) error {
	var ce *herdguard.ConfigError
	if errors.As(err, &ce) {
		if kv, ok := s.fromEnv[strings.TrimPrefix(ce.Field, "fleet.Config.")]; ok {
			return fmt.Errorf("herdlambda: %s: %w", kv, err)
		}
	}
	return err
}

// envReader parses variables into the zero fields of a Config, collecting
// one error per bad variable.
type envReader struct {
	lookup func(string) (string, bool)
	s      *settings
	errs   []error
}

func (r *envReader) get(name string) (string, bool) {
	v, ok := r.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (r *envReader) fail(name, v, want string) {
	r.errs = append(r.errs, fmt.Errorf("herdlambda: %s=%q: %s", name, v, want))
}

// parse sets *p from the variable name unless *p is already set (in code).
func parse[T comparable](r *envReader, name, field string, p *T, conv func(string) (T, error), want string) {
	var zero T
	v, ok := r.get(name)
	if !ok || *p != zero {
		return
	}
	x, err := conv(v)
	if err != nil {
		r.fail(name, v, want)
		return
	}
	*p = x
	if field != "" {
		r.s.fromEnv[field] = name + "=" + strconv.Quote(v)
	}
}

func (r *envReader) str(name string, p *string) {
	parse(r, name, "", p, func(v string) (string, error) { return v, nil }, "")
}

func (r *envReader) integer(name, field string, p *int) {
	parse(r, name, field, p, strconv.Atoi, "want an integer")
}

func (r *envReader) ratio(name, field string, p *float64) {
	parse(r, name, field, p, func(v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && (math.IsNaN(f) || f <= 0 || f > 1) {
			err = errors.New("out of range")
		}
		return f, err
	}, "want a number in (0, 1], such as 0.1")
}

func (r *envReader) duration(name, field string, p *time.Duration) {
	parse(r, name, field, p, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err == nil && d <= 0 {
			err = errors.New("not positive")
		}
		return d, err
	}, "want a positive duration such as 800ms or 10s")
}
