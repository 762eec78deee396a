package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(lookupFrom(map[string]string{
		envTableName:  "herdguard",
		envPartnerURL: "https://partner.example.com/api",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Table != "herdguard" || c.PartnerURL.String() != "https://partner.example.com/api" {
		t.Errorf("table %q, partner %v", c.Table, c.PartnerURL)
	}
	want := Config{
		Name: defaultName, FunctionName: defaultFunctionName, LogLevel: "info",
		MaxAttempts: DefaultMaxAttempts, AttemptTimeout: DefaultAttemptTimeout, BaseDelay: DefaultBaseDelay, MaxDelay: DefaultMaxDelay,
		Ratio: DefaultRatio, Window: DefaultWindow, Floor: DefaultFloor, LocalFloor: DefaultLocalFloor, Shards: DefaultShards,
		FailureRatio: DefaultFailureRatio, MinRequests: DefaultMinRequests,
		BreakerWindow: DefaultBreakerWindow, OpenDuration: DefaultOpenDuration, CacheTTL: DefaultCacheTTL,
		StoreTimeout: DefaultStoreTimeout, FlushTimeout: DefaultFlushTimeout,
	}
	c.Table, c.PartnerURL = "", nil
	if c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	// The article's budget: three attempts of 800 ms and waits fit in 6 s.
	if wc := want.WorstCase(); wc >= 6*time.Second {
		t.Errorf("worst case %v does not fit the article's 6 s timeout", wc)
	}
}

func TestLoadConfigOverrides(t *testing.T) {
	c, err := loadConfig(lookupFrom(map[string]string{
		envTableName: "t-1", envPartnerURL: "http://127.0.0.1:9/", envDynamoEndpoint: "http://127.0.0.1:8000",
		envName: "p:1", envRatio: "0.25", envWindow: "2s", envFloor: "0", envLocalFloor: "2", envShards: "4",
		envCacheTTL: "250ms", envOpenDuration: " 5s ", envLogLevel: "DEBUG",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Ratio != 0.25 || c.Window != 2*time.Second || c.Floor != 0 || c.LocalFloor != 2 || c.Shards != 4 ||
		c.CacheTTL != 250*time.Millisecond || c.OpenDuration != 5*time.Second ||
		c.LogLevel != "debug" || c.Name != "p:1" || c.DynamoEndpoint != "http://127.0.0.1:8000" {
		t.Errorf("overrides not applied: %+v", c)
	}
}

func TestLoadConfigErrorsNameEveryBadVariable(t *testing.T) {
	bad := map[string]string{
		envPartnerURL:     "ftp://x",
		envDynamoEndpoint: "localhost:8000",
		envName:           "a#b",
		envRatio:          "0",
		envWindow:         "10",
		envFloor:          "-1",
		envShards:         "0",
		envMaxAttempts:    "eleven",
		envAttemptTimeout: "0s",
		envCacheTTL:       "2h",
		envFailureRatio:   "1.5",
		envLogLevel:       "verbose",
	}
	_, err := loadConfig(lookupFrom(bad))
	if err == nil {
		t.Fatal("no error")
	}
	for name := range bad {
		if !strings.Contains(err.Error(), name+" ") {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
	if !strings.Contains(err.Error(), envTableName+" is not set") {
		t.Errorf("error does not say %s is missing: %v", envTableName, err)
	}
}

func TestLoadConfigCrossChecks(t *testing.T) {
	base := map[string]string{envTableName: "herdguard", envPartnerURL: "https://p.example.com"}
	for _, tc := range []struct {
		set  map[string]string
		name string
	}{
		{map[string]string{envBaseDelay: "2s", envMaxDelay: "1s"}, envBaseDelay},
		{map[string]string{envShards: "4", envFloor: "3"}, envFloor},
		{map[string]string{envWindow: "1500us"}, envWindow},
		{map[string]string{envPartnerURL: "https://p.example.com/?key=1"}, envPartnerURL},
		{map[string]string{envTableName: "ab"}, envTableName},
		{map[string]string{envPartnerURL: "   "}, envPartnerURL},
	} {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tc.set {
			env[k] = v
		}
		_, err := loadConfig(lookupFrom(env))
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%v: error %v, want one naming %s", tc.set, err, tc.name)
		}
	}
}

func TestNewFunctionValidatesDeps(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:9")
	if _, err := newFunction(cfg, deps{}); err == nil {
		t.Error("newFunction without an executor succeeded")
	}
	f := newFixture(t, cfg, nil)
	d := deps{executor: inMemory(f.budgets, f.breakers, "bad#name"), metrics: f.emf, logger: f.fn.log}
	if _, err := newFunction(cfg, d); err == nil {
		t.Error("newFunction accepted a name with '#'")
	}
	d.executor = inMemory(f.budgets, f.breakers, cfg.Name)
	cfg = testConfig(t, "http://127.0.0.1:9")
	cfg.BaseDelay = time.Minute
	if _, err := newFunction(cfg, d); err == nil || !strings.Contains(err.Error(), "TransientBase") {
		t.Errorf("base delay above max delay: %v, want the executor's error naming TransientBase", err)
	}
}

func TestSetupReportsConfigurationErrors(t *testing.T) {
	_, err := setup(t.Context(), lookupFrom(map[string]string{envPartnerURL: "https://p.example.com"}), nil, nil)
	if err == nil || !strings.Contains(err.Error(), envTableName) {
		t.Fatalf("setup without %s: %v", envTableName, err)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Errorf("error %v does not list the bad variables", err)
	}
}
