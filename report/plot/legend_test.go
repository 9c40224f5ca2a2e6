package plot

import (
	"strings"
	"testing"
)

// TestLegendNamesDistinct: names that a cut at the end would make read
// the same keep the end that tells them apart (seed 004's "iptables
// no-match, measured Service first" and "… last").
func TestLegendNamesDistinct(t *testing.T) {
	long := []string{
		"iptables no-match, measured Service first",
		"iptables no-match, measured Service last",
		"nftables, measured Service first",
		"ebpf socket-lb, measured Service last",
	}
	for _, legend := range []LegendPlacement{LegendRight, LegendBelow} {
		for _, w := range []int{800, 400} {
			f := &Figure{Title: "t", Legend: legend, Width: w}
			for i, n := range long {
				f.Series = append(f.Series, Series{Name: n, Points: []Point{{X: 1, Y: float64(i)}, {X: 2, Y: float64(i + 1)}}})
			}
			got, err := f.LegendTexts()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(long) {
				t.Fatalf("%d entries, want %d: %q", len(got), len(long), got)
			}
			seen := map[string]bool{}
			for _, g := range got {
				if seen[g] {
					t.Errorf("legend %v, width %d: %q twice in %q", legend, w, g, got)
				}
				seen[g] = true
			}
			if !strings.HasSuffix(got[0], "first") || !strings.HasSuffix(got[1], "last") {
				t.Errorf("legend %v, width %d: the ends that tell lines apart are lost: %q", legend, w, got)
			}
		}
	}
	// Names alike up to their last character, in a legend too narrow for
	// their ends: numbered.
	fs, err := newFontSet()
	if err != nil {
		t.Fatal(err)
	}
	got := legendNames(fs, []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"}, 60)
	if got[0] == got[1] {
		t.Errorf("alike names read the same: %q", got)
	}
}

// TestReferenceStyle: a Reference series draws a dashed line with hollow
// markers, and outlined bars in a Bars figure.
func TestReferenceStyle(t *testing.T) {
	f := &Figure{Series: []Series{{Name: "measured", Points: []Point{{X: 1, Y: 1}, {X: 2, Y: 2}}},
		{Name: "seed", Style: Reference, Points: []Point{{X: 1, Y: 1.5}, {X: 2, Y: 2.5}}}}}
	svg, err := f.SVG()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "stroke-dasharray") {
		t.Error("no dashed line for the Reference series")
	}
	f.Kind = Bars
	f.Categories = []string{"a", "b"}
	f.Series[0].Points = []Point{{X: 0, Y: 1}, {X: 1, Y: 2}}
	f.Series[1].Points = []Point{{X: 0, Y: 1.5}}
	if _, err := f.SVG(); err != nil {
		t.Fatal(err)
	}
}
