// Package budgetcheck holds the assertions the tests of budget backends
// share.
package budgetcheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"
)

// MustGrant asks b for a retry and fails the test unless it is granted
// with a Release, which it returns.
func MustGrant(t testing.TB, b budget.Budget, now time.Time, kind budget.Kind) budget.Release {
	t.Helper()
	rel, err := b.AcquireRetry(context.Background(), now, kind)
	if err != nil {
		t.Fatalf("AcquireRetry(%v) refused: %v", kind, err)
	}
	if rel == nil {
		t.Fatalf("AcquireRetry(%v) granted with a nil Release", kind)
	}
	return rel
}

// MustRefuse asks b for a retry and fails the test unless it is refused
// with a *budget.ExhaustedError naming layer, which it returns.
func MustRefuse(t testing.TB, b budget.Budget, now time.Time, kind budget.Kind, layer string) *budget.ExhaustedError {
	t.Helper()
	rel, err := b.AcquireRetry(context.Background(), now, kind)
	if err == nil {
		t.Fatalf("AcquireRetry(%v) granted, want a refusal", kind)
	}
	if rel != nil {
		t.Fatalf("AcquireRetry(%v) returned a Release with error %v", kind, err)
	}
	if !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("AcquireRetry(%v) error %v does not satisfy errors.Is(err, budget.ErrExhausted)", kind, err)
	}
	var ex *budget.ExhaustedError
	if !errors.As(err, &ex) {
		t.Fatalf("AcquireRetry(%v) error %T is not a *budget.ExhaustedError", kind, err)
	}
	if ex.Budget != layer {
		t.Fatalf("refusal names layer %q, want %q", ex.Budget, layer)
	}
	return ex
}
