package report

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// benchArgs are the go test arguments of the peer benchmarks (bench/):
// short runs, enough for the order of magnitude.
func benchArgs(benchtime string, count int) []string {
	return []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", benchtime, "-count", strconv.Itoa(count), "."}
}

// benchResult is one benchmark over its -count runs.
type benchResult struct {
	Name     string
	NsPerOp  []float64
	BPerOp   []float64
	AllocsOp []float64
}

// parseBench reads go test -bench output: one line per run of a
// benchmark, in the order they ran; the -GOMAXPROCS suffix is dropped.
func parseBench(out string) []*benchResult {
	var res []*benchResult
	byName := map[string]*benchResult{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := byName[name]
		if b == nil {
			b = &benchResult{Name: name}
			byName[name] = b
			res = append(res, b)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				b.NsPerOp = append(b.NsPerOp, v)
			case "B/op":
				b.BPerOp = append(b.BPerOp, v)
			case "allocs/op":
				b.AllocsOp = append(b.AllocsOp, v)
			}
		}
	}
	return res
}

// runBench runs the benchmarks in dir and returns their table.
func runBench(ctx context.Context, dir string, args []string) (Table, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Table{}, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return benchTable(parseBench(string(out))), nil
}

func benchTable(res []*benchResult) Table {
	t := Table{File: "bench.md", ID: "bench", Title: "Healthy path, herdguard and its peers",
		Columns: []Column{{Key: "benchmark", Header: "benchmark"},
			{Key: "ns_per_op", Header: "ns/op", Digits: 1}, {Key: "bytes_per_op", Header: "B/op"}, {Key: "allocs_per_op", Header: "allocs/op"}}}
	for _, b := range res {
		t.Rows = append(t.Rows, []Cell{Text("%s", strings.TrimPrefix(b.Name, "Benchmark")),
			Span(len(b.NsPerOp), b.NsPerOp...), Span(len(b.BPerOp), b.BPerOp...), Span(len(b.AllocsOp), b.AllocsOp...)})
	}
	return t
}
