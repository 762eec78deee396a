package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWriteTable(t *testing.T) {
	openAll := Duration(3200 * time.Millisecond)
	firstOpen := Duration(2100 * time.Millisecond)
	trueRatio := 0.334
	probes := int64(12)
	readsPerCall, writesPerCall := 0.0004, 0.0101
	units := &StoreUsage{Reads: 10, Writes: 20, ReadUnits: 10, WriteUnits: 20, HasUnits: true}
	rep := Report{
		Config: ReportConfig{Fleet: FleetBusy, Envs: 50, Rate: 1000, Duration: Duration(time.Minute), Capacity: 1500, OutageCapacity: 300,
			Outage: OutageMajor, OutageStart: Duration(20 * time.Second), OutageLength: Duration(20 * time.Second), RejectStatus: 503,
			RetryAfter: Duration(time.Second), Attempts: 3, Ratio: 0.1, Window: Duration(10 * time.Second), Seed: 42,
			Speed: 10, Store: "dynamodb http://x", PriceRead: 0.125, PriceWrite: 0.625},
		Results: []*Result{
			{Label: "no budget (3 attempts)", LoadFactor: 2.004, FailedForGood: 5868, FirstAttemptsInOutage: 20004, Envs: 50,
				Wall: Duration(6540 * time.Millisecond), Clock: ClockStats{EffectiveSpeed: 9.3},
				After: Phase{Failed: Failures{Throttled: 17}}},
			{Label: "global ratio + breaker", HasBreaker: true, LoadFactor: 0.127, FailedForGood: 31105, BreakerOpenAll: &openAll, FirstAttemptsAfterOpen: &probes,
				BreakerFirstOpen: &firstOpen, BreakerFirstOpenFailureRatio: &trueRatio,
				GlobalRatio: &RatioBound{GrantedOverBound: 0.287}, StoreReadsPerCall: &readsPerCall, StoreWritesPerCall: &writesPerCall,
				Capacity:        &CapacityUse{PeakItemWriteUnits: 212, PeakItemReadUnits: 25.5, Throttled: 3},
				BreakerOpenedIn: 50, BreakerActive: 50, Envs: 50, Clock: ClockStats{EffectiveSpeed: 1},
				Before: Phase{Calls: 20000, BreakerBlockedFirst: 0, Store: units, StoreReadsPerCall: 0.0005, ReadUnitsPerMillion: 48650},
				Outage: Phase{Calls: 20000, BreakerBlockedFirst: 17621, Store: units, StoreWritesPerCall: 0.0306, ReadUnitsPerMillion: 48025, WriteUnitsPerMillion: 30500},
				After:  Phase{Calls: 20000, BreakerBlockedFirst: 11416, Store: units}},
		},
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	assertContains(t, out,
		"50 environments, 1000 new calls/s for 1m0s; partner serves 1500/s, major outage: 300/s from 20s for 20s (503 + Retry-After 1s)",
		"no budget (3 attempts)      2.00x      5868         17          20004                -    50  6.54s",
		"global ratio + breaker      0.13x     31105          0              0             0.29    50     0s",
		// opened 2.1 s into the outage at a true failure ratio of 33%;
		// blocked: 0 + 17,621 + 11,416; 12 first attempts (probes) after the breaker was open everywhere
		"global ratio + breaker            2.1s           33%             3.2s        29037             12",
		"global ratio + breaker       0.001 / 0.000       0.000 / 0.031       0.000 / 0.010           212          25.5          3",
		// 48,025 RRU × $0.125 + 30,500 WRU × $0.625, per million calls
		"48025 / 30500 = $0.0251",
		"effective (stops for backlog and stalls included): x9.3, x1.0",
	)
	if strings.Contains(out, "KEEP UP") || strings.Contains(out, "!") {
		t.Errorf("a run that kept up is marked:\n%s", out)
	}

	// A run the machine could not keep up with is marked, above and below.
	rep.Results[0].KeepUp.Problems = []string{"9 of 10 attempts reached the partner late"}
	rep.Results[1].KeepUp.Notes = []string{"simulated time ran slowly"}
	buf.Reset()
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out = buf.String()
	assertContains(t, out,
		"!!! THE MACHINE DID NOT KEEP UP with 1 of 2 runs (marked !)",
		"50  6.54s  !\n",
		"no budget (3 attempts): 9 of 10 attempts reached the partner late",
		"note: global ratio + breaker: simulated time ran slowly",
	)
}

func assertContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// Failed store calls are listed, with what the global budget did meanwhile;
// a run without any lists nothing.
func TestWriteTableStoreFaults(t *testing.T) {
	faulty := &StoreUsage{Writes: 3092, Errors: 594, WriteUnits: 3092, HasUnits: true}
	clean := &StoreUsage{HasUnits: true}
	results := []*Result{
		{Label: "global 10% ratio", Before: Phase{Store: clean}, Outage: Phase{Store: faulty}, After: Phase{Store: &StoreUsage{Errors: 1, HasUnits: true}}},
		{Label: "global ratio + breaker", Before: Phase{Store: clean}, Outage: Phase{Store: clean}, After: Phase{Store: clean}},
		{Label: "local 10% ratio"},
	}
	for _, tc := range []struct {
		cfg  ReportConfig
		want string
	}{
		{ReportConfig{}, "no other budget bounded the retries"},
		{ReportConfig{GlobalWithLocal: true}, "the local ratio budget (-global-with-local) decided alone"},
		{ReportConfig{FailClosed: true, GlobalWithLocal: true}, "refused retries while its store failed (-fail-closed)"},
	} {
		var buf bytes.Buffer
		if err := WriteTable(&buf, Report{Config: tc.cfg, Results: results}); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range []string{"store faults: global 10% ratio: 595 store calls failed, 594 of them during the outage", tc.want} {
			if !strings.Contains(out, want) {
				t.Errorf("%+v: table lacks %q:\n%s", tc.cfg, want, out)
			}
		}
		if strings.Contains(out, "store faults: global ratio + breaker") || strings.Contains(out, "store faults: local") {
			t.Errorf("%+v: a strategy without failed store calls is listed:\n%s", tc.cfg, out)
		}
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, Report{Results: results[1:]}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "store faults") {
		t.Errorf("no store call failed, yet:\n%s", buf.String())
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 20 * time.Second: "20s", 3216 * time.Millisecond: "3.22s", 11013 * time.Millisecond: "11s",
		61100 * time.Millisecond: "1m1.1s", 20 * time.Millisecond: "20ms",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}
