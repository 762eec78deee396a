package retry

import "time"

// Defaults of Config. They follow the AWS SDKs' 2026 standard retry
// behaviour where it has one.
const (
	defaultMaxAttempts    = 3
	defaultTransientBase  = 50 * time.Millisecond
	defaultThrottlingBase = time.Second
	defaultMaxDelay       = 20 * time.Second
	defaultDeadlineMargin = 100 * time.Millisecond
	defaultMaxRetryAfter  = time.Minute
)

// fullJitter returns the full-jitter backoff before retry number retry
// (0 for the first retry, that is, the wait before the second attempt):
//
//	random × min(maxDelay, base × 2^retry)
//
// random is a number in [0, 1), as returned by math/rand/v2.Float64; values
// outside are clamped into [0, 1] and NaN counts as 0. The result is never
// negative and never above maxDelay, for any retry number: the exponential
// is computed with shifts that stop at maxDelay instead of overflowing.
// A non-positive base or maxDelay gives 0.
//
// With base 100 ms, maxDelay 1 s and random 0.999999 the waits before the
// first, fourth and eleventh retry are 99.9999 ms, 799.9992 ms and
// 999.999 ms: the article this package grew from, working in whole
// milliseconds, floors them to 99, 799 and 999.
func fullJitter(retry int, base, maxDelay time.Duration, random float64) time.Duration {
	if base <= 0 || maxDelay <= 0 {
		return 0
	}
	if retry < 0 {
		retry = 0
	}
	ceiling := maxDelay
	// base<<retry <= maxDelay  <=>  base <= maxDelay>>retry (no overflow).
	if retry < 63 && base <= maxDelay>>uint(retry) {
		ceiling = base << uint(retry)
	}
	switch {
	case !(random > 0): // also NaN
		return 0
	case random >= 1:
		return ceiling
	}
	f := random * float64(ceiling)
	if f >= float64(ceiling) { // rounding near 1; also keeps the conversion in range
		return ceiling
	}
	return time.Duration(f)
}
