package breaker_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
)

func TestSettingsValidation(t *testing.T) {
	store := newFakeStore()
	cases := []struct {
		name  string
		s     breaker.Settings
		field string // "" = valid
	}{
		{"zero is valid", breaker.Settings{}, ""},
		{"ratio 1", breaker.Settings{FailureRatio: 1}, ""},
		{"ratio negative", breaker.Settings{FailureRatio: -0.1}, "FailureRatio"},
		{"ratio above 1", breaker.Settings{FailureRatio: 1.5}, "FailureRatio"},
		{"ratio NaN", breaker.Settings{FailureRatio: math.NaN()}, "FailureRatio"},
		{"min requests negative", breaker.Settings{MinRequests: -1}, "MinRequests"},
		{"window negative", breaker.Settings{Window: -time.Second}, "Window"},
		{"window below 1ms", breaker.Settings{Window: time.Microsecond}, "Window"},
		{"window not a multiple of its slots in memory", breaker.Settings{Window: 10*time.Second + 3*time.Nanosecond}, ""},
		{"sub-ms window shared", breaker.Settings{Window: 1500 * time.Microsecond, Store: store}, "Window"},
		{"consecutive negative", breaker.Settings{ConsecutiveFailures: -2}, "ConsecutiveFailures"},
		{"open duration negative", breaker.Settings{OpenDuration: -1}, "OpenDuration"},
		{"max open negative", breaker.Settings{MaxOpenDuration: -1}, "MaxOpenDuration"},
		{"max open below open", breaker.Settings{OpenDuration: time.Minute, MaxOpenDuration: time.Second}, "MaxOpenDuration"},
		{"open above default max", breaker.Settings{OpenDuration: time.Hour}, ""},
		{"jitter 1", breaker.Settings{Jitter: 1}, "Jitter"},
		{"jitter NaN", breaker.Settings{Jitter: math.NaN()}, "Jitter"},
		{"no jitter", breaker.Settings{Jitter: -1}, ""},
		{"jitter -inf", breaker.Settings{Jitter: math.Inf(-1)}, ""},
		{"report interval negative", breaker.Settings{ReportInterval: -time.Second}, "ReportInterval"},
		{"report interval short", breaker.Settings{ReportInterval: time.Millisecond, Store: store}, ""},
		{"probes negative", breaker.Settings{HalfOpenProbes: -1}, "HalfOpenProbes"},
		{"probes too many", breaker.Settings{HalfOpenProbes: 65}, "HalfOpenProbes"},
		{"lease negative", breaker.Settings{ProbeLease: -1}, "ProbeLease"},
		{"slow negative", breaker.Settings{SlowCallThreshold: -1}, "SlowCallThreshold"},
		{"cache negative", breaker.Settings{CacheTTL: -1}, "CacheTTL"},
		{"timeout negative", breaker.Settings{StoreTimeout: -1}, "StoreTimeout"},
		{"window not a multiple of 10 ms shared", breaker.Settings{Window: 1005 * time.Millisecond, Store: store}, "Window"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := breaker.New("partner", c.s)
			if c.field == "" {
				if err != nil || b == nil {
					t.Fatalf("New = %v, %v; want a breaker", b, err)
				}
				return
			}
			var se *herdguard.ConfigError
			if !errors.As(err, &se) || b != nil {
				t.Fatalf("New = %v, %v; want a *herdguard.ConfigError", b, err)
			}
			if se.Field != "breaker.Settings."+c.field {
				t.Fatalf("error names field %q, want breaker.Settings.%q (%v)", se.Field, c.field, err)
			}
			if !strings.HasPrefix(err.Error(), "herdguard: breaker.Settings."+c.field+" ") {
				t.Fatalf("error %q does not start with herdguard: breaker.Settings.%s", err, c.field)
			}
		})
	}
}

func TestNameValidation(t *testing.T) {
	for _, name := range []string{"", "a#b", "has space", strings.Repeat("n", 129)} {
		if b, err := breaker.New(name, breaker.Settings{}); err == nil || b != nil {
			t.Errorf("New(%q) = %v, %v; want an error", name, b, err)
		}
	}
}

func TestDefaultsApply(t *testing.T) {
	// Observable defaults: 50% of at least 20 calls trips; open for 30 s
	// (NoJitter); one probe; the open duration caps at 5 min.
	b := newBreaker(t, breaker.Settings{Jitter: -1})
	calls(t, b, t0, breaker.Success, 10)
	calls(t, b, t0, breaker.Failure, 10)
	_, err := b.Allow(ctx, t0)
	if oe := mustOpenError(t, err); oe.RetryAfter != defaultOpenDuration {
		t.Fatalf("RetryAfter = %v", oe.RetryAfter)
	}
}

// TestSettingsReportsDefaults: Settings returns what New filled in, and
// passed to New again makes the same breaker.
func TestSettingsReportsDefaults(t *testing.T) {
	got := newBreaker(t, breaker.Settings{}).Settings()
	want := breaker.Settings{
		FailureRatio: defaultFailureRatio, MinRequests: defaultMinRequests, Window: defaultWindow,
		OpenDuration: defaultOpenDuration, MaxOpenDuration: defaultMaxOpenDuration, Jitter: defaultJitter,
		HalfOpenProbes: defaultHalfOpenProbes, ProbeLease: defaultProbeLease, CacheTTL: defaultCacheTTL,
		StoreTimeout: 50 * time.Millisecond, ReportInterval: defaultReportInterval,
	}
	if got.Rand != nil || got.Store != nil || got.OnStoreError != nil || got.OnStateChange != nil {
		t.Errorf("Settings() filled a function or a store that was not given: %+v", got)
	}
	got.Rand, got.Store, got.OnStoreError, got.OnStateChange = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Settings() = %+v\nwant %+v", got, want)
	}
	if again := newBreaker(t, breaker.Settings{Jitter: -0.5, OpenDuration: time.Minute}).Settings(); again.Jitter != -1 || again.OpenDuration != time.Minute {
		t.Errorf("Settings() = Jitter %v, OpenDuration %v; want -1 (none) and 1m0s", again.Jitter, again.OpenDuration)
	}
	if s := newBreaker(t, newBreaker(t, breaker.Settings{Jitter: -1}).Settings()).Settings(); s.Jitter != -1 {
		t.Errorf("New(b.Settings()) has Jitter %v; want -1 (none)", s.Jitter)
	}
}

// FuzzSettings checks that New either rejects settings with an error or
// returns a breaker that works: no panic either way.
func FuzzSettings(f *testing.F) {
	f.Add(0.0, int64(0), int64(0), 0, int64(0), int64(0), int64(0), 0.0, 0, int64(0), int64(0), int64(0), int64(0), 0, int64(0), "", false)
	f.Add(0.5, int64(20), int64(10e9), 10, int64(5), int64(30e9), int64(300e9), 0.2, 1, int64(10e9), int64(1e8), int64(1e9), int64(5e7), 2, int64(1e9), "env-1", true)
	f.Add(1.0, int64(1), int64(1e6), 1000, int64(1), int64(1), int64(1), -1.0, 1000, int64(1), int64(1), int64(1), int64(1), 1, int64(1), "x", true)
	f.Add(-1.0, int64(-1), int64(-1), -1, int64(-1), int64(-1), int64(-1), 2.0, -1, int64(-1), int64(-1), int64(-1), int64(-1), -1, int64(-1), "\x00", false)
	f.Add(math.NaN(), int64(math.MaxInt64), int64(math.MaxInt64), 7, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), math.Inf(1), 1001, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), math.MaxInt, int64(math.MaxInt64), "\xff", true)
	f.Add(0.3, int64(3), int64(999999), 3, int64(0), int64(1), int64(0), 0.99, 3, int64(0), int64(0), int64(0), int64(0), 0, int64(0), "", true)
	f.Fuzz(func(t *testing.T, ratio float64, minReq, window int64, slots int, consec, open, maxOpen int64, jitter float64,
		probes int, lease, slow, ttl, timeout int64, _ int, interval int64, _ string, shared bool) {
		_, _ = slots, interval // WindowSlots left Settings (fixed at 10); ReportInterval is validated as a duration like CacheTTL
		// (The two unnamed arguments were MinReporters and Env, settings
		// that went with the fleet windows: kept so that the corpus stays
		// valid.)
		s := breaker.Settings{
			FailureRatio:        ratio,
			MinRequests:         minReq,
			Window:              time.Duration(window),
			ConsecutiveFailures: consec,
			OpenDuration:        time.Duration(open),
			MaxOpenDuration:     time.Duration(maxOpen),
			Jitter:              jitter,
			Rand:                func() float64 { return 0.999 },
			HalfOpenProbes:      probes,
			ProbeLease:          time.Duration(lease),
			SlowCallThreshold:   time.Duration(slow),
			CacheTTL:            time.Duration(ttl),
			StoreTimeout:        time.Duration(timeout),
		}
		if shared {
			s.Store = newFakeStore()
		}
		b, err := breaker.New("fuzz", s)
		if err != nil {
			var se *herdguard.ConfigError
			if b != nil || !errors.As(err, &se) || !strings.HasPrefix(se.Field, "breaker.Settings.") {
				t.Fatalf("New = %v, %v: want nil and a *herdguard.ConfigError naming a field", b, err)
			}
			return
		}
		// A valid breaker trips, rejects with a sane wait, and probes.
		now := t0
		for i := range 200 {
			p, err := b.Allow(ctx, now)
			if err != nil {
				var oe *breaker.OpenError
				if !errors.As(err, &oe) || oe.RetryAfter < 0 {
					t.Fatalf("Allow: %v", err)
				}
				now = now.Add(min(oe.RetryAfter, time.Hour) + time.Millisecond)
				continue
			}
			o := breaker.Failure
			if i%5 == 0 {
				o = breaker.Success
			}
			b.Done(ctx, now, p, o)
			if i%50 == 0 {
				if err := b.Flush(ctx, now); err != nil && !errors.Is(err, breaker.ErrStore) {
					t.Fatalf("Flush: %v, want nil or an ErrStore (a 1ns StoreTimeout is valid)", err)
				}
			}
		}
		_ = b.State(now)
		_ = b.Counts()
	})
}
