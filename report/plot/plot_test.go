package plot

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func sortedNames(m map[string]*Figure) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// svgDoc is what the tests learn from walking an SVG's XML tokens.
type svgDoc struct {
	root     xml.StartElement
	title    string
	texts    []string           // character data of <text> elements
	classes  map[string]int     // element count per class attribute
	elements map[string]int     // element count per name
	attrs    []xml.StartElement // every start element
}

func parseSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	doc := svgDoc{classes: map[string]int{}, elements: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var stack []string
	depth0 := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not valid XML: %v\n%s", err, b)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				depth0++
				doc.root = tok.Copy()
			}
			stack = append(stack, tok.Name.Local)
			doc.elements[tok.Name.Local]++
			doc.attrs = append(doc.attrs, tok.Copy())
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					doc.classes[a.Value]++
				}
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 {
				if strings.TrimSpace(string(tok)) != "" {
					t.Fatalf("text outside the root element: %q", tok)
				}
				continue
			}
			switch stack[len(stack)-1] {
			case "title":
				doc.title += string(tok)
			case "text":
				doc.texts = append(doc.texts, string(tok))
			}
		case xml.ProcInst:
			t.Fatalf("unexpected processing instruction %q", tok.Target)
		}
	}
	if depth0 != 1 {
		t.Fatalf("want exactly one root element, got %d", depth0)
	}
	return doc
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func TestSVG(t *testing.T) {
	figs := exampleFigures()
	for _, name := range sortedNames(figs) {
		f := figs[name]
		t.Run(name, func(t *testing.T) {
			b, err := f.SVG()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte("<svg ")) {
				t.Fatalf("SVG does not start with <svg: %.40q", b)
			}
			doc := parseSVG(t, b)
			if doc.root.Name.Local != "svg" || doc.root.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("root element %v", doc.root.Name)
			}
			if got := attr(doc.root, "data-figure-id"); got != f.ID {
				t.Errorf("data-figure-id = %q, want %q", got, f.ID)
			}
			for _, a := range []string{"viewBox", "width", "height"} {
				if attr(doc.root, a) == "" {
					t.Errorf("root has no %s", a)
				}
			}
			if doc.title != f.Title {
				t.Errorf("<title> = %q, want %q", doc.title, f.Title)
			}
			all := strings.Join(doc.texts, "\n")
			for _, want := range []string{f.XLabel, f.YLabel} {
				if !strings.Contains(all, want) {
					t.Errorf("axis label %q missing from texts %q", want, doc.texts)
				}
			}
			if len(f.Title) < 60 && !slices.Contains(doc.texts, f.Title) {
				t.Errorf("title %q not drawn", f.Title)
			}
			lineSeries, errBars := 0, 0
			for _, s := range f.Series {
				if len(s.Name) < 30 && !slices.Contains(doc.texts, s.Name) {
					t.Errorf("series name %q not in legend", s.Name)
				}
				n := 0
				for _, p := range s.Points {
					if finite(p.X) && finite(p.Y) {
						n++
						if p.HasErr() {
							errBars++
						}
					}
				}
				if f.Kind == Lines && s.Style != MarkersOnly && n >= 2 {
					lineSeries++
				}
			}
			if got := doc.classes["series-line"]; got != lineSeries {
				t.Errorf("%d series-line paths, want one per line series (%d)", got, lineSeries)
			}
			if got := doc.classes["errorbar"]; got != errBars {
				t.Errorf("%d error bars, want %d", got, errBars)
			}
			if f.Kind == Bars {
				want := 0
				for _, s := range f.Series {
					for _, p := range s.Points {
						if p.Y != 0 { // a zero bar has no height
							want++
						}
					}
				}
				if got := doc.classes["bar"]; got != want {
					t.Errorf("%d bars, want %d", got, want)
				}
			}
		})
	}
}

func TestSVGDegenerate(t *testing.T) {
	figs := exampleFigures()
	doc := parseSVG(t, mustSVG(t, figs["empty"]))
	if !slices.Contains(doc.texts, "no data") {
		t.Errorf("empty figure has no 'no data' note: %q", doc.texts)
	}
	// Long legend names are truncated with an ellipsis.
	doc = parseSVG(t, mustSVG(t, figs["long-names"]))
	found := false
	for _, s := range doc.texts {
		if strings.HasPrefix(s, "a datapath with") && strings.HasSuffix(s, "…") {
			found = true
		}
	}
	if !found {
		t.Errorf("long series name not truncated with an ellipsis: %q", doc.texts)
	}
	// Escaping: the raw names come back intact through the XML decoder.
	doc = parseSVG(t, mustSVG(t, figs["nan-inf-negative"]))
	if !slices.Contains(doc.texts, "a<b>&c") {
		t.Errorf("escaped name lost: %q", doc.texts)
	}
	// Huge and tiny values get compact SI tick labels.
	doc = parseSVG(t, mustSVG(t, figs["huge-values"]))
	if !slices.Contains(doc.texts, "1M") || !slices.Contains(doc.texts, "100k") {
		t.Errorf("huge ticks not SI-formatted: %q", doc.texts)
	}
	doc = parseSVG(t, mustSVG(t, figs["tiny-values"]))
	if !slices.Contains(doc.texts, "10µ") {
		t.Errorf("tiny ticks not SI-formatted: %q", doc.texts)
	}
	// Negative values: the y axis includes them.
	d := mustLayout(t, figs["nan-inf-negative"])
	if d.ya.lo > -5 || d.ya.hi < 4 {
		t.Errorf("y axis %v..%v does not cover -5..4", d.ya.lo, d.ya.hi)
	}
	// All-equal values get a non-empty range around them.
	d = mustLayout(t, figs["all-equal"])
	if !(d.ya.lo < 5 && d.ya.hi > 5) {
		t.Errorf("constant series: y axis %v..%v does not surround 5", d.ya.lo, d.ya.hi)
	}
	// Y starts at 0 by default.
	d = mustLayout(t, figs["throughput-vs-policies"])
	if d.ya.lo != 0 {
		t.Errorf("y axis starts at %v, want 0", d.ya.lo)
	}
	// Bad options are errors, not panics.
	for _, bad := range []*Figure{
		{Width: -1}, {Width: 50}, {Scale: 100}, {Width: 8000, Height: 8000, Scale: 2},
		{Series: []Series{{Color: "red"}}},
		{Kind: Kind(7)},
	} {
		if _, err := bad.SVG(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
		if _, err := bad.PNG(); err == nil {
			t.Errorf("%+v: no PNG error", bad)
		}
	}
}

func mustSVG(t *testing.T, f *Figure) []byte {
	t.Helper()
	b, err := f.SVG()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustLayout(t *testing.T, f *Figure) *drawing {
	t.Helper()
	fs, err := newFontSet()
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.layout(fs)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func decodePNG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
	return img
}

func rgb(img image.Image, x, y int) (int, int, int) {
	r, g, b, _ := img.At(x, y).RGBA()
	return int(r >> 8), int(g >> 8), int(b >> 8)
}

// near reports whether some pixel within radius rad of (x, y) has colour c
// (within a tolerance for antialiasing).
func near(img image.Image, x, y float64, rad int, c rgba) bool {
	cx, cy := int(math.Floor(x)), int(math.Floor(y))
	for dy := -rad; dy <= rad; dy++ {
		for dx := -rad; dx <= rad; dx++ {
			r, g, b := rgb(img, cx+dx, cy+dy)
			if abs(r-int(c.r)) <= 40 && abs(g-int(c.g)) <= 40 && abs(b-int(c.b)) <= 40 {
				return true
			}
		}
	}
	return false
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func TestPNG(t *testing.T) {
	figs := exampleFigures()
	for _, name := range sortedNames(figs) {
		f := figs[name]
		t.Run(name, func(t *testing.T) {
			b, err := f.PNG()
			if err != nil {
				t.Fatal(err)
			}
			img := decodePNG(t, b)
			if got := img.Bounds(); got != image.Rect(0, 0, defaultWidth, defaultHeight) {
				t.Fatalf("size %v, want %dx%d", got, defaultWidth, defaultHeight)
			}
			nonWhite := 0
			bd := img.Bounds()
			for y := bd.Min.Y; y < bd.Max.Y; y++ {
				for x := bd.Min.X; x < bd.Max.X; x++ {
					if r, g, b := rgb(img, x, y); r < 240 || g < 240 || b < 240 {
						nonWhite++
					}
				}
			}
			frac := float64(nonWhite) / float64(bd.Dx()*bd.Dy())
			if frac < 0.01 || frac > 0.6 {
				t.Errorf("non-white fraction %.4f: blank or flooded image", frac)
			}
			checkDataPixels(t, f, img, 1)
		})
	}
}

// checkDataPixels checks that the series colours are at the data points'
// pixel positions (markers for lines, the middle of each bar for bars).
func checkDataPixels(t *testing.T, f *Figure, img image.Image, scale float64) {
	t.Helper()
	d := mustLayout(t, f)
	// occluded reports whether a series drawn later has a point within a
	// marker's reach of (x, y).
	occluded := func(j int, x, y float64) bool {
		if f.Kind == Bars {
			return false
		}
		for _, s := range f.Series[j+1:] {
			if s.Style != LineMarkers && s.Style != MarkersOnly {
				continue // a thin line leaves most of the marker visible
			}
			for _, p := range s.Points {
				if finite(p.X) && finite(p.Y) && math.Hypot(d.xa.px(p.X)-x, d.ya.px(p.Y)-y) < 3*markerR {
					return true
				}
			}
		}
		return false
	}
	auto := 0
	for j, s := range f.Series {
		col := mustHex(PaletteColor(auto))
		if s.Color != "" {
			col = mustHex(s.Color)
		} else {
			auto++
		}
		checked, hits := 0, 0
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			var x, y float64
			if f.Kind == Bars {
				if p.Y == 0 {
					continue
				}
				n := len(f.Series)
				slotW := (d.xa.p1 - d.xa.p0) / float64(len(f.Categories))
				groupW := 0.8 * slotW
				x = d.xa.px(p.X) - groupW/2 + (float64(j)+0.25)*groupW/float64(n)
				y = (d.ya.px(0) + d.ya.px(p.Y)) / 2
			} else {
				x, y = d.xa.px(p.X), d.ya.px(p.Y)
				if occluded(j, x, y) {
					continue
				}
			}
			checked++
			if near(img, x*scale, y*scale, int(2*scale), col) {
				hits++
			} else if f.Kind == Bars || s.Style != DashedLine {
				r, g, b := rgb(img, int(x*scale), int(y*scale))
				t.Errorf("series %q point (%v, %v): pixel (%.0f, %.0f) is #%02x%02x%02x, want near %s",
					s.Name, p.X, p.Y, x*scale, y*scale, r, g, b, col.hex())
			}
		}
		if len(s.Points) > 0 && checked == 0 {
			t.Errorf("series %q: no point checked", s.Name)
		}
		// A dashed line leaves gaps: most, not all, points are on a dash.
		if checked > 0 && float64(hits) < 0.5*float64(checked) {
			t.Errorf("series %q: only %d of %d points have the series colour nearby", s.Name, hits, checked)
		}
	}
}

func TestPNGScale(t *testing.T) {
	f := exampleFigures()["throughput-vs-policies"]
	g := *f
	g.Scale = 2
	b, err := g.PNG()
	if err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, b)
	if got := img.Bounds().Size(); got != (image.Point{1600, 1000}) {
		t.Fatalf("2x size %v", got)
	}
	checkDataPixels(t, &g, img, 2)
}

func TestDeterministic(t *testing.T) {
	figs := exampleFigures()
	for _, name := range []string{"throughput-vs-policies", "baselines-bars", "chain-length", "nan-inf-negative"} {
		f := figs[name]
		s1, s2 := mustSVG(t, f), mustSVG(t, f)
		if !bytes.Equal(s1, s2) {
			t.Errorf("%s: SVG differs between renders", name)
		}
		p1, err1 := f.PNG()
		p2, err2 := f.PNG()
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(p1, p2) {
			t.Errorf("%s: PNG differs between renders", name)
		}
	}
}

// TestWriteExamples writes every example figure (PNG and SVG) to a temp dir,
// and also to $CNLAB_PLOT_OUT when set, so a person can look at them.
func TestWriteExamples(t *testing.T) {
	dirs := []string{t.TempDir()}
	if out := os.Getenv("CNLAB_PLOT_OUT"); out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, out)
	}
	figs := exampleFigures()
	var page bytes.Buffer
	page.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cnlab plot examples</title></head><body>\n")
	for _, name := range sortedNames(figs) {
		f := figs[name]
		p, err := f.PNG()
		if err != nil {
			t.Fatal(err)
		}
		s := mustSVG(t, f)
		page.Write(s)
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, name+".png"), p, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name+".svg"), s, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The three kinds the report draws, also at 2× scale.
	for _, name := range []string{"throughput-vs-policies", "baselines-bars", "chain-length"} {
		g := *figs[name]
		g.Scale = 2
		p, err := g.PNG()
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, name+"@2x.png"), p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	page.WriteString("</body></html>\n")
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "index.html"), page.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
