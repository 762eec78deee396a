package awsretry

import (
	"math/rand/v2"
	"testing"
	"time"
)

// sdkAdjust is what the SDK's Attempt middleware sleeps for a RetryDelay
// answer d (adjustForRetryAfterHeader in aws/retry).
func sdkAdjust(d, xamz time.Duration, hasX bool) time.Duration {
	if !hasX {
		return d
	}
	return min(max(xamz, d), d+sdkHintSlack)
}

// TestSplitWait checks splitWait's two promises over random waits and
// hints: with its own delay the SDK sleeps exactly the checked wait, and
// with any other RetryDelay answer the hint is still a lower bound.
func TestSplitWait(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := func(max time.Duration) time.Duration { return time.Duration(r.Int64N(int64(max))) }
	for i := range 100_000 {
		hasX := r.IntN(2) == 0
		var xamz, ra time.Duration
		if hasX {
			xamz = d(20 * time.Second)
		}
		if r.IntN(2) == 0 {
			ra = d(20 * time.Second)
		}
		hint := max(xamz, ra)
		wait := hint + d(3*time.Second)
		pre, delay := splitWait(wait, hint, xamz, hasX)
		if pre < 0 || delay < 0 {
			t.Fatalf("case %d: splitWait(%v, %v, %v, %v) = %v, %v: negative", i, wait, hint, xamz, hasX, pre, delay)
		}
		if got := pre + sdkAdjust(delay, xamz, hasX); got != wait {
			t.Fatalf("case %d: splitWait(%v, %v, %v, %v) = %v, %v: the SDK sleeps %v in all, want %v", i, wait, hint, xamz, hasX, pre, delay, got, wait)
		}
		other := d(time.Second) // a wrapper's backoff
		if got := pre + sdkAdjust(other, xamz, hasX); got < hint {
			t.Fatalf("case %d: splitWait(%v, %v, %v, %v) = %v, %v: with RetryDelay %v the SDK sleeps %v, under the hint", i, wait, hint, xamz, hasX, pre, delay, other, got)
		}
	}
}
