package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/internal/memstore"
	"github.com/herdguard/herdguard/retry"
)

// An open breaker rejects a retry before the budgets are asked: it is never
// charged (the fleet-wide allowance is not stranded in an environment that
// cannot use it). The permit a retry runs under is taken after the wait:
// a retry the budgets refuse, or whose wait the context ends, took none,
// and one the breaker rejects after the wait hands its grant back.

func TestBreakerRejectedRetryChargesNoBudget(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	store := memstore.NewBudgetStore(memstore.Options{Now: func() time.Time { return now }})
	global, err := budget.NewGlobal(store, "partner", budget.GlobalConfig{Floor: 5})
	if err != nil {
		t.Fatal(err)
	}
	local := &fakeBudget{}
	br := mustBreaker(t)
	e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Budgets: []budget.Budget{local, global}, Clock: fixedClock{now}, Rand: constRand(0)})
	calls := 0
	err = e.Do(context.Background(), func(context.Context, int) error {
		calls++
		br.Override(breaker.ForcedOpen) // the fleet opens the breaker while the first attempt fails
		return status(503)
	})
	if gu := asGiveUp(t, err); gu.Reason != retry.BreakerOpen || gu.Attempts != 1 || calls != 1 {
		t.Fatalf("%d calls, %+v; want the retry rejected by the breaker", calls, gu)
	}
	if s := local.snapshot(); len(s.acquires) != 0 || len(s.outcomes) != 0 {
		t.Errorf("local budget asked %v (outcomes %v); want it never asked", s.acquires, s.outcomes)
	}
	if st := global.Stats(); st.StoreCalls != 0 || st.Granted != 0 || store.Writes() != 0 {
		t.Errorf("global budget: %+v, %d store writes; want no store call", st, store.Writes())
	}
	// Once the breaker admits again, the allowance is all there: the
	// floor of 5, not 4.
	br.Override(breaker.ForcedClosed)
	granted := 0
	for range 10 {
		if rel, err := global.AcquireRetry(context.Background(), now, budget.Transient); err == nil {
			granted++
			rel.Done(budget.RetryFailed)
		}
	}
	if granted != 5 {
		t.Errorf("granted %d of a floor of 5 after the rejection", granted)
	}
}

func TestRetryTakesItsPermitAfterTheWait(t *testing.T) {
	ctx := context.Background()
	br := mustBreaker(t)
	refusing := &fakeBudget{refuse: &budget.ExhaustedError{Budget: "global:partner"}}
	e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Budgets: []budget.Budget{refusing}, Clock: newFakeClock()})
	calls := 0
	err := e.Do(ctx, failing(&calls, status(503)))
	var ex *budget.ExhaustedError
	if !errors.As(err, &ex) || calls != 1 {
		t.Fatalf("%d calls, %v; want the budget's refusal after one attempt", calls, err)
	}
	if s := refusing.snapshot(); len(s.acquires) != 1 {
		t.Fatalf("budget asked %d times, want once", len(s.acquires))
	}
	// The first attempt's failure counts; the refused retry took no
	// permit: no success, no second failure, nothing excluded.
	if c := br.Counts(); c.Failures != 1 || c.Successes != 0 || c.Excluded != 0 {
		t.Errorf("breaker counts %+v; want the one failure only", c)
	}

	// The same when the context ends during the wait before the retry.
	br2 := mustBreaker(t)
	clk := newFakeClock()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clk.OnSleep = cancel
	granting := &fakeBudget{}
	e2 := mustNew(t, retry.Config{Idempotent: true, Breaker: br2, Budgets: []budget.Budget{granting}, Clock: clk})
	if err := e2.Do(cctx, failing(&calls, status(503))); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	if c := br2.Counts(); c.Failures != 1 || c.Successes != 0 || c.Excluded != 0 {
		t.Errorf("breaker counts %+v; want the one failure only", c)
	}
	if s := granting.snapshot(); len(s.outcomes) != 1 || s.outcomes[0] != budget.RetryNotUsed {
		t.Errorf("budget outcomes %v, want [not-used]", s.outcomes)
	}
}

// A breaker that opens during the wait before a retry rejects the retry,
// and the budgets get their grant back unused.
func TestBreakerOpeningDuringTheWaitRejectsTheRetry(t *testing.T) {
	br := mustBreaker(t)
	clk := newFakeClock()
	clk.OnSleep = func() { br.Override(breaker.ForcedOpen) }
	b := &fakeBudget{}
	e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Budgets: []budget.Budget{b}, Clock: clk})
	calls := 0
	err := e.Do(context.Background(), failing(&calls, status(503)))
	if gu := asGiveUp(t, err); gu.Reason != retry.BreakerOpen || calls != 1 {
		t.Fatalf("%d calls, %+v; want the retry rejected by the breaker after the wait", calls, gu)
	}
	if s := b.snapshot(); len(s.acquires) != 1 || len(s.outcomes) != 1 || s.outcomes[0] != budget.RetryNotUsed {
		t.Errorf("budget: %d acquires, outcomes %v; want one grant handed back not-used", len(s.acquires), s.outcomes)
	}
}

// The wait before a retry is not part of the retry's duration: a fast
// retry after a long Retry-After wait is a success, not a slow call.
func TestSlowCallClockStartsAfterTheWait(t *testing.T) {
	br, err := breaker.New("partner", breaker.Settings{SlowCallThreshold: 500 * time.Millisecond, MinRequests: 2, FailureRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	e := mustNew(t, retry.Config{Idempotent: true, Breaker: br, Clock: clk, Rand: constRand(0.99)})
	calls := 0
	throttled := &retry.StatusError{StatusCode: 429, RetryAfter: 2 * time.Second}
	if err := e.Do(context.Background(), failing(&calls, throttled)); err != nil || calls != 2 {
		t.Fatalf("%d calls, %v; want the retry to succeed", calls, err)
	}
	if c := br.Counts(); c.Successes != 1 {
		t.Errorf("breaker counts %+v; want the retry counted a success", c)
	}
	if st := br.State(clk.Now()); st != breaker.Closed {
		t.Errorf("breaker %v after a throttled call and a fast retry; want closed", st)
	}
}
