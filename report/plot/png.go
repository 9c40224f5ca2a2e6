package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// raster paints primitives onto an RGBA image in device pixels.
type raster struct {
	img *image.RGBA
	s   float64 // CSS pixel → device pixel
	z   vector.Rasterizer
	fs  *fontSet
}

func (c rgba) color() color.NRGBA { return color.NRGBA{c.r, c.g, c.b, c.a} }

// png rasterizes the drawing at the given scale and encodes it.
func (d *drawing) png(scale float64, fs *fontSet) ([]byte, error) {
	W := int(math.Round(d.w * scale))
	H := int(math.Round(d.h * scale))
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	r := &raster{img: img, s: scale, fs: fs}
	for i := range d.prims {
		r.prim(&d.prims[i])
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (r *raster) scalePts(p []pt) []pt {
	out := make([]pt, len(p))
	for i, q := range p {
		out[i] = pt{q.x * r.s, q.y * r.s}
	}
	return out
}

func (r *raster) prim(p *prim) {
	switch p.kind {
	case primPath:
		var sub [][]pt
		for _, s := range p.sub {
			sub = append(sub, r.scalePts(s))
		}
		r.stroke(sub, false, p.sw*r.s, scaleDash(p.dash, r.s), p.stroke)
	case primPolygon:
		if len(p.sub) == 0 {
			return
		}
		poly := r.scalePts(p.sub[0])
		r.fillShape(poly, p)
	case primRect:
		poly := r.scalePts([]pt{{p.x, p.y}, {p.x + p.w, p.y}, {p.x + p.w, p.y + p.h}, {p.x, p.y + p.h}})
		r.fillShape(poly, p)
	case primCircle:
		rad := p.r * r.s
		n := max(16, int(math.Ceil(rad*4)))
		poly := make([]pt, n)
		for i := range poly {
			a := 2 * math.Pi * float64(i) / float64(n)
			poly[i] = pt{p.x*r.s + rad*math.Cos(a), p.y*r.s + rad*math.Sin(a)}
		}
		r.fillShape(poly, p)
	case primText:
		r.text(p)
	}
}

func scaleDash(d []float64, s float64) []float64 {
	if len(d) == 0 {
		return nil
	}
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = v * s
	}
	return out
}

func (r *raster) fillShape(poly []pt, p *prim) {
	if !p.fill.none() {
		r.fill([][]pt{poly}, p.fill)
	}
	if !p.stroke.none() && p.sw > 0 {
		r.stroke([][]pt{poly}, true, p.sw*r.s, nil, p.stroke)
	}
}

// fill paints the union of the polygons (nonzero rule, with every polygon
// oriented the same way) with one colour, antialiased.
func (r *raster) fill(polys [][]pt, c rgba) {
	if c.none() || len(polys) == 0 {
		return
	}
	x0, y0 := math.Inf(1), math.Inf(1)
	x1, y1 := math.Inf(-1), math.Inf(-1)
	for _, pl := range polys {
		for _, q := range pl {
			x0, y0 = math.Min(x0, q.x), math.Min(y0, q.y)
			x1, y1 = math.Max(x1, q.x), math.Max(y1, q.y)
		}
	}
	if !finite(x0) || !finite(y0) || !finite(x1) || !finite(y1) {
		return
	}
	box := image.Rect(int(math.Floor(x0))-1, int(math.Floor(y0))-1, int(math.Ceil(x1))+1, int(math.Ceil(y1))+1).Intersect(r.img.Bounds())
	if box.Empty() {
		return
	}
	r.z.Reset(box.Dx(), box.Dy())
	ox, oy := float64(box.Min.X), float64(box.Min.Y)
	for _, pl := range polys {
		if len(pl) < 3 {
			continue
		}
		if signedArea(pl) < 0 {
			rev := make([]pt, len(pl))
			for i, q := range pl {
				rev[len(pl)-1-i] = q
			}
			pl = rev
		}
		r.z.MoveTo(float32(pl[0].x-ox), float32(pl[0].y-oy))
		for _, q := range pl[1:] {
			r.z.LineTo(float32(q.x-ox), float32(q.y-oy))
		}
		r.z.ClosePath()
	}
	r.z.Draw(r.img, box, image.NewUniform(c.color()), image.Point{})
}

func signedArea(p []pt) float64 {
	a := 0.0
	for i := range p {
		j := (i + 1) % len(p)
		a += p[i].x*p[j].y - p[j].x*p[i].y
	}
	return a / 2
}

// stroke paints polylines of width w as quads per segment plus round joins.
func (r *raster) stroke(sub [][]pt, closed bool, w float64, dash []float64, c rgba) {
	if c.none() || w <= 0 {
		return
	}
	hw := w / 2
	var polys [][]pt
	for _, line := range sub {
		if closed && len(line) > 1 {
			line = append(append([]pt(nil), line...), line[0])
		}
		pieces := [][]pt{line}
		if len(dash) > 0 {
			pieces = dashPolyline(line, dash)
		}
		for _, pc := range pieces {
			for i := 0; i+1 < len(pc); i++ {
				a, b := pc[i], pc[i+1]
				dx, dy := b.x-a.x, b.y-a.y
				l := math.Hypot(dx, dy)
				if l == 0 {
					continue
				}
				nx, ny := -dy/l*hw, dx/l*hw
				polys = append(polys, []pt{{a.x + nx, a.y + ny}, {b.x + nx, b.y + ny}, {b.x - nx, b.y - ny}, {a.x - nx, a.y - ny}})
			}
			if hw >= 0.6 {
				// round joins at interior vertices (all vertices when closed)
				for i := 1; i+1 < len(pc); i++ {
					polys = append(polys, disc(pc[i], hw))
				}
				if closed && len(pc) > 2 && len(dash) == 0 {
					polys = append(polys, disc(pc[0], hw))
				}
			}
		}
	}
	r.fill(polys, c)
}

func disc(c pt, rad float64) []pt {
	n := max(8, int(math.Ceil(rad*4)))
	out := make([]pt, n)
	for i := range out {
		a := 2 * math.Pi * float64(i) / float64(n)
		out[i] = pt{c.x + rad*math.Cos(a), c.y + rad*math.Sin(a)}
	}
	return out
}

// dashPolyline splits a polyline into its "on" pieces for a dash pattern,
// continuing the pattern across vertices like SVG's stroke-dasharray.
func dashPolyline(line []pt, dash []float64) [][]pt {
	total := 0.0
	for _, v := range dash {
		total += v
	}
	if total <= 0 {
		return [][]pt{line}
	}
	var out [][]pt
	var cur []pt
	idx, left := 0, dash[0] // current dash entry and what remains of it
	on := true
	for i := 0; i+1 < len(line); i++ {
		a, b := line[i], line[i+1]
		segLen := math.Hypot(b.x-a.x, b.y-a.y)
		pos := 0.0
		for pos < segLen {
			step := math.Min(left, segLen-pos)
			t0, t1 := pos/segLen, (pos+step)/segLen
			p0 := pt{a.x + (b.x-a.x)*t0, a.y + (b.y-a.y)*t0}
			p1 := pt{a.x + (b.x-a.x)*t1, a.y + (b.y-a.y)*t1}
			if on {
				if len(cur) == 0 {
					cur = append(cur, p0)
				}
				cur = append(cur, p1)
			}
			pos += step
			left -= step
			if left <= 1e-9 {
				if on && len(cur) > 0 {
					out = append(out, cur)
					cur = nil
				}
				idx = (idx + 1) % len(dash)
				left = dash[idx]
				on = !on // odd patterns alternate across repeats, like SVG
			}
		}
	}
	if len(cur) > 1 {
		out = append(out, cur)
	}
	return out
}

// text draws one text primitive with the Go fonts.
func (r *raster) text(p *prim) {
	face := r.fs.face(p.size*r.s, p.bold)
	w := fromFixed(font.MeasureString(face, p.text))
	off := 0.0
	switch p.anchor {
	case anchorMiddle:
		off = w / 2
	case anchorEnd:
		off = w
	}
	src := image.NewUniform(p.fill.color())
	X, Y := p.x*r.s, p.y*r.s
	if !p.rot {
		dr := font.Drawer{Dst: r.img, Src: src, Face: face,
			Dot: fixed.Point26_6{X: fixed.Int26_6(math.Round((X - off) * 64)), Y: fixed.Int26_6(math.Round(Y * 64))}}
		dr.DrawString(p.text)
		return
	}
	// Rotated 90° counter-clockwise: draw horizontally into a small image,
	// transpose the pixels, composite so the anchor lands on (X, Y).
	m := face.Metrics()
	asc, desc := m.Ascent.Ceil(), m.Descent.Ceil()
	tw, th := int(math.Ceil(w))+2, asc+desc+2
	tmp := image.NewRGBA(image.Rect(0, 0, tw, th))
	dr := font.Drawer{Dst: tmp, Src: src, Face: face, Dot: fixed.P(1, 1+asc)}
	dr.DrawString(p.text)
	rot := image.NewRGBA(image.Rect(0, 0, th, tw))
	for y := range th {
		for x := range tw {
			si := tmp.PixOffset(x, y)
			di := rot.PixOffset(y, tw-1-x)
			copy(rot.Pix[di:di+4], tmp.Pix[si:si+4])
		}
	}
	// tmp point (u, v) maps to rot point (v, tw-u); the anchor is
	// (1+off, 1+asc) in tmp.
	ax, ay := 1+off, float64(1+asc)
	ox := int(math.Round(X - ay))
	oy := int(math.Round(Y - (float64(tw) - ax)))
	dst := image.Rect(ox, oy, ox+th, oy+tw)
	draw.Draw(r.img, dst, rot, image.Point{}, draw.Over)
}
