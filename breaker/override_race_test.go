package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/local"
)

// blockingStore holds Reports while gate is set: a Report in flight while
// another call reads an operator override (a Report's answer carries no
// override; the breaker must keep the one it read).
type blockingStore struct {
	*local.BreakerStore
	gate chan struct{}
	in   chan struct{}
}

func (s *blockingStore) Report(ctx context.Context, name string, r breaker.Report) (breaker.Snapshot, error) {
	if s.gate != nil {
		s.in <- struct{}{}
		<-s.gate
	}
	return s.BreakerStore.Report(ctx, name, r)
}

func TestSharedReportAnswerKeepsTheOverride(t *testing.T) {
	ctx := context.Background()
	st := &blockingStore{BreakerStore: local.NewBreakerStore()}
	t0 := time.UnixMilli(1_800_000_000_000)
	// A watch counted for a second already: an environment that learns of
	// it in the watch's first bucket would sample only from the next one.
	if _, err := st.Report(ctx, "p", breaker.Report{Bucket: t0.Unix() - 1, Requests: 1, Successes: 1, Samples: 1, WatchUntil: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	s := breaker.Settings{Store: st, CacheTTL: time.Second, StoreTimeout: time.Minute, Rand: func() float64 { return 0 }}
	s.ReportInterval = 100 * time.Millisecond
	b, err := breaker.New("p", s)
	if err != nil {
		t.Fatal(err)
	}
	call := func(at time.Duration) error {
		p, err := b.Allow(ctx, t0.Add(at))
		if err != nil {
			return err
		}
		b.Done(ctx, t0.Add(at), p, breaker.Success)
		return nil
	}
	if err := call(0); err != nil { // loads the watch, samples, reports
		t.Fatal(err)
	}
	st.gate, st.in = make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- call(900 * time.Millisecond) }() // its report is held in the store
	// Bounds far above what the steps take, so that a breaker that makes
	// no report fails the test instead of hanging it.
	const bound = time.Minute
	select {
	case <-st.in:
	case err := <-done:
		t.Fatalf("the call at 900 ms ended (%v) without a Report", err)
	case <-time.After(bound):
		t.Fatal("no Report from the call at 900 ms")
	}
	if err := st.SetOverride(ctx, "p", breaker.ForcedOpen, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allow(ctx, t0.Add(1050*time.Millisecond)); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after loading force-open: %v, want ErrOpen", err)
	}
	close(st.gate)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		t.Fatal("the call at 900 ms did not end after its Report was let go")
	}
	if _, err := b.Allow(ctx, t0.Add(1100*time.Millisecond)); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("force-open, after the held Report answered: Allow = %v, want ErrOpen", err)
	}
}
