package integration

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportRulesOfAdapters extends TestImportRules to the packages built on
// top of retry: awsretry (the AWS SDK adapter) and emf (metrics). Both may
// import retry, budget and breaker; only awsretry may use the AWS SDK. No
// other library package may depend on awsretry, dynamo least of all: the
// stores' own DynamoDB client must never draw from the budgets and the
// breaker it serves (awsretry's tests also show that dynamo.NewClient
// ignores an awsretry retryer handed to it in an aws.Config).
func TestImportRulesOfAdapters(t *testing.T) {
	const mod = "github.com/herdguard/herdguard"
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", mod+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	// The internal packages retry and its dependencies use are allowed
	// through them.
	internal := []string{"herdguard", "internal/hint", "internal/layers", "internal/names", "internal/ratio", "internal/sleep", "internal/storecall"}
	for pkg, allowed := range map[string][]string{
		"awsretry": append([]string{"retry", "budget", "breaker", "awsretry"}, internal...),
		"emf":      append([]string{"retry", "budget", "breaker", "emf"}, internal...),
	} {
		for _, d := range deps(pkg) {
			rel, ok := strings.CutPrefix(d, mod+"/")
			if d == mod {
				rel, ok = "herdguard", true
			}
			if ok && !contains(allowed, rel) {
				t.Errorf("%s depends on %s: it may only import %v of this module", pkg, rel, allowed[:3])
			}
			if pkg == "emf" && strings.HasPrefix(d, "github.com/aws/") {
				t.Errorf("emf depends on %s: it writes JSON lines and needs no AWS SDK", d)
			}
		}
	}
	for _, pkg := range []string{"budget", "breaker", "local", "dynamo", "retry", "emf", "fleet"} {
		for _, d := range deps(pkg) {
			if d == mod+"/awsretry" {
				t.Errorf("%s depends on awsretry", pkg)
			}
		}
	}
}
