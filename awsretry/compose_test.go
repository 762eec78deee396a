package awsretry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	sdkretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/awsretry"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/retry"
)

func mustExec(t *testing.T, cfg retry.Config) *retry.Executor {
	t.Helper()
	e, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestBaseOptionsHonouredOrRejected: a Base whose attempts differ from the
// Executor's, or that rate-limits on the client (adaptive mode), is a
// *herdguard.ConfigError naming Options.Base; the others are accepted.
func TestBaseOptionsHonouredOrRejected(t *testing.T) {
	four := func(o *sdkretry.StandardOptions) { o.MaxAttempts = 4 }
	for _, tc := range []struct {
		name     string
		attempts int
		base     aws.Retryer
		reject   string // in the reason; "" accepts
	}{
		{"nil Base", 4, nil, ""},
		{"standard, same attempts", 3, sdkretry.NewStandard(), ""},
		{"wrapped standard, same attempts", 4, sdkretry.AddWithErrorCodes(sdkretry.NewStandard(four), "Busy"), ""},
		{"standard, other attempts", 4, sdkretry.NewStandard(), "MaxAttempts() is 3"},
		{"AddWithMaxAttempts, other attempts", 3, sdkretry.AddWithMaxAttempts(sdkretry.NewStandard(), 5), "MaxAttempts() is 5"},
		{"adaptive mode", 3, sdkretry.NewAdaptiveMode(), "adaptive mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := awsretry.New(mustExec(t, retry.Config{MaxAttempts: tc.attempts}), awsretry.Options{Base: tc.base})
			if tc.reject == "" {
				if err != nil || r.MaxAttempts() != tc.attempts {
					t.Fatalf("New = %v, %v; want a retryer of %d attempts", r, err, tc.attempts)
				}
				return
			}
			var ce *herdguard.ConfigError
			if !errors.As(err, &ce) || ce.Field != "awsretry.Options.Base" || !strings.Contains(ce.Reason, tc.reject) {
				t.Fatalf("New = %v; want a ConfigError naming awsretry.Options.Base: %q", err, tc.reject)
			}
		})
	}
}

// TestAttemptsPrecedence: the Executor's MaxAttempts is the most attempts a
// call makes; the client's RetryMaxAttempts and retry.AddWithMaxAttempts
// may lower it, never raise it. DynamoDB's own default of 4 attempts is
// the Executor's to give (MaxAttempts: 4).
func TestAttemptsPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		exec       int
		client     int                           // dynamodb.Options.RetryMaxAttempts
		wrap       func(aws.Retryer) aws.Retryer // applied to the retryer, if set
		want       int
		exhaustion bool // the Executor ended the call (AttemptsExhausted)
	}{
		{"Executor's number", 4, 0, nil, 4, false},
		{"client's lower number", 4, 2, nil, 2, false},
		{"client's higher number is capped", 3, 5, nil, 3, true},
		{"AddWithMaxAttempts higher is capped", 3, 0, func(r aws.Retryer) aws.Retryer { return sdkretry.AddWithMaxAttempts(r, 6) }, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeDynamoDB(t, internal, internal, internal, internal, internal, internal)
			r, err := awsretry.New(mustExec(t, retry.Config{MaxAttempts: tc.exec, Budgets: []budget.Budget{}}), awsretry.Options{Base: fastBaseN(tc.exec)})
			if err != nil {
				t.Fatal(err)
			}
			var rr aws.Retryer = r
			if tc.wrap != nil {
				rr = tc.wrap(rr)
			}
			client := dynamodb.New(dynamodb.Options{
				Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
				BaseEndpoint: aws.String(fake.srv.URL), Retryer: rr, RetryMaxAttempts: tc.client,
			})
			f := &fixture{client: client}
			err = f.getItem(context.Background())
			if n := fake.requests(); n != tc.want {
				t.Errorf("%d attempts reached the service, want %d (%v)", n, tc.want, err)
			}
			var gu *retry.GiveUpError
			if got := errors.As(err, &gu) && gu.Reason == retry.AttemptsExhausted; got != tc.exhaustion {
				t.Errorf("err %v: the Executor's AttemptsExhausted %v, want %v", err, got, tc.exhaustion)
			}
		})
	}
}

// TestBudgetRefusalIsQuotaExceeded: code written for the SDK's retry quota
// sees a budget refusal as one, and herdguard's own checks still hold.
func TestBudgetRefusalIsQuotaExceeded(t *testing.T) {
	f := newFixture(t, retry.Config{}, fastBase(), internal, internal)
	f.budget.limit = 0
	err := f.getItem(context.Background())
	var q *ratelimit.QuotaExceededError
	var qv ratelimit.QuotaExceededError // the form the SDK's own quota returns
	var gu *retry.GiveUpError
	if !errors.As(err, &q) || !errors.As(err, &qv) || !errors.Is(err, budget.ErrExhausted) || !errors.As(err, &gu) || gu.Reason != retry.BudgetExhausted {
		t.Fatalf("err %v; want a ratelimit.QuotaExceededError (value and pointer) matching budget.ErrExhausted, a BudgetExhausted give-up", err)
	}
	if _, ok := retry.RetryAfter(err); !ok {
		t.Errorf("retry.RetryAfter(%v) found no hint", err)
	}
	// A breaker rejection is not a quota refusal.
	br, _ := breaker.New("partner", breaker.Settings{})
	br.Override(breaker.ForcedOpen)
	f = newFixture(t, retry.Config{Breaker: br}, fastBase())
	if err := f.getItem(context.Background()); !errors.Is(err, breaker.ErrOpen) || errors.As(err, &q) {
		t.Errorf("breaker rejection %v; want ErrOpen and no QuotaExceededError", err)
	}
}

// TestThrottlingDoesNotOpenBreaker: a storm of throttling is retried within
// the budgets and does not open a breaker that opens after two failures,
// unless ThrottlingOpensBreaker says so.
func TestThrottlingDoesNotOpenBreaker(t *testing.T) {
	for _, opens := range []bool{false, true} {
		br, err := breaker.New("partner", breaker.Settings{ConsecutiveFailures: 2})
		if err != nil {
			t.Fatal(err)
		}
		fake := newFakeDynamoDB(t, throttling, throttling, throttling, throttling, throttling, throttling)
		b := &countingBudget{limit: -1}
		exec := mustExec(t, retry.Config{Breaker: br, Budgets: []budget.Budget{b}})
		r, err := awsretry.New(exec, awsretry.Options{Base: fastBase(), ThrottlingOpensBreaker: opens})
		if err != nil {
			t.Fatal(err)
		}
		f := &fixture{client: newClient(fake.srv.URL, r)}
		for range 2 {
			_ = f.getItem(context.Background())
		}
		_, _, kinds, _ := b.snapshot()
		if opens {
			if st := br.State(time.Now()); st != breaker.Open {
				t.Errorf("ThrottlingOpensBreaker: breaker %v; want Open after the throttled attempts", st)
			}
			continue
		}
		if st := br.State(time.Now()); st != breaker.Closed || fake.requests() != 6 {
			t.Errorf("breaker %v after %d throttled attempts; want Closed and 6 attempts", st, fake.requests())
		}
		if len(kinds) != 4 || kinds[0] != budget.Throttling {
			t.Errorf("retries asked as %v; want 4 throttling retries", kinds)
		}
		if c := br.Counts(); c.Failures != 0 || c.Excluded != 6 {
			t.Errorf("breaker counts %+v; want 6 excluded, no failure", c)
		}
	}
}

// TestAddWithMaxBackoffDelayKeepsTheHint: retry.AddWithMaxBackoffDelay
// around the retryer replaces its RetryDelay; the server's Retry-After,
// which the SDK alone ignores, is still waited for.
func TestAddWithMaxBackoffDelayKeepsTheHint(t *testing.T) {
	hinted := answer{status: 503, code: "ServiceUnavailable", header: map[string]string{"Retry-After": "1"}}
	fake := newFakeDynamoDB(t, hinted)
	r, err := awsretry.New(mustExec(t, retry.Config{Budgets: []budget.Budget{}}), awsretry.Options{Base: fastBase()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{client: newClient(fake.srv.URL, sdkretry.AddWithMaxBackoffDelay(r, time.Millisecond))}
	if err := f.getItem(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.arrivals) != 2 {
		t.Fatalf("%d requests, want 2", len(fake.arrivals))
	}
	if gap := fake.arrivals[1].Sub(fake.arrivals[0]); gap < time.Second {
		t.Errorf("the retry came %v after a Retry-After: 1 answer; want at least 1s", gap)
	}
}

// TestBaseRetryQuotaHonoured: a Base's retry quota gates retries as well
// as the budgets: with room for one retry token, a second concurrent retry
// is refused with the SDK's ratelimit.QuotaExceededError and costs the
// budgets nothing, and a token given back (the retry succeeded) makes
// room again.
func TestBaseRetryQuotaHonoured(t *testing.T) {
	base := sdkretry.NewStandard(func(o *sdkretry.StandardOptions) {
		o.MaxAttempts = 3
		o.RateLimiter = ratelimit.NewTokenRateLimit(10)
		o.RetryCost = 10
	})
	var grants int
	exec := mustExec(t, retry.Config{MaxAttempts: 3, Budgets: []budget.Budget{},
		OnRetry: func(retry.RetryEvent) { grants++ }})
	r, err := awsretry.New(exec, awsretry.Options{Base: base})
	if err != nil {
		t.Fatal(err)
	}
	opErr := errors.New("connection reset by peer")
	ctx := context.Background()
	first, err := r.GetRetryToken(ctx, opErr)
	if err != nil {
		t.Fatalf("first retry: %v; want a token (the quota holds one)", err)
	}
	_, err = r.GetRetryToken(ctx, opErr)
	var q ratelimit.QuotaExceededError
	if !errors.As(err, &q) {
		t.Fatalf("second retry with the quota spent: %v; want the SDK's ratelimit.QuotaExceededError", err)
	}
	if grants != 1 {
		t.Errorf("the budgets saw %d retries; want 1 (Base's refusal comes first and costs them nothing)", grants)
	}
	if err := first(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetRetryToken(ctx, opErr); err != nil {
		t.Fatalf("retry after the token came back: %v", err)
	}
}
