package report

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/report/plot"
)

// shippedReports are the reports the tests can build: the committed
// fixture run and a quick run of every shipped experiment file with
// synthetic samples (quickResults), by name.
func shippedReports(t *testing.T) map[string]*Report {
	t.Helper()
	out := map[string]*Report{}
	rep, err := Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	out[fixture] = rep
	files, err := filepath.Glob("../experiments/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("%d experiment files (%v)", len(files), err)
	}
	for _, f := range files {
		out[filepath.Base(f)] = Build(quickResults(t, f), nil)
	}
	return out
}

// TestLegendsDistinct: no two series of a figure show the same legend
// text, in any figure the report draws from the fixture or from a quick
// run of a shipped experiment file (seed 004's figures once showed
// "iptables no-match, measured Service…" for two lines).
func TestLegendsDistinct(t *testing.T) {
	for name, rep := range shippedReports(t) {
		for _, f := range rep.Figures {
			texts, err := f.Plot.LegendTexts()
			if err != nil {
				t.Fatalf("%s %s: %v", name, f.ID, err)
			}
			seen := map[string]int{}
			for i, s := range texts {
				if j, ok := seen[s]; ok {
					t.Errorf("%s, figure %s: legend entries %d and %d both read %q", name, f.ID, j+1, i+1, s)
				}
				seen[s] = i
			}
		}
	}
}

// TestSeedValuesDrawn: every figures.seedValues entry of a shipped file
// is drawn on at least one figure of its quick run (a topology, metric
// or workload that matches no figure would be lost silently), as a
// Reference series, and the caption names it.
func TestSeedValuesDrawn(t *testing.T) {
	files, _ := filepath.Glob("../experiments/*.yaml")
	total := 0
	for _, file := range files {
		r := quickResults(t, file)
		rep := Build(r, nil)
		for _, sw := range r.Experiment.Spec.Sweeps {
			if sw.Figures == nil {
				continue
			}
			for _, v := range sw.Figures.SeedValues {
				total++
				drawn := false
				for _, f := range rep.Figures {
					if !strings.Contains(f.Caption, v.Label) {
						continue
					}
					for _, s := range f.Plot.Series {
						if s.Style == plot.Reference && strings.HasPrefix(s.Name, v.Label) {
							drawn = true
						}
					}
				}
				if !drawn && !skippedInQuick(r, sw.Name, v.Workload) {
					t.Errorf("%s, sweep %s: %q (%s) is on no figure of the quick run", filepath.Base(file), sw.Name, v.Label, v.Metric)
				}
			}
		}
	}
	if total < 10 {
		t.Errorf("%d seed tables and figures in the shipped files: are the seeds' values still there?", total)
	}
}

// skippedInQuick: the quick run measures no point of the sweep with the
// workload ("" for any).
func skippedInQuick(r *results.Results, sweep, workload string) bool {
	for _, p := range r.Points {
		w := workloadKey(p.Workload)
		if p.Sweep == sweep && (workload == "" || w == workload || strings.HasPrefix(w, workload+" ")) {
			return false
		}
	}
	return true
}

// TestSeedValuesOnFigure: a seed's values are drawn beside cnlab's lines
// in the colour of the line they name, dashed with hollow markers, the x
// axis widened to take them in, and a value without x as a horizontal
// line; the caption names the seed.
func TestSeedValuesOnFigure(t *testing.T) {
	r := synth(2, 1)
	x0, x300 := 0.0, 300.0
	r.Experiment.Spec = &results.Spec{Sweeps: []results.Sweep{{Name: "scaling", Figures: &results.Figures{SeedValues: []results.SeedValues{{
		Label: "seed 9, Table 1", Metric: "throughput_gbps", Topology: "single-host",
		Points: []results.SeedPoint{{Series: "theirs", Line: "iptables no-match", X: &x0, Y: 11}, {Series: "theirs", Line: "iptables no-match", X: &x300, Y: 7},
			{Series: "max", Y: 13}}}}}}}}
	rep := Build(r, nil)
	found := 0
	for _, f := range rep.Figures {
		for _, s := range f.Plot.Series {
			if s.Style != plot.Reference {
				continue
			}
			if f.Kind == "baseline" { // the seed's value at the first x, as a bar
				if s.Name != "seed 9, Table 1" || len(s.Points) != 1 || s.Points[0].Y != 11 {
					t.Errorf("baseline %s: seed bars %q %v", f.ID, s.Name, s.Points)
				}
				continue
			}
			if s.Name == "seed 9, Table 1: max" {
				if len(s.Points) != 2 || s.Points[0].Y != 13 || s.Points[0].X != 0 || s.Points[1].X != 200 {
					t.Errorf("a value without x: %v, want flat at 13 from x = 0 to 200", s.Points)
				}
				continue
			}
			found++
			if f.ID != "fig01-scaling-single-host-tcp-stream-throughput-gbps" || s.Name != "seed 9, Table 1: theirs" || len(s.Points) != 2 {
				t.Errorf("figure %s: seed series %q with %d points", f.ID, s.Name, len(s.Points))
			}
			if s.Color != plot.PaletteColor(1) { // iptables no-match is the second line
				t.Errorf("seed series colour %s, want iptables no-match's %s", s.Color, plot.PaletteColor(1))
			}
			if lim := f.Plot.XLimits; lim.Min < lim.Max && lim.Max < 300 {
				t.Errorf("x limits %v leave out the seed's x = 300", lim)
			}
			if !strings.Contains(f.Caption, "seed 9, Table 1") {
				t.Errorf("caption %q does not name the seed", f.Caption)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d seed series drawn, want 1", found)
	}
}

// TestSeedNormalised: a seed whose values are far from cnlab's in scale
// (another machine) gets an extra figure of every line relative to its
// own first x, the seed's shape beside cnlab's; a close seed does not.
func TestSeedNormalised(t *testing.T) {
	for _, scale := range []float64{1, 100} {
		r := synth(2, 1)
		x0, x200 := 0.0, 200.0
		r.Experiment.Spec = &results.Spec{Sweeps: []results.Sweep{{Name: "scaling", Figures: &results.Figures{SeedValues: []results.SeedValues{{
			Label: "seed 9, Fig. 2", Metric: "throughput_gbps",
			Points: []results.SeedPoint{{Series: "theirs", X: &x0, Y: 10 * scale}, {Series: "theirs", X: &x200, Y: 7 * scale}}}}}}}}
		var norm *Figure
		for _, f := range Build(r, nil).Figures {
			if f.Kind == "seed" {
				norm = &f
			}
		}
		switch {
		case scale == 1 && norm != nil:
			t.Errorf("seed values at cnlab's scale got a normalised figure %s", norm.ID)
		case scale == 100 && norm == nil:
			t.Errorf("seed values 100× cnlab's got no normalised figure")
		case scale == 100:
			for _, s := range norm.Plot.Series {
				if s.Name == "seed 9, Fig. 2: theirs" && (len(s.Points) != 2 || s.Points[0].Y != 100 || math.Abs(s.Points[1].Y-70) > 1e-9) {
					t.Errorf("the seed's shape normalised: %v, want 100%% then 70%%", s.Points)
				}
				if s.Name == "iptables no-match" && s.Points[0].Y != 100 {
					t.Errorf("cnlab's line normalised starts at %v%%", s.Points[0].Y)
				}
			}
		}
	}
}
