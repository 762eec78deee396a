package sim

import (
	"bufio"
	"fmt"
	"image/color"
	"os"
	"time"

	"github.com/herdguard/herdguard/cmd/outagesim/internal/chart"
)

// Chart draws partner arrivals per simulated second, one line per
// strategy, over the partner's capacity and the new calls per second, with
// the outage shaded.
func Chart(r Report) chart.Chart {
	c := r.Config
	// Only the seconds in which new calls start: a tail second holds the
	// last few retries and would draw a misleading drop.
	secs := int(time.Duration(c.Duration) / time.Second)
	sched := Schedule{Normal: c.Capacity, Outage: c.OutageCapacity,
		OutageStart: time.Duration(c.OutageStart), OutageLength: time.Duration(c.OutageLength)}
	capY := make([]float64, secs)
	newY := make([]float64, secs)
	for i := range capY {
		capY[i] = float64(sched.Capacity(i))
	}
	for i := range newY {
		newY[i] = float64(c.Rate)
	}
	var series []chart.Series
	for i, res := range r.Results {
		y := make([]float64, min(len(res.Seconds), secs))
		for j := range y {
			y[j] = float64(res.Seconds[j].Arrivals)
		}
		series = append(series, chart.Series{
			Name:  fmt.Sprintf("%s (%.2fx)", res.Label, res.LoadFactor),
			Color: chart.Palette[i%len(chart.Palette)],
			Y:     y,
		})
	}
	series = append(series,
		chart.Series{Name: "partner capacity", Color: color.RGBA{0x30, 0x30, 0x30, 0xff}, Y: capY, Dashed: true, Step: true},
		chart.Series{Name: "new calls per second", Color: color.RGBA{0x99, 0x99, 0x99, 0xff}, Y: newY, Dashed: true, Step: true},
	)
	fleet := fmt.Sprintf("%d environments", c.Envs)
	if c.ScaleOut {
		fleet = fmt.Sprintf("%d-%d environments (scale-out)", c.Envs, c.MaxEnvs)
	}
	outage := "an outage"
	if c.Outage != "" {
		outage = "a " + c.Outage + " outage"
	}
	return chart.Chart{
		Title:  fmt.Sprintf("Partner arrivals per second during %s: %s, %d new calls/s", outage, fleet, c.Rate),
		XLabel: "simulated time (s)",
		YLabel: "attempts reaching the partner per second",
		X0:     0.5, // second i is drawn at its middle
		DX:     1,
		XMin:   0,
		XMax:   float64(secs),
		Series: series,
		Bands: []chart.Band{{
			From:  time.Duration(c.OutageStart).Seconds(),
			To:    time.Duration(c.OutageStart + c.OutageLength).Seconds(),
			Label: fmt.Sprintf("outage: capacity %d/s", c.OutageCapacity),
			Color: color.RGBA{0xff, 0xd8, 0xd8, 0xff},
		}},
	}
}

// WritePlotFile writes the chart of r to path as PNG.
func WritePlotFile(path string, r Report) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("plot: %w", cerr)
		}
	}()
	w := bufio.NewWriter(f)
	if err := Chart(r).WritePNG(w); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
