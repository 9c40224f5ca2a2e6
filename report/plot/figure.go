package plot

import (
	"fmt"
	"math"
	"strings"
)

// Kind selects how a Figure draws its series.
type Kind int

const (
	// Lines draws each series as lines and/or markers over a numeric x axis
	// (or over Categories, when the figure has them).
	Lines Kind = iota
	// Bars draws a grouped bar chart: Categories on the x axis, one bar per
	// series in each category. A point's X is the index of its category.
	Bars
)

// Style is how a series is drawn in a Lines figure.
type Style int

const (
	// LineMarkers joins the points with a solid line and marks each point.
	LineMarkers Style = iota
	// MarkersOnly marks each point without joining them.
	MarkersOnly
	// DashedLine joins the points with a dashed line and no markers; meant
	// for fitted curves.
	DashedLine
	// LineOnly joins the points with a solid line and no markers.
	LineOnly
	// Reference joins the points with a dashed line and marks each with a
	// hollow marker (white inside, its colour as the edge); in a Bars
	// figure its bars are outlined, white inside: values published
	// elsewhere (a seed study's), drawn beside measured ones.
	Reference
)

// LegendPlacement says where the legend goes. The legend is always drawn
// outside the plot area so it never covers data.
type LegendPlacement int

const (
	// LegendAuto puts the legend on the right of the plot area, or below it
	// when the legend would take too much width.
	LegendAuto LegendPlacement = iota
	// LegendRight puts the legend on the right of the plot area.
	LegendRight
	// LegendBelow puts the legend below the x-axis label.
	LegendBelow
	// LegendNone draws no legend.
	LegendNone
)

// Point is one data point. YLow and YHigh are an optional error bar (for
// instance a 95% confidence interval): it is drawn when YLow < YHigh and both
// are finite. Points with a non-finite X or Y are skipped.
type Point struct {
	X, Y        float64
	YLow, YHigh float64
}

// HasErr reports whether the point carries an error bar.
func (p Point) HasErr() bool {
	return finite(p.YLow) && finite(p.YHigh) && p.YLow < p.YHigh
}

// Series is one named data set. In a Lines figure its points are joined in
// the order given (sort them by X first for a function-like curve).
type Series struct {
	// Name is shown in the legend; a series with an empty name has no
	// legend entry.
	Name   string
	Points []Point
	// Style is used in Lines figures; Bars figures ignore it.
	Style Style
	// Color overrides the automatic palette colour, as "#rrggbb" (for
	// example PaletteColor(0) to draw a fitted curve in the colour of the
	// data it fits). Series without an override take the palette colours in
	// order.
	Color string
}

// RefLine is a horizontal (Figure.HLines, at y = Value) or vertical
// (Figure.VLines, at x = Value) dashed reference line with an optional label.
type RefLine struct {
	Value float64
	Label string
}

// Band is a horizontal range of y (Figure.HBands), from From to To,
// shaded across the plot area under the data with dashed edges and its
// label inside its top edge: a range reported elsewhere, drawn for
// comparison.
type Band struct {
	From, To float64
	Label    string
}

// Limits fixes an axis range; it is used only when Min < Max (both finite).
type Limits struct {
	Min, Max float64
}

func (l Limits) set() bool { return finite(l.Min) && finite(l.Max) && l.Min < l.Max }

// Figure is one plot. The zero value of every option is a sensible default.
type Figure struct {
	// ID identifies the figure in the SVG (data-figure-id attribute).
	ID     string
	Title  string
	XLabel string
	YLabel string
	// Note is a caption line drawn under the figure (wrapped if long).
	Note string

	Kind Kind
	// Categories are the x-axis labels of a Bars figure (point X = index).
	// A Lines figure with Categories uses the same categorical x axis.
	// A Bars figure without Categories numbers its categories 0, 1, ...
	Categories []string
	Series     []Series

	HLines []RefLine
	VLines []RefLine
	HBands []Band

	// YFromData fits the y axis to the data instead of starting it at zero
	// (Bars figures always include zero).
	YFromData bool
	// XLimits and YLimits fix the axis ranges (data outside is clipped).
	XLimits Limits
	YLimits Limits
	// XLog draws a numeric x axis on a logarithmic scale: labelled ticks
	// at the powers of ten (1, 10, 100, 1k, 10k, ...; every second or
	// third power when the labels would collide), minor ticks at 2–9
	// times them when a decade is wide enough. Lines between points are
	// straight on the page, so a curve (a fit) must be given enough
	// points, spaced evenly in log x, to look like one (LogSpace). A log
	// axis cannot show zero or a negative x: when any point, VLine or
	// XLimits.Min is at or below zero, or there is no positive x at all,
	// the axis is drawn linear instead and no point is dropped. Bars and
	// categorical axes ignore XLog.
	XLog bool

	Legend LegendPlacement

	// Width and Height are the figure size in CSS pixels; 0 means 800×500.
	Width, Height int
	// Scale multiplies the PNG resolution (2 gives a crisp 1600×1000 image
	// for the default size); 0 means 1. The SVG is unaffected.
	Scale float64
}

const (
	defaultWidth  = 800
	defaultHeight = 500
)

// palette is the Okabe–Ito colour-blind-safe palette, ordered so that the
// first colours contrast best on white (yellow, the weakest, comes last).
var palette = [...]string{
	"#0072B2", // blue
	"#D55E00", // vermillion
	"#009E73", // bluish green
	"#CC79A7", // reddish purple
	"#E69F00", // orange
	"#56B4E9", // sky blue
	"#000000", // black
	"#F0E442", // yellow
}

// PaletteColor returns the i-th automatic series colour as "#rrggbb"
// (the palette repeats after 8 colours).
func PaletteColor(i int) string {
	if i < 0 {
		i = -i
	}
	return palette[i%len(palette)]
}

// SVG renders the figure as a standalone <svg> element.
func (f *Figure) SVG() ([]byte, error) {
	d, _, err := f.draw()
	if err != nil {
		return nil, err
	}
	return d.svg(), nil
}

// draw lays the figure out into the primitives both backends render.
func (f *Figure) draw() (*drawing, *fontSet, error) {
	fs, err := newFontSet()
	if err != nil {
		return nil, nil, err
	}
	d, err := f.layout(fs)
	return d, fs, err
}

// PNG renders the figure as a PNG image of Width×Height pixels times Scale.
func (f *Figure) PNG() ([]byte, error) {
	d, fs, err := f.draw()
	if err != nil {
		return nil, err
	}
	scale := f.Scale
	if scale == 0 {
		scale = 1
	}
	return d.png(scale, fs)
}

// check validates the options that cannot be defaulted.
func (f *Figure) check() error {
	if f.Width < 0 || f.Height < 0 || (f.Width != 0 && f.Width < 200) || (f.Height != 0 && f.Height < 150) ||
		f.Width > 8000 || f.Height > 8000 {
		return fmt.Errorf("plot: figure size %dx%d out of range (200..8000 × 150..8000)", f.Width, f.Height)
	}
	if f.Scale != 0 && !(f.Scale >= 0.25 && f.Scale <= 8) {
		return fmt.Errorf("plot: PNG scale %v out of range (0.25..8)", f.Scale)
	}
	w, h := float64(f.Width), float64(f.Height)
	if w == 0 {
		w = defaultWidth
	}
	if h == 0 {
		h = defaultHeight
	}
	if sc := f.Scale; sc > 0 && w*h*sc*sc > 64e6 {
		return fmt.Errorf("plot: PNG of %dx%d at scale %v is too large (over 64 megapixels)", f.Width, f.Height, f.Scale)
	}
	if f.Kind != Lines && f.Kind != Bars {
		return fmt.Errorf("plot: unknown figure kind %d", f.Kind)
	}
	for i, s := range f.Series {
		if s.Color != "" {
			if _, ok := parseHex(s.Color); !ok {
				return fmt.Errorf("plot: series %d (%q): colour %q is not #rrggbb", i, s.Name, s.Color)
			}
		}
		if s.Style < LineMarkers || s.Style > Reference {
			return fmt.Errorf("plot: series %d (%q): unknown style %d", i, s.Name, s.Style)
		}
	}
	return nil
}

// rgba is a non-premultiplied colour; a == 0 means "none".
type rgba struct{ r, g, b, a uint8 }

func (c rgba) none() bool { return c.a == 0 }

func (c rgba) hex() string { return fmt.Sprintf("#%02x%02x%02x", c.r, c.g, c.b) }

func parseHex(s string) (rgba, bool) {
	s = strings.TrimSpace(s)
	if len(s) != 7 || s[0] != '#' {
		return rgba{}, false
	}
	var v [3]uint8
	for i := range 3 {
		var x uint8
		for _, ch := range s[1+2*i : 3+2*i] {
			x <<= 4
			switch {
			case ch >= '0' && ch <= '9':
				x |= uint8(ch - '0')
			case ch >= 'a' && ch <= 'f':
				x |= uint8(ch-'a') + 10
			case ch >= 'A' && ch <= 'F':
				x |= uint8(ch-'A') + 10
			default:
				return rgba{}, false
			}
		}
		v[i] = x
	}
	return rgba{v[0], v[1], v[2], 255}, true
}

func mustHex(s string) rgba {
	c, ok := parseHex(s)
	if !ok {
		panic("plot: bad colour " + s)
	}
	return c
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
