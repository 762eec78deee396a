package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var tinyArgs = []string{
	"-envs", "3", "-rate", "50", "-duration", "4s", "-outage-start", "1s", "-outage-length", "2s",
	"-capacity", "80", "-outage-capacity", "20", "-speed", "20",
}

func TestMainExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), "outagesim", []string{"-speed", "0"}, &out, &errOut); code != ExitUsage {
		t.Errorf("bad flag: exit %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(errOut.String(), "-speed: 0 must be in (0, 1000]") || out.Len() != 0 {
		t.Errorf("bad flag: stdout %q, stderr %q", out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := Main(context.Background(), "outagesim", []string{"-help"}, &out, &errOut); code != ExitOK {
		t.Errorf("-help: exit %d, want 0", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if code := Main(ctx, "outagesim", append(tinyArgs, "-strategies", "none"), &out, &errOut); code != ExitError {
		t.Errorf("canceled run: exit %d, want %d", code, ExitError)
	}
}

// A tiny end-to-end run: table, JSON and chart.
func TestMainOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulation")
	}
	dir := t.TempDir()
	plot := filepath.Join(dir, "chart.png")
	var out, errOut bytes.Buffer
	args := append(append([]string(nil), tinyArgs...), "-strategies", "none,sdk,global-breaker", "-plot", plot)
	if code := Main(context.Background(), "outagesim", args, &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	for _, s := range []string{"no budget (3 attempts)", "AWS SDK standard retryer", "global ratio + breaker", "load", "chart written to " + plot} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr is not a terminal, yet got %q", errOut.String())
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 400 {
		t.Errorf("chart is %v", b)
	}

	out.Reset()
	args = append(append([]string(nil), tinyArgs...), "-strategies", "ratio,global", "-json")
	if code := Main(context.Background(), "outagesim", args, &out, &errOut); code != ExitOK {
		t.Fatalf("-json: exit %d, stderr %s", code, errOut.String())
	}
	var rep struct {
		Config  map[string]any
		Results []struct {
			Strategy   string
			LoadFactor float64 `json:"load_factor"`
			Outage     struct {
				Calls int64
				Store *StoreUsage
			}
			Seconds []Second
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("-json output: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 2 || rep.Results[0].Strategy != "ratio" || rep.Results[1].Strategy != "global" {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Outage.Calls != 100 || len(r.Seconds) < 4 || r.LoadFactor <= 0 {
			t.Errorf("%s: %d outage calls, %d seconds, load %v", r.Strategy, r.Outage.Calls, len(r.Seconds), r.LoadFactor)
		}
	}
	if rep.Results[0].Outage.Store != nil || rep.Results[1].Outage.Store == nil {
		t.Errorf("store usage: local %v, global %v; want only the global strategy's", rep.Results[0].Outage.Store, rep.Results[1].Outage.Store)
	}
	if rep.Config["envs"] != 3.0 || rep.Config["store"] != "memory" {
		t.Errorf("config %v", rep.Config)
	}
}
