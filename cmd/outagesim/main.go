package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/report"
	"github.com/herdguard/herdguard/cmd/outagesim/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	if len(os.Args) > 1 && os.Args[1] == "report" {
		code = report.Main(ctx, "outagesim report", os.Args[2:], os.Stdout, os.Stderr)
	} else {
		code = sim.Main(ctx, "outagesim", os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}
