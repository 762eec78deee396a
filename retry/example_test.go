package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// An Executor with a local token bucket and a breaker retries a partner
// that turns an order away twice with 503 and Retry-After (it is shedding
// load: the order was not booked, so it can be sent again). A bare 503, a
// 500 or a timeout would not be retried for a call that is not idempotent:
// the order may have been booked.
func ExampleExecutor_Do() {
	bucket, err := local.NewTokenBucket(local.TokenBucketConfig{}) // AWS SDK defaults: 500 tokens, 14 per transient retry
	if err != nil {
		panic(err)
	}
	br, err := breaker.New("mill-api", breaker.Settings{})
	if err != nil {
		panic(err)
	}
	e, err := retry.New(retry.Config{
		Budgets:        []budget.Budget{bucket},
		Breaker:        br,
		ThrottlingBase: time.Millisecond, // keep the example fast
		OnRetry: func(ev retry.RetryEvent) {
			fmt.Printf("attempt %d: %v; retrying (%s)\n", ev.Attempt, ev.Err, ev.Kind)
		},
	})
	if err != nil {
		panic(err)
	}

	err = e.Do(context.Background(), func(ctx context.Context, attempt int) error {
		if attempt < 3 {
			return &retry.StatusError{StatusCode: http.StatusServiceUnavailable, RetryAfter: time.Millisecond}
		}
		fmt.Printf("attempt %d: order booked\n", attempt)
		return nil
	})
	fmt.Println("error:", err)
	fmt.Println("tokens left:", bucket.Available()) // 5 per throttling retry; the successful one got its 5 back
	// Output:
	// attempt 1: herdguard: partner answered 503 Service Unavailable (retry after 1ms); retrying (throttling)
	// attempt 2: herdguard: partner answered 503 Service Unavailable (retry after 1ms); retrying (throttling)
	// attempt 3: order booked
	// error: <nil>
	// tokens left: 495
}

// The generic Do returns the successful attempt's value.
func ExampleDo() {
	e, err := retry.New(retry.Config{TransientBase: time.Millisecond})
	if err != nil {
		panic(err)
	}
	bikes, err := retry.DoIdempotent(context.Background(), e, true, func(ctx context.Context, attempt int) (int, error) {
		if attempt == 1 {
			return 0, context.DeadlineExceeded // a slow first attempt: safe to repeat, the call is idempotent
		}
		return 7, nil
	})
	fmt.Println(bikes, err)
	// Output: 7 <nil>
}

// A Transport gives an http.Client retries: the partner answers 503 once,
// the client sees the 200.
func ExampleNewTransport() {
	attempts := 0
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts++
		fmt.Printf("partner: %s %s, attempt %s\n", r.Method, r.URL.Path, r.Header.Get(retry.DefaultAttemptHeader))
		if attempts == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "12 bikes")
	}))
	defer partner.Close()

	e, err := retry.New(retry.Config{TransientBase: time.Millisecond})
	if err != nil {
		panic(err)
	}
	t, err := retry.NewTransport(e, nil, retry.TransportOptions{})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: t, Timeout: 5 * time.Second}

	resp, err := client.Get(partner.URL + "/stations/nord-3/bikes")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output:
	// partner: GET /stations/nord-3/bikes, attempt 1
	// partner: GET /stations/nord-3/bikes, attempt 2
	// 200 OK 12 bikes
}

// A handler passes a refusal on as 503 with Retry-After instead of piling
// on: the bucket (capacity 14) pays for one retry, then refuses.
func ExampleRetryAfter() {
	bucket, err := local.NewTokenBucket(local.TokenBucketConfig{Capacity: 14})
	if err != nil {
		panic(err)
	}
	e, err := retry.New(retry.Config{
		MaxAttempts:   5,
		Idempotent:    true,
		Budgets:       []budget.Budget{bucket},
		TransientBase: 10 * time.Millisecond,
		Rand:          func() float64 { return 0.5 },
	})
	if err != nil {
		panic(err)
	}
	err = e.Do(context.Background(), func(context.Context, int) error {
		return &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
	})

	var gu *retry.GiveUpError
	if errors.As(err, &gu) && gu.Reason == retry.BudgetExhausted {
		fmt.Println("budget exhausted after", gu.Attempts, "attempts")
	}
	if d, ok := retry.RetryAfter(err); ok {
		secs := int(math.Ceil(d.Seconds()))
		fmt.Println("respond: 503, Retry-After:", strconv.Itoa(secs))
	}
	// Output:
	// budget exhausted after 2 attempts
	// respond: 503, Retry-After: 1
}
