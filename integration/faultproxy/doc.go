// Package faultproxy is a test-only HTTP reverse proxy that stands between
// a DynamoDB client and DynamoDB Local and makes DynamoDB fail on demand:
// added latency, dropped connections, HTTP 500 InternalServerError,
// ThrottlingException and ProvisionedThroughputExceededException answers in
// DynamoDB's JSON protocol, and refused connections. herdguard's reliability
// tests point the dynamo stores' client at it to prove what the library does
// when its table misbehaves.
//
//	p, err := faultproxy.New(dynamoLocalURL)
//	client, err := dynamo.NewClient(ctx, dynamo.ClientOptions{Endpoint: p.URL(), ...})
//	p.Set(faultproxy.Fault{Kind: faultproxy.ThroughputExceeded})
//	... // every request now gets a ProvisionedThroughputExceededException
//	p.Set(faultproxy.Fault{})
//	defer p.Close()
//
// The proxy listens on 127.0.0.1 only. It counts requests by DynamoDB
// operation (Stats), so a test can report the DynamoDB calls it caused, and
// SetUpstream follows a DynamoDB Local that restarted on another port.
package faultproxy
