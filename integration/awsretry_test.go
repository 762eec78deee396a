package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	sdkretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/awsretry"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/dynamo"
	"github.com/herdguard/herdguard/integration/internal/faultproxy"
	"github.com/herdguard/herdguard/internal/fakeclock"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// These tests put a real SDK client (service/dynamodb) behind an
// awsretry retryer: its partner is an application table in DynamoDB Local,
// reached through the fault proxy, which injects throttling and HTTP 500s
// and counts every request that reaches it. The retry budgets and the
// breaker keep their state in a herdguard table reached directly, through
// dynamo.NewClient, as in production.

// awsSDKFixture is the application's SDK client through the proxy, over an
// Executor of the caller's making.
type awsSDKFixture struct {
	proxy  *faultproxy.Proxy
	client *dynamodb.Client
	table  string

	mu      sync.Mutex
	retries []retry.RetryEvent
}

func newAWSSDKFixture(t *testing.T) *awsSDKFixture {
	t.Helper()
	requireDynamoDB(t)
	p, err := faultproxy.New(dynamoEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &awsSDKFixture{proxy: p, table: newTable(t)}
}

// useConfig builds an Executor from cfg, with hooks that record what it
// reports, and the SDK client over it. The SDK's backoff is 1 ms, so that
// throttling retries do not wait its second; the classification is the
// SDK's.
func (f *awsSDKFixture) useConfig(t *testing.T, cfg retry.Config) {
	t.Helper()
	cfg.OnRetry = func(ev retry.RetryEvent) { f.mu.Lock(); f.retries = append(f.retries, ev); f.mu.Unlock() }
	exec, err := retry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := awsretry.New(exec, awsretry.Options{Base: sdkretry.NewStandard(func(o *sdkretry.StandardOptions) {
		o.MaxAttempts = exec.MaxAttempts()
		o.Backoff = sdkretry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		o.RateLimiter = ratelimit.None // the budgets alone decide (a Base's quota would be honoured too)
	})})
	if err != nil {
		t.Fatal(err)
	}
	f.client = dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
		BaseEndpoint: aws.String(f.proxy.URL()),
		Retryer:      r,
	})
}

func (f *awsSDKFixture) put(ctx context.Context, i int) error {
	_, err := f.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(f.table),
		Item: map[string]types.AttributeValue{
			"pk":    &types.AttributeValueMemberS{Value: "app#" + strings.Repeat("x", i%7)},
			"count": &types.AttributeValueMemberN{Value: "1"},
		},
	})
	return err
}

// calls makes n calls one after the other and returns their errors and the
// requests that reached the proxy meanwhile.
func (f *awsSDKFixture) calls(t *testing.T, n int) (errs []error, requests int64) {
	t.Helper()
	before := f.proxy.Stats().Requests
	for i := 0; i < n; i++ {
		errs = append(errs, f.put(callContext(t), i))
	}
	return errs, f.proxy.Stats().Requests - before
}

func (f *awsSDKFixture) retryEvents() []retry.RetryEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]retry.RetryEvent(nil), f.retries...)
}

// newFleetBudgets returns a local ratio (counted) and a Global over the
// herdguard table, reached through dynamo.NewClient without the proxy.
func newFleetBudgets(t *testing.T, name string, localMin, globalFloor int, globalRatio float64, now func() time.Time) (*relCounting, *budget.Global) {
	t.Helper()
	store, err := dynamo.NewBudgetStore(relStoreClient(t, dynamoEndpoint), newTable(t), dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lr, err := local.NewRatio(local.RatioConfig{Ratio: 0.1, Window: 10 * time.Second, MinRetries: localMin})
	if err != nil {
		t.Fatal(err)
	}
	g, err := budget.NewGlobal(store, name, budget.GlobalConfig{Ratio: globalRatio, Window: 10 * time.Second, Floor: globalFloor,
		StoreTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &relCounting{b: lr}, g
}

// TestAWSRetryerDrawsFromTheBudgets: an SDK client retries throttling and
// HTTP 500s exactly as far as the budgets allow, and every retry they grant
// is one request at the proxy, every refusal none.
func TestAWSRetryerDrawsFromTheBudgets(t *testing.T) {
	t.Run("the local ratio binds", func(t *testing.T) {
		f := newAWSSDKFixture(t)
		clock := fakeclock.New(time.Now()) // never moved: the SDK sleeps on its own
		// Local: at most max(3, 10% of requests) retries per window; the
		// fleet's allows more (floor 10).
		lr, global := newFleetBudgets(t, "awsretry-local", 3, 10, 0.1, clock.Now)
		f.useConfig(t, retry.Config{MaxAttempts: 3, Budgets: []budget.Budget{lr, global}, Clock: clock})

		// Healthy: one request per call, no retry.
		errs, requests := f.calls(t, 10)
		if err := errors.Join(errs...); err != nil || requests != 10 || len(f.retryEvents()) != 0 {
			t.Fatalf("healthy: %d requests for 10 calls, %d retries, errors %v", requests, len(f.retryEvents()), err)
		}

		// Throttled on the first attempt of each call: the retry is granted
		// as throttling and succeeds. 12 requests so far: the local ratio
		// allows max(3, 1.2) = 3 retries in the window.
		f.proxy.Set(faultproxy.Fault{Kind: faultproxy.Throttling, Attempts: 1})
		errs, requests = f.calls(t, 2)
		if err := errors.Join(errs...); err != nil || requests != 4 {
			t.Fatalf("throttled first attempts: %d requests for 2 calls, errors %v; want 4 and none", requests, err)
		}
		for _, ev := range f.retryEvents() {
			if ev.Kind != budget.Throttling {
				t.Errorf("a retry after ThrottlingException was charged as %v", ev.Kind)
			}
		}

		// HTTP 500 on every attempt. Call 1: the third retry of the window is
		// granted, the fourth refused by the local ratio (2 requests). Call
		// 2: refused at once (1 request).
		f.proxy.Set(faultproxy.Fault{Kind: faultproxy.InternalError})
		errs, requests = f.calls(t, 2)
		f.proxy.Set(faultproxy.Fault{})
		if requests != 3 {
			t.Errorf("HTTP 500s: %d requests for 2 calls, want 3 (first attempts + the one retry granted)", requests)
		}
		for i, err := range errs {
			var ex *budget.ExhaustedError
			if !errors.As(err, &ex) || ex.Budget != "local-ratio" {
				t.Errorf("call %d: %v; want a refusal by %s", i+1, err, "local-ratio")
				continue
			}
			var ise *types.InternalServerError
			if !errors.As(err, &ise) {
				t.Errorf("call %d: %v does not carry the service's InternalServerError", i+1, err)
			}
		}
		c := lr.counts()
		if c.granted != 3 || c.refused != 2 || c.requests != 14 {
			t.Errorf("local ratio: %+v; want 14 requests, 3 granted, 2 refused", c)
		}
		if s := global.Stats(); s.Granted-s.Returned != 3 || s.Unavailable != 0 {
			t.Errorf("the fleet budget granted %d (stats %+v); want the same 3 retries, from DynamoDB", s.Granted-s.Returned, s)
		}
		if n := len(f.retryEvents()); n != 3 {
			t.Errorf("OnRetry saw %d retries, want 3", n)
		}
	})

	t.Run("the fleet budget binds", func(t *testing.T) {
		f := newAWSSDKFixture(t)
		clock := fakeclock.New(time.Now()) // never moved: the SDK sleeps on its own
		// Local: generous. Fleet: a floor of 2 and a ratio too small to add
		// a retry, so it grants exactly 2 in the window.
		lr, global := newFleetBudgets(t, "awsretry-global", 100, 2, 1e-6 /* the smallest ratio */, clock.Now)
		f.useConfig(t, retry.Config{MaxAttempts: 3, Budgets: []budget.Budget{lr, global}, Clock: clock})

		f.proxy.Set(faultproxy.Fault{Kind: faultproxy.InternalError})
		errs, requests := f.calls(t, 3)
		f.proxy.Set(faultproxy.Fault{})
		// Call 1: 3 attempts (2 retries granted), the SDK's MaxAttemptsError;
		// calls 2 and 3: refused by the fleet budget after 1 attempt each.
		if requests != 5 {
			t.Errorf("%d requests for 3 calls, want 5", requests)
		}
		var me *sdkretry.MaxAttemptsError
		if !errors.As(errs[0], &me) {
			t.Errorf("call 1: %v; want the SDK's MaxAttemptsError", errs[0])
		}
		for i, err := range errs[1:] {
			var ex *budget.ExhaustedError
			var gu *retry.GiveUpError
			if !errors.Is(err, budget.ErrExhausted) || !errors.As(err, &ex) || !strings.HasPrefix(ex.Budget, "global:") ||
				!errors.As(err, &gu) || gu.Attempts != 1 {
				t.Errorf("call %d: %v; want a refusal by the fleet budget after 1 attempt", i+2, err)
			}
			if d, ok := retry.RetryAfter(err); !ok || d <= 0 {
				t.Errorf("call %d: retry.RetryAfter = %v, %v; want the time left in the window", i+2, d, ok)
			}
		}
		if s := global.Stats(); s.Granted != 2 || s.Refused != 2 {
			t.Errorf("fleet budget stats %+v; want 2 granted, 2 refused", s)
		}
	})
}

// TestAWSRetryerSharedBreaker: the SDK's failures trip the shared breaker,
// after which SDK calls fail before sending anything, with an error that
// matches breaker.ErrOpen and carries the time until the next probe. The
// breaker's own store client is dynamo.NewClient given an aws.Config whose
// Retryer is an awsretry one that can send nothing: it ignores it, so the
// store keeps working.
func TestAWSRetryerSharedBreaker(t *testing.T) {
	f := newAWSSDKFixture(t)
	// An application's aws.Config whose retryer is an awsretry one over a
	// breaker that is always open: a client that used it could send
	// nothing.
	closed, err := breaker.New("awsretry-app", breaker.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Override(breaker.ForcedOpen)
	appExec, err := retry.New(retry.Config{Breaker: closed})
	if err != nil {
		t.Fatal(err)
	}
	appRetryer, err := awsretry.New(appExec, awsretry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	storeAPI, err := dynamo.NewClient(ctx, dynamo.ClientOptions{
		Config:      &aws.Config{Retryer: func() aws.Retryer { return appRetryer }},
		Region:      "us-east-1",
		Endpoint:    dynamoEndpoint,
		Credentials: credentials.NewStaticCredentialsProvider("herdguard", "herdguard", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeIdle(storeAPI) })
	table := newTable(t)
	store, err := dynamo.NewBreakerStore(storeAPI, table, dynamo.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var opened atomic.Bool
	br, err := breaker.New("awsretry-partner", breaker.Settings{
		MinRequests: 6,
		Store:       store,
		CacheTTL:    200 * time.Millisecond,
		// Generous: a store call that timed out would put the breaker on
		// its local state machine, and it would open there, not in the
		// table this test reads (seen under a load of 5 on two cores).
		StoreTimeout: callTimeout,
		OnStateChange: func(c breaker.StateChange) {
			if c.To == breaker.Open {
				opened.Store(true)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.useConfig(t, retry.Config{MaxAttempts: 2, Breaker: br, Budgets: []budget.Budget{} /* the breaker alone */})
	if storeAPI.Options().Retryer == aws.Retryer(appRetryer) {
		t.Fatal("dynamo.NewClient uses the awsretry retryer of its aws.Config")
	}

	// The partner fails every attempt until the breaker opens; it reports
	// to the table at most once per ReportInterval (1 s), so this takes a
	// few seconds.
	f.proxy.Set(faultproxy.Fault{Kind: faultproxy.InternalError})
	deadline := time.Now().Add(20 * time.Second)
	var openErr error
	for openErr == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not open within 20 s of failures (counts %+v)", br.Counts())
		}
		if err := f.put(callContext(t), 0); errors.Is(err, breaker.ErrOpen) {
			openErr = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !opened.Load() {
		t.Error("OnStateChange did not see the breaker open")
	}

	// Open: SDK calls fail before any request is sent.
	before := f.proxy.Stats().Requests
	for i := 0; i < 5; i++ {
		err := f.put(callContext(t), i)
		var oe *breaker.OpenError
		if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &oe) {
			t.Fatalf("call %d while open: %v; want an error matching breaker.ErrOpen", i, err)
		}
		if d, ok := retry.RetryAfter(err); !ok || d <= 0 || d != oe.RetryAfter {
			t.Errorf("call %d: retry.RetryAfter = %v, %v; want the breaker's %v", i, d, ok, oe.RetryAfter)
		}
	}
	if n := f.proxy.Stats().Requests - before; n != 0 {
		t.Errorf("%d requests reached the proxy while the breaker was open", n)
	}
	// The store behind the breaker answers while it is open: its client is
	// not gated by the breaker it serves.
	snap, err := store.Load(callContext(t), "awsretry-partner")
	if err != nil || snap.State != breaker.Open {
		t.Errorf("the breaker's store read %+v, %v; want the open state, read through dynamo.NewClient", snap, err)
	}
}

// TestAWSRetryerUnderLoad: many concurrent calls of a real dynamodb.Client
// through one awsretry retryer, with the fleet's budgets (a local ratio and
// a Global in DynamoDB) and a breaker that opens after 3 consecutive
// failures, while the table throttles every request. No call panics or
// makes more than MaxAttempts attempts; every retry at the proxy is one the
// budgets granted; every refusal is a *ratelimit.QuotaExceededError that
// also matches budget.ErrExhausted; the throttling never opens the breaker;
// and once the throttling stops every call succeeds.
func TestAWSRetryerUnderLoad(t *testing.T) {
	const (
		workers     = 16
		perWorker   = 20
		calls       = workers * perWorker
		maxAttempts = 3
	)
	f := newAWSSDKFixture(t)
	lr, global := newFleetBudgets(t, "awsretry-load", 3, 10, 0.1, time.Now)
	var opened atomic.Int64
	br, err := breaker.New("awsretry-load", breaker.Settings{
		ConsecutiveFailures: 3,
		OnStateChange: func(c breaker.StateChange) {
			if c.To == breaker.Open {
				opened.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.useConfig(t, retry.Config{MaxAttempts: maxAttempts, Budgets: []budget.Budget{lr, global}, Breaker: br})

	f.proxy.Set(faultproxy.Fault{Kind: faultproxy.Throttling})
	before := f.proxy.Stats().Requests
	var (
		wg                        sync.WaitGroup
		refused, exhausted, other atomic.Int64
		firstOther                atomic.Pointer[error]
		tooMany                   atomic.Int64
	)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				err := f.put(callContext(t), w*perWorker+i)
				var q *ratelimit.QuotaExceededError
				var gu *retry.GiveUpError
				var me *sdkretry.MaxAttemptsError
				var te *types.ThrottlingException
				switch {
				case errors.As(err, &q) && errors.Is(err, budget.ErrExhausted) && errors.As(err, &gu) && gu.Reason == retry.BudgetExhausted && errors.As(err, &te):
					refused.Add(1)
					if gu.Attempts > maxAttempts {
						tooMany.Add(1)
					}
				case errors.As(err, &me) && errors.As(err, &te):
					exhausted.Add(1)
					if me.Attempt > maxAttempts {
						tooMany.Add(1)
					}
				default:
					other.Add(1)
					e := fmt.Errorf("call %d: %w", w*perWorker+i, err)
					firstOther.CompareAndSwap(nil, &e)
				}
			}
		})
	}
	wg.Wait()
	requests := f.proxy.Stats().Requests - before
	if n := other.Load(); n > 0 {
		t.Errorf("%d calls ended otherwise than refused or attempts exhausted with the ThrottlingException; first: %v", n, *firstOther.Load())
	}
	if n := tooMany.Load(); n > 0 {
		t.Errorf("%d calls made more than %d attempts", n, maxAttempts)
	}
	if refused.Load() == 0 {
		t.Error("no retry was refused: the budgets never bound, so the test shows nothing about refusals")
	}
	c := lr.counts()
	if retries := requests - calls; requests > calls*maxAttempts || retries != c.granted-c.returned {
		t.Errorf("%d requests at the proxy for %d calls: %d retries; the budgets granted %d (returned %d)", requests, calls, retries, c.granted, c.returned)
	}
	if c.requests != calls {
		t.Errorf("the local ratio saw %d requests for %d calls", c.requests, calls)
	}
	if n := opened.Load(); n != 0 || br.State(time.Now()) != breaker.Closed {
		t.Errorf("the breaker opened %d times under throttling (state %v); want it closed", n, br.State(time.Now()))
	}
	if s := global.Stats(); s.Unavailable != 0 {
		t.Errorf("the fleet budget's store was unavailable %d times", s.Unavailable)
	}
	t.Logf("%d calls: %d refused, %d attempts exhausted, %d requests; local %+v", calls, refused.Load(), exhausted.Load(), requests, c)

	// The throttling ends: every call succeeds at once.
	f.proxy.Set(faultproxy.Fault{})
	errs, requests := f.calls(t, 10)
	if err := errors.Join(errs...); err != nil || requests != 10 {
		t.Errorf("after the throttling: %d requests for 10 calls, errors %v", requests, err)
	}
}
