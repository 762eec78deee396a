package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/retry"
)

func TestSystemClockSleep(t *testing.T) {
	var c retry.SystemClock
	if err := c.Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0) = %v", err)
	}
	if err := c.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a canceled context = %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep past the deadline = %v", err)
	}
	if now := c.Now(); time.Since(now) < 0 || time.Since(now) > time.Minute {
		t.Errorf("Now = %v", now)
	}
}
