package labgraph

import (
	"fmt"
	"unicode/utf8"
)

// The drawing: primitives in pixel coordinates, rendered by svg.go and
// png.go alike.

type primKind int

const (
	primRect primKind = iota
	primLine          // a polyline
	primText
)

type pt struct{ x, y float64 }

type prim struct {
	kind       primKind
	x, y, w, h float64 // rect; text: x, y the baseline's anchor
	rx         float64 // rect corner radius
	pts        []pt    // line
	fill       string  // "#rrggbb" or "" (none)
	stroke     string
	sw         float64
	dash       bool
	text       string
	size       float64
	bold       bool
	middle     bool   // text anchored at its middle (else at its start)
	class      string // SVG class
	data       string // SVG data-id (endpoint IDs, host names)
	tip        string // tooltip (SVG <title>)
}

type canvas struct {
	w, h  float64
	prims []prim
}

func (c *canvas) rect(class string, x, y, w, h, rx float64, fill, stroke string, sw float64, dash bool) *prim {
	c.prims = append(c.prims, prim{kind: primRect, class: class, x: x, y: y, w: w, h: h, rx: rx, fill: fill, stroke: stroke, sw: sw, dash: dash})
	return &c.prims[len(c.prims)-1]
}

func (c *canvas) line(class string, pts []pt, stroke string, sw float64, dash bool) {
	c.prims = append(c.prims, prim{kind: primLine, class: class, pts: pts, stroke: stroke, sw: sw, dash: dash})
}

func (c *canvas) text(s string, x, y, size float64, bold, middle bool, fill string) {
	c.prims = append(c.prims, prim{kind: primText, text: s, x: x, y: y, size: size, bold: bold, middle: middle, fill: fill})
}

// Text is Go Mono: every glyph advances 0.6 em.
const advance = 0.6

func textW(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * advance * size
}

func widest(size float64, ss ...string) float64 {
	w := 0.0
	for _, s := range ss {
		w = max(w, textW(s, size))
	}
	return w
}

// Sizes and colours.
const (
	margin   = 24.0
	pad      = 12.0
	gapX     = 56.0 // between hosts
	titleSz  = 18.0
	headSz   = 12.0
	hostSz   = 14.0
	lineSz   = 11.0
	epSz     = 12.0
	lineH    = 15.0 // of an 11 or 12 px line
	epGap    = 8.0
	epMinW   = 190.0
	epRowMax = 10 // endpoints in a column before a host takes two
	linkGap  = 34.0

	colText    = "#1b1f24"
	colGrey    = "#5b6570"
	colHost    = "#f3f6fa"
	colHostLn  = "#4a6fa5"
	colEp      = "#ffffff"
	colEpLn    = "#7c8ea3"
	colMore    = "#eceff3"
	colWire    = "#2d3a4a"
	colVXLAN   = "#b03a2e"
	colL7      = "#7d3c98"
	colDP      = "#1e7f74"
	colHop     = "#fdf6e3"
	colHopLn   = "#a07d00"
	colEnd     = "#eef2ff"
	colSegment = "#2d3a4a"
)

// layout draws the graph.
func (g *Graph) layout() *canvas {
	c := &canvas{}
	y := margin + titleSz
	c.text("lab "+g.Name, margin, y, titleSz, true, false, colText)
	w := margin + textW("lab "+g.Name, titleSz)
	for _, h := range g.Header {
		y += lineH + 3
		c.text(h, margin, y, headSz, false, false, colGrey)
		w = max(w, margin+textW(h, headSz))
	}
	y += 24
	if len(g.Hosts) > 0 {
		bottom, right := g.drawHosts(c, y)
		y, w = bottom, max(w, right)
	}
	if g.Chain != nil {
		bottom, right := g.drawChain(c, y)
		y, w = bottom, max(w, right)
	}
	if len(g.Loose) > 0 {
		bottom, right := drawLoose(c, g.Loose, y)
		y, w = bottom, max(w, right)
	}
	c.w, c.h = w+margin, y+margin
	return c
}

// epLines are an endpoint box's lines under its ID.
func epLines(e Endpoint) []string {
	l := []string{e.IP}
	if e.Dev != "" {
		l[0] += " · " + e.Dev
	}
	l = append(l, "netns "+e.Netns)
	if e.Ports != "" {
		l = append(l, "ports "+e.Ports)
	}
	return l
}

func epTip(e Endpoint) string {
	s := e.ID + "\n" + e.IP + "\nnetns " + e.Netns
	if e.Dev != "" {
		s += "\n" + e.Dev
	}
	if e.Ports != "" {
		s += "\nports " + e.Ports
	}
	return s
}

// hostBox is a host's laid-out size.
type hostBox struct {
	w, epW     float64
	cols, rows int
	lines      []string
}

func (g *Graph) hostBoxes() ([]hostBox, float64, float64) {
	epLinesMax := 1
	for _, h := range g.Hosts {
		for _, e := range h.Endpoints {
			epLinesMax = max(epLinesMax, len(epLines(e)))
		}
	}
	epH := 12 + lineH*float64(1+epLinesMax)
	var boxes []hostBox
	maxH := 0.0
	for i, h := range g.Hosts {
		b := hostBox{lines: h.Lines}
		for _, l := range g.Links {
			for k, hi := range []int{l.A, l.B} {
				if hi == i {
					other := g.Hosts[[]int{l.B, l.A}[k]].Name
					b.lines = append(b.lines, fmt.Sprintf("%s → %s (%s)", l.Ends[k], other, l.Kind))
				}
			}
		}
		n := len(h.Endpoints)
		if len(h.Hidden) > 0 {
			n++
		}
		b.cols = 1
		if n > epRowMax {
			b.cols = 2
		}
		b.rows = (n + b.cols - 1) / b.cols
		b.epW = epMinW
		for _, e := range h.Endpoints {
			b.epW = max(b.epW, widest(lineSz, epLines(e)...)+2*pad, textW(e.ID, epSz)+2*pad)
		}
		b.w = max(widest(lineSz, b.lines...), textW("host "+h.Name, hostSz)) + 2*pad
		b.w = max(b.w, float64(b.cols)*b.epW+float64(b.cols-1)*epGap+2*pad)
		hgt := pad + 20 + lineH*float64(len(b.lines)) + 10 + float64(b.rows)*(epH+epGap) + pad
		maxH = max(maxH, hgt)
		boxes = append(boxes, b)
	}
	return boxes, maxH, epH
}

// drawHosts draws the hosts in a row from top, the links in a channel
// under them; it returns the bottom and the right edge.
func (g *Graph) drawHosts(c *canvas, top float64) (float64, float64) {
	boxes, hostH, epH := g.hostBoxes()
	x := margin
	xs := make([]float64, len(boxes))
	for i, b := range boxes {
		xs[i] = x
		h := g.Hosts[i]
		r := c.rect("host", x, top, b.w, hostH, 8, colHost, colHostLn, 1.5, false)
		r.data, r.tip = h.Name, "host "+h.Name
		y := top + pad + 14
		c.text("host "+h.Name, x+pad, y, hostSz, true, false, colText)
		y += 6
		for _, l := range b.lines {
			y += lineH
			col := colGrey
			switch {
			case l == "L7 proxy running":
				col = colL7
			case len(l) > 9 && l[:9] == "datapath ":
				col = colDP
			}
			c.text(l, x+pad, y, lineSz, false, false, col)
		}
		y += 14
		all := h.Endpoints
		for k := 0; k < len(all)+min(1, len(h.Hidden)); k++ {
			col, row := k/b.rows, k%b.rows
			ex := x + pad + float64(col)*(b.epW+epGap)
			ey := y + float64(row)*(epH+epGap)
			if k == len(all) {
				m := c.rect("more", ex, ey, b.epW, epH, 5, colMore, colEpLn, 1, true)
				m.tip = hiddenText(h.Hidden)
				c.text(fmt.Sprintf("… %d more", len(h.Hidden)), ex+b.epW/2, ey+epH/2+4, epSz, true, true, colGrey)
				continue
			}
			drawEndpoint(c, all[k], ex, ey, b.epW, epH)
		}
		x += b.w + gapX
	}
	right := x - gapX
	bottom := top + hostH
	if len(g.Links) == 0 {
		return bottom, right
	}
	// Each host's link ends spread along its bottom edge, ordered by
	// the other end's position so that lines cross less.
	type end struct{ link, side, other int }
	ends := make([][]end, len(g.Hosts))
	for k, l := range g.Links {
		ends[l.A] = append(ends[l.A], end{k, 0, l.B})
		ends[l.B] = append(ends[l.B], end{k, 1, l.A})
	}
	at := make([][2]float64, len(g.Links))
	for i, es := range ends {
		sortEnds(es, func(e end) int { return e.other })
		for j, e := range es {
			at[e.link][e.side] = xs[i] + boxes[i].w*float64(j+1)/float64(len(es)+1)
		}
	}
	for k, l := range g.Links {
		ly := bottom + 30 + float64(k)*linkGap
		col := colWire
		if l.Kind == "vxlan" {
			col = colVXLAN
		}
		a, b := at[k][0], at[k][1]
		c.line("link "+l.Kind, []pt{{a, bottom}, {a, ly}, {b, ly}, {b, bottom}}, col, 2, l.Kind == "vxlan")
		lw := textW(l.Label, lineSz)
		c.rect("", (a+b)/2-lw/2-3, ly-6-lineSz, lw+6, lineSz+4, 2, "#ffffff", "", 0, false) // a halo over crossing lines
		c.text(l.Label, (a+b)/2, ly-6, lineSz, false, true, col)
		right = max(right, (a+b)/2+textW(l.Label, lineSz)/2)
	}
	return bottom + 30 + float64(len(g.Links)-1)*linkGap + 16, right
}

func sortEnds[E any](es []E, key func(E) int) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && key(es[j]) < key(es[j-1]); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// chainPerRow is how many chain boxes go in one row before the chain
// wraps to the next.
const chainPerRow = 6

// drawChain draws a chain's boxes in rows of chainPerRow, the segments
// between them; it returns the bottom and the right edge.
func (g *Graph) drawChain(c *canvas, top float64) (float64, float64) {
	ch := g.Chain
	boxW, lines := 0.0, 0
	for _, b := range ch.Boxes {
		boxW = max(boxW, textW(b.Title, hostSz), widest(lineSz, b.Lines...))
		lines = max(lines, len(b.Lines))
	}
	boxW += 2 * pad
	boxH := pad + 20 + lineH*float64(lines) + pad
	gap := 90.0
	for _, s := range ch.Segments {
		gap = max(gap, widest(lineSz, s.Prefix, s.Via)+24)
	}
	rowGap := 64.0
	pos := make([]pt, len(ch.Boxes))
	right := 0.0
	for i, b := range ch.Boxes {
		row, col := i/chainPerRow, i%chainPerRow
		x := margin + float64(col)*(boxW+gap)
		y := top + float64(row)*(boxH+rowGap)
		pos[i] = pt{x, y}
		fill, stroke := colHop, colHopLn
		switch {
		case b.Summary:
			fill, stroke = colMore, colEpLn
		case i == 0 || i == len(ch.Boxes)-1:
			fill, stroke = colEnd, colHostLn
		}
		r := c.rect("chain-node", x, y, boxW, boxH, 8, fill, stroke, 1.5, b.Summary)
		r.data, r.tip = b.Title, b.Title+"\n"+joinLines(b.Lines)
		ty := y + pad + 14
		c.text(b.Title, x+pad, ty, hostSz, true, false, colText)
		ty += 6
		for _, l := range b.Lines {
			ty += lineH
			col := colGrey
			if len(l) > 9 && (l[:9] == "firewall " || l[:7] == "shaper ") {
				col = colDP
			}
			c.text(l, x+pad, ty, lineSz, false, false, col)
		}
		right = max(right, x+boxW)
	}
	for i, s := range ch.Segments {
		if i+1 >= len(pos) {
			break
		}
		a, b := pos[i], pos[i+1]
		if b.y == a.y { // same row
			my := a.y + boxH/2
			x0, x1 := a.x+boxW, b.x
			c.line("segment", []pt{{x0, my}, {x1, my}}, colSegment, 2, ch.Link == "ovs")
			c.text(s.Prefix, (x0+x1)/2, my-6, lineSz, false, true, colText)
			c.text(s.Via, (x0+x1)/2, my+14, lineSz, false, true, colGrey)
			continue
		}
		// wrap: down from the row's last box, back to the next row's first
		x0, x1 := a.x+boxW/2, b.x+boxW/2
		my := a.y + boxH + rowGap/2
		c.line("segment", []pt{{x0, a.y + boxH}, {x0, my}, {x1, my}, {x1, b.y}}, colSegment, 2, ch.Link == "ovs")
		c.text(s.Prefix+" · "+s.Via, (x0+x1)/2, my-6, lineSz, false, true, colText)
	}
	rows := (len(ch.Boxes) + chainPerRow - 1) / chainPerRow
	return top + float64(rows)*(boxH+rowGap) - rowGap + 16, right
}

func joinLines(ls []string) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += "\n"
		}
		s += l
	}
	return s
}

// drawLoose draws endpoints on no host in a row.
// drawEndpoint draws an endpoint's box at x, y: its name, then its lines.
func drawEndpoint(c *canvas, e Endpoint, x, y, w, h float64) {
	r := c.rect("endpoint", x, y, w, h, 5, colEp, colEpLn, 1, false)
	r.data, r.tip = e.ID, epTip(e)
	ty := y + 2 + lineH
	c.text(e.ID, x+pad, ty, epSz, true, false, colText)
	for _, l := range epLines(e) {
		ty += lineH
		c.text(l, x+pad, ty, lineSz, false, false, colGrey)
	}
}

func drawLoose(c *canvas, eps []Endpoint, top float64) (float64, float64) {
	x := margin
	h := 12 + lineH*4
	for _, e := range eps {
		w := max(epMinW, widest(lineSz, epLines(e)...)+2*pad, textW(e.ID, epSz)+2*pad)
		drawEndpoint(c, e, x, top, w, h)
		x += w + epGap
	}
	return top + h + 16, x - epGap
}
