package plot

import (
	"math"
	"strings"
	"testing"
)

// TestHBands: a band widens the y axis to hold it, is shaded between its
// y values under the data with dashed edges, and carries its label; a
// band that is no range is left out.
func TestHBands(t *testing.T) {
	f := &Figure{ID: "fig-band", Kind: Bars, Title: "cost", YLabel: "%", Categories: []string{"ebpf", "iptables"},
		Series: []Series{{Name: "all", Points: []Point{{X: 0, Y: 3, YLow: 2, YHigh: 4}, {X: 1, Y: -2, YLow: -3, YHigh: -1}}}},
		HBands: []Band{{From: 1, To: 15, Label: "seed 003: Hubble 1–15%"}, {From: 5, To: 2, Label: "backwards"}, {From: math.NaN(), To: 1}}}
	d := mustLayout(t, f)
	if d.ya.hi < 15 || d.ya.lo > -3 {
		t.Errorf("y axis %g to %g does not hold the band and the data", d.ya.lo, d.ya.hi)
	}
	var bands, edges, labels int
	firstBar := -1
	for i, p := range d.prims {
		switch p.class {
		case "refband":
			bands++
			if top, bot := d.ya.px(15), d.ya.px(1); math.Abs(p.y-top) > 1 || math.Abs(p.y+p.h-bot) > 1 || p.fill.a == 0 || p.fill.a == 255 {
				t.Errorf("band drawn from y %g to %g (fill %+v), want %g to %g, translucent", p.y, p.y+p.h, p.fill, top, bot)
			}
			if firstBar >= 0 {
				t.Error("band drawn over the bars")
			}
		case "refband-edge":
			edges++
			if len(p.dash) == 0 {
				t.Error("band edge not dashed")
			}
		case "refband-label":
			labels++
			if p.text != "seed 003: Hubble 1–15%" {
				t.Errorf("band label %q", p.text)
			}
		}
		if strings.HasPrefix(p.class, "bar") && firstBar < 0 {
			firstBar = i
		}
	}
	if bands != 1 || edges != 2 || labels != 1 {
		t.Errorf("%d bands, %d edges, %d labels: want 1, 2, 1", bands, edges, labels)
	}
	if _, err := f.SVG(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.PNG(); err != nil {
		t.Fatal(err)
	}
}
