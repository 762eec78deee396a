package budget

import (
	"context"
	"errors"
	"time"
)

// Layered composes budgets into one. A retry is granted only if every layer
// grants it; when a later layer refuses, the grants already taken from the
// earlier layers are given back (their Release is called with RetryNotUsed)
// before the refusal is returned. A layer that answers ErrUnavailable
// abstains: the other layers decide. If every layer abstains the retry is
// granted, since each backend chooses for itself whether a store fault
// should refuse (it then answers ErrExhausted) or abstain.
//
// Layers are asked in order, so put the cheap in-memory layers first: a
// local refusal then costs no store call.
func Layered(layers ...Budget) Budget {
	ls := make([]Budget, 0, len(layers))
	for _, l := range layers {
		if l != nil {
			ls = append(ls, l)
		}
	}
	return &layered{layers: ls}
}

type layered struct {
	layers []Budget // immutable after construction
}

func (l *layered) RecordRequest(now time.Time) {
	for _, b := range l.layers {
		b.RecordRequest(now)
	}
}

func (l *layered) RecordSuccess(now time.Time) {
	for _, b := range l.layers {
		b.RecordSuccess(now)
	}
}

func (l *layered) AcquireRetry(ctx context.Context, now time.Time, kind Kind) (Release, error) {
	return AcquireAll(ctx, now, kind, l.layers, nil)
}

// Flush flushes every layer that implements Flusher and joins their errors.
func (l *layered) Flush(ctx context.Context) error {
	return FlushAll(ctx, l.layers)
}

// AcquireAll asks each budget in turn, as Layered does, and calls
// onUnavailable (if not nil) with the index and error of every layer whose
// store failed: those that abstained and those that refused because they
// fail closed. The retry.Executor uses it to report store faults.
func AcquireAll(ctx context.Context, now time.Time, kind Kind, layers []Budget, onUnavailable func(layer int, err error)) (Release, error) {
	var (
		single  Release
		granted []Release // only allocated when more than one layer hands out a Release
	)
	for i, b := range layers {
		rel, err := b.AcquireRetry(ctx, now, kind)
		if err != nil {
			if errors.Is(err, ErrUnavailable) {
				// A store fault is reported whether the layer abstains
				// (fails open) or refuses (fails closed).
				if onUnavailable != nil {
					onUnavailable(i, err)
				}
				if !errors.Is(err, ErrExhausted) {
					continue
				}
			}
			// Refused (or an error a backend should not return): give back
			// what the earlier layers granted.
			single.Done(RetryNotUsed)
			for _, r := range granted {
				r(RetryNotUsed)
			}
			if !errors.Is(err, ErrExhausted) {
				err = &ExhaustedError{Err: err}
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
			granted = []Release{single, rel}
			single = nil
		default:
			granted = append(granted, rel)
		}
	}
	if granted == nil {
		return single, nil
	}
	return func(o Outcome) {
		for _, r := range granted {
			r(o)
		}
	}, nil
}

// FlushAll flushes every budget that implements Flusher and joins the errors.
func FlushAll(ctx context.Context, layers []Budget) error {
	var errs []error
	for _, b := range layers {
		if f, ok := b.(Flusher); ok {
			if err := f.Flush(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
