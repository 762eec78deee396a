package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/local"
)

// A breaker guards calls to one partner: Allow before the call, Done with
// its outcome after. Times are passed in; real code passes time.Now().
func Example() {
	ctx := context.Background()
	b, err := breaker.New("payments", breaker.Settings{
		MinRequests: 5,  // trip on 50% of at least 5 calls
		Jitter:      -1, // exact durations, for this example
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
		Jitter:       -1,
		OnStateChange: func(c breaker.StateChange) {
			fmt.Printf("%s: %s -> %s after %d failures, %d successes\n", c.Name, c.From, c.To, c.Counts.Failures, c.Counts.Successes)
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

// With a Store, environments share one breaker. While every call succeeds
// the fleet writes nothing; a failure starts the fleet's watch, every
// environment then reports a sample of its calls, and once the sampled
// failure ratio is clearly above FailureRatio the breaker opens for
// everyone, new environments included.
func Example_fleet() {
	ctx := context.Background()
	store := local.NewBreakerStore() // package dynamo has the DynamoDB one
	env := func(seed uint64) *breaker.Breaker {
		b, err := breaker.New("partner-api", breaker.Settings{
			Store:  store,
			Jitter: -1,
			Rand:   rand.New(rand.NewPCG(seed, 1)).Float64, // seeded for a stable output
		})
		if err != nil {
			panic(err)
		}
		return b
	}
	a, b := env(1), env(2)
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	// invoke is one Lambda invocation at `at`: one call with outcome o,
	// then Flush before returning (the environment may be frozen).
	invoke := func(e *breaker.Breaker, at time.Time, o breaker.Outcome) {
		if p, err := e.Allow(ctx, at); err == nil {
			e.Done(ctx, at, p, o)
		}
		_ = e.Flush(ctx, at)
	}
	for i := range 20 { // healthy: two environments, a call every 100 ms each
		at := start.Add(time.Duration(i) * 100 * time.Millisecond)
		invoke(a, at, breaker.Success)
		invoke(b, at, breaker.Success)
	}
	fmt.Printf("healthy: %d writes\n", store.Stats().Writes)
	for i := range 100 { // the partner fails
		at := start.Add(2*time.Second + time.Duration(i)*100*time.Millisecond)
		invoke(a, at, breaker.Failure)
		invoke(b, at, breaker.Failure)
	}
	fmt.Println("after the outage began:", a.State(start.Add(12*time.Second)), b.State(start.Add(12*time.Second)))

	c := env(3) // a fresh environment
	_, err := c.Allow(ctx, start.Add(12*time.Second))
	fmt.Println("fresh environment rejected:", errors.Is(err, breaker.ErrOpen))
	// Output:
	// healthy: 0 writes
	// after the outage began: open open
	// fresh environment rejected: true
}

// A retry loop of its own (not a retry.Executor) asks Allow for a call's
// first attempt and AllowRetry for each retry. While the fleet watches,
// its first attempts are sampled for the fleet's counts and its retries
// never are: a retry exists because an attempt failed. This process's
// Counts see every attempt.
func ExampleBreaker_AllowRetry() {
	ctx := context.Background()
	store := local.NewBreakerStore()
	b, err := breaker.New("partner-api", breaker.Settings{
		Store: store,
		Rand:  func() float64 { return 0 }, // sample every first attempt, for a stable output
	})
	if err != nil {
		panic(err)
	}
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	// A failure starts the fleet's watch; this environment samples its
	// first attempts from the next second on.
	p, _ := b.Allow(ctx, start)
	b.Done(ctx, start, p, breaker.Failure)

	now := start.Add(time.Second)
	for attempt, o := range []breaker.Outcome{breaker.Failure, breaker.Failure, breaker.Success} {
		allow := b.Allow
		if attempt > 0 {
			allow = b.AllowRetry
		}
		p, err := allow(ctx, now)
		if err != nil {
			fmt.Println(err)
			return
		}
		// ... call the partner ...
		b.Done(ctx, now, p, o)
		now = now.Add(100 * time.Millisecond)
	}
	_ = b.Flush(ctx, start.Add(3*time.Second))

	snap, _ := store.Load(ctx, "partner-api")
	var sampled int64
	for _, bk := range snap.Buckets {
		sampled += bk.Samples
	}
	c := b.Counts()
	fmt.Printf("this process: %d failures, %d success\n", c.Failures, c.Successes)
	fmt.Printf("the fleet: %d sampled attempt\n", sampled)
	// Output:
	// this process: 3 failures, 1 success
	// the fleet: 1 sampled attempt
}

// Override(ForcedOpen) is a local kill switch: this process rejects every
// call; NoOverride lifts it.
func ExampleBreaker_Override() {
	b, _ := breaker.New("ledger", breaker.Settings{})
	b.Override(breaker.ForcedOpen)
	_, err := b.Allow(context.Background(), time.Now())
	fmt.Println(err)
	b.Override(breaker.NoOverride)
	_, err = b.Allow(context.Background(), time.Now())
	fmt.Println(err)
	// Output:
	// herdguard: circuit breaker "ledger" is open (forced by operator)
	// <nil>
}
