package herdlambda_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/herdguard/herdguard/awsretry"
	herdlambda "github.com/herdguard/herdguard/lambda"
	"github.com/herdguard/herdguard/local"
	"github.com/herdguard/herdguard/retry"
)

// A function behind an HTTP API that calls a partner over HTTP and
// DynamoDB through the AWS SDK, both on the partner's budgets and breaker.
// Start reads HERDGUARD_NAME, HERDGUARD_TABLE and the other variables, and
// runs setup once per execution environment.
func ExampleStart() {
	herdlambda.Start(herdlambda.Config{}, func(ctx context.Context, f *herdlambda.Fleet) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
		transport, err := retry.NewTransport(f.Executor, nil, retry.TransportOptions{})
		if err != nil {
			return nil, err
		}
		partner := &http.Client{Transport: transport}
		retryer, err := awsretry.New(f.Executor, awsretry.Options{})
		if err != nil {
			return nil, err
		}
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, err
		}
		db := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.Retryer = retryer })
		return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			_, _ = partner, db // call them with ctx; return a refusal's error as it is
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusNoContent}, nil
		}, nil
	})
}

// Wrap is what Start runs each invocation: here, over in-memory stores, a
// partner that keeps answering 503 gets one retry (the environment's local
// floor), then the budget refuses and the function answers 503 with a
// Retry-After instead of a bare error.
func ExampleWrap() {
	f, err := herdlambda.New(context.Background(), herdlambda.Config{
		Name:     "partner",
		Budgets:  local.NewBudgetStore(),
		Breakers: local.NewBreakerStore(),
		Metrics:  io.Discard,
		Log:      slog.NewTextHandler(io.Discard, nil),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := herdlambda.Wrap(f, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		body, err := retry.DoIdempotent(ctx, f.Executor, true, func(ctx context.Context, attempt int) (string, error) {
			return "", &retry.StatusError{StatusCode: http.StatusServiceUnavailable}
		})
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Body: body}, err
	})
	resp, err := h(context.Background(), events.APIGatewayV2HTTPRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(resp.StatusCode, "Retry-After:", resp.Headers["Retry-After"] != "")
	fmt.Println(resp.Body[:len(`{"message":"partner currently unavailable","reason":"budget-exhausted"`)])
	// Output:
	// 503 Retry-After: true
	// {"message":"partner currently unavailable","reason":"budget-exhausted"
}
