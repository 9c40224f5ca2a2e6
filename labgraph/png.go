package labgraph

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/gomonobold"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// pngScale is the PNG's device pixels per layout pixel (sharp on
// high-density screens), pngMaxPixels the most it paints: a very large
// lab is drawn at a smaller scale instead.
const (
	pngScale     = 2.0
	pngMaxPixels = 16e6
)

// PNG renders the graph as a PNG image: the SVG's primitives rasterised
// in pure Go (golang.org/x/image/vector, the Go Mono fonts).
func (g *Graph) PNG() ([]byte, error) {
	c := g.layout()
	s := pngScale
	if c.w*c.h*s*s > pngMaxPixels {
		s = math.Sqrt(pngMaxPixels / (c.w * c.h))
	}
	img := image.NewRGBA(image.Rect(0, 0, int(math.Ceil(c.w*s)), int(math.Ceil(c.h*s))))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	p, err := newPainter(img, s)
	if err != nil {
		return nil, err
	}
	for i := range c.prims {
		p.paint(&c.prims[i])
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type painter struct {
	img          *image.RGBA
	s            float64
	z            vector.Rasterizer
	regular, bld *opentype.Font
	faces        map[[2]float64]font.Face
}

func newPainter(img *image.RGBA, s float64) (*painter, error) {
	r, err := opentype.Parse(gomono.TTF)
	if err != nil {
		return nil, err
	}
	b, err := opentype.Parse(gomonobold.TTF)
	if err != nil {
		return nil, err
	}
	return &painter{img: img, s: s, regular: r, bld: b, faces: map[[2]float64]font.Face{}}, nil
}

func (p *painter) paint(q *prim) {
	switch q.kind {
	case primRect:
		outer := roundRect(q.x*p.s, q.y*p.s, q.w*p.s, q.h*p.s, q.rx*p.s)
		if q.fill != "" {
			p.fill(hexColor(q.fill), outer)
		}
		if q.stroke == "" || q.sw <= 0 {
			return
		}
		hw := q.sw * p.s / 2
		if q.dash {
			// a dashed outline: the four sides as dashed lines
			x0, y0, x1, y1 := q.x, q.y, q.x+q.w, q.y+q.h
			p.polyline([]pt{{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}, {x0, y0}}, q.sw, true, hexColor(q.stroke))
			return
		}
		ring := roundRect(q.x*p.s-hw, q.y*p.s-hw, q.w*p.s+2*hw, q.h*p.s+2*hw, q.rx*p.s+hw)
		hole := roundRect(q.x*p.s+hw, q.y*p.s+hw, q.w*p.s-2*hw, q.h*p.s-2*hw, max(0, q.rx*p.s-hw))
		for i, j := 0, len(hole)-1; i < j; i, j = i+1, j-1 {
			hole[i], hole[j] = hole[j], hole[i] // the other way round: a hole
		}
		p.fill(hexColor(q.stroke), ring, hole)
	case primLine:
		p.polyline(q.pts, q.sw, q.dash, hexColor(q.stroke))
	case primText:
		p.text(q)
	}
}

// polyline strokes a line of axis-parallel segments (all the graph
// draws) as rectangles, square ends; dashed 6 on, 4 off.
func (p *painter) polyline(pts []pt, sw float64, dash bool, col color.Color) {
	hw := sw / 2
	var polys [][]pt
	rect := func(a, b pt) {
		x0, x1 := min(a.x, b.x)-hw, max(a.x, b.x)+hw
		y0, y1 := min(a.y, b.y)-hw, max(a.y, b.y)+hw
		polys = append(polys, []pt{{x0 * p.s, y0 * p.s}, {x1 * p.s, y0 * p.s}, {x1 * p.s, y1 * p.s}, {x0 * p.s, y1 * p.s}})
	}
	for i := 0; i+1 < len(pts); i++ {
		a, b := pts[i], pts[i+1]
		if !dash {
			rect(a, b)
			continue
		}
		l := math.Hypot(b.x-a.x, b.y-a.y)
		for t := 0.0; t < l; t += 10 {
			e := min(t+6, l)
			rect(pt{a.x + (b.x-a.x)*t/l, a.y + (b.y-a.y)*t/l}, pt{a.x + (b.x-a.x)*e/l, a.y + (b.y-a.y)*e/l})
		}
	}
	// The pieces overlap at the corners: paint them one by one so that
	// the overlap is not counted twice.
	for _, pl := range polys {
		p.fill(col, pl)
	}
}

// fill paints polygons (device pixels) with one colour, antialiased;
// polygons wound the other way cut holes.
func (p *painter) fill(col color.Color, polys ...[]pt) {
	lo, hi := pt{math.Inf(1), math.Inf(1)}, pt{math.Inf(-1), math.Inf(-1)}
	for _, pl := range polys {
		for _, q := range pl {
			lo, hi = pt{min(lo.x, q.x), min(lo.y, q.y)}, pt{max(hi.x, q.x), max(hi.y, q.y)}
		}
	}
	// only the polygons' bounds are rasterised, not the whole image
	area := image.Rect(int(math.Floor(lo.x)), int(math.Floor(lo.y)), int(math.Ceil(hi.x))+1, int(math.Ceil(hi.y))+1).Intersect(p.img.Bounds())
	if area.Empty() {
		return
	}
	p.z.Reset(area.Dx(), area.Dy())
	off := pt{float64(area.Min.X), float64(area.Min.Y)}
	for _, pl := range polys {
		if len(pl) < 3 {
			continue
		}
		p.z.MoveTo(float32(pl[0].x-off.x), float32(pl[0].y-off.y))
		for _, q := range pl[1:] {
			p.z.LineTo(float32(q.x-off.x), float32(q.y-off.y))
		}
		p.z.ClosePath()
	}
	p.z.Draw(p.img, area, image.NewUniform(col), area.Min)
}

// roundRect is a rectangle with corners of radius r, clockwise.
func roundRect(x, y, w, h, r float64) []pt {
	r = max(0, min(r, w/2, h/2))
	if r == 0 {
		return []pt{{x, y}, {x + w, y}, {x + w, y + h}, {x, y + h}}
	}
	var out []pt
	corners := []struct{ cx, cy, a float64 }{
		{x + w - r, y + r, -math.Pi / 2}, {x + w - r, y + h - r, 0}, {x + r, y + h - r, math.Pi / 2}, {x + r, y + r, math.Pi},
	}
	const steps = 6
	for _, c := range corners {
		for i := 0; i <= steps; i++ {
			a := c.a + math.Pi/2*float64(i)/steps
			out = append(out, pt{c.cx + r*math.Cos(a), c.cy + r*math.Sin(a)})
		}
	}
	return out
}

func (p *painter) face(size float64, bold bool) font.Face {
	k := [2]float64{size * p.s, 0}
	if bold {
		k[1] = 1
	}
	if f, ok := p.faces[k]; ok {
		return f
	}
	src := p.regular
	if bold {
		src = p.bld
	}
	f, err := opentype.NewFace(src, &opentype.FaceOptions{Size: k[0], DPI: 72, Hinting: font.HintingNone})
	if err != nil {
		f, _ = opentype.NewFace(p.regular, &opentype.FaceOptions{Size: k[0], DPI: 72})
	}
	p.faces[k] = f
	return f
}

func (p *painter) text(q *prim) {
	f := p.face(q.size, q.bold)
	d := font.Drawer{Dst: p.img, Src: image.NewUniform(hexColor(q.fill)), Face: f}
	x := q.x * p.s
	if q.middle {
		x -= float64(d.MeasureString(q.text)) / 64 / 2
	}
	d.Dot = fixed.Point26_6{X: fixed.Int26_6(math.Round(x * 64)), Y: fixed.Int26_6(math.Round(q.y * p.s * 64))}
	d.DrawString(q.text)
}

// hexColor parses "#rrggbb" (black when it cannot).
func hexColor(s string) color.Color {
	if len(s) != 7 || s[0] != '#' {
		return color.Black
	}
	v, err := strconv.ParseUint(s[1:], 16, 32)
	if err != nil {
		return color.Black
	}
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xff}
}
