package report

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/report/plot"
)

// TestCostFigure: experiments/seed003-observe.yaml's quick run, with
// samples where drops costs each datapath 1% and all 10% (less
// throughput, more latency and CPU), draws for each metric a figure of
// the cost of drops and all against off, grouped by datapath, in
// percent, with seed 003's 1-15% as a labelled band.
func TestCostFigure(t *testing.T) {
	const path = "../experiments/seed003-observe.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := experiment.Parse(data, path, true)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	factor := map[string]float64{"off": 1, "drops": 1.01, "all": 1.1} // worse by
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: s.Name, File: path, Text: string(data), Spec: &s.Spec}}
	for _, p := range pts {
		pr := results.PointResult{Point: p, Status: results.PointDone}
		for rep := range 3 {
			ms := map[string]float64{}
			for _, name := range recorded[p.Workload.Kind] {
				v := 100 * factor[p.Params.Observe]
				if MetricInfo(name).Better > 0 {
					v = 100 / factor[p.Params.Observe]
				}
				ms[name] = v * (1 + 0.001*float64(rep-1)) // a little spread
			}
			ms["system_cpu_pct"] = 40 * factor[p.Params.Observe] * (1 + 0.001*float64(rep-1))
			pr.Samples = append(pr.Samples, results.Sample{Repetition: rep, Metrics: ms})
		}
		r.Points = append(r.Points, pr)
	}
	rep := Build(r, nil)
	var costs []Figure
	for _, f := range rep.Figures {
		if f.Kind == "cost" {
			costs = append(costs, f)
		}
	}
	// tcp-stream: throughput, sender, receiver and machine CPU; tcp-rr:
	// p50, p99, transactions/s, CPU; tcp-crr: transactions/s, p50,
	// connect p50 and p99, CPU.
	if len(costs) != 13 {
		var ids []string
		for _, f := range rep.Figures {
			ids = append(ids, f.ID+" "+f.Kind)
		}
		t.Fatalf("%d cost figures, want 13:\n%s", len(costs), strings.Join(ids, "\n"))
	}
	for _, f := range costs {
		p := f.Plot
		if p.Kind != plot.Bars || !slices.Equal(p.Categories, []string{"ebpf terms", "iptables terms", "nftables terms"}) {
			t.Errorf("%s: kind %v categories %q, want bars per datapath", f.ID, p.Kind, p.Categories)
		}
		if len(p.Series) != 2 || p.Series[0].Name != "observe drops" || p.Series[1].Name != "observe all" {
			t.Fatalf("%s: series %+v, want observe drops and observe all", f.ID, p.Series)
		}
		for i, want := range []float64{1, 10} {
			for _, pt := range p.Series[i].Points {
				// Higher-is-better metrics lose 1 - 1/1.01 and 1 - 1/1.1.
				if math.Abs(pt.Y-want) > 1.2 || !pt.HasErr() || pt.YLow > pt.Y || pt.YHigh < pt.Y {
					t.Errorf("%s %s: %+v, want a cost of about %g%% with its interval", f.ID, p.Series[i].Name, pt, want)
				}
			}
		}
		if want := []plot.Band{{From: 1, To: 15, Label: "seed 003: Hubble 1–15%"}}; !slices.Equal(p.HBands, want) {
			t.Errorf("%s: reference bands %+v, want %+v", f.ID, p.HBands, want)
		}
		if !strings.Contains(p.YLabel, "% of observe off") || !strings.Contains(f.Caption, "seed 003: Hubble 1–15%") {
			t.Errorf("%s: y label %q caption %q", f.ID, p.YLabel, f.Caption)
		}
		if _, err := p.SVG(); err != nil {
			t.Errorf("%s: %v", f.ID, err)
		}
	}
	// The measured figures are there too, a bar per datapath and level.
	found := false
	for _, f := range rep.Figures {
		if f.Kind == "sweep" && strings.Contains(f.ID, "throughput") {
			found = slices.Contains(f.Plot.Categories, "ebpf terms, observe all")
		}
	}
	if !found {
		t.Error("no throughput figure with a bar for ebpf terms, observe all")
	}
}

// TestCostSigned: a cost may be negative (better than the base), and its
// interval is not cut at zero; a line without its base value gets none.
func TestCostSigned(t *testing.T) {
	mk := func(id, dp, obs string, vs ...float64) *results.PointResult {
		p := &results.PointResult{Point: results.Point{ID: id, Series: dp, Params: results.Params{Datapath: "ebpf", Observe: obs}}}
		for _, v := range vs {
			p.Samples = append(p.Samples, results.Sample{Metrics: map[string]float64{"latency_p50_us": v}})
		}
		return p
	}
	pts := []*results.PointResult{mk("p1", "ebpf", "off", 100, 100, 100), mk("p2", "ebpf", "all", 95, 97, 99), mk("p3", "iptables", "all", 50)}
	pn := &Panel{Metric: MetricInfo("latency_p50_us")}
	sdims := []dim{seriesDims[1], axisDim("observe")}
	for _, p := range pts {
		c := &Curve{Series: seriesName(p, sdims), X: []float64{0}, Samples: map[float64][]float64{0: nil}, Points: map[float64][]string{0: {p.ID}}}
		c.Samples[0] = samplesOf(p, "latency_p50_us")
		pn.Curves = append(pn.Curves, c)
	}
	cp := costPanel(pn, pts, sdims, &results.Cost{Axis: "observe", Base: "off"})
	if cp == nil || len(cp.Curves) != 1 || cp.Groups[0] != [2]string{"ebpf", "observe all"} {
		t.Fatalf("cost panel %+v", cp)
	}
	pt := cp.ciPoint(0, cp.Curves[0].summary(0))
	if pt.Y != -3 || !pt.HasErr() || pt.YLow >= -5 || pt.YHigh <= -1 {
		t.Errorf("cost %+v, want -3%% with an interval below -5 and above -1", pt)
	}
	if costPanel(pn, pts, sdims[:1], &results.Cost{Axis: "observe", Base: "off"}) != nil {
		t.Error("a cost panel where observe names no line")
	}
}
