package sim

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// ProgressBar draws a one-line progress bar, redrawn in place with a
// carriage return. It is meant for a terminal; the command only creates
// one when stderr is a terminal.
type ProgressBar struct {
	w     io.Writer
	n     int // strategies in the run
	width int
	start time.Time

	mu    sync.Mutex // guards the fields below and writes to w
	i     int
	label string
	last  int // last drawn permille, to skip redundant redraws
}

// NewProgressBar returns a bar for a run of n strategies.
func NewProgressBar(w io.Writer, n int) *ProgressBar {
	return &ProgressBar{w: w, n: n, width: 30, start: time.Now(), last: -1}
}

// Start begins strategy i (0-based) of the run.
func (p *ProgressBar) Start(i int, label string) {
	p.mu.Lock()
	p.i, p.label, p.last = i, label, -1
	p.mu.Unlock()
	p.Update(0)
}

// Update draws the current strategy at fraction frac of its new calls.
func (p *ProgressBar) Update(frac float64) {
	frac = min(max(frac, 0), 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	permille := int(frac * 1000)
	if permille == p.last {
		return
	}
	p.last = permille
	fill := int(frac * float64(p.width))
	fmt.Fprintf(p.w, "\r\033[K[%d/%d] %-26s [%s%s] %3d%%  %s",
		p.i+1, p.n, p.label, strings.Repeat("#", fill), strings.Repeat(".", p.width-fill),
		permille/10, time.Since(p.start).Round(time.Second))
}

// Done erases the bar.
func (p *ProgressBar) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r\033[K")
}
