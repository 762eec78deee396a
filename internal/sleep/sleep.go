// Package sleep waits on the real clock, as the retry.Executor's default
// clock does; the tests that time real waits share it.
package sleep

import (
	"context"
	"time"
)

// For waits for d, or until ctx ends, whichever comes first. It returns
// ctx.Err() when ctx ended first (even for d <= 0), else nil, and stops its
// timer when ctx wins.
func For(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
