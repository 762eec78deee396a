package retry

import "time"

// Defaults of Config. They follow the AWS SDKs' 2026 standard retry
// behaviour where it has one.
const (
	// DefaultMaxAttempts is the number of attempts of one call, the first
	// one included.
	DefaultMaxAttempts = 3
	// DefaultTransientBase is the backoff base after a transient failure
	// (5xx, timeout, dropped connection).
	DefaultTransientBase = 50 * time.Millisecond
	// DefaultThrottlingBase is the backoff base after throttling (429, or
	// 503 with Retry-After).
	DefaultThrottlingBase = time.Second
	// DefaultMaxDelay caps one backoff wait (jitter only; a server's
	// Retry-After comes on top, bounded by MaxRetryAfter and the deadline).
	DefaultMaxDelay = 20 * time.Second
	// DefaultDeadlineMargin is kept free before the context's deadline: a
	// retry whose wait would end later than deadline - margin is not made,
	// so the caller still has time to answer (a Lambda handler its 503).
	DefaultDeadlineMargin = 100 * time.Millisecond
	// DefaultMaxRetryAfter is the longest Retry-After the executor honours.
	// A server asking for more makes it give up at once with the server's
	// error instead of parking the call.
	DefaultMaxRetryAfter = time.Minute
)

// FullJitter returns the full-jitter backoff before retry number retry
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
func FullJitter(retry int, base, maxDelay time.Duration, random float64) time.Duration {
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
