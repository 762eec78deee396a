// Package layers composes retry budgets: the retry.Executor asks the
// layers of its Config.Budgets in order with Acquire.
package layers

import (
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/budget"
)

// Acquire asks each budget in turn for a retry. A retry is granted only if
// every layer grants it; when a later layer refuses, the grants already
// taken from the earlier layers are given back (their Release is called
// with budget.RetryNotUsed) before the refusal is returned. A layer that
// answers budget.ErrUnavailable abstains: the other layers decide. If
// every layer abstains the retry is granted, since each backend chooses
// for itself whether a store fault should refuse (it then answers
// budget.ErrExhausted) or abstain. A refusal is an error satisfying
// errors.Is(err, budget.ErrExhausted).
//
// onUnavailable, if not nil, is called with the index and error of every
// layer whose store failed: those that abstained and those that refused
// because they fail closed.
func Acquire(ctx context.Context, now time.Time, kind budget.Kind, layers []budget.Budget, onUnavailable func(layer int, err error)) (budget.Release, error) {
	var (
		single  budget.Release
		granted []budget.Release // allocated only when more than one layer hands out a Release
	)
	for i, b := range layers {
		rel, err := b.AcquireRetry(ctx, now, kind)
		if err != nil {
			if errors.Is(err, budget.ErrUnavailable) {
				// A store fault is reported whether the layer abstains
				// (fails open) or refuses (fails closed).
				if onUnavailable != nil {
					onUnavailable(i, err)
				}
				if !errors.Is(err, budget.ErrExhausted) {
					continue
				}
			}
			// Refused (or an error a backend should not return): give back
			// what the earlier layers granted.
			single.Done(budget.RetryNotUsed)
			for _, r := range granted {
				r(budget.RetryNotUsed)
			}
			if !errors.Is(err, budget.ErrExhausted) {
				err = &budget.ExhaustedError{Cause: err}
			}
			return nil, err
		}
		if rel == nil {
			continue
		}
		switch {
		case single == nil && granted == nil:
			single = rel
		case granted == nil:
			granted = []budget.Release{single, rel}
			single = nil
		default:
			granted = append(granted, rel)
		}
	}
	if granted == nil {
		return single, nil
	}
	return func(o budget.Outcome) {
		for _, r := range granted {
			r(o)
		}
	}, nil
}
