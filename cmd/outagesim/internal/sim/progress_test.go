package sim

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgressBar(&buf, 3)
	p.Start(1, "local token bucket")
	p.Update(0.5)
	p.Update(0.5) // no redraw
	p.Update(2)   // clamped
	p.Done()
	out := buf.String()
	draws := strings.Split(out, "\r\033[K")
	// Start draws 0%, then 50%, then 100%, then Done erases.
	if len(draws) != 5 || draws[4] != "" {
		t.Fatalf("draws %q", draws)
	}
	for i, want := range []string{"  0%", " 50%", "100%"} {
		if !strings.Contains(draws[i+1], "[2/3] local token bucket") || !strings.Contains(draws[i+1], want) {
			t.Errorf("draw %d = %q, want strategy 2/3 at %s", i, draws[i+1], want)
		}
	}
	if !strings.Contains(draws[2], "["+strings.Repeat("#", 15)+strings.Repeat(".", 15)+"]") {
		t.Errorf("half-way bar %q", draws[2])
	}
}
