package plot

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

const svgFontFamily = "Go, 'Go Regular', 'Helvetica Neue', Helvetica, Arial, sans-serif"

// num formats a coordinate with at most two decimals.
func num(v float64) string {
	v = math.Round(v*100) / 100
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// esc escapes text for XML character data and attribute values, replacing
// invalid UTF-8 and characters XML does not allow.
func esc(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune('\uFFFD')
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&quot;")
		case r == '\'':
			b.WriteString("&#39;")
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x20 || (r >= 0xD800 && r <= 0xDFFF) || r == 0xFFFE || r == 0xFFFF:
			b.WriteRune('\uFFFD')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

type svgWriter struct{ bytes.Buffer }

func (w *svgWriter) attr(name, value string) {
	w.WriteByte(' ')
	w.WriteString(name)
	w.WriteString(`="`)
	w.WriteString(value)
	w.WriteByte('"')
}

func (w *svgWriter) paint(p *prim) {
	if p.fill.none() {
		w.attr("fill", "none")
	} else {
		w.attr("fill", p.fill.hex())
		if p.fill.a != 255 {
			w.attr("fill-opacity", num(float64(p.fill.a)/255))
		}
	}
	if !p.stroke.none() && p.sw > 0 {
		w.attr("stroke", p.stroke.hex())
		if p.stroke.a != 255 {
			w.attr("stroke-opacity", num(float64(p.stroke.a)/255))
		}
		w.attr("stroke-width", num(p.sw))
		if len(p.dash) > 0 {
			ds := make([]string, len(p.dash))
			for i, v := range p.dash {
				ds[i] = num(v)
			}
			w.attr("stroke-dasharray", strings.Join(ds, " "))
		}
	}
}

// svg renders the drawing as one <svg> element.
func (d *drawing) svg() []byte {
	var w svgWriter
	w.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" version="1.1"`)
	w.attr("class", "cnlab-figure")
	w.attr("data-figure-id", esc(d.id))
	w.attr("viewBox", "0 0 "+num(d.w)+" "+num(d.h))
	w.attr("width", num(d.w))
	w.attr("height", num(d.h))
	w.attr("role", "img")
	if d.title != "" {
		w.attr("aria-label", esc(d.title))
	}
	w.attr("font-family", svgFontFamily)
	w.WriteString(">\n")
	w.WriteString("<title>" + esc(d.title) + "</title>\n")
	if d.desc != "" {
		w.WriteString("<desc>" + esc(d.desc) + "</desc>\n")
	}
	for i := range d.prims {
		p := &d.prims[i]
		switch p.kind {
		case primPath:
			w.WriteString("<path")
			w.attr("class", esc(p.class))
			var dd strings.Builder
			for _, sub := range p.sub {
				for k, q := range sub {
					if k == 0 {
						dd.WriteString("M")
					} else {
						dd.WriteString(" L")
					}
					dd.WriteString(num(q.x) + " " + num(q.y))
				}
				if len(sub) == 1 { // a lone point: zero-length segment
					dd.WriteString(" l0 0")
				}
				dd.WriteString(" ")
			}
			w.attr("d", strings.TrimSpace(dd.String()))
			p2 := *p
			p2.fill = rgba{}
			w.paint(&p2)
			w.attr("stroke-linejoin", "round")
			w.WriteString("/>\n")
		case primPolygon:
			w.WriteString("<polygon")
			w.attr("class", esc(p.class))
			var ps []string
			if len(p.sub) > 0 {
				for _, q := range p.sub[0] {
					ps = append(ps, num(q.x)+","+num(q.y))
				}
			}
			w.attr("points", strings.Join(ps, " "))
			w.paint(p)
			w.WriteString("/>\n")
		case primRect:
			w.WriteString("<rect")
			w.attr("class", esc(p.class))
			w.attr("x", num(p.x))
			w.attr("y", num(p.y))
			w.attr("width", num(p.w))
			w.attr("height", num(p.h))
			w.paint(p)
			w.WriteString("/>\n")
		case primCircle:
			w.WriteString("<circle")
			w.attr("class", esc(p.class))
			w.attr("cx", num(p.x))
			w.attr("cy", num(p.y))
			w.attr("r", num(p.r))
			w.paint(p)
			w.WriteString("/>\n")
		case primText:
			w.WriteString("<text")
			w.attr("class", esc(p.class))
			w.attr("x", num(p.x))
			w.attr("y", num(p.y))
			w.attr("font-size", num(p.size))
			switch p.anchor {
			case anchorMiddle:
				w.attr("text-anchor", "middle")
			case anchorEnd:
				w.attr("text-anchor", "end")
			}
			if p.bold {
				w.attr("font-weight", "bold")
			}
			if p.rot {
				w.attr("transform", "rotate(-90 "+num(p.x)+" "+num(p.y)+")")
			}
			w.attr("fill", p.fill.hex())
			w.WriteString(">")
			w.WriteString(esc(p.text))
			w.WriteString("</text>\n")
		}
	}
	w.WriteString("</svg>\n")
	return w.Bytes()
}
