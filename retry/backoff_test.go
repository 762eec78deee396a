package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/herdguard/herdguard/retry"
)

func TestFullJitter(t *testing.T) {
	const maxDur = time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name        string
		retry       int
		base, limit time.Duration
		random      float64
		want        time.Duration
	}{
		{"first retry, half", 0, 100 * time.Millisecond, time.Second, 0.5, 50 * time.Millisecond},
		{"second retry, half", 1, 100 * time.Millisecond, time.Second, 0.5, 100 * time.Millisecond},
		{"capped", 5, 100 * time.Millisecond, time.Second, 0.5, 500 * time.Millisecond},
		{"zero random", 3, time.Second, 20 * time.Second, 0, 0},
		{"random 1 gives the ceiling", 2, time.Second, 20 * time.Second, 1, 4 * time.Second},
		{"random above 1 clamped", 2, time.Second, 20 * time.Second, 7, 4 * time.Second},
		{"negative random clamped", 2, time.Second, 20 * time.Second, -3, 0},
		{"NaN random", 2, time.Second, 20 * time.Second, math.NaN(), 0},
		{"negative retry is the first", -4, 100 * time.Millisecond, time.Second, 0.5, 50 * time.Millisecond},
		{"huge retry does not overflow", math.MaxInt, time.Nanosecond, time.Second, 0.5, 500 * time.Millisecond},
		{"retry 62 on a huge cap", 62, time.Nanosecond, maxDur, 1, time.Duration(1) << 62},
		{"retry 63 stays at the cap", 63, time.Nanosecond, maxDur, 1, maxDur},
		{"retry 64 stays at the cap", 64, 3, maxDur, 1, maxDur},
		{"largest durations", 1, maxDur, maxDur, 0.999999999, time.Duration(0.999999999 * float64(maxDur))},
		{"zero base", 3, 0, time.Second, 0.5, 0},
		{"negative cap", 3, time.Second, -time.Second, 0.5, 0},
	} {
		got := retry.FullJitter(tc.retry, tc.base, tc.limit, tc.random)
		if got != tc.want {
			t.Errorf("%s: FullJitter(%d, %v, %v, %v) = %v, want %v", tc.name, tc.retry, tc.base, tc.limit, tc.random, got, tc.want)
		}
		if got < 0 || (tc.limit > 0 && got > tc.limit) {
			t.Errorf("%s: FullJitter = %v outside [0, %v]", tc.name, got, tc.limit)
		}
	}
}
