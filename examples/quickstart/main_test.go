package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// The quick start survives a partner that fails its first two calls.
func TestRunRetriesFlakyPartner(t *testing.T) {
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"available":7}`))
	}))
	defer partner.Close()

	if err := run(partner.URL); err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("partner saw %d calls, want 3", got)
	}
}

// A partner that answers 400 is not retried.
func TestRunDoesNotRetryBadRequest(t *testing.T) {
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "bad", http.StatusBadRequest)
	}))
	defer partner.Close()

	if err := run(partner.URL); err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("partner saw %d calls, want 1", got)
	}
}
