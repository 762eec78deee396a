package sim

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
)

// scripted answers calls with the given statuses in turn (the last one
// repeats) and counts attempts.
type scripted struct {
	statuses []int
	header   http.Header
	attempts []int
}

func (s *scripted) send(_ context.Context, n int) (*http.Response, error) {
	s.attempts = append(s.attempts, n)
	i := min(len(s.attempts)-1, len(s.statuses)-1)
	return &http.Response{StatusCode: s.statuses[i], Header: s.header.Clone()}, nil
}

func newSDKTestCaller(t *testing.T, mut func(*Config)) *sdkCaller {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	clock := newManualClock()
	st, err := newSDK(context.Background(), Deps{Config: cfg, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.NewEnv(EnvSpec{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*sdkCaller)
}

func TestSDKRetryerCosts(t *testing.T) {
	c := newSDKTestCaller(t, nil)
	if got := c.bucket.Remaining(); got != 500 {
		t.Fatalf("bucket starts at %d, want 500", got)
	}
	ctx := context.Background()

	// 503 is transient for the SDK: each retry costs 14; 3 attempts.
	s := &scripted{statuses: []int{503}}
	out, err := c.Call(ctx, s.send)
	var mae *awsretry.MaxAttemptsError
	if out != FailedPartner || !errors.As(err, &mae) || len(s.attempts) != 3 {
		t.Fatalf("always 503: %v %v after %v attempts", out, err, s.attempts)
	}
	if got := c.bucket.Remaining(); got != 500-2*14 {
		t.Errorf("after two transient retries: %d tokens, want %d", got, 500-2*14)
	}

	// An unmodeled 429 is throttling: a retry costs 5, refunded on success.
	s = &scripted{statuses: []int{429, 200}}
	if out, err := c.Call(ctx, s.send); out != Succeeded || err != nil || len(s.attempts) != 2 {
		t.Fatalf("429 then 200: %v %v after %v attempts", out, err, s.attempts)
	}
	if got := c.bucket.Remaining(); got != 472 {
		t.Errorf("successful retry: %d tokens, want its cost refunded (472)", got)
	}

	// A first-attempt success adds 1.
	s = &scripted{statuses: []int{200}}
	if out, _ := c.Call(ctx, s.send); out != Succeeded {
		t.Fatal(out)
	}
	if got := c.bucket.Remaining(); got != 473 {
		t.Errorf("first-attempt success: %d tokens, want 473", got)
	}

	// 400 is not retryable.
	s = &scripted{statuses: []int{400}}
	if out, _ := c.Call(ctx, s.send); out != FailedPartner || len(s.attempts) != 1 {
		t.Errorf("400: %v after %v attempts, want FailedPartner after 1", out, s.attempts)
	}
}

// An empty bucket stops retries: the seed article's "capacity 14, always
// 503" case gives two attempts here too (the SDK refuses once fewer than 14
// tokens are left).
func TestSDKRetryerQuotaExhausted(t *testing.T) {
	c := newSDKTestCaller(t, func(c *Config) { c.BucketCapacity = 14; c.Attempts = 5 })
	s := &scripted{statuses: []int{503}}
	out, err := c.Call(context.Background(), s.send)
	var qe ratelimit.QuotaExceededError
	if out != FailedBudget || !errors.As(err, &qe) || len(s.attempts) != 2 {
		t.Errorf("got %v %v after %v attempts, want FailedBudget (QuotaExceededError) after 2", out, err, s.attempts)
	}
	if want := []int{1, 2}; len(s.attempts) == 2 && (s.attempts[0] != want[0] || s.attempts[1] != want[1]) {
		t.Errorf("attempt numbers %v, want %v", s.attempts, want)
	}
}

// x-amz-retry-after is honoured the way the SDK middleware does it: at
// least the backoff, at most the backoff plus 5 s.
func TestSDKRetryAfterClamp(t *testing.T) {
	resp := func(v string) error {
		h := http.Header{}
		if v != "" {
			h.Set("X-Amz-Retry-After", v)
		}
		return sdkError(&http.Response{StatusCode: 503, Header: h}, nil)
	}
	for _, tc := range []struct {
		backoff time.Duration
		header  string
		want    time.Duration
	}{
		{100 * time.Millisecond, "", 100 * time.Millisecond},
		{100 * time.Millisecond, "1000", time.Second},
		{100 * time.Millisecond, "50", 100 * time.Millisecond},
		{100 * time.Millisecond, "60000", 5100 * time.Millisecond},
		{100 * time.Millisecond, "-5", 100 * time.Millisecond},
		{100 * time.Millisecond, "soon", 100 * time.Millisecond},
	} {
		if got := sdkRetryAfterClamp(tc.backoff, resp(tc.header)); got != tc.want {
			t.Errorf("backoff %v, header %q: %v, want %v", tc.backoff, tc.header, got, tc.want)
		}
	}
	if got := sdkRetryAfterClamp(time.Second, errors.New("dial")); got != time.Second {
		t.Errorf("non-HTTP error: %v", got)
	}
}

// The call waits (on the simulation's clock) for the partner's
// x-amz-retry-after before the retry, and ignores the standard Retry-After
// as the SDK does.
func TestSDKCallWaitsRetryAfter(t *testing.T) {
	c := newSDKTestCaller(t, nil)
	clock := c.clock.(*manualClock)
	s := &scripted{statuses: []int{503, 200}, header: http.Header{"X-Amz-Retry-After": {"2000"}, "Retry-After": {"9"}}}
	if out, err := c.Call(context.Background(), s.send); out != Succeeded || err != nil {
		t.Fatal(out, err)
	}
	if slept := slept(clock); len(slept) != 1 || slept[0] < 2*time.Second || slept[0] > 2050*time.Millisecond {
		t.Errorf("slept %v, want one wait in [2s, 2.05s] (hint, at least the 50 ms transient backoff)", slept)
	}
}

func TestSDKCallCanceled(t *testing.T) {
	c := newSDKTestCaller(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	s := &scripted{statuses: []int{503}}
	send := func(ctx context.Context, n int) (*http.Response, error) {
		cancel()
		return s.send(ctx, n)
	}
	if out, _ := c.Call(ctx, send); out != FailedOther || len(s.attempts) != 1 {
		t.Errorf("canceled: %v after %v attempts, want FailedOther after 1", out, s.attempts)
	}
}
