package chart

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line: Y[i] is drawn at x = X0 + i*DX, joined by straight
// segments, or with Step as a level over [x - DX/2, x + DX/2].
type Series struct {
	Name   string
	Color  color.RGBA
	Y      []float64
	Dashed bool
	Step   bool
}

// Band is a shaded range of x, such as an outage.
type Band struct {
	From, To float64
	Label    string
	Color    color.RGBA
}

// Chart is a line chart.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	// X0 and DX place the samples: Y[i] at X0 + i*DX.
	X0, DX float64
	// XMin and XMax set the x axis; both zero: from X0 to the last sample.
	XMin, XMax    float64
	Series        []Series
	Bands         []Band
	Width, Height int // pixels; zero means 1200 × 600
}

// Palette is a set of distinguishable line colours (Tableau 10).
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
	{0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff}, {0xbc, 0xbd, 0x22, 0xff},
	{0x17, 0xbe, 0xcf, 0xff},
}

var (
	white     = color.RGBA{0xff, 0xff, 0xff, 0xff}
	black     = color.RGBA{0x20, 0x20, 0x20, 0xff}
	gridColor = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
)

const (
	marginLeft   = 70
	marginTop    = 40
	marginBottom = 50
	legendMin    = 200 // legend column width, at least
	lineHeight   = 13  // basicfont.Face7x13
	charWidth    = 7
)

// WritePNG renders the chart and encodes it as PNG.
func (c Chart) WritePNG(w io.Writer) error {
	img, err := c.Image()
	if err != nil {
		return err
	}
	return png.Encode(w, img)
}

// Image renders the chart.
func (c Chart) Image() (*image.RGBA, error) {
	if len(c.Series) == 0 {
		return nil, errors.New("chart: no series")
	}
	if c.DX <= 0 {
		return nil, fmt.Errorf("chart: DX %v must be positive", c.DX)
	}
	w, h := c.Width, c.Height
	if w == 0 {
		w = 1200
	}
	if h == 0 {
		h = 600
	}
	legendWidth := legendMin
	for _, s := range c.Series {
		legendWidth = max(legendWidth, 20+36+len(s.Name)*charWidth+10)
	}
	if w < marginLeft+legendWidth+100 || h < marginTop+marginBottom+100 {
		return nil, fmt.Errorf("chart: %d×%d is too small for the plot and its legend", w, h)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	plot := image.Rect(marginLeft, marginTop, w-legendWidth, h-marginBottom)

	// Ranges.
	xMin, xMax, yMax := c.X0, c.X0, 0.0
	for _, s := range c.Series {
		if n := len(s.Y); n > 0 {
			xMax = math.Max(xMax, c.X0+float64(n-1)*c.DX)
		}
		for _, y := range s.Y {
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				yMax = math.Max(yMax, y)
			}
		}
	}
	for _, b := range c.Bands {
		xMax = math.Max(xMax, b.To)
	}
	if c.XMin != 0 || c.XMax != 0 {
		if c.XMax <= c.XMin {
			return nil, fmt.Errorf("chart: XMax %v must be above XMin %v", c.XMax, c.XMin)
		}
		xMin, xMax = c.XMin, c.XMax
	}
	if xMax <= xMin {
		xMax = xMin + c.DX
	}
	yStep := niceStep(yMax / 5)
	yTop := math.Ceil(yMax/yStep) * yStep
	if yTop <= 0 {
		yTop, yStep = 1, 0.2
	}
	xStep := niceStep((xMax - xMin) / 10)
	px := func(x float64) float64 {
		return float64(plot.Min.X) + (x-xMin)/(xMax-xMin)*float64(plot.Dx())
	}
	py := func(y float64) float64 {
		return float64(plot.Max.Y) - y/yTop*float64(plot.Dy())
	}

	// Bands.
	for _, b := range c.Bands {
		r := image.Rect(int(px(b.From)), plot.Min.Y, int(px(b.To)), plot.Max.Y).Intersect(plot)
		draw.Draw(img, r, image.NewUniform(b.Color), image.Point{}, draw.Over)
		if b.Label != "" {
			text(img, r.Min.X+4, plot.Min.Y+lineHeight+2, b.Label, black)
		}
	}
	// Grid, ticks and tick labels.
	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		yy := int(math.Round(py(y)))
		hline(img, plot.Min.X, plot.Max.X, yy, gridColor)
		hline(img, plot.Min.X-5, plot.Min.X, yy, black)
		l := formatTick(y, yStep)
		text(img, plot.Min.X-8-len(l)*charWidth, yy+4, l, black)
	}
	for x := math.Ceil(xMin/xStep) * xStep; x <= xMax+xStep/1e6; x += xStep {
		xx := int(math.Round(px(x)))
		vline(img, xx, plot.Min.Y, plot.Max.Y, gridColor)
		vline(img, xx, plot.Max.Y, plot.Max.Y+5, black)
		l := formatTick(x, xStep)
		text(img, xx-len(l)*charWidth/2, plot.Max.Y+18, l, black)
	}
	// Axes.
	hline(img, plot.Min.X, plot.Max.X, plot.Max.Y, black)
	vline(img, plot.Min.X, plot.Min.Y, plot.Max.Y, black)
	// Titles.
	text(img, plot.Min.X+(plot.Dx()-len(c.Title)*charWidth)/2, 20, c.Title, black)
	text(img, plot.Min.X+(plot.Dx()-len(c.XLabel)*charWidth)/2, h-14, c.XLabel, black)
	text(img, 8, marginTop-8, c.YLabel, black)

	// Lines, clipped to the plot area.
	clip := plot.Inset(-1)
	for _, s := range c.Series {
		var dash float64
		for i := range s.Y {
			x := c.X0 + float64(i)*c.DX
			if s.Step {
				if i > 0 {
					dash = line(img, clip, px(x-c.DX/2), py(s.Y[i-1]), px(x-c.DX/2), py(s.Y[i]), s.Color, s.Dashed, dash)
				}
				dash = line(img, clip, px(x-c.DX/2), py(s.Y[i]), px(x+c.DX/2), py(s.Y[i]), s.Color, s.Dashed, dash)
			} else if i > 0 {
				dash = line(img, clip, px(x-c.DX), py(s.Y[i-1]), px(x), py(s.Y[i]), s.Color, s.Dashed, dash)
			}
		}
	}

	// Legend.
	lx, ly := plot.Max.X+20, plot.Min.Y+6
	for _, s := range c.Series {
		for dy := -1.0; dy <= 1; dy++ {
			line(img, img.Bounds(), float64(lx), float64(ly)+dy, float64(lx+28), float64(ly)+dy, s.Color, s.Dashed, 0)
		}
		text(img, lx+36, ly+4, s.Name, black)
		ly += lineHeight + 8
	}
	return img, nil
}

// niceStep rounds a raw step up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func formatTick(v, step float64) string {
	if step >= 1 && v == math.Trunc(v) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// line draws a 2-pixel-wide segment, dashed if asked (8 on, 5 off, the
// pattern carried over from segment to segment through the returned
// offset), and returns the dash offset at its end.
func line(img *image.RGBA, clip image.Rectangle, x0, y0, x1, y1 float64, c color.RGBA, dashed bool, dash float64) float64 {
	dx, dy := x1-x0, y1-y0
	length := math.Hypot(dx, dy)
	steps := int(math.Ceil(length * 2))
	if steps == 0 {
		steps = 1
	}
	for i := 0; i <= steps; i++ {
		t := float64(i) / float64(steps)
		if dashed && math.Mod(dash+t*length, 13) >= 8 {
			continue
		}
		x, y := x0+t*dx, y0+t*dy
		for _, o := range [...][2]float64{{0, 0}, {0.5, 0}, {0, 0.5}, {0.5, 0.5}} {
			p := image.Pt(int(math.Floor(x+o[0])), int(math.Floor(y+o[1])))
			if p.In(clip) {
				img.SetRGBA(p.X, p.Y, c)
			}
		}
	}
	return dash + length
}
