package hint_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/hint"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"120", 120 * time.Second, true},
		{" 3 ", 3 * time.Second, true},
		{"0", 0, true},
		{"007", 7 * time.Second, true},
		{"86400", 24 * time.Hour, true},
		{"86401", hint.Max, true},
		{"99999999999999999999999999999", hint.Max, true},
		{"Mon, 30 Nov 2026 12:00:10 GMT", 10 * time.Second, true},
		{"Monday, 30-Nov-26 12:01:00 GMT", time.Minute, true}, // RFC 850
		{"Mon Nov 30 12:00:05 2026", 5 * time.Second, true},   // ANSI C asctime
		{"Sun, 29 Nov 2026 12:00:00 GMT", 0, true},            // in the past: retry now
		{"Fri, 31 Dec 9999 23:59:59 GMT", hint.Max, true},
		{"", 0, false},
		{"   ", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"12 0", 0, false},
		{"soon", 0, false},
		{"30 Nov 2026", 0, false},
		{"Mon, 32 Nov 2026 12:00:00 GMT", 0, false},
		{"\x00\xff", 0, false},
	} {
		got, ok := hint.Parse(tc.value, now)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.value, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestParseAmzRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"1500", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{"86400000", hint.Max, true},
		{"86400001", hint.Max, true},
		{"123456789012345678901234567890", hint.Max, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1e3", 0, false},
		{"1.5", 0, false},
	} {
		got, ok := hint.ParseAmz(tc.value)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("ParseAmzRetryAfter(%q) = %v, %v; want %v, %v", tc.value, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestRetryAfterFromHeader(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		h      http.Header
		want   time.Duration
		wantOK bool
	}{
		{"none", h(), 0, false},
		{"nil", nil, 0, false},
		{"retry-after", h("Retry-After", "2"), 2 * time.Second, true},
		{"amz", h("x-amz-retry-after", "2500"), 2500 * time.Millisecond, true},
		{"both, amz larger", h("Retry-After", "2", "X-Amz-Retry-After", "2500"), 2500 * time.Millisecond, true},
		{"both, retry-after larger", h("Retry-After", "3", "X-Amz-Retry-After", "2500"), 3 * time.Second, true},
		{"garbage retry-after, good amz", h("Retry-After", "later", "X-Amz-Retry-After", "10"), 10 * time.Millisecond, true},
		{"both garbage", h("Retry-After", "later", "X-Amz-Retry-After", "-10"), 0, false},
	} {
		got, ok := hint.FromHeader(tc.h, now)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: RetryAfterFromHeader = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}
