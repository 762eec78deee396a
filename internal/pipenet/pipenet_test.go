package pipenet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/internal/pipenet"
)

// TestServe: a request reaches the handler and its answer comes back; a
// client timeout fires at exactly its fake time while the handler hangs,
// and the handler sees the client go; after stop, dialing fails.
func TestServe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gone := make(chan time.Duration, 1)
		start := time.Now()
		tr, stop := pipenet.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hang" {
				<-r.Context().Done()
				gone <- time.Since(start)
				return
			}
			_, _ = io.WriteString(w, "hello "+r.URL.Path)
		}))
		c := &http.Client{Transport: tr}
		resp, err := c.Get(pipenet.URL + "x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello /x" {
			t.Fatalf("body %q, want hello /x", b)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, pipenet.URL+"hang", nil)
		if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do past the deadline = %v, want DeadlineExceeded", err)
		}
		if took := time.Since(start); took != 30*time.Millisecond {
			t.Errorf("the timeout fired after %v of fake time, want 30ms", took)
		}
		if d := <-gone; d != 30*time.Millisecond {
			t.Errorf("the handler saw the client go after %v, want 30ms", d)
		}

		stop()
		if _, err := tr.DialContext(context.Background(), "tcp", "partner.test:80"); !errors.Is(err, net.ErrClosed) {
			t.Errorf("dial after stop = %v, want net.ErrClosed", err)
		}
	})
}
