package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The documents whose Go blocks must compile: README.md and every Markdown
// file under docs/, relative to the repository root.
var docGlobs = []string{"README.md", "docs/*.md", "docs/*/*.md"}

// TestDocsGoBlocks keeps the documents' Go code true. Every ```go block of
// README.md and docs/ is either
//
//   - a complete program (its first line starts "package main"), which is
//     written into a directory of this module and vetted with `go vet`
//     (which type-checks it: an unused variable or a wrong signature fails),
//     against the workspace's herdguard, or
//   - an excerpt, preceded by a line <!-- from PATH -->, that must appear
//     in PATH (relative to the repository root) exactly and as whole lines.
//
// Any other Go block fails the test. The README's "Go X.Y or later" must
// also name go.mod's go directive.
func TestDocsGoBlocks(t *testing.T) {
	var files []string
	for _, g := range docGlobs {
		m, err := filepath.Glob(filepath.Join("..", g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no documents found: the test runs in integration/, one level below the repository root")
	}
	for _, err := range checkDocs("..", files) {
		t.Error(err)
	}
	for _, err := range checkGoVersion("..") {
		t.Error(err)
	}
}

// TestDocCheckReportsDrift shows the checker failing: a program block that
// does not compile and an excerpt that no longer matches its file are each
// reported with the document and the line.
func TestDocCheckReportsDrift(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "broken.md")
	content := strings.Join([]string{
		"# Broken", // 1
		"",         // 2
		"```go",    // 3
		"package main",
		"",
		"import \"github.com/herdguard/herdguard/breaker\"",
		"",
		"func main() {",
		"\tbr, err := breaker.New(\"p\", breaker.Settings{})", // 9
		"\t_ = err",
		"}",
		"```",
		"",
		"<!-- from examples/quickstart/main.go -->", // 14
		"```go", // 15
		"\texec, err := retry.New(retry.Config{Breaker: nil})",
		"```",
		"",
		"```go", // 19
		"x := 1",
		"```",
		"",
		"<!-- from examples/quickstart/main.go -->",
		"```go",
		"func run(url string) error {",
		"```",
		"",
	}, "\n")
	if err := os.WriteFile(doc, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := checkDocs("..", []string{doc})
	want := []string{
		doc + ":9:", // the unused br, on its own line in the Markdown
		doc + ":15: the excerpt is not lines of examples/quickstart/main.go",
		doc + ":19: a go block must be a complete program",
	}
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = e.Error()
	}
	if len(got) != len(want) {
		t.Fatalf("checkDocs reported %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(got[0], "declared and not used") {
		t.Errorf("problem 0 = %q, want go vet's \"declared and not used\"", got[0])
	}
}

// TestCheckGoVersion: a README that names another Go version than go.mod is
// reported, one that names go.mod's is not.
func TestCheckGoVersion(t *testing.T) {
	for _, tc := range []struct {
		readme string
		ok     bool
	}{
		{"needs Go 1.25 or later.", true},
		{"needs Go 1.24 or later.", false},
		{"says nothing of versions.", false},
		{"Go 1.25 or later here, Go 1.26 or later there.", false},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module m\n\ngo 1.25.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(tc.readme), 0o644); err != nil {
			t.Fatal(err)
		}
		errs := checkGoVersion(dir)
		if (len(errs) == 0) != tc.ok {
			t.Errorf("README %q: errors %v, want ok=%v", tc.readme, errs, tc.ok)
		}
	}
}

// goBlock is one ```go block of a Markdown file.
type goBlock struct {
	doc  string // the Markdown file
	line int    // line of the opening fence, from 1
	code string // the lines between the fences, each ending in "\n"
	from string // the file it is an excerpt of, or ""
}

var fromComment = regexp.MustCompile(`^<!--\s*from\s+(\S+)\s*-->$`)

// goBlocks returns the ```go blocks of the Markdown file doc.
func goBlocks(doc string) ([]goBlock, error) {
	data, err := os.ReadFile(doc)
	if err != nil {
		return nil, err
	}
	var (
		blocks []goBlock
		cur    *goBlock
		fence  string // the fence of the block being read, "" outside one
		prev   string // the last non-blank line outside a block
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if trimmed == fence {
				if cur != nil {
					blocks = append(blocks, *cur)
				}
				cur, fence, prev = nil, "", trimmed
			} else if cur != nil {
				cur.code += line + "\n"
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
			if strings.TrimSpace(strings.TrimLeft(trimmed, "`")) == "go" {
				cur = &goBlock{doc: doc, line: n}
				if m := fromComment.FindStringSubmatch(prev); m != nil {
					cur.from = m[1]
				}
			}
			continue
		}
		if trimmed != "" {
			prev = trimmed
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if fence != "" {
		return nil, fmt.Errorf("%s: a code fence is not closed", doc)
	}
	return blocks, nil
}

// checkDocs checks the Go blocks of the Markdown files docs; root is the
// repository root, against which excerpts' paths are read. Problems come
// back in document order, each starting "FILE:LINE: ".
func checkDocs(root string, docs []string) []error {
	var (
		errs     []error
		programs []goBlock
	)
	for _, doc := range docs {
		blocks, err := goBlocks(doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, b := range blocks {
			switch {
			case b.from != "":
				if err := checkExcerpt(root, b); err != nil {
					errs = append(errs, err)
				}
			case strings.HasPrefix(b.code, "package main"):
				programs = append(programs, b)
			default:
				errs = append(errs, fmt.Errorf("%s:%d: a go block must be a complete program (package main) "+
					"or an excerpt marked by a line <!-- from FILE --> before it", b.doc, b.line))
			}
		}
	}
	errs = append(errs, vetPrograms(programs)...)
	sort.SliceStable(errs, func(i, j int) bool { return lessPos(errs[i].Error(), errs[j].Error()) })
	return errs
}

// checkExcerpt reports whether b's lines appear, whole and in order, in
// the file b is an excerpt of.
func checkExcerpt(root string, b goBlock) error {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.from)))
	if err != nil {
		return fmt.Errorf("%s:%d: the excerpt's file: %v", b.doc, b.line, err)
	}
	if b.code == "" || !strings.Contains("\n"+string(src), "\n"+b.code) {
		return fmt.Errorf("%s:%d: the excerpt is not lines of %s as they are now: copy them again", b.doc, b.line, b.from)
	}
	return nil
}

// vetPrograms writes each program into a directory of this module (one
// whose name starts with "_", so that ./... patterns skip it) and runs go
// vet over them, in the workspace. Diagnostics are mapped back to the
// Markdown lines.
func vetPrograms(programs []goBlock) []error {
	if len(programs) == 0 {
		return nil
	}
	tmp, err := os.MkdirTemp(".", "_doccheck-")
	if err != nil {
		return []error{err}
	}
	defer os.RemoveAll(tmp)
	byDir := map[string]goBlock{}
	var pkgs []string
	for i, b := range programs {
		dir := filepath.Join(tmp, "b"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return []error{err}
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.code), 0o644); err != nil {
			return []error{err}
		}
		byDir[filepath.Base(dir)] = b
		pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
	}
	cmd := exec.Command(goTool(), append([]string{"vet"}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return []error{fmt.Errorf("go vet: %v", err)}
	}
	// Diagnostics read "_doccheck-N/bI/main.go:LINE:COL: message" (maybe
	// after "vet: " or "./"); the rest ("# package" headers) is dropped
	// unless nothing could be mapped.
	diag := regexp.MustCompile(`(?m)^(?:vet: )?(?:\./)?` + regexp.QuoteMeta(filepath.ToSlash(filepath.Clean(tmp))) + `/(b\d+)/main\.go:(\d+)(?::\d+)?: (.*)$`)
	var errs []error
	for _, m := range diag.FindAllStringSubmatch(filepath.ToSlash(string(out)), -1) {
		b := byDir[m[1]]
		n, _ := strconv.Atoi(m[2])
		errs = append(errs, fmt.Errorf("%s:%d: %s", b.doc, b.line+n, m[3]))
	}
	if len(errs) == 0 {
		errs = append(errs, fmt.Errorf("go vet of the documents' programs failed:\n%s", out))
	}
	return errs
}

// lessPos orders "FILE:LINE: ..." messages by file, then line.
func lessPos(a, b string) bool {
	fa, la := splitPos(a)
	fb, lb := splitPos(b)
	if fa != fb {
		return fa < fb
	}
	return la < lb
}

func splitPos(s string) (string, int) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 3 {
		return s, 0
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return s, 0
	}
	return parts[0], n
}

var (
	goDirective   = regexp.MustCompile(`(?m)^go (\d+\.\d+)(?:\.\d+)?\s*$`)
	readmeVersion = regexp.MustCompile(`Go (\d+\.\d+) or later`)
)

// checkGoVersion reports a README.md in root that does not say "Go X.Y or
// later" with X.Y the go directive of root's go.mod, or that says it of
// another version too.
func checkGoVersion(root string) []error {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return []error{err}
	}
	m := goDirective.FindSubmatch(mod)
	if m == nil {
		return []error{errors.New("go.mod has no go directive")}
	}
	want := string(m[1])
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return []error{err}
	}
	found := readmeVersion.FindAllSubmatch(readme, -1)
	if len(found) == 0 {
		return []error{fmt.Errorf("README.md does not say \"Go %s or later\" (go.mod's go directive)", want)}
	}
	var errs []error
	for _, f := range found {
		if string(f[1]) != want {
			errs = append(errs, fmt.Errorf("README.md says %q but go.mod's go directive is %s", f[0], want))
		}
	}
	return errs
}
