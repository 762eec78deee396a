package chart

import (
	"bytes"
	"image/color"
	"image/png"
	"testing"
)

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0.3: 0.5, 1: 1, 1.1: 2, 2.2: 2.5, 3: 5, 7: 10, 420: 500, 0: 1, -5: 1} {
		if got := niceStep(raw); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}

func TestChartDrawsSeriesBandsAndLegend(t *testing.T) {
	red := color.RGBA{0xd6, 0x27, 0x28, 0xff}
	band := color.RGBA{0xff, 0xd8, 0xd8, 0xff}
	c := Chart{
		Title: "title", XLabel: "x", YLabel: "y", X0: 0.5, DX: 1, XMin: 0, XMax: 10,
		Series: []Series{
			{Name: "flat", Color: red, Y: []float64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5}},
			{Name: "step", Color: Palette[0], Y: []float64{1, 1, 8, 8, 1}, Dashed: true, Step: true},
		},
		Bands:  []Band{{From: 2, To: 4, Label: "band", Color: band}},
		Width:  800,
		Height: 400,
	}
	img, err := c.Image()
	if err != nil {
		t.Fatal(err)
	}
	count := func(want color.RGBA) int {
		n := 0
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if img.RGBAAt(x, y) == want {
					n++
				}
			}
		}
		return n
	}
	// The flat series is a horizontal line across the plot, plus its legend sample.
	if n := count(red); n < 500 {
		t.Errorf("%d red pixels, want a line across the plot", n)
	}
	if n := count(band); n < 1000 {
		t.Errorf("%d band pixels, want a shaded band", n)
	}
	if n := count(Palette[0]); n < 100 {
		t.Errorf("%d pixels of the dashed step series", n)
	}
	var buf bytes.Buffer
	if err := c.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Fatal(err)
	}
}

func TestChartRejects(t *testing.T) {
	for name, c := range map[string]Chart{
		"no series": {DX: 1},
		"DX":        {DX: 0, Series: []Series{{Y: []float64{1}}}},
		"small":     {DX: 1, Width: 100, Height: 100, Series: []Series{{Y: []float64{1}}}},
		"x range":   {DX: 1, XMin: 5, XMax: 1, Series: []Series{{Y: []float64{1}}}},
	} {
		if _, err := c.Image(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
