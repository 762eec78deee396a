// Package hint parses the waits a server asks for: HTTP Retry-After and
// x-amz-retry-after. Package retry reads them from a response's headers
// (retry.StatusError), package awsretry from an AWS SDK error's response.
package hint

import (
	"net/http"
	"strings"
	"time"
)

// Max is the largest wait the parsers return: longer values are clamped
// to it, so that no arithmetic on a hint can overflow. The executor
// honours far less (retry.Config.MaxRetryAfter and the context deadline).
const Max = 24 * time.Hour

// Header names read by FromHeader.
const (
	headerRetryAfter    = "Retry-After"
	headerAmzRetryAfter = "X-Amz-Retry-After"
)

// Parse parses the value of an HTTP Retry-After header (RFC 9110,
// section 10.2.3): either delta-seconds ("120") or an HTTP-date, which is
// taken relative to now.
//
// It reports ok = false for an empty or malformed value (a sign, a
// fraction, trailing garbage, an impossible date). A date in the past gives
// (0, true): the server allows a retry now. Values above Max are
// clamped to Max. The result is never negative.
func Parse(value string, now time.Time) (d time.Duration, ok bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if value[0] >= '0' && value[0] <= '9' {
		if secs, ok := parseDigits(value, int64(Max/time.Second)); ok {
			return time.Duration(secs) * time.Second, true
		}
		// Not all digits: an HTTP-date never starts with a digit, except
		// in malformed values; fall through and let ParseTime decide.
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now) // saturates instead of overflowing
	switch {
	case d <= 0:
		return 0, true
	case d > Max:
		return Max, true
	}
	return d, true
}

// ParseAmz parses the value of an x-amz-retry-after header: a
// non-negative integer number of milliseconds. Malformed values give
// ok = false; values above Max are clamped to it.
func ParseAmz(value string) (d time.Duration, ok bool) {
	ms, ok := parseDigits(strings.TrimSpace(value), int64(Max/time.Millisecond))
	if !ok {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// FromHeader returns the wait a response's headers ask for: the
// larger of Retry-After and x-amz-retry-after when both are present and
// well-formed (both are lower bounds, so the stricter wins). It reports
// ok = false when neither is usable.
func FromHeader(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get(headerRetryAfter); v != "" {
		d, ok = Parse(v, now)
	}
	if v := h.Get(headerAmzRetryAfter); v != "" {
		if amz, amzOK := ParseAmz(v); amzOK {
			if !ok || amz > d {
				d = amz
			}
			ok = true
		}
	}
	return d, ok
}

// parseDigits parses a non-empty string of ASCII digits, clamping the value
// at limit (limit >= 0). Any other character makes it fail.
func parseDigits(s string, limit int64) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < limit { // once at the limit, keep validating but stop growing
			n = n*10 + int64(c-'0')
			if n > limit {
				n = limit
			}
		}
	}
	return n, true
}
