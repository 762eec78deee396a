package integration

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportRules keeps the dependency graph pointing one way, as
// docs/ARCHITECTURE.md draws it: retry → budget, breaker; local, dynamo →
// budget, breaker (local through internal/memstore, dynamo sharing
// internal/layout and internal/slothint with it); and the AWS SDK only in
// dynamo, integration, cmd and examples. Packages under internal/ count by
// their first two path elements.
func TestImportRules(t *testing.T) {
	const mod = "github.com/herdguard/herdguard"
	out, err := exec.Command("go", "list", "-deps=false", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	// allowed lists, per top-level package, the module packages it may import.
	allowed := map[string][]string{
		"budget":            {"budget"},
		"breaker":           {"budget", "breaker", "internal/attempt"},
		"local":             {"budget", "breaker", "internal/memstore"},
		"dynamo":            {"budget", "breaker", "internal/layout", "internal/slothint"},
		"retry":             {"budget", "breaker", "internal/attempt"},
		"internal/memstore": {"budget", "breaker", "internal/capacity", "internal/layout", "internal/slothint"},
		"internal/layout":   {"breaker"},
		"internal/slothint": {"breaker"},
		"internal/capacity": {},
		"internal/attempt":  {},
	}
	awsFree := map[string]bool{"budget": true, "breaker": true, "local": true, "retry": true,
		"internal/memstore": true, "internal/layout": true, "internal/slothint": true, "internal/capacity": true, "internal/attempt": true}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
		top := topOf(rel)
		rules, ok := allowed[top]
		if !ok {
			continue // cmd, examples, integration may import anything
		}
		seen++
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, mod+"/") {
				impTop := topOf(strings.TrimPrefix(imp, mod+"/"))
				if !contains(rules, impTop) {
					t.Errorf("%s imports %s: %s may only import %v", rel, imp, top, rules)
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
					t.Errorf("%s depends on %s: only dynamo, integration, cmd and examples may use the AWS SDK", rel, d)
				}
			}
		}
	}
	if seen < 9 {
		t.Fatalf("checked %d library packages, want at least 9 (budget, breaker, local, dynamo, retry, internal/memstore, internal/layout, internal/slothint, internal/capacity)", seen)
	}
}

// topOf returns the package's first path element, or its first two under
// internal/.
func topOf(rel string) string {
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
