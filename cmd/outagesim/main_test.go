package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// When this variable is set the test binary runs the command instead of
// the tests, so that the tests can check its real exit status.
const runMainEnv = "OUTAGESIM_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"outagesim"}, strings.Fields(os.Getenv(runMainEnv+"_ARGS"))...)
		main()
		return
	}
	os.Exit(m.Run())
}

func runCommand(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), runMainEnv+"=1", runMainEnv+"_ARGS="+strings.Join(args, " "))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	default:
		t.Fatal(err)
		return 0, "", ""
	}
}

func TestBadFlagsExitWithStatus2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-envs", "0"}, "-envs: 0 must be between 1 and 100000"},
		{[]string{"-ratio", "2"}, "-ratio: 2 must be in (0, 1]"},
		{[]string{"-strategies", "none,retry-forever"}, `unknown strategy "retry-forever"`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"-duration", "10s"}, "-outage-length: the outage (20s from 20s) ends after -duration 10s"},
	} {
		code, stdout, stderr := runCommand(t, tc.args...)
		if code != 2 {
			t.Errorf("%v: exit status %d, want 2", tc.args, code)
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: stderr %q does not contain %q", tc.args, stderr, tc.want)
		}
		if stdout != "" {
			t.Errorf("%v: wrote %q to stdout", tc.args, stdout)
		}
	}
}

func TestHelpExitsWithStatus0(t *testing.T) {
	code, _, stderr := runCommand(t, "-h")
	if code != 0 || !strings.Contains(stderr, "Usage: outagesim") {
		t.Errorf("-h: status %d, stderr %q", code, stderr)
	}
}

// `outagesim report` is the report subcommand: its own flags, its own
// exit statuses, and -quick writes the report.
func TestReportSubcommand(t *testing.T) {
	if code, _, stderr := runCommand(t, "report", "-seeds", "x"); code != 2 || !strings.Contains(stderr, `-seeds: "x" is not a seed`) {
		t.Errorf("report -seeds x: status %d, stderr %q", code, stderr)
	}
	dir := t.TempDir()
	code, stdout, stderr := runCommand(t, "report", "-quick", "-progress=false", "-out", dir)
	if code != 0 || stdout != "report written to "+dir+"\n" {
		t.Fatalf("report -quick: status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, name := range []string{"scenarios.md", "cost.md", "grid.md", "bench.md", "results.json", "outage.png", "outage-lambda.png"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
}
