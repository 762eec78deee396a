package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/local"
)

// A breaker guards calls to one partner: Allow before the call, Done with
// its outcome after. Times are passed in; real code passes time.Now().
func Example() {
	ctx := context.Background()
	b, err := breaker.New("payments", breaker.Settings{
		MinRequests: 5,                // trip on 50% of at least 5 calls
		Jitter:      breaker.NoJitter, // exact durations, for this example
	})
	if err != nil {
		panic(err)
	}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for range 5 {
		p, err := b.Allow(ctx, now)
		if err != nil {
			break
		}
		// ... call the partner; it fails ...
		b.Done(ctx, now, p, breaker.Failure)
	}

	_, err = b.Allow(ctx, now.Add(time.Second))
	var open *breaker.OpenError
	if errors.As(err, &open) {
		fmt.Printf("%s; retry after %v\n", open.State, open.RetryAfter)
	}
	fmt.Println(errors.Is(err, breaker.ErrOpen))
	// Output:
	// open; retry after 29s
	// true
}

// OnStateChange sees every transition, with the counts that caused it.
func ExampleSettings_onStateChange() {
	ctx := context.Background()
	b, _ := breaker.New("search", breaker.Settings{
		MinRequests:  4,
		OpenDuration: 10 * time.Second,
		Jitter:       breaker.NoJitter,
		OnStateChange: func(name string, from, to breaker.State, before breaker.Counts) {
			fmt.Printf("%s: %s -> %s after %d failures, %d successes\n", name, from, to, before.Failures, before.Successes)
		},
	})
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, o := range []breaker.Outcome{breaker.Success, breaker.Failure, breaker.Failure, breaker.Failure} {
		p, _ := b.Allow(ctx, now)
		b.Done(ctx, now, p, o)
	}
	now = now.Add(10 * time.Second)
	probe, _ := b.Allow(ctx, now) // the open duration has passed: one probe goes
	fmt.Println("probe:", probe.Probe())
	b.Done(ctx, now, probe, breaker.Success)
	// Output:
	// search: closed -> open after 3 failures, 1 successes
	// search: open -> half-open after 0 failures, 0 successes
	// probe: true
	// search: half-open -> closed after 0 failures, 1 successes
}

// With a Store, environments share one breaker. One sick environment cannot
// open it for everyone (MinReporters); two can, and then every environment
// rejects first attempts.
func Example_fleet() {
	ctx := context.Background()
	store := local.NewBreakerStore() // package dynamo has the DynamoDB one
	env := func(id string) *breaker.Breaker {
		b, err := breaker.New("partner-api", breaker.Settings{Store: store, Env: id, Jitter: breaker.NoJitter})
		if err != nil {
			panic(err)
		}
		return b
	}
	a, b, c := env("env-a"), env("env-b"), env("env-c")
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	// invoke is one Lambda invocation at `at` whose calls all fail. An
	// environment reports its counts at its first failure, then at most
	// once per ReportInterval (1 s); the handler's Flush sends what is due.
	invoke := func(e *breaker.Breaker, at time.Time, calls int) {
		for range calls {
			if p, err := e.Allow(ctx, at); err == nil {
				e.Done(ctx, at, p, breaker.Failure)
			}
		}
		_ = e.Flush(ctx) // before returning: the environment may be frozen
	}

	invoke(a, start, 30)                 // the first failure is reported
	invoke(a, start.Add(time.Second), 1) // a second later, the other 30
	fmt.Println("after env-a alone:", a.State(start.Add(time.Second)))
	invoke(b, start.Add(time.Second), 1)
	fmt.Println("after env-b too:  ", b.State(start.Add(time.Second)))

	_, err := c.Allow(ctx, start.Add(2*time.Second)) // a fresh environment
	var oe *breaker.OpenError
	if errors.As(err, &oe) {
		// 29 s, plus this environment's own delay (under CacheTTL) so
		// that the fleet does not move to half-open in lockstep.
		fmt.Println("env-c:", oe.State, "for", oe.RetryAfter.Truncate(time.Second), "more")
	}
	st := store.Stats()
	fmt.Printf("store: %d reads, %d writes\n", st.Reads, st.Writes)
	// Output:
	// after env-a alone: closed
	// after env-b too:   open
	// env-c: open for 29s more
	// store: 4 reads, 4 writes
}

// ForceOpen is a local kill switch: this process rejects every call.
func ExampleBreaker_ForceOpen() {
	b, _ := breaker.New("ledger", breaker.Settings{})
	b.ForceOpen()
	_, err := b.Allow(context.Background(), time.Now())
	fmt.Println(err)
	b.Reset()
	_, err = b.Allow(context.Background(), time.Now())
	fmt.Println(err)
	// Output:
	// herdguard: circuit breaker "ledger" is open (forced by operator)
	// <nil>
}
