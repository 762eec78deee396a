// Package storecall bounds a call to a store that herdguard does not trust
// to honour its context: breaker.Store and budget.Store are public
// interfaces, and a third-party implementation that ignores ctx, or
// panics, must not block the caller past its timeout or crash it.
package storecall

import (
	"context"
	"fmt"
	"time"
)

// Do runs f with a timeout of its own, in a goroutine. It returns f's
// answer if it comes in time; otherwise an error wrapping class and ctx's
// error, and a panic in f comes back as an error wrapping class. op names
// the call in those errors. A result that comes too late is dropped (the
// goroutine ends when f does).
func Do[T any](ctx context.Context, timeout time.Duration, class error, op string, f func(context.Context) (T, error)) (T, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("%w: %s panicked: %v", class, op, p)}
			}
			ch <- r
		}()
		r.v, r.err = f(sctx)
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-sctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: %s gave no answer in time: %w", class, op, sctx.Err())
	}
}
