package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := sim.Main(ctx, "outagesim", os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
