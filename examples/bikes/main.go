package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/aws/aws-lambda-go/events"

	herdlambda "github.com/herdguard/herdguard/lambda"
	"github.com/herdguard/herdguard/retry"
)

func main() { herdlambda.Start(herdlambda.Config{}, setup) }

// setup runs once per execution environment, after herdlambda has built the
// partner's Executor from the HERDGUARD_* variables.
func setup(ctx context.Context, f *herdlambda.Fleet) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
	partner, err := url.Parse(os.Getenv("PARTNER_URL"))
	if err != nil || partner.Host == "" {
		return nil, fmt.Errorf("PARTNER_URL %q: want an absolute http:// or https:// URL", os.Getenv("PARTNER_URL"))
	}
	transport, err := retry.NewTransport(f.Executor, nil, retry.TransportOptions{})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: transport}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		station := partner.JoinPath("stations", req.PathParameters["stationId"], "bikes").String()
		hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, station, nil)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		resp, err := client.Do(hreq)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err // a refusal becomes a 503 with Retry-After
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil || resp.StatusCode >= 500 {
			f.Logger.WarnContext(ctx, "partner call failed", "status", resp.StatusCode, "error", err)
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadGateway}, nil
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: resp.StatusCode, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(body)}, nil
	}, nil
}
