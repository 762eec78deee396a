// Command quickstart is the README's quick start: an http.Client that
// retries a flaky partner with a local retry budget and a circuit breaker.
//
//	go run ./examples/quickstart https://partner.example.com/stations/nord-3/bikes
package main
