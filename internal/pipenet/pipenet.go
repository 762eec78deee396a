// Package pipenet is an in-memory network for HTTP tests that run in a
// testing/synctest bubble: an http.Server serves on a Listener, and an
// http.Transport dials it with net.Pipe. Every wait on it (accept, read,
// write, a handler waiting for its request's context) is on the bubble's
// channels and timers, so the bubble's fake clock runs timeouts exactly: a
// test of a 20 ms attempt timeout does not depend on a loopback round trip
// of a loaded machine finishing within 20 ms.
//
// It is an instrument for tests, not public API.
package pipenet

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// URL is the address a Serve'd handler answers on. Any host would do: the
// Transport dials the pipe whatever the address.
const URL = "http://partner.test/"

// Listener is a net.Listener whose connections come from DialContext.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener returns a Listener. Create it inside the bubble that uses it.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for a connection dialed by DialContext.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and DialContext fail with net.ErrClosed.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a fixed address.
func (l *Listener) Addr() net.Addr { return addr{} }

// DialContext hands the listener one end of a new pipe and returns the
// other. Its signature is http.Transport.DialContext's.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, net.ErrClosed
}

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "partner.test:80" }

// Serve serves h on a new Listener and returns a Transport that reaches it
// (at URL, or any other address), and a function that closes the
// Transport's idle connections and the server and waits until the server
// has stopped. Call both inside the bubble (t.Cleanup registered inside
// synctest.Test runs there), so that their goroutines end before it does.
func Serve(h http.Handler) (tr *http.Transport, stop func()) {
	l := NewListener()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	tr = &http.Transport{Proxy: nil, DialContext: l.DialContext}
	return tr, func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		<-served
	}
}
