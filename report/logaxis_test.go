package report

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// TestLogAxisChoice: a figure's x axis is logarithmic when every x is
// above 0 and they span two decades or more, linear otherwise.
func TestLogAxisChoice(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want bool
	}{
		{[]float64{1, 10, 100, 1000, 10000}, true}, // services 1 to 10,000
		{[]float64{1, 100}, true},                  // exactly two decades
		{[]float64{1, 200}, true},                  // thesis-offloads' policies 1 and 200
		{[]float64{5, 10, 50, 100, 200}, false},    // 40×: under two decades
		{[]float64{1, 2, 4, 8, 16}, false},         // a chain's hops
		{[]float64{100, 1000, 5000}, false},        // firewall rules 100 to 5,000: 50×
		{[]float64{0, 1, 10, 100, 1000, 10000}, false},
		{[]float64{0, 10, 25, 50, 100, 150, 200}, false}, // policies from 0
		{[]float64{-1, 10, 10000}, false},
		{[]float64{7}, false},
		{nil, false},
		{[]float64{1, math.Inf(1)}, false},
	} {
		if got := logAxis(c.xs); got != c.want {
			t.Errorf("logAxis(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	for label, want := range map[string]string{
		"number of services":   "number of services (log scale)",
		"message size (bytes)": "message size (bytes; log scale)",
	} {
		if got := logLabel(label); got != want {
			t.Errorf("logLabel(%q) = %q, want %q", label, got, want)
		}
	}
}

// TestFitXsLog: a fitted curve over a log axis is sampled evenly in log
// x, at least ten points a decade; over a linear axis evenly in x, as
// before.
func TestFitXsLog(t *testing.T) {
	xs := fitXs(1, 10000, true)
	if xs[0] != 1 || xs[len(xs)-1] != 10000 {
		t.Fatalf("fitXs(1, 10000, log) from %v to %v", xs[0], xs[len(xs)-1])
	}
	for dec := 0; dec < 4; dec++ {
		n := 0
		for _, x := range xs {
			if x >= math.Pow(10, float64(dec)) && x < math.Pow(10, float64(dec+1)) {
				n++
			}
		}
		if n < 10 {
			t.Errorf("%d fit points in [10^%d, 10^%d), want 10 or more", n, dec, dec+1)
		}
	}
	r := xs[1] / xs[0]
	for i := 2; i < len(xs); i++ {
		if math.Abs(xs[i]/xs[i-1]-r) > 1e-9*r {
			t.Fatalf("fit points not evenly spaced in log x: %v", xs)
		}
	}
	lin := fitXs(1, 16, false)
	if len(lin) != 41 || lin[0] != 1 || lin[40] != 16 || math.Abs(lin[1]-lin[0]-15.0/40) > 1e-12 {
		t.Errorf("linear fitXs(1, 16) = %v, want 41 points 0.375 apart", lin)
	}
}

// TestLinearAxesStay: sweeps with an x at 0 (policies from 0, chains from
// the direct pair) or spanning less than two decades keep linear axes and
// draw every point.
func TestLinearAxesStay(t *testing.T) {
	rep := Build(synth(3, 1), nil)
	for _, f := range rep.Figures {
		if f.XLog || f.Plot.XLog || strings.Contains(f.Caption, "log scale") {
			t.Errorf("%s: log x axis for x from 0 or under two decades", f.ID)
		}
	}
}

// TestPowerLawOnLogAxis: a chain whose lengths span two decades is drawn
// on a log axis, and its fitted power law as a curve sampled evenly in log
// x (not 40 chords crowded into the last decade).
func TestPowerLawOnLogAxis(t *testing.T) {
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "long chain", File: "c.yaml", Text: "name: c\n"}}
	for i, n := range []int{1, 2, 4, 16, 64, 128} {
		pr := results.PointResult{Point: results.Point{ID: fmt.Sprintf("p%d", i), Sweep: "chain",
			Params: results.Params{Topology: "chain", Link: "veth", ChainLength: n}, Workload: results.Workload{Kind: results.TCPStream},
			Series: "none", Repetitions: 3}, Status: results.PointDone}
		for k := range 3 {
			pr.Samples = append(pr.Samples, results.Sample{Repetition: k + 1, Metrics: map[string]float64{
				"throughput_gbps": 20 * math.Pow(0.99, float64(n-1)) * (1 + 0.001*float64(k-1))}})
		}
		r.Points = append(r.Points, pr)
	}
	rep := Build(r, nil)
	var fig *Figure
	for i := range rep.Figures {
		if rep.Figures[i].Kind == "sweep" {
			fig = &rep.Figures[i]
		}
	}
	if fig == nil || !fig.XLog {
		t.Fatalf("chain 1 to 128 hops: no log figure (%+v)", fig)
	}
	if len(fig.Plot.Series) != 2 {
		t.Fatalf("%d series, want the data and its fit", len(fig.Plot.Series))
	}
	fit := fig.Plot.Series[1].Points
	below10 := 0
	for _, p := range fit {
		if p.X < 10 {
			below10++
		}
	}
	if len(fit) < 60 || below10 < len(fit)/3 {
		t.Errorf("fit drawn with %d points, %d below 10 hops: want it sampled evenly in log x", len(fit), below10)
	}
}
