//go:build !unix

package integration

import (
	"net"
	"testing"
)

// relRefusingAddr returns a loopback address nothing listens on. Outside
// Unix it cannot hold the port bound without listening (see
// reliability_refuse_unix_test.go), so it closes a listener and returns
// its address: another listener could, in principle, take the port before
// the test dials it.
func relRefusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
