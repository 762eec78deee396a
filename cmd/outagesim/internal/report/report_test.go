package report

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/sim"
)

func quickReport(t *testing.T) (string, Results) {
	t.Helper()
	dir := t.TempDir()
	var stderr bytes.Buffer
	o := Options{Out: dir, Quick: true, Seeds: []uint64{7, 8}, Parallel: runtime.GOMAXPROCS(0), Progress: true, Command: "go run ./cmd/outagesim report -quick"}
	if err := Run(context.Background(), o, &stderr); err != nil {
		t.Fatal(err)
	}
	res := readResults(t, dir)
	// A line per step (stderr is not a terminal), ending with n/n.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	n := strconv.Itoa(len(lines))
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "report: "+n+"/"+n+" ") || !strings.Contains(last, "ETA") {
		t.Errorf("progress: last of %d lines is %q", len(lines), last)
	}
	return dir, res
}

func readResults(t *testing.T, dir string) Results {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	return res
}

// The quick report writes every file, each Markdown file headed by the
// command, the date, the machine and the seeds, and its tables carry the
// numbers of results.json.
func TestQuickReport(t *testing.T) {
	dir, res := quickReport(t)
	for _, name := range []string{"outage.png", "outage-lambda.png"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	if res.Header.Command != "go run ./cmd/outagesim report -quick" || res.Header.Machine != machine() || !reflect.DeepEqual(res.Header.Seeds, []uint64{7}) {
		t.Errorf("header %+v", res.Header)
	}
	md := map[string]string{}
	for _, name := range []string{TableFleet, "cost.md", "grid.md", "bench.md"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		md[name] = string(b)
		for _, want := range []string{"- Command: `" + res.Header.Command + "`\n", "- Date: " + res.Header.Date + "\n", "- Machine: " + res.Header.Machine + "\n", "- Seeds: 7\n"} {
			if !strings.Contains(md[name], want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	if !strings.Contains(md["bench.md"], "skipped") {
		t.Errorf("bench.md does not say the benchmarks were skipped:\n%s", md["bench.md"])
	}
	files := map[string]int{}
	for _, tb := range res.Tables {
		files[tb.File]++
		text, ok := md[tb.File]
		if !ok {
			t.Errorf("table %s: file %s not read", tb.ID, tb.File)
			continue
		}
		checkTable(t, text, tb)
	}
	if files[TableFleet] != 2 || files["cost.md"] != 1 || files["grid.md"] != 2 {
		t.Errorf("tables per file: %v", files)
	}
}

var number = regexp.MustCompile(`-?[0-9]+(\.[0-9]+)?`)

// checkTable finds table tb in text (after its scenario's heading or its
// title) and checks every cell against tb's values.
func checkTable(t *testing.T, text string, tb Table) {
	t.Helper()
	anchor := "## " + tb.ID + "\n"
	if tb.Title != "" {
		anchor = "### " + tb.Title + "\n"
	}
	i := strings.Index(text, anchor)
	if i < 0 {
		t.Errorf("%s: no %q", tb.File, anchor)
		return
	}
	rest := text[i:]
	rest = rest[strings.Index(rest, "\n|"):]
	var rows [][]string
	for _, line := range strings.Split(rest, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		rows = append(rows, cells)
	}
	if len(rows) != len(tb.Rows)+2 {
		t.Fatalf("%s %s: %d Markdown rows, %d in results.json", tb.File, tb.ID, len(rows)-2, len(tb.Rows))
	}
	for k, c := range tb.Columns {
		if rows[0][k] != c.Header {
			t.Errorf("%s %s: column %d is %q, results.json says %q", tb.File, tb.ID, k, rows[0][k], c.Header)
		}
	}
	for r, row := range tb.Rows {
		got := rows[r+2]
		if len(got) != len(tb.Columns) || len(row) != len(tb.Columns) {
			t.Fatalf("%s %s row %d: %d cells, %d columns", tb.File, tb.ID, r, len(got), len(tb.Columns))
		}
		for k, cell := range row {
			col := tb.Columns[k]
			if cell.Min == nil {
				if want := cell.Text; want != "" && got[k] != want || want == "" && got[k] != "–" {
					t.Errorf("%s %s row %d %s: %q, results.json has %+v", tb.File, tb.ID, r, col.Key, got[k], cell)
				}
				continue
			}
			want := []string{strconv.FormatFloat(*cell.Min, 'f', col.Digits, 64)}
			if hi := strconv.FormatFloat(*cell.Max, 'f', col.Digits, 64); hi != want[0] {
				want = append(want, hi)
			}
			if len(cell.Values) < cell.Of {
				want = append(want, strconv.Itoa(len(cell.Values)), strconv.Itoa(cell.Of))
			}
			if nums := number.FindAllString(strings.ReplaceAll(got[k], "–", " "), -1); !reflect.DeepEqual(nums, want) {
				t.Errorf("%s %s row %d %s: Markdown %q, results.json %v", tb.File, tb.ID, r, col.Key, got[k], want)
			}
		}
	}
}

// The report's figures are outagesim's: each scenario's command, run as
// `outagesim -json`, gives the same load and failures for every strategy.
func TestReportMatchesOutagesim(t *testing.T) {
	_, res := quickReport(t)
	for _, e := range res.Scenarios {
		var tb *Table
		for i := range res.Tables {
			if res.Tables[i].ID == e.Name {
				tb = &res.Tables[i]
			}
		}
		if tb == nil {
			t.Fatalf("no table for %s", e.Name)
		}
		args := strings.Fields(strings.TrimPrefix(e.Commands[0], "go run ./cmd/outagesim "))
		var out bytes.Buffer
		if code := sim.Main(context.Background(), "outagesim", append(args, "-json"), &out, io.Discard); code != sim.ExitOK {
			t.Fatalf("%s: exit %d", e.Commands[0], code)
		}
		var rep struct {
			Results []struct {
				Strategy      string  `json:"strategy"`
				Label         string  `json:"label"`
				LoadFactor    float64 `json:"load_factor"`
				FailedForGood int64   `json:"failed_for_good"`
			} `json:"results"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Results) != len(tb.Rows) {
			t.Fatalf("%s: %d strategies, table has %d rows", e.Name, len(rep.Results), len(tb.Rows))
		}
		col := func(key string) int {
			for k, c := range tb.Columns {
				if c.Key == key {
					return k
				}
			}
			t.Fatalf("no column %s", key)
			return -1
		}
		load, failed := col("load_factor"), col("failed_for_good")
		for i, r := range rep.Results {
			row := tb.Rows[i]
			if row[0].Text != r.Label || row[load].Values[0] != r.LoadFactor || row[failed].Values[0] != float64(r.FailedForGood) {
				t.Errorf("%s %s: report %s load %v failed %v, outagesim load %v failed %d",
					e.Name, r.Strategy, row[0].Text, row[load].Values, row[failed].Values, r.LoadFactor, r.FailedForGood)
			}
		}
	}
}

// The same seeds give the same tables.
func TestReportDeterministic(t *testing.T) {
	_, a := quickReport(t)
	_, b := quickReport(t)
	if !reflect.DeepEqual(a.Tables, b.Tables) {
		ja, _ := json.Marshal(a.Tables)
		jb, _ := json.Marshal(b.Tables)
		t.Errorf("two runs differ:\n%s\n%s", ja, jb)
	}
}

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string][]uint64{"1-3": {1, 2, 3}, "5": {5}, "1,4, 9": {1, 4, 9}, "2-2,7": {2, 7}} {
		got, err := parseSeeds(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseSeeds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "3-1", "1,1", "1-1000", "-2"} {
		if got, err := parseSeeds(in); err == nil {
			t.Errorf("parseSeeds(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	var errOut bytes.Buffer
	_, err := ParseFlags("outagesim report", []string{"-seeds", "x", "-parallel", "0", "extra"}, &errOut)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"-seeds", "-parallel: 0", `unexpected argument "extra"`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("errors %q lack %q", errOut.String(), want)
		}
	}
	o, err := ParseFlags("outagesim report", []string{"-quick"}, &errOut)
	if err != nil || o.Bench {
		t.Errorf("-quick: %+v, %v; want the benchmarks off", o, err)
	}
}

func TestParseBench(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkHealthyPath/herdguard-2  \t 100\t 120.5 ns/op\t 0 B/op\t 0 allocs/op\n" +
		"BenchmarkHealthyPath/herdguard-2  \t 100\t 110.5 ns/op\t 8 B/op\t 1 allocs/op\n" +
		"BenchmarkX-parallel-2 \t 10\t 3 ns/op\n" +
		"PASS\n"
	got := parseBench(out)
	if len(got) != 2 || got[0].Name != "BenchmarkHealthyPath/herdguard" || got[1].Name != "BenchmarkX-parallel" {
		t.Fatalf("parsed %+v", got)
	}
	if !reflect.DeepEqual(got[0].NsPerOp, []float64{120.5, 110.5}) || !reflect.DeepEqual(got[0].BPerOp, []float64{0, 8}) || !reflect.DeepEqual(got[0].AllocsOp, []float64{0, 1}) {
		t.Errorf("parsed %+v", got[0])
	}
	tb := benchTable(got)
	if s := tb.Rows[0][1].Format(tb.Columns[1]); s != "110.5–120.5" {
		t.Errorf("ns/op cell %q", s)
	}
}

// The committed docs/results is what the report wrote for today's
// scenarios: the same scenario list, and Markdown tables carrying the
// numbers of its results.json. (Run `go run ./cmd/outagesim report` after
// adding a scenario.)
func TestCommittedResults(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "docs", "results")
	res := readResults(t, dir)
	if res.Header.Quick || !strings.HasPrefix(res.Header.Command, "go run ./cmd/outagesim report") {
		t.Errorf("docs/results was written by %q (quick %v), not the full report", res.Header.Command, res.Header.Quick)
	}
	if len(res.Scenarios) != len(Scenarios) {
		t.Fatalf("docs/results has %d scenarios, Scenarios %d: regenerate it", len(res.Scenarios), len(Scenarios))
	}
	for i, s := range Scenarios {
		if e := res.Scenarios[i]; e.Name != s.Name || e.Args != s.Args || e.Table != s.Table || e.Plot != s.Plot {
			t.Errorf("docs/results scenario %d is %+v, Scenarios has %+v: regenerate it", i, e, s)
		}
	}
	md := map[string]string{}
	for _, tb := range res.Tables {
		if _, ok := md[tb.File]; !ok {
			b, err := os.ReadFile(filepath.Join(dir, tb.File))
			if err != nil {
				t.Fatal(err)
			}
			md[tb.File] = string(b)
		}
		checkTable(t, md[tb.File], tb)
	}
}
