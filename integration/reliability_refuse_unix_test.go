//go:build unix

package integration

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

// relRefusingAddr returns a loopback address at which every dial is
// refused, for as long as the test runs. It holds a TCP socket bound to
// the port without listening on it: the kernel answers a connection
// attempt with a reset (ECONNREFUSED), and since the port stays bound (the
// socket has no SO_REUSEADDR) nothing else can listen on it, nor take it
// as the source port of a connection, until the test ends. (A port closed
// after use could be taken by another test's listener or an outgoing
// connection before the dial.)
func relRefusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("getsockname returned %T", sa)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", in4.Port)
	// Make sure the kernel refuses it, as the tests rely on.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("a dial to %s, bound and not listening, succeeded", addr)
	} else if !relIsRefused(err) {
		t.Fatalf("a dial to %s failed with %v, not connection refused", addr, err)
	}
	return addr
}

// relIsRefused reports whether err is a refused connection.
func relIsRefused(err error) bool {
	var se syscall.Errno
	return errors.As(err, &se) && se == syscall.ECONNREFUSED
}
