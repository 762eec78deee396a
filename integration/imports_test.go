package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestImportRules keeps the dependency graph pointing one way, as
// docs/ARCHITECTURE.md draws it: the root package herdguard (ConfigError)
// imports nothing of the module; retry → budget, breaker; local, dynamo →
// budget, breaker (local through internal/memstore and internal/ratio,
// dynamo sharing internal/layout, internal/slothint and internal/readspread
// with memstore);
// fleet on top of them all; and the AWS SDK only in dynamo, fleet (through
// dynamo), integration, cmd and examples. Packages under internal/ count by
// their first two path elements; the root counts as "herdguard".
func TestImportRules(t *testing.T) {
	const mod = "github.com/herdguard/herdguard"
	out, err := exec.Command("go", "list", "-deps=false", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	// allowed lists, per top-level package, the module packages it may import.
	allowed := map[string][]string{
		"herdguard":            {},
		"budget":               {"herdguard", "budget", "internal/names", "internal/storecall"},
		"breaker":              {"herdguard", "budget", "breaker", "internal/names", "internal/storecall"},
		"local":                {"herdguard", "budget", "breaker", "internal/memstore", "internal/ratio"},
		"dynamo":               {"herdguard", "budget", "breaker", "internal/layout", "internal/slothint", "internal/readspread", "internal/names"},
		"retry":                {"herdguard", "budget", "breaker", "internal/layers", "internal/ratio", "internal/hint", "internal/sleep"},
		"fleet":                {"herdguard", "budget", "breaker", "local", "dynamo", "retry", "internal/names", "internal/ratio"},
		"internal/memstore":    {"budget", "breaker", "internal/capacity", "internal/layout", "internal/slothint", "internal/readspread", "internal/names"},
		"internal/layout":      {"breaker"},
		"internal/slothint":    {"breaker"},
		"internal/readspread":  {},
		"internal/capacity":    {},
		"internal/names":       {},
		"internal/hint":        {},
		"internal/sleep":       {},
		"internal/fakeclock":   {},
		"internal/leakcheck":   {},
		"internal/storecall":   {},
		"internal/budgetcheck": {"budget"},
		"internal/layers":      {"budget"},
		"internal/ratio":       {"herdguard", "budget"},
	}
	awsFree := map[string]bool{"herdguard": true, "budget": true, "breaker": true, "local": true, "retry": true}
	for pkg := range allowed {
		if strings.HasPrefix(pkg, "internal/") {
			awsFree[pkg] = true
		}
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		top := topOf(strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/"))
		rules, ok := allowed[top]
		if !ok {
			continue // cmd, examples, integration may import anything
		}
		seen[top] = true
		for _, imp := range strings.Fields(imports) {
			if imp == mod || strings.HasPrefix(imp, mod+"/") {
				impTop := topOf(strings.TrimPrefix(strings.TrimPrefix(imp, mod), "/"))
				if !contains(rules, impTop) {
					t.Errorf("%s imports %s: %s may only import %v", pkg, imp, top, rules)
				}
			}
		}
		if awsFree[top] {
			deps, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, deps)
			}
			for _, d := range strings.Fields(string(deps)) {
				if strings.HasPrefix(d, "github.com/aws/") {
					t.Errorf("%s depends on %s: only dynamo, fleet, awsretry, integration, cmd and examples may use the AWS SDK", pkg, d)
				}
			}
		}
	}
	for _, want := range []string{"herdguard", "budget", "breaker", "local", "dynamo", "retry", "fleet", "internal/memstore", "internal/layout", "internal/slothint", "internal/capacity"} {
		if !seen[want] {
			t.Errorf("go list did not list %s: the rules check nothing there", want)
		}
	}
}

// TestLibraryLeavesTheLab keeps the lab out of the library's module: no
// package of the root module, nor its tests, imports a package of the
// nested modules (the simulator and the fleet-shape grid in cmd/outagesim,
// the fault proxy in integration, the examples, the peer benchmarks, the
// Lambda adapter). Listed with GOWORK=off, as a user's build sees the
// module.
func TestLibraryLeavesTheLab(t *testing.T) {
	const mod = "github.com/herdguard/herdguard"
	cmd := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}:{{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	nested := []string{"cmd", "integration", "examples", "bench", "lambda"}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		pkgs++
		for _, imp := range strings.Fields(imports) {
			rel, ok := strings.CutPrefix(imp, mod+"/")
			if !ok {
				continue
			}
			if top, _, _ := strings.Cut(rel, "/"); contains(nested, top) {
				t.Errorf("%s (or its tests) imports %s, a package of a nested module", pkg, imp)
			}
		}
	}
	if pkgs < 10 {
		t.Errorf("go list listed %d packages of the root module:\n%s", pkgs, out)
	}
}

// topOf returns the package's first path element, or its first two under
// internal/, or "herdguard" for the root package.
func topOf(rel string) string {
	if rel == "" {
		return "herdguard"
	}
	parts := strings.SplitN(rel, "/", 3)
	if parts[0] == "internal" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
