package retry

import (
	"math"
	"testing"
	"time"
)

func TestSaturatingArithmetic(t *testing.T) {
	const maxD, minD = time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	for _, tc := range []struct {
		a, b, sum, diff time.Duration
	}{
		{1, 2, 3, -1},
		{maxD, 1, maxD, maxD - 1},
		{maxD, maxD, maxD, 0},
		{minD, -1, minD, minD + 1},
		{minD, 1, minD + 1, minD},
		{0, minD, minD, maxD},
		{-5, minD, minD, maxD - 4},
		{5, minD, minD + 5, maxD},
	} {
		if got := addSat(tc.a, tc.b); got != tc.sum {
			t.Errorf("addSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.sum)
		}
		if got := subSat(tc.a, tc.b); got != tc.diff {
			t.Errorf("subSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.diff)
		}
	}
}
