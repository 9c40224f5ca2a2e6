package plot

import "math"

// pt is a point in pixel coordinates (y grows downwards).
type pt struct{ x, y float64 }

type primKind uint8

const (
	primPath    primKind = iota // open polylines (sub), stroked
	primPolygon                 // closed polygon (sub[0]), filled and/or stroked
	primRect                    // x, y, w, h; filled and/or stroked
	primCircle                  // centre x, y, radius r; filled and/or stroked
	primText                    // text at x, y (baseline)
)

type anchor uint8

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

// prim is one drawing primitive. Both backends render exactly these.
type prim struct {
	kind  primKind
	class string // SVG class (also lets tests find elements)

	sub        [][]pt
	x, y, w, h float64
	r          float64

	fill, stroke rgba
	sw           float64   // stroke width
	dash         []float64 // stroke dash pattern (on, off, ...)

	text   string
	size   float64
	anchor anchor
	rot    bool // rotated 90° counter-clockwise about (x, y)
	bold   bool
}

// drawing is the laid-out figure: a canvas size and primitives in paint order.
type drawing struct {
	w, h  float64
	id    string
	title string
	desc  string
	prims []prim

	xa, ya axis // the plot axes (kept for tests)
}

func (d *drawing) add(p prim) { d.prims = append(d.prims, p) }

func (d *drawing) path(class string, sub [][]pt, stroke rgba, sw float64, dash []float64) {
	if len(sub) == 0 {
		return
	}
	d.add(prim{kind: primPath, class: class, sub: sub, stroke: stroke, sw: sw, dash: dash})
}

func (d *drawing) line(class string, x0, y0, x1, y1 float64, stroke rgba, sw float64, dash []float64) {
	d.path(class, [][]pt{{{x0, y0}, {x1, y1}}}, stroke, sw, dash)
}

func (d *drawing) rect(class string, x, y, w, h float64, fill, stroke rgba, sw float64) {
	d.add(prim{kind: primRect, class: class, x: x, y: y, w: w, h: h, fill: fill, stroke: stroke, sw: sw})
}

func (d *drawing) text(class, s string, x, y, size float64, a anchor, col rgba, bold, rot bool) {
	if s == "" {
		return
	}
	d.add(prim{kind: primText, class: class, text: s, x: x, y: y, size: size, anchor: a, fill: col, bold: bold, rot: rot})
}

// crisp snaps a coordinate so that a line of width sw (in CSS pixels) covers
// whole pixels at scale 1 and 2.
func crisp(v, sw float64) float64 {
	if int(math.Round(sw))%2 == 1 {
		return math.Floor(v) + 0.5
	}
	return math.Round(v)
}

// markerShape is the shape of the markers of one series.
type markerShape int

const (
	markCircle markerShape = iota
	markSquare
	markTriangle
	markDiamond
	markTriangleDown
	markPentagon
	markStar
	markHexagon
	numMarkers
)

// marker appends a marker of the given shape centred at (x, y) with a
// nominal radius r.
func (d *drawing) marker(class string, shape markerShape, x, y, r float64, fill rgba) {
	d.markerEdged(class, shape, x, y, r, fill, rgba{255, 255, 255, 255}, 0.8)
}

// hollowMarker is a marker white inside with an edge of colour c (a
// Reference series').
func (d *drawing) hollowMarker(class string, shape markerShape, x, y, r float64, c rgba) {
	d.markerEdged(class, shape, x, y, r, rgba{255, 255, 255, 255}, c, 1.8)
}

func (d *drawing) markerEdged(class string, shape markerShape, x, y, r float64, fill, edge rgba, ew float64) {
	if shape == markCircle {
		d.add(prim{kind: primCircle, class: class, x: x, y: y, r: r, fill: fill, stroke: edge, sw: ew})
		return
	}
	var pts []pt
	regular := func(n int, rad, rot float64) {
		for i := range n {
			a := rot + 2*math.Pi*float64(i)/float64(n)
			pts = append(pts, pt{x + rad*math.Cos(a), y + rad*math.Sin(a)})
		}
	}
	switch shape {
	case markSquare:
		s := r * 0.9
		pts = []pt{{x - s, y - s}, {x + s, y - s}, {x + s, y + s}, {x - s, y + s}}
	case markTriangle:
		regular(3, r*1.3, -math.Pi/2)
		shift(pts, 0, r*0.2)
	case markTriangleDown:
		regular(3, r*1.3, math.Pi/2)
		shift(pts, 0, -r*0.2)
	case markDiamond:
		regular(4, r*1.25, -math.Pi/2)
	case markPentagon:
		regular(5, r*1.1, -math.Pi/2)
	case markHexagon:
		regular(6, r*1.05, 0)
	case markStar:
		for i := range 10 {
			rad := r * 1.4
			if i%2 == 1 {
				rad = r * 0.6
			}
			a := -math.Pi/2 + math.Pi*float64(i)/5
			pts = append(pts, pt{x + rad*math.Cos(a), y + rad*math.Sin(a)})
		}
	}
	d.add(prim{kind: primPolygon, class: class, sub: [][]pt{pts}, fill: fill, stroke: edge, sw: ew})
}

func shift(pts []pt, dx, dy float64) {
	for i := range pts {
		pts[i].x += dx
		pts[i].y += dy
	}
}

// clipSegment clips the segment a–b to the rectangle (Liang–Barsky).
func clipSegment(a, b pt, x0, y0, x1, y1 float64) (pt, pt, bool) {
	t0, t1 := 0.0, 1.0
	dx, dy := b.x-a.x, b.y-a.y
	for _, e := range [4][2]float64{{-dx, a.x - x0}, {dx, x1 - a.x}, {-dy, a.y - y0}, {dy, y1 - a.y}} {
		p, q := e[0], e[1]
		if p == 0 {
			if q < 0 {
				return a, b, false
			}
			continue
		}
		t := q / p
		if p < 0 {
			if t > t1 {
				return a, b, false
			}
			t0 = math.Max(t0, t)
		} else {
			if t < t0 {
				return a, b, false
			}
			t1 = math.Min(t1, t)
		}
	}
	return pt{a.x + t0*dx, a.y + t0*dy}, pt{a.x + t1*dx, a.y + t1*dy}, true
}

// clipPolyline clips a polyline to the rectangle, returning the visible
// pieces. A single point inside the rectangle is kept as a one-point piece.
func clipPolyline(p []pt, x0, y0, x1, y1 float64) [][]pt {
	inside := func(q pt) bool { return q.x >= x0 && q.x <= x1 && q.y >= y0 && q.y <= y1 }
	if len(p) == 1 {
		if inside(p[0]) {
			return [][]pt{{p[0]}}
		}
		return nil
	}
	var out [][]pt
	var cur []pt
	for i := 0; i+1 < len(p); i++ {
		a, b, ok := clipSegment(p[i], p[i+1], x0, y0, x1, y1)
		if !ok {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		if len(cur) == 0 || cur[len(cur)-1] != a {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = []pt{a}
		}
		cur = append(cur, b)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
