package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWriteTable(t *testing.T) {
	openAll := Duration(3200 * time.Millisecond)
	units := &StoreUsage{Reads: 10, Writes: 20, ReadUnits: 10, WriteUnits: 20, HasUnits: true}
	rep := Report{
		Config: ReportConfig{Envs: 50, Rate: 1000, Duration: Duration(time.Minute), Capacity: 1500, OutageCapacity: 600,
			OutageStart: Duration(20 * time.Second), OutageLength: Duration(20 * time.Second), RejectStatus: 503,
			RetryAfter: Duration(time.Second), Attempts: 3, Ratio: 0.1, Window: Duration(10 * time.Second), Seed: 42,
			Speed: 10, Store: "dynamodb http://x", PriceRead: 0.125, PriceWrite: 0.625},
		Results: []*Result{
			{Label: "no budget (3 attempts)", LoadFactor: 2.004, FailedForGood: 5868, FirstAttemptsInOutage: 20004, Envs: 50,
				Wall: Duration(6540 * time.Millisecond), Clock: ClockStats{EffectiveSpeed: 9.3}},
			{Label: "global ratio + breaker", HasBreaker: true, LoadFactor: 0.127, FailedForGood: 31105, BreakerOpenAll: &openAll,
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
	for _, want := range []string{
		"50 environments, 1000 new calls/s for 1m0s; partner serves 1500/s, 600/s from 20s for 20s (503 + Retry-After 1s)",
		"no budget (3 attempts)      2.00x      5868            -          20004                -",
		"global ratio + breaker      0.13x     31105        29037",
		"3.2s",
		"0.000 / 0.031",
		// 48,025 RRU × $0.125 + 30,500 WRU × $0.625, per million calls
		"48025 / 30500 = $0.0251",
		"effective (stops for backlog and stalls included): x9.3, x1.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
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
