package sim

import (
	"bytes"
	"errors"
	"flag"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	var errOut bytes.Buffer
	o, err := ParseFlags("outagesim", nil, &errOut)
	if err != nil {
		t.Fatalf("ParseFlags: %v\n%s", err, errOut.String())
	}
	if !reflect.DeepEqual(o.Config, DefaultConfig()) || o.JSON || o.Plot != "" || !o.Progress {
		t.Errorf("defaults: got %+v", o)
	}
	c := o.Config
	if c.Envs != 50 || c.Rate != 1000 || c.Duration != time.Minute || c.Attempts != 3 || c.Ratio != 0.1 ||
		c.BucketCapacity != 500 || c.TransientCost != 14 || c.ThrottlingCost != 5 || c.Speed != 10 {
		t.Errorf("defaults differ from the issue's: %+v", c)
	}
	// The default outage is a major one: the partner keeps a fifth of its
	// capacity, less than a third of the new calls, so that the fleet's
	// failure ratio under a 10% budget is well above the breaker's 50%.
	if c.Capacity != 1500 || c.OutageCapacity != 300 || c.OutageStart != 20*time.Second || c.OutageLength != 20*time.Second {
		t.Errorf("default outage: capacity %d, %d/s from %v for %v; want 1500, 300/s from 20s for 20s",
			c.Capacity, c.OutageCapacity, c.OutageStart, c.OutageLength)
	}
	if failing := 1 - float64(c.OutageCapacity)/(float64(c.Rate)*(1+c.Ratio)); failing <= 0.5 {
		t.Errorf("default outage: %.0f%% of the attempts a %g budget lets through fail, want a major outage (over 50%%)", 100*failing, c.Ratio)
	}
	if got := strings.Join(c.Strategies, ","); got != "none,sdk,bucket,ratio,global,global-breaker,global-adaptive" {
		t.Errorf("default strategies %q", got)
	}
}

func TestParseFlagsSetsEveryField(t *testing.T) {
	args := []string{
		"-fleet", "lambda", "-envs", "10", "-rate", "200", "-duration", "30s", "-scale-out", "-max-envs", "400", "-scale-rate", "7",
		"-capacity", "300", "-outage-capacity", "100", "-outage-start", "5s", "-outage-length", "10s", "-capacity-slot", "100ms",
		"-reject-status", "429", "-retry-after", "2s", "-latency", "5ms", "-slowdown", "50ms",
		"-attempts", "4", "-transient-base", "20ms", "-throttling-base", "500ms", "-max-delay", "5s",
		"-bucket-capacity", "100", "-transient-cost", "10", "-throttling-cost", "2",
		"-ratio", "0.2", "-window", "5s", "-min-retries", "1", "-global-floor", "7", "-global-shards", "2", "-lease-size", "4", "-fail-closed", "-global-with-local", "-store-timeout", "80ms",
		"-breaker-failure-ratio", "0.3", "-breaker-min-requests", "40", "-breaker-open", "10s",
		"-seed", "18446744073709551615", "-speed", "25", "-strategies", "global,none",
		"-dynamodb-endpoint", "http://localhost:8000", "-dynamodb-table", "my-table", "-dynamodb-region", "eu-west-1",
		"-price-read", "0.25", "-price-write", "1.25",
		"-json", "-plot", "out.png", "-progress=false",
	}
	o, err := ParseFlags("outagesim", args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Fleet: FleetLambda, Envs: 10, Rate: 200, Duration: 30 * time.Second, ScaleOut: true, MaxEnvs: 400, ScaleRate: 7,
		Capacity: 300, OutageCapacity: 100, OutageStart: 5 * time.Second, OutageLength: 10 * time.Second, CapacitySlot: 100 * time.Millisecond,
		RejectStatus: http.StatusTooManyRequests, RetryAfter: 2 * time.Second, Latency: 5 * time.Millisecond,
		Slowdown: 50 * time.Millisecond, Attempts: 4, TransientBase: 20 * time.Millisecond,
		ThrottlingBase: 500 * time.Millisecond, MaxDelay: 5 * time.Second,
		BucketCapacity: 100, TransientCost: 10, ThrottlingCost: 2, Ratio: 0.2, Window: 5 * time.Second,
		MinRetries: 1, GlobalFloor: 7, GlobalShards: 2, LeaseSize: 4, BreakerFailureRatio: 0.3, BreakerMinRequests: 40, BreakerOpen: 10 * time.Second,
		Seed: 1<<64 - 1, Speed: 25, Strategies: []string{"global", "none"}, Partner: PartnerHTTP,
		DynamoEndpoint: "http://localhost:8000", DynamoTable: "my-table", DynamoRegion: "eu-west-1",
		PriceRead: 0.25, PriceWrite: 1.25, FailClosed: true, LocalUnder: true, StoreTimeout: 80 * time.Millisecond,
	}
	if !reflect.DeepEqual(o.Config, want) {
		t.Errorf("got  %+v\nwant %+v", o.Config, want)
	}
	if !o.JSON || o.Plot != "out.png" || o.Progress {
		t.Errorf("output options %+v", o)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"-envs", "0"}, "-envs: 0"},
		{[]string{"-envs", "x"}, "invalid value"},
		{[]string{"-rate", "-5"}, "-rate"},
		{[]string{"-duration", "1500ms"}, "whole number of seconds"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-outage-start", "50s", "-outage-length", "20s"}, "ends after -duration"},
		{[]string{"-outage-length", "0s"}, "-outage-length"},
		{[]string{"-capacity", "-1"}, "-capacity"},
		{[]string{"-capacity-slot", "300ms"}, "-capacity-slot: 300ms must be 0 (per second) or a whole fraction of a second"},
		{[]string{"-capacity-slot", "2s"}, "-capacity-slot"},
		{[]string{"-capacity-slot", "-100ms"}, "-capacity-slot"},
		{[]string{"-reject-status", "500"}, "503 or 429"},
		{[]string{"-attempts", "0"}, "-attempts"},
		{[]string{"-ratio", "0"}, "-ratio"},
		{[]string{"-ratio", "1.5"}, "-ratio"},
		{[]string{"-ratio", "NaN"}, "-ratio"},
		{[]string{"-window", "0s"}, "-window"},
		{[]string{"-min-retries", "0"}, "-min-retries"},
		{[]string{"-bucket-capacity", "4"}, "-bucket-capacity"},
		{[]string{"-max-delay", "10ms"}, "-max-delay"},
		{[]string{"-speed", "0"}, "-speed"},
		{[]string{"-seed", "-1"}, "not an unsigned integer"},
		{[]string{"-scale-out", "-max-envs", "10"}, "-max-envs: 10 is below -envs 50"},
		{[]string{"-strategies", "none,bogus"}, `unknown strategy "bogus"`},
		{[]string{"-strategies", "none,none"}, "listed twice"},
		{[]string{"-strategies", ""}, "no strategy selected"},
		{[]string{"-dynamodb-endpoint", "localhost:8000"}, "not an http(s) URL"},
		{[]string{"-dynamodb-table", "ab"}, "-dynamodb-table"},
		{[]string{"-dynamodb-table", "bad/name"}, "-dynamodb-table"},
		{[]string{"-global-floor", "-2"}, "-global-floor"},
		{[]string{"-lease-size", "-1"}, "-lease-size"},
		{[]string{"-store-timeout", "-1s"}, "-store-timeout"},
		{[]string{"-price-write", "-1"}, "-price-write"},
		{[]string{"-plot", "chart.svg"}, "must end in .png"},
		{[]string{"-fleet", "tiny"}, `-fleet: "tiny" must be busy or lambda`},
		{[]string{"-outage", "total"}, `-outage: "total" must be major or partial`},
		{[]string{"-outage", "partial", "-outage-capacity", "600"}, "-outage: partial sets -outage-capacity 750 (of -capacity 1500), not 600"},
		{[]string{"-scale-rate", "-1"}, "-scale-rate"},
		{[]string{"-partner", "grpc"}, `-partner: "grpc" must be http or inproc`},
		{[]string{"-partner", "inproc", "-dynamodb-endpoint", "http://localhost:8000"}, "-partner: inproc needs the in-memory stores"},
		{[]string{"-fleet", "lambda", "-scale-out", "-max-envs", "500"}, "-max-envs: 500 is below -envs 1000"},
		{[]string{"-no-such-flag"}, "not defined"},
		{[]string{"stray"}, "unexpected argument"},
	} {
		var errOut bytes.Buffer
		_, err := ParseFlags("outagesim", tc.args, &errOut)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%v: error %v, want ErrUsage", tc.args, err)
			continue
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: stderr %q does not contain %q", tc.args, errOut.String(), tc.want)
		}
	}
}

// Several bad flags are all reported at once.
func TestParseFlagsReportsEveryBadFlag(t *testing.T) {
	var errOut bytes.Buffer
	_, err := ParseFlags("outagesim", []string{"-envs", "0", "-rate", "0", "-speed", "-2"}, &errOut)
	if !errors.Is(err, ErrUsage) {
		t.Fatal(err)
	}
	for _, f := range []string{"-envs", "-rate", "-speed"} {
		if !strings.Contains(errOut.String(), f+":") {
			t.Errorf("stderr does not name %s:\n%s", f, errOut.String())
		}
	}
}

func TestParseFlagsHelp(t *testing.T) {
	var errOut bytes.Buffer
	_, err := ParseFlags("outagesim", []string{"-h"}, &errOut)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, s := range []string{"Usage: outagesim", "-envs", "-speed", "-dynamodb-endpoint", "-plot", "-fleet", "lambda", "-outage", "partial"} {
		if !strings.Contains(errOut.String(), s) {
			t.Errorf("usage lacks %q", s)
		}
	}
}

// -fleet lambda and -outage set the flags they imply, unless given.
func TestParseFlagsPresets(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(*Config)
	}{
		{[]string{"-fleet", "lambda"}, func(c *Config) {
			c.Fleet, c.Envs, c.Rate, c.MaxEnvs, c.ScaleRate, c.Partner = FleetLambda, 1000, 1000, 10_000, 100, PartnerInproc
		}},
		{[]string{"-fleet", "lambda", "-partner", "http"}, func(c *Config) {
			c.Fleet, c.Envs, c.Rate, c.MaxEnvs, c.ScaleRate = FleetLambda, 1000, 1000, 10_000, 100
		}},
		{[]string{"-partner", "inproc"}, func(c *Config) { c.Partner = PartnerInproc }},
		{[]string{"-fleet", "lambda", "-envs", "300", "-scale-rate", "0"}, func(c *Config) {
			c.Fleet, c.Envs, c.Rate, c.MaxEnvs, c.ScaleRate, c.Partner = FleetLambda, 300, 1000, 10_000, 0, PartnerInproc
		}},
		{[]string{"-outage", "partial"}, func(c *Config) { c.Outage, c.OutageCapacity = OutagePartial, 750 }},
		{[]string{"-outage", "partial", "-capacity", "1000"}, func(c *Config) {
			c.Outage, c.Capacity, c.OutageCapacity = OutagePartial, 1000, 500
		}},
		{[]string{"-capacity", "2000"}, func(c *Config) { c.Capacity, c.OutageCapacity = 2000, 400 }},
		{[]string{"-outage-capacity", "600"}, func(c *Config) { c.Outage, c.OutageCapacity = "", 600 }},
		{[]string{"-outage", "major", "-outage-capacity", "300"}, func(c *Config) {}},
	} {
		o, err := ParseFlags("outagesim", tc.args, &bytes.Buffer{})
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		want := DefaultConfig()
		tc.want(&want)
		if !reflect.DeepEqual(o.Config, want) {
			t.Errorf("%v:\ngot  %+v\nwant %+v", tc.args, o.Config, want)
		}
	}
	if want := LambdaConfig(); want.Fleet != FleetLambda || want.Envs != 1000 || want.Rate != 1000 || !want.OneAtATime() {
		t.Errorf("LambdaConfig() = %+v", want)
	}
}

// With DynamoDB the default speed is real time; an explicit -speed wins.
func TestParseFlagsDynamoSpeed(t *testing.T) {
	o, err := ParseFlags("outagesim", []string{"-dynamodb-endpoint", "http://127.0.0.1:8000"}, &bytes.Buffer{})
	if err != nil || o.Speed != DefaultDynamoSpeed {
		t.Errorf("speed %v (%v), want %v", o.Speed, err, float64(DefaultDynamoSpeed))
	}
	o, err = ParseFlags("outagesim", []string{"-dynamodb-endpoint", "http://127.0.0.1:8000", "-speed", "3"}, &bytes.Buffer{})
	if err != nil || o.Speed != 3 {
		t.Errorf("speed %v (%v), want 3", o.Speed, err)
	}
	// The Lambda-shaped fleet runs over HTTP with DynamoDB.
	o, err = ParseFlags("outagesim", []string{"-fleet", "lambda", "-dynamodb-endpoint", "http://127.0.0.1:8000"}, &bytes.Buffer{})
	if err != nil || o.Partner != PartnerHTTP || o.Speed != DefaultDynamoSpeed {
		t.Errorf("-fleet lambda with DynamoDB: partner %q, speed %v (%v); want http at real time", o.Partner, o.Speed, err)
	}
}
