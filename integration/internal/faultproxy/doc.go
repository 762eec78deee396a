// Package faultproxy is a test-only HTTP reverse proxy that stands between
// a DynamoDB client and DynamoDB Local and makes DynamoDB fail on demand:
// added latency, dropped connections, HTTP 500 InternalServerError,
// ThrottlingException and ProvisionedThroughputExceededException answers in
// DynamoDB's JSON protocol, refused connections, and writes applied whose
// answer is lost (ApplyThenDrop). herdguard's reliability tests point the
// dynamo stores' client at it to prove what the library does when its
// table misbehaves.
//
//	p, err := faultproxy.New(dynamoLocalURL)
//	client, err := dynamo.NewClient(ctx, dynamo.ClientOptions{Endpoint: p.URL(), ...})
//	p.Set(faultproxy.Fault{Kind: faultproxy.ThroughputExceeded})
//	... // every request now gets a ProvisionedThroughputExceededException
//	p.Set(faultproxy.Fault{Kind: faultproxy.ApplyThenDrop, Attempts: 1})
//	... // the first attempt of every SDK call is applied and its answer lost
//	p.Set(faultproxy.Fault{})
//	defer p.Close()
//
// The proxy listens on 127.0.0.1 only. It counts requests by DynamoDB
// operation, the upstream answers that succeeded, and the SDK retries that
// re-sent a write already applied (Stats, by the AWS SDK's invocation
// identifier header), so a test can report the DynamoDB calls it caused
// and bound the duplicates a lost answer allows. SetUpstream follows a
// DynamoDB Local that restarted on another port, and CloseIdleConnections
// lets a test count goroutines without the proxy's idle connections.
//
// SetCapacity adds DynamoDB's capacity model, which DynamoDB Local lacks:
// every item request is billed with an internal/capacity Meter by the
// sizes of the items it touches, and a request past an item's throughput
// limit (1,000 write units or 3,000 read units a second) is answered
// ProvisionedThroughputExceededException without being forwarded (see
// Capacity for how faithful that is).
//
//	m := capacity.NewMeter(capacity.Config{Throttle: true})
//	p.SetCapacity(faultproxy.Capacity{Meter: m, Now: clock.Now})
//	... // m.Stats(): the hottest item's units per second, throttles
package faultproxy
