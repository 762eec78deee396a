package report

import (
	"fmt"
	"math"
	"strings"
)

// Table is one Markdown table of the report, as results.json carries it:
// the Markdown is written from this, so the two hold the same numbers.
type Table struct {
	// File is the Markdown file the table is in; ID names it there.
	File    string   `json:"file"`
	ID      string   `json:"id"`
	Title   string   `json:"title"`
	Note    string   `json:"note,omitempty"`
	Columns []Column `json:"columns"`
	Rows    [][]Cell `json:"rows"`
}

// Column is a table's column: numeric cells are printed with Digits
// decimals and Unit after them.
type Column struct {
	Key    string `json:"key"`
	Header string `json:"header"`
	Digits int    `json:"digits"`
	Unit   string `json:"unit,omitempty"`
}

// Cell is a text, or a range of values over seeds: Values holds one value
// per seed that had one, Of the number of seeds.
type Cell struct {
	Text   string    `json:"text,omitempty"`
	Min    *float64  `json:"min,omitempty"`
	Max    *float64  `json:"max,omitempty"`
	Values []float64 `json:"values,omitempty"`
	Of     int       `json:"of,omitempty"`
}

// Text returns a text cell.
func Text(format string, args ...any) Cell { return Cell{Text: fmt.Sprintf(format, args...)} }

// Span returns the range of the values of of seeds (NaN values are left
// out: the seed had none).
func Span(of int, values ...float64) Cell {
	c := Cell{Of: of}
	for _, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		c.Values = append(c.Values, v)
		if c.Min == nil || v < *c.Min {
			c.Min = ptr(v)
		}
		if c.Max == nil || v > *c.Max {
			c.Max = ptr(v)
		}
	}
	return c
}

func ptr[T any](v T) *T { return &v }

// Format prints the cell for column col: "a", "a–b" (over the seeds), with
// " (k/n)" when only k of n seeds had a value, "–" when none had.
func (c Cell) Format(col Column) string {
	if c.Min == nil {
		if c.Text != "" {
			return c.Text
		}
		return "–"
	}
	lo, hi := FormatNumber(*c.Min, col.Digits), FormatNumber(*c.Max, col.Digits)
	s := lo + col.Unit
	if lo != hi {
		s = lo + "–" + hi + col.Unit
	}
	if len(c.Values) < c.Of {
		s += fmt.Sprintf(" (%d/%d)", len(c.Values), c.Of)
	}
	return s
}

// FormatNumber prints v with digits decimals.
func FormatNumber(v float64, digits int) string {
	s := fmt.Sprintf("%.*f", digits, v)
	if s == "-0" || strings.HasPrefix(s, "-0.") && strings.Trim(s[3:], "0") == "" {
		s = s[1:]
	}
	return s
}

// Markdown writes the table: its title as a heading, its note, and the
// rows.
func (t Table) Markdown(b *strings.Builder) {
	if t.Title != "" {
		fmt.Fprintf(b, "### %s\n\n", t.Title)
	}
	if t.Note != "" {
		fmt.Fprintf(b, "%s\n\n", t.Note)
	}
	b.WriteString("|")
	for _, c := range t.Columns {
		fmt.Fprintf(b, " %s |", c.Header)
	}
	b.WriteString("\n|")
	for i := range t.Columns {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, row := range t.Rows {
		b.WriteString("|")
		for i, c := range row {
			fmt.Fprintf(b, " %s |", c.Format(t.Columns[i]))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}
