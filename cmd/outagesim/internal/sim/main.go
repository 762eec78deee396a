package sim

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit statuses of Main.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Main is the command: it parses args, runs every selected strategy one
// after another (each against a fresh partner, fleet and set of stores),
// prints the table (or JSON) on stdout and writes the chart. It returns the
// exit status: ExitUsage for bad flags, ExitError when a run fails.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	opts, err := ParseFlags(name, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		return ExitUsage
	}
	if err := runAll(ctx, opts, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitError
	}
	return ExitOK
}

func runAll(ctx context.Context, opts Options, stdout, stderr io.Writer) (err error) {
	cfg := opts.Config
	strategies, err := LookupStrategies(cfg.Strategies)
	if err != nil {
		return err
	}
	var backend Backend = MemoryBackend{}
	if cfg.DynamoEndpoint != "" {
		needed := false
		for _, s := range strategies {
			needed = needed || s.Shared
		}
		if needed {
			db, err := NewDynamoBackend(ctx, cfg, stderr)
			if err != nil {
				return err
			}
			backend = db
		}
	}
	defer func() {
		if cerr := backend.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}()

	var bar *ProgressBar
	if opts.Progress && IsTerminal(stderr) {
		bar = NewProgressBar(stderr, len(strategies))
	}
	runner := &Runner{Config: cfg, Backend: backend}
	var results []*Result
	for i, s := range strategies {
		if bar != nil {
			bar.Start(i, s.Label(cfg))
			runner.Progress = bar.Update
		}
		res, err := runner.Run(ctx, s)
		if bar != nil {
			bar.Done()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Key, err)
		}
		results = append(results, res)
	}

	report := NewReport(cfg, results)
	out := bufio.NewWriter(stdout)
	if opts.JSON {
		b, err := report.JSON()
		if err != nil {
			return err
		}
		_, _ = out.Write(b)
	} else if err := WriteTable(out, report); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if opts.Plot != "" {
		if err := WritePlotFile(opts.Plot, report); err != nil {
			return err
		}
		if !opts.JSON {
			fmt.Fprintf(stdout, "chart written to %s\n", opts.Plot)
		}
	}
	return nil
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
