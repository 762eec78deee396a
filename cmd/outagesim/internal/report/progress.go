package report

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/sim"
)

// progress reports steps done on stderr: one line redrawn with a carriage
// return on a terminal, a line per step otherwise. The ETA is the elapsed
// time scaled by the work left, each step weighed by its estimated cost.
type progress struct {
	w        io.Writer
	terminal bool
	start    time.Time
	now      func() time.Time

	mu         sync.Mutex
	n, done    int
	total, got float64
}

func newProgress(w io.Writer, n int, total float64) *progress {
	return &progress{w: w, terminal: sim.IsTerminal(w), start: time.Now(), now: time.Now, n: n, total: total}
}

// step records a step of the given weight as done.
func (p *progress) step(name string, weight float64) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.got += weight
	elapsed := p.now().Sub(p.start)
	eta := "?"
	if p.got > 0 && p.total > p.got {
		eta = (time.Duration(float64(elapsed) * (p.total - p.got) / p.got)).Round(time.Second).String()
	} else if p.total <= p.got {
		eta = "0s"
	}
	line := fmt.Sprintf("report: %d/%d  elapsed %s  ETA %s  %s", p.done, p.n, elapsed.Round(time.Second), eta, name)
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

// note prints a line of its own (after the bar, on a terminal).
func (p *progress) note(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "report: "+format+"\n", args...)
}
