package dynamo

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/budget"

	"github.com/herdguard/herdguard/internal/layout"
	"github.com/herdguard/herdguard/internal/names"
)

func TestBudgetKey(t *testing.T) {
	w := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		k    budget.Key
		want string
	}{
		{budget.Key{Name: "payments", Shard: 0, Window: w}, "b#payments#0#1700000000000"},
		{budget.Key{Name: "a.b-c_d:e", Shard: maxShards - 1, Window: w.Add(10 * time.Second)}, "b#a.b-c_d:e#1023#1700000010000"},
		{budget.Key{Name: "x", Shard: 3, Window: time.UnixMilli(0)}, "b#x#3#0"},
		// Sub-millisecond parts and locations do not change the key.
		{budget.Key{Name: "x", Window: w.Add(999 * time.Microsecond).In(time.FixedZone("X", 3600))}, "b#x#0#1700000000000"},
	} {
		got, err := budgetKey(c.k)
		if err != nil || got != c.want {
			t.Errorf("budgetKey(%v) = %q, %v; want %q", c.k, got, err, c.want)
		}
	}
}

func TestBudgetKeyRejects(t *testing.T) {
	w := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		k    budget.Key
		want string // part of the error
	}{
		{budget.Key{Name: "", Window: w}, "empty"},
		{budget.Key{Name: "a#b", Window: w}, "'#'"},
		{budget.Key{Name: "a/b", Window: w}, "'/'"},
		{budget.Key{Name: "caf\xe9", Window: w}, "character"},
		{budget.Key{Name: "tab\tname", Window: w}, "character"},
		{budget.Key{Name: strings.Repeat("n", names.MaxLen+1), Window: w}, "bytes long"},
		{budget.Key{Name: "x", Shard: -1, Window: w}, "shard -1"},
		{budget.Key{Name: "x", Shard: maxShards, Window: w}, "shard 1024"},
		{budget.Key{Name: "x"}, "zero time"},
		{budget.Key{Name: "x", Window: time.UnixMilli(-1)}, "outside"},
		{budget.Key{Name: "x", Window: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "outside"},
	} {
		got, err := budgetKey(c.k)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("budgetKey(%+v) = %q, %v; want an error mentioning %q", c.k, got, err, c.want)
		}
	}
}

// TestKeysNeverCollide builds the keys of many kinds and names, including
// names that look like the layout's own suffixes, and checks that no two
// distinct (kind, name, ...) tuples share a key.
func TestKeysNeverCollide(t *testing.T) {
	keyNames := []string{"a", "b", "ab", "a:b", "override", "w", "p", "0", "a.override", "c", "b.0", "payments"}
	windows := []int64{0, 1, 10, 1_700_000_000_000}
	seen := map[string]string{}
	add := func(key, what string) {
		if prev, ok := seen[key]; ok {
			t.Fatalf("key %q for %s and for %s", key, prev, what)
		}
		seen[key] = what
	}
	for _, n := range keyNames {
		add(layout.StateKey(n), "state "+n)
		add(layout.OverrideKey(n), "override "+n)
		for _, w := range windows {
			for shard := range 3 {
				k, err := budgetKey(budget.Key{Name: n, Shard: shard, Window: time.UnixMilli(w)})
				if err != nil {
					t.Fatal(err)
				}
				add(k, "budget "+n)
			}
		}
		for slot := range 11 {
			add(layout.ProbeKey(n, slot), "probe "+n)
		}
	}
	for key, what := range seen {
		if !strings.HasPrefix(key, "b#") && !strings.HasPrefix(key, "c#") {
			t.Errorf("key %q of %s has neither prefix", key, what)
		}
	}
}

// stringLike reports whether s matches the IAM StringLike pattern: '*'
// stands for any run of characters (none included), '?' for one, and
// everything else for itself, case included.
func stringLike(pattern, s string) bool {
	var re strings.Builder
	re.WriteString(`^(?s)`)
	for _, r := range pattern {
		switch r {
		case '*':
			re.WriteString(".*")
		case '?':
			re.WriteString(".")
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(s)
}

func TestStringLike(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"c#*#override", "c#p#override", true},
		{"c#*#override", "c##override", true},
		{"c#*#override", "c#override", false},
		{"c#*#override", "c#p#Override", false},
		{"c#*#override", "c#p#override#", false},
		{"c#*#override", "xc#p#override", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a.c", "abc", false},
	} {
		if got := stringLike(c.pattern, c.s); got != c.want {
			t.Errorf("stringLike(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// TestOverrideKeyPattern checks that the IAM pattern a deployment uses to
// keep its functions away from the override items matches the override key
// of every valid name and no other key the stores write: a Deny with it
// neither misses an override nor blocks a run-time write.
func TestOverrideKeyPattern(t *testing.T) {
	if OverrideKeyPattern != "c#*#override" {
		t.Errorf("OverrideKeyPattern = %q; SECURITY.md and template.yaml spell it c#*#override", OverrideKeyPattern)
	}
	// Names that end like the suffix or embed it are the interesting ones.
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, 1+r.IntN(40))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		name := string(b)
		switch r.IntN(4) {
		case 1:
			name += "override"
		case 2:
			name = "override" + name
		case 3:
			name = "override"
		}
		if err := names.Validate(name); err != nil {
			t.Fatalf("generated name %q is invalid: %v", name, err)
		}
		checkOverrideKeyPattern(t, name, r.Int64N(maxUnixMilli+1), r.IntN(maxShards), r.IntN(maxProbeSlots))
	}
}

// FuzzOverrideKeyPattern is TestOverrideKeyPattern's property over any
// valid name, window, shard and slot (go test -fuzz FuzzOverrideKeyPattern
// ./dynamo/); go test runs the seeds.
func FuzzOverrideKeyPattern(f *testing.F) {
	f.Add("payments", int64(1_700_000_000_000), 0, 0)
	f.Add("override", int64(0), maxShards-1, maxProbeSlots-1)
	f.Add("a.override", int64(maxUnixMilli), 3, 7)
	f.Add("override:x", int64(10), 1, 1)
	f.Fuzz(func(t *testing.T, name string, ms int64, shard, slot int) {
		if names.Validate(name) != nil || ms < 0 || ms > maxUnixMilli || shard < 0 || shard >= maxShards || slot < 0 || slot >= maxProbeSlots {
			t.Skip("not a key the stores write")
		}
		checkOverrideKeyPattern(t, name, ms, shard, slot)
	})
}

// checkOverrideKeyPattern fails t unless OverrideKeyPattern matches name's
// override key and none of its state, probe (slot) and budget (window ms,
// shard) keys.
func checkOverrideKeyPattern(t *testing.T, name string, ms int64, shard, slot int) {
	t.Helper()
	if k := layout.OverrideKey(name); !stringLike(OverrideKeyPattern, k) {
		t.Fatalf("pattern %q misses the override key %q", OverrideKeyPattern, k)
	}
	bk, err := budgetKey(budget.Key{Name: name, Shard: shard, Window: time.UnixMilli(ms)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{layout.StateKey(name), layout.ProbeKey(name, slot), bk} {
		if stringLike(OverrideKeyPattern, k) {
			t.Fatalf("pattern %q matches %q, which is not an override item", OverrideKeyPattern, k)
		}
	}
}

func TestTTLSecondsRoundsUp(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want int64
	}{{0, 0}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {1_700_000_020_001, 1_700_000_021}} {
		got, err := ttlSeconds("t", time.UnixMilli(c.ms))
		if err != nil || got != c.want {
			t.Errorf("ttlSeconds(%d ms) = %d, %v; want %d", c.ms, got, err, c.want)
		}
	}
	if _, err := ttlSeconds("expiry", time.Time{}); err == nil || !strings.Contains(err.Error(), "expiry is the zero time") {
		t.Errorf("ttlSeconds(zero) error = %v, want one naming the field", err)
	}
}

func TestValidateTableName(t *testing.T) {
	for _, ok := range []string{"herdguard", "abc", "a.b-c_D9", strings.Repeat("t", 255)} {
		if msg := checkTableName(ok); msg != "" {
			t.Errorf("checkTableName(%q) = %q, want nothing wrong", ok, msg)
		}
	}
	for _, bad := range []string{"", "ab", strings.Repeat("t", 256), "has space", "slash/", "hash#", "ünï"} {
		if msg := checkTableName(bad); msg == "" {
			t.Errorf("checkTableName(%q) found nothing wrong", bad)
		}
	}
}
