package awsretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/herdguard/herdguard/awsretry"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/retry"
)

// answer is one scripted DynamoDB response.
type answer struct {
	status int
	code   string // the __type's short name; empty for a 200 {}
	header map[string]string
}

var (
	ok             = answer{status: 200}
	throttling     = answer{status: 400, code: "ThrottlingException"}
	throughput     = answer{status: 400, code: "ProvisionedThroughputExceededException"}
	internal       = answer{status: 500, code: "InternalServerError"}
	validation     = answer{status: 400, code: "ValidationException"}
	conditionCheck = answer{status: 400, code: "ConditionalCheckFailedException"}
	unavailable    = answer{status: 503, code: "ServiceUnavailable"}
	notImplemented = answer{status: 501, code: "NotImplemented"}
	tooMany        = answer{status: 429}
)

// fakeDynamoDB answers requests from a script, then 200 {} once it runs
// out, and records when each request arrived and its X-Amz-Date.
type fakeDynamoDB struct {
	srv *httptest.Server

	mu       sync.Mutex
	script   []answer
	arrivals []time.Time
	amzDates []string
}

func newFakeDynamoDB(t *testing.T, script ...answer) *fakeDynamoDB {
	f := &fakeDynamoDB{script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.arrivals = append(f.arrivals, time.Now())
		f.amzDates = append(f.amzDates, r.Header.Get("X-Amz-Date"))
		a := ok
		if len(f.script) > 0 {
			a, f.script = f.script[0], f.script[1:]
		}
		f.mu.Unlock()
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(a.status)
		if a.code == "" {
			fmt.Fprint(w, "{}")
			return
		}
		fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"scripted"}`, a.code)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeDynamoDB) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.arrivals)
}

// countingBudget is a budget that counts what it is told, grants up to
// limit retries (forever when limit is negative), and records the kinds it
// was asked for and the outcomes of its grants.
type countingBudget struct {
	mu        sync.Mutex
	limit     int
	granted   int
	requests  int
	successes int
	kinds     []budget.Kind
	outcomes  []budget.Outcome
}

func (b *countingBudget) RecordRequest(time.Time) { b.mu.Lock(); b.requests++; b.mu.Unlock() }
func (b *countingBudget) RecordSuccess(time.Time) { b.mu.Lock(); b.successes++; b.mu.Unlock() }
func (b *countingBudget) AcquireRetry(_ context.Context, _ time.Time, k budget.Kind) (budget.Release, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kinds = append(b.kinds, k)
	if b.limit >= 0 && b.granted >= b.limit {
		return nil, &budget.ExhaustedError{Budget: "test", RetryAfter: 4 * time.Second}
	}
	b.granted++
	return func(o budget.Outcome) {
		b.mu.Lock()
		b.outcomes = append(b.outcomes, o)
		b.mu.Unlock()
	}, nil
}

func (b *countingBudget) snapshot() (requests, successes int, kinds []budget.Kind, outcomes []budget.Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests, b.successes, slices.Clone(b.kinds), slices.Clone(b.outcomes)
}

// fastBase is the SDK's standard classification with a 1 ms backoff, so
// that tests of throttling do not wait the SDK's second.
func fastBase() aws.Retryer { return fastBaseN(3) }

// fastBaseN is fastBase with n attempts.
func fastBaseN(n int) aws.Retryer {
	return sdkretry.NewStandard(func(o *sdkretry.StandardOptions) {
		o.MaxAttempts = n
		o.Backoff = sdkretry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

type fixture struct {
	fake    *fakeDynamoDB
	budget  *countingBudget
	breaker *breaker.Breaker
	exec    *retry.Executor
	client  *dynamodb.Client
	retries []retry.RetryEvent
	giveUps []*retry.GiveUpError
}

func newFixture(t *testing.T, cfg retry.Config, base aws.Retryer, script ...answer) *fixture {
	t.Helper()
	f := &fixture{fake: newFakeDynamoDB(t, script...), budget: &countingBudget{limit: -1}}
	var err error
	if cfg.Breaker == nil {
		if f.breaker, err = breaker.New("partner", breaker.Settings{}); err != nil {
			t.Fatal(err)
		}
		cfg.Breaker = f.breaker
	} else {
		f.breaker = cfg.Breaker
	}
	if cfg.Budgets == nil {
		cfg.Budgets = []budget.Budget{f.budget}
	}
	var mu sync.Mutex
	cfg.OnRetry = func(ev retry.RetryEvent) { mu.Lock(); f.retries = append(f.retries, ev); mu.Unlock() }
	cfg.OnGiveUp = func(ev *retry.GiveUpError) { mu.Lock(); f.giveUps = append(f.giveUps, ev); mu.Unlock() }
	if f.exec, err = retry.New(cfg); err != nil {
		t.Fatal(err)
	}
	r, err := awsretry.New(f.exec, awsretry.Options{Base: base})
	if err != nil {
		t.Fatal(err)
	}
	f.client = newClient(f.fake.srv.URL, r)
	return f
}

func newClient(endpoint string, r aws.Retryer) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("k", "s", ""),
		BaseEndpoint: aws.String(endpoint),
		Retryer:      r,
	})
}

func (f *fixture) getItem(ctx context.Context) error {
	_, err := f.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("t"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
	})
	return err
}

func TestNewRejectsNilExecutor(t *testing.T) {
	if _, err := awsretry.New(nil, awsretry.Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestClassification maps the SDK's answer to each DynamoDB error onto
// herdguard's: whether it is retried, as which budget kind, and how the
// breaker counts the failed attempt.
func TestClassification(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    answer
		retried  bool
		kind     budget.Kind
		failures int64 // breaker failures (the retry's success adds a success; throttling is excluded)
	}{
		{"ThrottlingException is throttling", throttling, true, budget.Throttling, 0},
		{"ProvisionedThroughputExceededException is throttling", throughput, true, budget.Throttling, 0},
		{"unmodeled 429 is throttling", tooMany, true, budget.Throttling, 0},
		{"HTTP 500 is transient", internal, true, budget.Transient, 1},
		{"HTTP 503 is transient", unavailable, true, budget.Transient, 1},
		{"HTTP 501 is not retried, a failure", notImplemented, false, 0, 1},
		{"ValidationException is not retried, the service is healthy", validation, false, 0, 0},
		{"ConditionalCheckFailedException is not retried, the service is healthy", conditionCheck, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, retry.Config{}, fastBase(), tc.first)
			err := f.getItem(context.Background())
			requests, successes, kinds, outcomes := f.budget.snapshot()
			if requests != 1 {
				t.Errorf("%d requests recorded for one call, want 1", requests)
			}
			c := f.breaker.Counts()
			if c.Failures != tc.failures {
				t.Errorf("breaker failures %d, want %d (counts %+v)", c.Failures, tc.failures, c)
			}
			if !tc.retried {
				if err == nil || f.fake.requests() != 1 || len(kinds) != 0 {
					t.Errorf("err %v, %d requests, kinds %v; want the error, 1 request, no retry asked", err, f.fake.requests(), kinds)
				}
				if c.Successes != 1-tc.failures {
					t.Errorf("breaker successes %d, want %d", c.Successes, 1-tc.failures)
				}
				return
			}
			if err != nil {
				t.Fatalf("the retry should have succeeded: %v", err)
			}
			if f.fake.requests() != 2 || !slices.Equal(kinds, []budget.Kind{tc.kind}) || !slices.Equal(outcomes, []budget.Outcome{budget.RetrySucceeded}) {
				t.Errorf("%d requests, kinds %v, outcomes %v; want 2, [%v], [succeeded]", f.fake.requests(), kinds, outcomes, tc.kind)
			}
			if successes != 0 || c.Successes != 1 {
				t.Errorf("first-attempt successes %d, breaker successes %d; want 0 and 1", successes, c.Successes)
			}
			if len(f.retries) != 1 || f.retries[0].Attempt != 1 || f.retries[0].Kind != tc.kind {
				t.Errorf("OnRetry events %+v", f.retries)
			}
		})
	}
}

// TestOneRequestPerCall checks that the budgets see one request per SDK
// call, however many attempts it makes: the SDK's attempt number is read
// from the attempt's context.
func TestOneRequestPerCall(t *testing.T) {
	f := newFixture(t, retry.Config{MaxAttempts: 3}, fastBase(), ok, internal, internal, ok, internal, internal, internal, ok)
	ctx := context.Background()
	errs := make([]error, 4)
	for i := range errs {
		errs[i] = f.getItem(ctx)
	}
	// Calls: ok; 2 failures then ok; 3 failures (MaxAttempts); ok.
	if errs[0] != nil || errs[1] != nil || errs[2] == nil || errs[3] != nil {
		t.Fatalf("errors %v; want only the third call to fail", errs)
	}
	requests, successes, kinds, outcomes := f.budget.snapshot()
	if requests != 4 || successes != 2 {
		t.Errorf("requests %d, first-attempt successes %d; want 4 and 2", requests, successes)
	}
	want := []budget.Outcome{budget.RetryFailed, budget.RetrySucceeded, budget.RetryFailed, budget.RetryFailed}
	if len(kinds) != 4 || !slices.Equal(outcomes, want) {
		t.Errorf("%d retries asked, outcomes %v; want 4 and %v", len(kinds), outcomes, want)
	}
	if f.fake.requests() != 8 {
		t.Errorf("%d requests reached the service, want 8", f.fake.requests())
	}
	var me *sdkretry.MaxAttemptsError
	if !errors.As(errs[2], &me) || me.Attempt != 3 {
		t.Errorf("third call: %v; want the SDK's MaxAttemptsError after 3 attempts", errs[2])
	}
}

func TestBreakerOpenFailsFast(t *testing.T) {
	br, err := breaker.New("partner", breaker.Settings{ConsecutiveFailures: 2})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, retry.Config{Breaker: br, MaxAttempts: 2}, fastBaseN(2), internal, internal)
	ctx := context.Background()
	// Two failed attempts trip the breaker; the SDK returns the last one.
	if err := f.getItem(ctx); err == nil || errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("first call: %v; want the service's error", err)
	}
	before := f.fake.requests()
	err = f.getItem(ctx)
	if f.fake.requests() != before {
		t.Errorf("%d requests reached the service while the breaker was open", f.fake.requests()-before)
	}
	var oe *breaker.OpenError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &oe) {
		t.Fatalf("err %v; want one matching breaker.ErrOpen", err)
	}
	if d, ok := retry.RetryAfter(err); !ok || d != oe.RetryAfter || d <= 0 {
		t.Errorf("retry.RetryAfter(err) = %v, %v; want the breaker's %v", d, ok, oe.RetryAfter)
	}
	var opErr *smithy.OperationError
	if !errors.As(err, &opErr) || opErr.Operation() != "GetItem" {
		t.Errorf("err %v is not the SDK's OperationError for GetItem", err)
	}
	if requests, _, _, _ := f.budget.snapshot(); requests != 1 {
		t.Errorf("%d requests recorded; the rejected call must not count", requests)
	}
	if n := len(f.giveUps); n == 0 || f.giveUps[n-1].Reason != retry.BreakerOpen {
		t.Errorf("OnGiveUp events %+v; want a BreakerOpen last", f.giveUps)
	}
}

func TestBudgetRefusal(t *testing.T) {
	f := newFixture(t, retry.Config{}, fastBase(), throttling, throttling, throttling)
	f.budget.limit = 1
	err := f.getItem(context.Background())
	if f.fake.requests() != 2 {
		t.Errorf("%d requests reached the service; want 2 (one retry granted, the second refused)", f.fake.requests())
	}
	var ex *budget.ExhaustedError
	if !errors.Is(err, budget.ErrExhausted) || !errors.As(err, &ex) {
		t.Fatalf("err %v; want one matching budget.ErrExhausted", err)
	}
	var te *types.ThrottlingException
	var gu *retry.GiveUpError
	if !errors.As(err, &te) || !errors.As(err, &gu) || gu.Reason != retry.BudgetExhausted || !errors.As(gu.Err, &te) || gu.Attempts != 2 {
		t.Errorf("err %v (give-up %+v); want the service's ThrottlingException inside a budget refusal, after 2 attempts", err, gu)
	}
	if d, ok := retry.RetryAfter(err); !ok || d != 4*time.Second {
		t.Errorf("retry.RetryAfter(err) = %v, %v; want the budget's 4s", d, ok)
	}
}

func TestServerHintIsALowerBound(t *testing.T) {
	hinted := answer{status: 503, code: "ServiceUnavailable", header: map[string]string{"x-amz-retry-after": "300"}}
	f := newFixture(t, retry.Config{}, fastBase(), hinted)
	if err := f.getItem(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.retries) != 1 || f.retries[0].RetryAfter != 300*time.Millisecond || f.retries[0].Delay < 300*time.Millisecond {
		t.Fatalf("OnRetry events %+v; want one with RetryAfter 300ms and a Delay at least that", f.retries)
	}
	f.fake.mu.Lock()
	gap := f.fake.arrivals[1].Sub(f.fake.arrivals[0])
	f.fake.mu.Unlock()
	if gap < 300*time.Millisecond {
		t.Errorf("the retry came %v after the hinted answer, before the 300ms it asked for", gap)
	}

	t.Run("Retry-After, which the SDK alone ignores", func(t *testing.T) {
		hinted := answer{status: 503, code: "ServiceUnavailable", header: map[string]string{"Retry-After": "1"}}
		f := newFixture(t, retry.Config{}, fastBase(), hinted)
		if err := f.getItem(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(f.retries) != 1 || f.retries[0].RetryAfter != time.Second || f.retries[0].Delay < time.Second {
			t.Fatalf("OnRetry events %+v; want one with RetryAfter 1s", f.retries)
		}
	})

	t.Run("above MaxRetryAfter gives up at once", func(t *testing.T) {
		hinted := answer{status: 503, code: "ServiceUnavailable", header: map[string]string{"x-amz-retry-after": "5000"}}
		f := newFixture(t, retry.Config{MaxRetryAfter: time.Second}, fastBase(), hinted)
		err := f.getItem(context.Background())
		var gu *retry.GiveUpError
		if !errors.As(err, &gu) || gu.Reason != retry.RetryAfterTooLong || f.fake.requests() != 1 {
			t.Fatalf("err %v after %d requests; want a RetryAfterTooLong give-up after 1", err, f.fake.requests())
		}
		if _, _, kinds, _ := f.budget.snapshot(); len(kinds) != 0 {
			t.Errorf("the budget was asked %d times", len(kinds))
		}
	})
}

func TestWaitPastTheDeadlineSpendsNothing(t *testing.T) {
	hinted := answer{status: 503, code: "ServiceUnavailable", header: map[string]string{"x-amz-retry-after": "400"}}
	f := newFixture(t, retry.Config{DeadlineMargin: 100 * time.Millisecond}, fastBase(), hinted)
	ctx, cancel := context.WithTimeout(context.Background(), 450*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := f.getItem(ctx)
	var gu *retry.GiveUpError
	if !errors.As(err, &gu) || gu.Reason != retry.DeadlineTooClose {
		t.Fatalf("err %v; want a DeadlineTooClose give-up", err)
	}
	// The SDK sleeps only after a granted retry token; none was granted,
	// so nothing was waited for. (How long the call took is the machine's
	// business: printed, not asserted.)
	if len(f.retries) != 0 {
		t.Errorf("OnRetry events %+v; want none: the retry does not fit the deadline", f.retries)
	}
	t.Logf("gave up after %v (deadline 450ms, hint 400ms + margin 100ms)", time.Since(start).Round(time.Millisecond))
	if _, _, kinds, _ := f.budget.snapshot(); len(kinds) != 0 || f.fake.requests() != 1 {
		t.Errorf("budget asked %d times, %d requests; want 0 and 1", len(kinds), f.fake.requests())
	}
}

// TestClockSkewCorrectionKept: a signature error from a server whose clock
// is 10 minutes ahead is retried by the SDK (its clock skew correction),
// signed with the server's time.
func TestClockSkewCorrectionKept(t *testing.T) {
	ahead := time.Now().Add(10 * time.Minute).UTC()
	skewed := answer{status: 400, code: "InvalidSignatureException", header: map[string]string{"Date": ahead.Format(http.TimeFormat)}}
	f := newFixture(t, retry.Config{}, fastBase(), skewed)
	if err := f.getItem(context.Background()); err != nil {
		t.Fatalf("the skew-corrected retry failed: %v", err)
	}
	if _, _, kinds, _ := f.budget.snapshot(); !slices.Equal(kinds, []budget.Kind{budget.Transient}) {
		t.Errorf("retries asked %v, want one transient", kinds)
	}
	f.fake.mu.Lock()
	defer f.fake.mu.Unlock()
	signed, err := time.Parse("20060102T150405Z", f.fake.amzDates[1])
	if err != nil || signed.Sub(ahead).Abs() > time.Minute {
		t.Errorf("the retry was signed at %v (%v); want about the server's %v", signed, err, ahead)
	}
}

// TestDefaultBackoffIsTheSDKs: with the zero Options, the wait before a
// transient retry is the SDK's full jitter over 50 ms.
func TestDefaultBackoffIsTheSDKs(t *testing.T) {
	f := newFixture(t, retry.Config{}, nil, internal)
	if err := f.getItem(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.retries) != 1 || f.retries[0].Delay < 0 || f.retries[0].Delay > 50*time.Millisecond {
		t.Errorf("OnRetry events %+v; want one wait in [0, 50ms]", f.retries)
	}
}

// TestDynamoClientNeverUsesIt: herdguard's own DynamoDB client ignores a
// Retryer in the aws.Config it is given, so the stores never depend on the
// budgets and the breaker they serve: with the breaker open, a call through
// dynamo.NewClient still reaches the table, and a throttled one is still
// retried by the client's own retryer without asking the budgets.
func TestDynamoClientNeverUsesIt(t *testing.T) {
	fake := newFakeDynamoDB(t, throttling)
	b := &countingBudget{limit: -1}
	br, err := breaker.New("partner", breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	br.Override(breaker.ForcedOpen)
	exec, err := retry.New(retry.Config{Budgets: []budget.Budget{b}, Breaker: br})
	if err != nil {
		t.Fatal(err)
	}
	r, err := awsretry.New(exec, awsretry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := aws.Config{Region: "us-east-1", Retryer: func() aws.Retryer { return r }}
	ctx := context.Background()
	client, err := dynamo.NewClient(ctx, dynamo.ClientOptions{
		Config:      &cfg,
		Endpoint:    fake.srv.URL,
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	if client.Options().Retryer == aws.Retryer(r) {
		t.Fatal("dynamo.NewClient kept the awsretry retryer of the aws.Config")
	}
	_, err = client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("t"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
	})
	if err != nil {
		t.Fatalf("GetItem through dynamo.NewClient with the partner's breaker open: %v", err)
	}
	if fake.requests() != 2 {
		t.Errorf("%d requests; want 2 (the throttled one and the client's own retry)", fake.requests())
	}
	if requests, _, kinds, _ := b.snapshot(); requests != 0 || len(kinds) != 0 {
		t.Errorf("the partner's budget saw %d requests and %d retries from herdguard's own client", requests, len(kinds))
	}
}

// stepBase is the SDK's standard classification whose backoff grows with
// every call of RetryDelay: 1 ms, then 300 ms.
type stepBase struct {
	*sdkretry.Standard
	calls int
}

func (b *stepBase) RetryDelay(int, error) (time.Duration, error) {
	b.calls++
	if b.calls == 1 {
		return time.Millisecond, nil
	}
	return 300 * time.Millisecond, nil
}

// TestRetryDelayIsTheCheckedWait: the SDK sleeps the very wait that
// GetRetryToken checked against the deadline when it granted the retry, not
// a second draw of the backoff.
func TestRetryDelayIsTheCheckedWait(t *testing.T) {
	base := &stepBase{Standard: sdkretry.NewStandard()}
	f := newFixture(t, retry.Config{}, base, internal)
	if err := f.getItem(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.fake.mu.Lock()
	gap := f.fake.arrivals[1].Sub(f.fake.arrivals[0])
	f.fake.mu.Unlock()
	if base.calls != 1 || len(f.retries) != 1 || f.retries[0].Delay != time.Millisecond || gap >= 250*time.Millisecond {
		t.Errorf("backoff drawn %d times, OnRetry %+v, retry sent %v later; want one draw of 1ms, slept", base.calls, f.retries, gap)
	}
}
