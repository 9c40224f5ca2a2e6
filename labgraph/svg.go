package labgraph

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// SVG renders the graph as a standalone SVG document (valid XML; each
// host, endpoint and chain node carries its name in data-id and a
// tooltip with its details).
func (g *Graph) SVG() []byte {
	c := g.layout()
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="'Go Mono', 'DejaVu Sans Mono', Menlo, Consolas, monospace" data-lab="%s">`+"\n",
		num(c.w), num(c.h), num(c.w), num(c.h), esc(g.Name))
	fmt.Fprintf(&b, "<title>lab %s</title>\n", esc(g.Name))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	for _, p := range c.prims {
		switch p.kind {
		case primRect:
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s"`, num(p.x), num(p.y), num(p.w), num(p.h))
			if p.rx > 0 {
				fmt.Fprintf(&b, ` rx="%s"`, num(p.rx))
			}
			paint(&b, &p, p.fill)
			if p.tip != "" {
				fmt.Fprintf(&b, "><title>%s</title></rect>\n", esc(p.tip))
			} else {
				b.WriteString("/>\n")
			}
		case primLine:
			var pts []string
			for _, q := range p.pts {
				pts = append(pts, num(q.x)+","+num(q.y))
			}
			fmt.Fprintf(&b, `<polyline points="%s"`, strings.Join(pts, " "))
			paint(&b, &p, "")
			b.WriteString("/>\n")
		case primText:
			fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="%s" fill="%s"`, num(p.x), num(p.y), num(p.size), p.fill)
			if p.bold {
				b.WriteString(` font-weight="bold"`)
			}
			if p.middle {
				b.WriteString(` text-anchor="middle"`)
			}
			fmt.Fprintf(&b, ` xml:space="preserve">%s</text>`+"\n", esc(p.text))
		}
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func paint(b *bytes.Buffer, p *prim, fill string) {
	if p.class != "" {
		fmt.Fprintf(b, ` class="%s"`, esc(p.class))
	}
	if p.data != "" {
		fmt.Fprintf(b, ` data-id="%s"`, esc(p.data))
	}
	if fill == "" {
		fill = "none"
	}
	fmt.Fprintf(b, ` fill="%s"`, fill)
	if p.stroke != "" {
		fmt.Fprintf(b, ` stroke="%s" stroke-width="%s"`, p.stroke, num(p.sw))
		if p.dash {
			b.WriteString(` stroke-dasharray="6 4"`)
		}
	}
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func esc(s string) string { return escaper.Replace(s) }
