package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/fleetsim"
	"github.com/herdguard/herdguard/cmd/outagesim/internal/sim"
)

// Options are the report's command line.
type Options struct {
	Out       string   // directory written
	Quick     bool     // a small, fast report (tests)
	Seeds     []uint64 // seeds of every scenario and grid cell
	Parallel  int      // runs at once
	Bench     bool     // run the peer benchmarks
	BenchTime string   // their -benchtime
	BenchDir  string   // bench/ module ("" : found from the working directory)
	Progress  bool
	// Command is the command line printed at the top of each file.
	Command string
}

// Main is `outagesim report`: it returns the exit status (0, 1 when a run
// fails, 2 for bad flags).
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	o, err := ParseFlags(name, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return sim.ExitOK
	}
	if err != nil {
		return sim.ExitUsage
	}
	if err := Run(ctx, o, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return sim.ExitError
	}
	fmt.Fprintf(stdout, "report written to %s\n", o.Out)
	return sim.ExitOK
}

// ParseFlags parses the report's flags.
func ParseFlags(name string, args []string, errOut io.Writer) (Options, error) {
	root := repoRoot()
	o := Options{Parallel: runtime.GOMAXPROCS(0), BenchTime: "100ms", Command: strings.TrimSpace("go run ./cmd/outagesim report " + strings.Join(args, " "))}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "Usage: %s [flags]\n\nRuns outagesim's reference scenarios, the fleet-shape grid and the peer benchmarks\n"+
			"and writes Markdown tables, results.json and charts.\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	defOut := "docs/results"
	if root != "" {
		defOut = filepath.Join(root, "docs", "results")
	}
	seeds := "1-3"
	fs.StringVar(&o.Out, "out", defOut, "directory to write (created if missing)")
	fs.BoolVar(&o.Quick, "quick", false, "a small report: the scenarios marked quick, shortened, one seed, a corner of the grid, no benchmarks")
	fs.StringVar(&seeds, "seeds", seeds, "seeds, as a list (1,2,5) or a range (1-3)")
	fs.IntVar(&o.Parallel, "parallel", o.Parallel, "runs at once (default GOMAXPROCS)")
	fs.BoolVar(&o.Bench, "bench", true, "run the peer benchmarks (go test -bench in bench/; off with -quick)")
	fs.StringVar(&o.BenchTime, "benchtime", o.BenchTime, "-benchtime of the peer benchmarks")
	fs.StringVar(&o.BenchDir, "bench-dir", filepath.Join(root, "bench"), "the bench module's directory")
	fs.BoolVar(&o.Progress, "progress", true, "report progress on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", sim.ErrUsage, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	s, err := parseSeeds(seeds)
	if err != nil {
		errs = append(errs, fmt.Errorf("-seeds: %w", err))
	}
	o.Seeds = s
	if o.Parallel < 1 {
		errs = append(errs, fmt.Errorf("-parallel: %d must be at least 1", o.Parallel))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.Quick && !set["bench"] {
		o.Bench = false
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(errOut, "%s: %v\n", name, err)
		return o, fmt.Errorf("%w: %w", sim.ErrUsage, err)
	}
	return o, nil
}

// parseSeeds parses "1,2,5" or "1-3".
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a seed or a range of seeds", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a || b-a > 100 {
				return nil, fmt.Errorf("%q is not a range of at most 100 seeds", part)
			}
		}
		for v := a; v <= b; v++ {
			if slices.Contains(out, v) {
				return nil, fmt.Errorf("seed %d given twice", v)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// repoRoot returns the herdguard repository holding the working
// directory ("" if none): the directory with go.work or the root go.mod.
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/herdguard/herdguard\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// scenarioArgs are the outagesim flags of scenario s at seed.
func scenarioArgs(s Scenario, quick bool, seed uint64) []string {
	args := strings.Fields(s.Args)
	if quick {
		args = append(args, strings.Fields(QuickArgs)...)
	}
	return append(args, "-partner", sim.PartnerInproc, "-seed", strconv.FormatUint(seed, 10))
}

// job is one unit of work: a strategy of a scenario at a seed, or a grid cell.
type job struct {
	name   string
	weight float64
	run    func(ctx context.Context) error
}

// Results is results.json.
type Results struct {
	Header    Header          `json:"header"`
	Scenarios []ScenarioEntry `json:"scenarios"`
	Tables    []Table         `json:"tables"`
	Notes     []string        `json:"notes,omitempty"`
	// Timing is real time (not reproducible).
	Timing Timing `json:"timing"`
}

// Header is what each Markdown file says at the top.
type Header struct {
	Command string   `json:"command"`
	Date    string   `json:"date"`
	Machine string   `json:"machine"`
	Seeds   []uint64 `json:"seeds"`
	Quick   bool     `json:"quick,omitempty"`
}

// ScenarioEntry is a scenario as it ran.
type ScenarioEntry struct {
	Name     string   `json:"name"`
	Table    string   `json:"table"`
	Args     string   `json:"args"`
	Seeds    []uint64 `json:"seeds"`
	Commands []string `json:"commands"`
	Plot     string   `json:"plot,omitempty"`
}

// Timing is the real time the report took.
type Timing struct {
	TotalSeconds float64            `json:"total_seconds"`
	Seconds      map[string]float64 `json:"seconds"` // per scenario (sum of its runs), grid, bench
}

// Run writes the report.
func Run(ctx context.Context, o Options, stderr io.Writer) error {
	start := time.Now()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	var all []*scenarioRuns
	var jobs []job
	var mu sync.Mutex
	timing := map[string]float64{}
	addTime := func(k string, d time.Duration) {
		mu.Lock()
		timing[k] += d.Seconds()
		mu.Unlock()
	}
	for _, sc := range Scenarios {
		if o.Quick && !sc.Quick {
			continue
		}
		seeds := o.Seeds
		if o.Quick {
			seeds = seeds[:1]
		}
		if sc.Seeds > 0 && sc.Seeds < len(seeds) {
			seeds = seeds[:sc.Seeds]
		}
		s := &scenarioRuns{Scenario: sc, seeds: seeds}
		for i, seed := range seeds {
			opts, err := sim.ParseFlags("outagesim", scenarioArgs(sc, o.Quick, seed), io.Discard)
			if err != nil {
				return fmt.Errorf("scenario %s: %w", sc.Name, err)
			}
			cfg := opts.Config
			strategies, err := sim.LookupStrategies(cfg.Strategies)
			if err != nil {
				return fmt.Errorf("scenario %s: %w", sc.Name, err)
			}
			s.configs = append(s.configs, cfg)
			s.runs = append(s.runs, make([]*sim.Result, len(strategies)))
			for j, info := range strategies {
				jobs = append(jobs, job{
					name:   fmt.Sprintf("%s seed %d %s", sc.Name, seed, info.Key),
					weight: float64(cfg.TotalCalls()),
					run: func(ctx context.Context) error {
						r := &sim.Runner{Config: cfg, Backend: unitsBackend{}}
						res, err := r.Run(ctx, info)
						if err != nil {
							return fmt.Errorf("scenario %s seed %d %s: %w", sc.Name, seed, info.Key, err)
						}
						s.runs[i][j] = res
						addTime(sc.Name, time.Duration(res.Wall))
						return nil
					},
				})
			}
		}
		all = append(all, s)
	}

	cells := gridCells(o.Seeds, o.Quick)
	grids := []struct {
		name string
		grid fleetsim.Grid
		out  []fleetsim.CellResult
	}{{name: "grid-breaker", grid: fleetsim.BreakerGrid()}, {name: "grid-budget", grid: fleetsim.BudgetGrid()}}
	for gi := range grids {
		g := &grids[gi]
		g.out = make([]fleetsim.CellResult, len(cells))
		for ci, c := range cells {
			jobs = append(jobs, job{
				name: fmt.Sprintf("%s %v", g.name, c), weight: gridWeight(g.grid, c),
				run: func(context.Context) error {
					t0 := time.Now()
					r, err := g.grid.RunCell(c)
					if err != nil {
						return err
					}
					g.out[ci] = r
					addTime("grid", time.Since(t0))
					return nil
				},
			})
		}
	}

	var bar *progress
	if o.Progress {
		var total float64
		for _, j := range jobs {
			total += j.weight
		}
		bar = newProgress(stderr, len(jobs), total)
	}
	if err := runJobs(ctx, jobs, o.Parallel, bar); err != nil {
		return err
	}

	used := o.Seeds
	if o.Quick {
		used = used[:1]
	}
	res := Results{Header: Header{Command: o.Command, Date: start.UTC().Format("2006-01-02 15:04 UTC"), Machine: machine(), Seeds: used, Quick: o.Quick}}
	for _, s := range all {
		e := ScenarioEntry{Name: s.Name, Table: s.Table, Args: s.Args, Seeds: s.seeds, Plot: s.Plot}
		for _, seed := range s.seeds {
			e.Commands = append(e.Commands, "go run ./cmd/outagesim "+strings.Join(scenarioArgs(s.Scenario, o.Quick, seed), " "))
		}
		res.Scenarios = append(res.Scenarios, e)
		res.Tables = append(res.Tables, outcomeTable(s))
		if s.Plot != "" {
			if err := sim.WritePlotFile(filepath.Join(o.Out, s.Plot), sim.NewReport(s.configs[0], s.runs[0])); err != nil {
				return err
			}
		}
	}
	res.Tables = append(res.Tables, costTable(all))
	res.Tables = append(res.Tables, breakerGridTable(fleetsim.Groups(grids[0].out)), budgetGridTable(fleetsim.Groups(grids[1].out)))
	gridNote := gridSummary(append(slices.Clone(grids[0].out), grids[1].out...))

	benchNote := ""
	switch {
	case !o.Bench:
		benchNote = "The peer benchmarks were skipped (-bench=false or -quick)."
	case o.BenchDir == "" || !exists(filepath.Join(o.BenchDir, "go.mod")):
		benchNote = fmt.Sprintf("The peer benchmarks were skipped: no bench module at %q (-bench-dir).", o.BenchDir)
	default:
		bar.note("running the peer benchmarks: go %s (in %s)", strings.Join(benchArgs(o.BenchTime, 3), " "), o.BenchDir)
		t0 := time.Now()
		t, err := runBench(ctx, o.BenchDir, benchArgs(o.BenchTime, 3))
		if err != nil {
			return err
		}
		timing["bench"] = time.Since(t0).Seconds()
		t.Note = fmt.Sprintf("`cd bench && go %s`: ranges over the 3 runs. Real time, so these figures vary from run to run and machine to machine.", strings.Join(benchArgs(o.BenchTime, 3), " "))
		res.Tables = append(res.Tables, t)
	}
	if benchNote != "" {
		res.Notes = append(res.Notes, benchNote)
	}
	res.Timing = Timing{TotalSeconds: time.Since(start).Seconds(), Seconds: timing}
	return writeFiles(o.Out, res, gridNote, benchNote)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// runJobs runs jobs, parallel at a time, the costliest first.
func runJobs(ctx context.Context, jobs []job, parallel int, bar *progress) error {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return jobs[order[a]].weight > jobs[order[b]].weight })
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for range min(parallel, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				if errs[i] = jobs[i].run(ctx); errs[i] != nil {
					cancel()
				}
				bar.step(jobs[i].name, jobs[i].weight)
			}
		})
	}
feed:
	for _, i := range order {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// machine describes the machine: OS/arch, cores, GOMAXPROCS, Go version,
// CPU model when known.
func machine() string {
	s := fmt.Sprintf("%s/%s, %d cores (GOMAXPROCS %d), %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return s + ", " + strings.TrimSpace(v)
			}
		}
	}
	return s
}

// headerMarkdown is the top of each Markdown file.
func headerMarkdown(title string, h Header, took float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	b.WriteString("Generated by the report command; do not edit by hand.\n\n")
	fmt.Fprintf(&b, "- Command: `%s`\n", h.Command)
	fmt.Fprintf(&b, "- Date: %s\n", h.Date)
	fmt.Fprintf(&b, "- Machine: %s\n", h.Machine)
	fmt.Fprintf(&b, "- Seeds: %s\n", seedList(h.Seeds))
	fmt.Fprintf(&b, "- Wall time of the whole report: %s\n\n", time.Duration(took*float64(time.Second)).Round(time.Second))
	return b.String()
}

func seedList(seeds []uint64) string {
	var s []string
	for _, v := range seeds {
		s = append(s, strconv.FormatUint(v, 10))
	}
	return strings.Join(s, ", ")
}

var fileTitles = map[string]string{
	TableFleet: "Outage scenarios: what each retry strategy does to the partner",
	TableScale: "Outage scenarios at scale",
	"cost.md":  "DynamoDB cost model",
	"grid.md":  "Fleet-shape grid",
	"bench.md": "Peer benchmarks",
}

var fileIntros = map[string]string{
	TableFleet: "Each scenario runs every strategy once per seed, in process, in virtual time (`-partner inproc`), with the in-memory stores and DynamoDB's capacity model; " +
		"a cell is the range (min–max) over the seeds, with (k/n) when only k of n seeds had a value. Columns as in cmd/outagesim/README.md: " +
		"load in outage = attempts reaching the partner during the outage ÷ new calls started during it; retries ÷ bound = what the global budget granted over its bound Ratio × requests + Floor; " +
		"store reads and writes per new call over the whole run; hottest item = the most units one store item took in one second (DynamoDB allows 1,000 WCU/s and 3,000 RCU/s).",
	TableScale: "As scenarios.md, for fleets of 10,000 environments and more, with the strategies that share state across the fleet: " +
		"there DynamoDB's per-item limits (1,000 WCU/s, 3,000 RCU/s) decide what the shared layers can do, so watch the hottest item and the throttled store requests.",
	"cost.md": "Request units per million calls, as DynamoDB's on-demand pricing bills the requests the stores make (the capacity model of internal/capacity), " +
		"before the outage (healthy), during it and over the whole run, and their price at the default us-east-1 on-demand prices (outagesim's -price-read, -price-write). Ranges over the seeds.",
	"grid.md": "The fleet-shape grid of cmd/outagesim/internal/fleetsim (what `HERDGUARD_GRID=full go test -run Grid ./cmd/outagesim/internal/fleetsim/` runs), in virtual time with the library's defaults, " +
		"a row per cell, ranges over the seeds; the last rows, 10,000 and 100,000 environments on the first seed, are the grid at scale, which the report runs and the grid tests do not judge.",
	"bench.md": "The healthy path of herdguard's Executor beside sony/gobreaker and failsafe-go (the bench/ module).",
}

// writeFiles writes the Markdown files and results.json.
func writeFiles(dir string, res Results, gridNote, benchNote string) error {
	files := map[string]*strings.Builder{}
	var order []string
	get := func(name string) *strings.Builder {
		b := files[name]
		if b == nil {
			b = &strings.Builder{}
			b.WriteString(headerMarkdown(fileTitles[name], res.Header, res.Timing.TotalSeconds))
			b.WriteString(fileIntros[name] + "\n\n")
			files[name] = b
			order = append(order, name)
		}
		return b
	}
	for _, t := range res.Tables {
		b := get(t.File)
		for _, e := range res.Scenarios {
			if e.Name == t.ID {
				fmt.Fprintf(b, "## %s\n\n`go run ./cmd/outagesim %s -partner inproc -seed N`, seeds %s; wall time %.1f s (sum of its runs).\n\n",
					e.Name, e.Args, seedList(e.Seeds), res.Timing.Seconds[e.Name])
				if e.Plot != "" {
					fmt.Fprintf(b, "![partner arrivals per second, seed %d](%s)\n\n", e.Seeds[0], e.Plot)
				}
			}
		}
		t.Markdown(b)
	}
	fmt.Fprintf(get("grid.md"), "%s; %.1f s of run time.\n", gridNote, res.Timing.Seconds["grid"])
	if benchNote != "" {
		fmt.Fprintf(get("bench.md"), "%s\n", benchNote)
	}
	for _, name := range order {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(files[name].String()), 0o644); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644)
}
