package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/retry"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: quickstart URL")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		log.Fatal(err)
	}
}

func run(url string) error {
	br, err := breaker.New("partner", breaker.Settings{}) // opens at 50% failures of ≥ 20 calls in 10 s
	if err != nil {
		return err
	}
	exec, err := retry.New(retry.Config{Breaker: br}) // retries ≤ 10% of requests per 10 s, at least 3
	if err != nil {
		return err
	}
	tr, err := retry.NewTransport(exec, http.DefaultTransport, retry.TransportOptions{})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	resp, err := client.Get(url) // a GET: retried with full jitter on 408/429/500/502/503/504 and network errors
	if err != nil {
		if d, ok := retry.RetryAfter(err); ok { // breaker open or budget exhausted
			return fmt.Errorf("partner unavailable, retry after %s: %w", d, err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 { // the partner's last answer, when the retries ran out or were refused
		return fmt.Errorf("partner answered %s", resp.Status)
	}
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}
