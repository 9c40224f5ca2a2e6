package labgraph

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/topology"
)

// labs are the topologies the tests draw: the shipped examples, the
// presets and a hand-made one of three hosts.
func labs(t *testing.T) map[string]*topology.Spec {
	t.Helper()
	out := map[string]*topology.Spec{}
	for _, f := range []string{"two-hosts-vxlan", "three-hosts", "probe-scale", "chain-firewall", "chain-bridge", "chain-ovs", "policy-lab"} {
		sp, err := topology.Load(filepath.Join("..", "examples", f+".yaml"), topology.Overrides{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = sp
	}
	for _, p := range []string{"single-host", "multi-host", "direct"} {
		sp, err := topology.Preset(p, topology.PresetOptions{}, topology.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		out[p] = sp
	}
	sp, err := topology.Preset("chain", topology.PresetOptions{Length: 24, Link: "bridge"}, topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	out["chain-24"] = sp
	return out
}

// TestWritePreview writes every lab's SVG, PNG and DOT to
// $LABGRAPH_PREVIEW, for a look.
func TestWritePreview(t *testing.T) {
	dir := os.Getenv("LABGRAPH_PREVIEW")
	if dir == "" {
		t.Skip("LABGRAPH_PREVIEW not set")
	}
	for name, sp := range labs(t) {
		g := Build(sp, Options{L7Proxies: []string{"flip"}})
		pngData, err := g.PNG()
		if err != nil {
			t.Fatal(err)
		}
		for ext, data := range map[string][]byte{"svg": g.SVG(), "dot": g.DOT(), "png": pngData} {
			if err := os.WriteFile(filepath.Join(dir, name+"."+ext), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkXML decodes an SVG to its end, failing on any XML error, and
// returns the data-id attributes of the elements of class cls.
func checkXML(t *testing.T, name string, svg []byte, cls string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: the SVG is not valid XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			var class, id string
			for _, a := range se.Attr {
				switch a.Name.Local {
				case "class":
					class = a.Value
				case "data-id":
					id = a.Value
				}
			}
			if class == cls {
				ids[id] = true
			}
		}
	}
	return ids
}

// TestEveryEndpointDrawn: in every lab, each endpoint has its box (or is
// counted in its host's summary, which lists it in its tooltip), each
// host its box, each link its line; the SVG is valid XML, the DOT names
// every endpoint.
func TestEveryEndpointDrawn(t *testing.T) {
	for name, sp := range labs(t) {
		g := Build(sp, Options{})
		svg := g.SVG()
		eps := checkXML(t, name, svg, "endpoint")
		chain := checkXML(t, name, svg, "chain-node")
		hosts := checkXML(t, name, svg, "host")
		dot := string(g.DOT())
		hidden := 0
		for _, h := range g.Hosts {
			hidden += len(h.Hidden)
			if !hosts[h.Name] {
				t.Errorf("%s: host %s has no box", name, h.Name)
			}
			if n := len(h.Endpoints) + min(1, len(h.Hidden)); n > DefaultMaxEndpoints {
				t.Errorf("%s: host %s shows %d boxes, more than %d", name, h.Name, n, DefaultMaxEndpoints)
			}
			if len(h.Hidden) > 0 && !strings.Contains(string(svg), fmt.Sprintf("… %d more", len(h.Hidden))) {
				t.Errorf("%s: host %s hides %d endpoints without saying so", name, h.Name, len(h.Hidden))
			}
			for _, e := range h.Hidden {
				if !strings.Contains(string(svg), esc(e.ID)+" ") || !strings.Contains(dot, e.ID+" ") {
					t.Errorf("%s: hidden endpoint %s is not in the summary's tooltip", name, e.ID)
				}
			}
		}
		for _, ep := range sp.Endpoints {
			if eps[ep.ID()] && !strings.Contains(dot, q(ep.ID())) {
				t.Errorf("%s: the DOT has no node %s", name, ep.ID())
			}
		}
		if got := len(eps) + hidden; sp.Chain == nil && got != len(sp.Endpoints) {
			t.Errorf("%s: %d endpoint boxes + %d summarised, want %d endpoints", name, len(eps), hidden, len(sp.Endpoints))
		}
		if c := strings.Count(string(svg), `class="link `); c != len(sp.Links) {
			t.Errorf("%s: %d link lines, want %d", name, c, len(sp.Links))
		}
		if sp.Chain != nil {
			want := min(sp.Chain.Length, maxHops+1) + 2
			if len(chain) != want {
				t.Errorf("%s: %d chain boxes, want %d", name, len(chain), want)
			}
			for _, ep := range sp.Endpoints {
				if !chain["client "+ep.ID()] && !chain["server "+ep.ID()] {
					t.Errorf("%s: chain end %s has no box", name, ep.ID())
				}
			}
		}
		if strings.Count(dot, "{") != strings.Count(dot, "}") {
			t.Errorf("%s: unbalanced DOT braces", name)
		}
	}
}

// TestManyEndpointsSummarised: a host of 100 endpoints shows 19 and a
// "… 81 more" box; --max-endpoints 0 (negative here) shows them all.
func TestManyEndpointsSummarised(t *testing.T) {
	var y strings.Builder
	y.WriteString("name: big\nhosts:\n  - {name: h1, podCIDR: 10.1.0.0/24}\nendpoints:\n")
	for i := range 100 {
		fmt.Fprintf(&y, "  - {name: e%03d, host: h1}\n", i)
	}
	sp, err := topology.Parse([]byte(y.String()), "big.yaml", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	g := Build(sp, Options{})
	if h := g.Hosts[0]; len(h.Endpoints) != DefaultMaxEndpoints-1 || len(h.Hidden) != 100-DefaultMaxEndpoints+1 {
		t.Fatalf("shown %d, hidden %d", len(h.Endpoints), len(h.Hidden))
	}
	if svg := string(g.SVG()); !strings.Contains(svg, "… 81 more") || !strings.Contains(svg, "default/e099 10.1.0.") {
		t.Errorf("no summary of 81 endpoints listing default/e099")
	}
	all := Build(sp, Options{MaxEndpoints: -1})
	if eps := checkXML(t, "big", all.SVG(), "endpoint"); len(eps) != 100 {
		t.Errorf("all: %d endpoint boxes, want 100", len(eps))
	}
	// two columns keep the host's height at about half
	if c := g.layout(); c.h > 1200 {
		t.Errorf("100 endpoints drawn %v px high", c.h)
	}
}

// TestDeterministic: the same lab gives the same bytes.
func TestDeterministic(t *testing.T) {
	for name, sp := range labs(t) {
		a, b := Build(sp, Options{}), Build(sp, Options{})
		if !bytes.Equal(a.SVG(), b.SVG()) || !bytes.Equal(a.DOT(), b.DOT()) {
			t.Errorf("%s: two renders differ", name)
		}
	}
}

// TestPNG: the PNG of a host lab and of a chain decodes at the layout's
// size times the scale, the same twice, not blank where a box is.
func TestPNG(t *testing.T) {
	ls := labs(t)
	for _, name := range []string{"two-hosts-vxlan", "chain-firewall"} {
		g := Build(ls[name], Options{})
		data, err := g.PNG()
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := g.PNG(); !bytes.Equal(data, again) {
			t.Errorf("%s: two PNGs differ", name)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: png: %v", name, err)
		}
		c := g.layout()
		if b := img.Bounds(); b.Dx() != int(math.Ceil(c.w*pngScale)) || b.Dy() != int(math.Ceil(c.h*pngScale)) {
			t.Errorf("%s: png %v, layout %vx%v", name, b, c.w, c.h)
		}
		// the first box's outline is painted in its colour
		for _, q := range c.prims {
			if q.kind == primRect && q.stroke != "" && !q.dash {
				r, g, b, _ := img.At(int((q.x+q.w/2)*pngScale), int(q.y*pngScale)).RGBA()
				if r == 0xffff && g == 0xffff && b == 0xffff {
					t.Errorf("%s: the outline of %s is white in the PNG", name, q.data)
				}
				break
			}
		}
	}
}

// TestGlyphsInFont: every character the drawings use is in Go Mono, so
// that the PNG shows no boxes for missing glyphs.
func TestGlyphsInFont(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	p, err := newPainter(img, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, sp := range labs(t) {
		for _, q := range Build(sp, Options{L7Proxies: []string{"flip"}}).layout().prims {
			if q.kind != primText {
				continue
			}
			f := p.face(q.size, q.bold)
			for _, r := range q.text {
				if _, ok := f.GlyphAdvance(r); !ok {
					t.Errorf("%s: %q has %q, which Go Mono lacks", name, q.text, r)
				}
			}
		}
	}
}

// TestDOTQuoting: quotes, backslashes and newlines in a name cannot end
// a DOT string early.
func TestDOTQuoting(t *testing.T) {
	if got := q("a\"b\\c\nd"); got != `"a\"b\\c\nd"` {
		t.Errorf("q = %s", got)
	}
}

// TestChainFunctionsAndSummary: a chain of 24 hops shows hops 1-5, a
// summary of 14 and hops 20-24; a firewall's rules are in every hop.
func TestChainFunctionsAndSummary(t *testing.T) {
	ls := labs(t)
	g := Build(ls["chain-24"], Options{})
	var titles []string
	for _, b := range g.Chain.Boxes {
		titles = append(titles, b.Title)
	}
	want := "client default/client,hop 1,hop 2,hop 3,hop 4,hop 5,… 14 more hops,hop 20,hop 21,hop 22,hop 23,hop 24,server default/server"
	if got := strings.Join(titles, ","); got != want {
		t.Errorf("boxes %s\nwant  %s", got, want)
	}
	if len(g.Chain.Segments) != len(g.Chain.Boxes)-1 || g.Chain.Segments[6].Prefix != "10.100.19.0/24" {
		t.Errorf("segments %+v", g.Chain.Segments)
	}
	fw := Build(ls["chain-firewall"], Options{})
	for _, b := range fw.Chain.Boxes[1 : len(fw.Chain.Boxes)-1] {
		if !strings.Contains(strings.Join(b.Lines, "|"), "firewall 100 rules, stateful") {
			t.Errorf("%s: %v", b.Title, b.Lines)
		}
	}
}
