package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The AWS SDK for Go v2 standard retryer, one per environment, as a Lambda
// function that called the partner through an SDK-generated client would
// have it. It is driven through its own API (GetAttemptToken, GetRetryToken,
// RetryDelay, IsErrorRetryable, MaxAttempts) in the same order as the SDK's
// retry middleware (aws/retry.Attempt.handleAttempt), because the partner is
// not an AWS service and has no SDK client.
//
// Two details of that middleware cannot be reached from outside the SDK
// and are reproduced here: GetAttemptToken hands out the first-attempt
// token (+NoRetryIncrement on success) only for attempt 1, which the SDK
// decides from context metadata only its middleware can set, so this loop
// asks for it only on attempt 1; and the x-amz-retry-after clamp
// (adjustForRetryAfterHeader: the hint, clamped to [backoff, backoff+5s])
// is unexported. The SDK ignores the standard Retry-After header.
//
// The retryer's backoff jitter comes from the SDK's own crypto/rand source,
// so this strategy does not follow -seed.

type sdkStrategy struct {
	noStore
	cfg Config
}

func newSDK(_ context.Context, d Deps) (Strategy, error) {
	return &sdkStrategy{cfg: d.Config}, nil
}

// newSDKRetryer builds a standard retryer with the 2026 retry costs set
// explicitly (they are the defaults of the SDK version in go.mod) and
// returns it with its token bucket.
func newSDKRetryer(c Config) (*awsretry.Standard, *ratelimit.TokenRateLimit) {
	bucket := ratelimit.NewTokenRateLimit(uint(c.BucketCapacity))
	return awsretry.NewStandard(func(o *awsretry.StandardOptions) {
		o.MaxAttempts = c.Attempts
		o.RateLimiter = bucket
		o.RetryCost = uint(c.TransientCost)
		o.ThrottlingRetryCost = uint(c.ThrottlingCost)
		o.NoRetryIncrement = 1
		o.BaseDelay = c.TransientBase
		o.MaxBackoff = c.MaxDelay
	}), bucket
}

func (s *sdkStrategy) NewEnv(spec EnvSpec) (Caller, error) {
	r, bucket := newSDKRetryer(s.cfg)
	return &sdkCaller{r: r, bucket: bucket, clock: spec.Clock}, nil
}

type sdkCaller struct {
	r      *awsretry.Standard
	bucket *ratelimit.TokenRateLimit // the retryer's; read by tests
	clock  TimeSource
}

func nopRelease(error) error { return nil }

func (c *sdkCaller) Call(ctx context.Context, send Send) (Outcome, error) {
	releaseRetry := nopRelease
	maxAttempts := c.r.MaxAttempts()
	for attempt := 1; ; attempt++ {
		releaseAttempt := nopRelease
		if attempt == 1 {
			rel, err := c.r.GetAttemptToken(ctx)
			if err != nil {
				return FailedOther, fmt.Errorf("get attempt token: %w", err)
			}
			releaseAttempt = rel
		}
		err := sdkError(send(ctx, attempt))
		_ = releaseRetry(err)
		_ = releaseAttempt(err)
		releaseRetry = nopRelease
		if err == nil {
			return Succeeded, nil
		}
		if ctx.Err() != nil {
			return FailedOther, err
		}
		if !c.r.IsErrorRetryable(err) {
			return FailedPartner, err
		}
		if attempt >= maxAttempts {
			return FailedPartner, &awsretry.MaxAttemptsError{Attempt: attempt, Err: err}
		}
		rel, tokErr := c.r.GetRetryToken(ctx, err)
		if tokErr != nil {
			return FailedBudget, errors.Join(err, tokErr)
		}
		releaseRetry = rel
		delay, dErr := c.r.RetryDelay(attempt, err)
		if dErr != nil {
			return FailedOther, dErr
		}
		delay = sdkRetryAfterClamp(delay, err)
		if sErr := c.clock.Sleep(ctx, delay); sErr != nil {
			return FailedOther, sErr
		}
	}
}

// sdkError turns the partner's answer into the error an SDK-generated
// client returns for an unmodeled error response: an *awshttp.ResponseError
// wrapping a smithy.GenericAPIError, which is what the SDK's retryables and
// throttle checks inspect (status 500/502/503/504 retryable at RetryCost,
// unmodeled 429 a throttle at ThrottlingRetryCost).
func sdkError(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	code := "ServiceUnavailable"
	if resp.StatusCode == http.StatusTooManyRequests {
		code = "TooManyRequests"
	} else if resp.StatusCode != http.StatusServiceUnavailable {
		code = "HTTP" + strconv.Itoa(resp.StatusCode)
	}
	return &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: resp},
			Err:      &smithy.GenericAPIError{Code: code, Message: http.StatusText(resp.StatusCode)},
		},
	}
}

// sdkRetryAfterClamp is the SDK middleware's handling of x-amz-retry-after
// (milliseconds): the hint, but no less than the backoff and no more than
// the backoff plus 5 s. Invalid values are ignored.
func sdkRetryAfterClamp(backoff time.Duration, err error) time.Duration {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return backoff
	}
	v := re.Response.Header.Get("X-Amz-Retry-After")
	if v == "" {
		return backoff
	}
	ms, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || ms < 0 {
		return backoff
	}
	ra := time.Duration(ms) * time.Millisecond
	return min(max(ra, backoff), backoff+5*time.Second)
}
