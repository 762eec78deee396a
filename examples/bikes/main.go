package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"

	"github.com/aws/aws-lambda-go/events"

	herdlambda "github.com/herdguard/herdguard/lambda"
	"github.com/herdguard/herdguard/retry"
)

type (
	request  = events.APIGatewayV2HTTPRequest
	response = events.APIGatewayV2HTTPResponse
)

var stationID = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

func main() { herdlambda.Start(herdlambda.Config{}, setup) }

// setup runs once per execution environment, after herdlambda has built the
// partner's Executor from the HERDGUARD_* variables.
func setup(ctx context.Context, f *herdlambda.Fleet) (func(context.Context, request) (response, error), error) {
	partner, err := url.Parse(os.Getenv("PARTNER_URL"))
	if err != nil || (partner.Scheme != "http" && partner.Scheme != "https") || partner.Host == "" {
		return nil, fmt.Errorf("PARTNER_URL %q: want an http:// or https:// URL", os.Getenv("PARTNER_URL"))
	}
	transport, err := retry.NewTransport(f.Executor, nil, retry.TransportOptions{})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: transport}
	return func(ctx context.Context, req request) (response, error) {
		station := req.PathParameters["stationId"]
		if !stationID.MatchString(station) {
			return reply(http.StatusBadRequest, "stationId must be 1 to 64 letters, digits or '-'"), nil
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, partner.JoinPath("stations", station, "bikes").String(), nil)
		if err != nil {
			return response{}, err
		}
		resp, err := client.Do(hreq)
		if err != nil {
			return response{}, err // a refusal: herdlambda answers 503 with Retry-After
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return reply(http.StatusNotFound, "unknown station"), nil
		case err != nil || resp.StatusCode != http.StatusOK || !json.Valid(body):
			f.Logger.WarnContext(ctx, "partner call failed", "station", station, "status", resp.StatusCode, "error", err)
			return reply(http.StatusBadGateway, "partner call failed"), nil
		}
		return response{StatusCode: http.StatusOK, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(body)}, nil
	}, nil
}

// reply is an answer other than 200: {"message": ...}.
func reply(status int, message string) response {
	body := fmt.Sprintf(`{"message":%q}`, message) // ASCII messages: Go's quoting is JSON's
	return response{StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}, Body: body}
}
