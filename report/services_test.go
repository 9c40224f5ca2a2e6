package report

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// servicesRun is a sweep of the number of services (params.services, as
// results.json names it), 1 to 10,000: iptables' tcp-rr p50 latency grows
// 12 ns per service from 60 µs and its throughput falls 0.1 Mb/s per
// service from 10 Gb/s; eBPF stays at 55 µs and 12 Gb/s. 1% noise, 5
// samples a point.
func servicesRun() *results.Results {
	rng := rand.New(rand.NewPCG(17, 5))
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "services", File: "services.yaml", Text: "name: services\n"}}
	add := func(dp string, w results.Workload, n int, m map[string]float64) {
		pr := results.PointResult{Point: results.Point{ID: fmt.Sprintf("p%03d", len(r.Points)), Sweep: "services",
			Params: results.Params{Topology: "single-host", Datapath: "ebpf", Services: n}, Workload: w, Series: dp, Repetitions: 5},
			Status: results.PointDone}
		for i := range 5 {
			s := map[string]float64{}
			for k, v := range m {
				s[k] = v * (1 + 0.01*rng.NormFloat64())
			}
			pr.Samples = append(pr.Samples, results.Sample{Repetition: i + 1, Metrics: s})
		}
		r.Points = append(r.Points, pr)
	}
	rr := results.Workload{Kind: results.TCPRR, RequestSize: 1, ResponseSize: 1}
	stream := results.Workload{Kind: results.TCPStream}
	for _, n := range []int{1, 10, 100, 1000, 10000} {
		l := 60 + 0.012*float64(n)
		add("iptables", rr, n, map[string]float64{"latency_p50_us": l, "latency_p99_us": 2 * l, "transactions_per_s": 1e6 / l})
		add("ebpf", rr, n, map[string]float64{"latency_p50_us": 55, "latency_p99_us": 110, "transactions_per_s": 1e6 / 55})
		add("iptables", stream, n, map[string]float64{"throughput_gbps": 10 - 0.0001*float64(n)})
		add("ebpf", stream, n, map[string]float64{"throughput_gbps": 12})
	}
	return r
}

// TestPerServiceSlope: a results.json whose points differ in
// params.services is drawn against the number of services on a log axis,
// and its slopes, bends and baselines are per service, in the metric's
// slope unit.
func TestPerServiceSlope(t *testing.T) {
	// Through results.json: the key is "services".
	dir := t.TempDir()
	b, err := json.Marshal(servicesRun())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"services":10000`) {
		t.Fatalf("results.json has no services key: %.300s", b)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fits, finds []string
	for _, f := range rep.Fits {
		fits = append(fits, f.Series+": "+f.Text)
		if f.Kind == "linear" && f.Series == "iptables" && strings.Contains(f.Panel, "latency-p50") {
			if math.Abs(f.Slope-0.012) > 0.001 || f.Flat {
				t.Errorf("iptables latency slope %v µs per service, want 0.012", f.Slope)
			}
		}
		if f.Kind == "bend" {
			t.Errorf("a straight line called bent: %s %s", f.Panel, f.Text)
		}
	}
	for _, f := range rep.Findings {
		finds = append(finds, f.Text)
	}
	fitText, findText := strings.Join(fits, "\n"), strings.Join(finds, "\n")
	for _, want := range []string{
		`iptables: \+1[12]\.\d ns per service \(95% CI \+1\d\.\d to \+1\d\.\d\)`,
		`iptables: −0\.(09|10)\d* Mb/s per service`,
		`ebpf: [−+]?\d.* ns per service`,
	} {
		if !regexp.MustCompile(want).MatchString(fitText) {
			t.Errorf("fits lack %q:\n%s", want, fitText)
		}
	}
	for _, want := range []string{
		`iptables \(tcp-rr 1/1, single-host, sweep services\): p50 latency \(µs\) rises \d+% from 1 to 10000 services .*; slope \+1[12]\.\d ns per service .*, \+0\.0\d+% of the fitted start per service\.`,
		`ebpf \(tcp-stream, single-host, sweep services\): .*its slope is not different from 0 \([−+]?\d.* Mb/s per service`,
		`at 1 service \(tcp-stream, single-host, sweep services\), ebpf has the highest median`,
	} {
		if !regexp.MustCompile(want).MatchString(findText) {
			t.Errorf("findings lack %q:\n%s", want, findText)
		}
	}
	if strings.Contains(fitText+findText, "per step") || strings.Contains(fitText+findText, "per policy") {
		t.Errorf("a slope not per service:\n%s\n%s", fitText, findText)
	}

	// Figures: every sweep figure on a log axis that says so, with its
	// points at (or dodged a hair from) the services' x; the baselines at
	// 1 service.
	sweeps, baselines := 0, 0
	for _, f := range rep.Figures {
		switch f.Kind {
		case "baseline":
			baselines++
			if !strings.HasPrefix(f.Title, "Baseline at 1 service:") {
				t.Errorf("baseline title %q", f.Title)
			}
			continue
		case "sweep":
			sweeps++
		default:
			continue
		}
		if !f.XLog || !f.Plot.XLog || !f.Plot.LogX() {
			t.Errorf("%s: x axis not logarithmic", f.ID)
		}
		if f.Plot.XLabel != "number of services (log scale)" || !strings.Contains(f.Caption, "log scale") {
			t.Errorf("%s: label %q, caption %q: want both to say log scale", f.ID, f.Plot.XLabel, f.Caption)
		}
		if !strings.Contains(f.Title, "vs number of services —") {
			t.Errorf("%s: title %q", f.ID, f.Title)
		}
		if lim := f.Plot.XLimits; !(lim.Min > 0 && lim.Min < 1 && lim.Max > 10000 && lim.Max < 20000) {
			t.Errorf("%s: x limits %v, want just around 1 to 10,000", f.ID, lim)
		}
		for _, s := range f.Plot.Series {
			if len(s.Points) != 5 {
				t.Errorf("%s %s: %d points, want 5", f.ID, s.Name, len(s.Points))
			}
			for i, p := range s.Points {
				want := math.Pow(10, float64(i))
				if r := p.X / want; !(r > 0.9 && r < 1.1) {
					t.Errorf("%s %s: point %d at x %v, want about %v", f.ID, s.Name, i, p.X, want)
				}
			}
		}
		svg, err := f.Plot.SVG()
		if err != nil {
			t.Fatal(err)
		}
		for _, lbl := range []string{">1<", ">10<", ">100<", ">1k<", ">10k<"} {
			if !strings.Contains(string(svg), lbl) {
				t.Errorf("%s: no tick label %s", f.ID, lbl)
			}
		}
	}
	if sweeps != 3 || baselines != 2 {
		t.Errorf("%d sweep figures and %d baselines, want 3 (p50 and p99 latency, throughput) and 2", sweeps, baselines)
	}
}

// TestSeedReference: a sweep's figures.reference is printed under every
// figure of that metric in the sweep, and under no other.
func TestSeedReference(t *testing.T) {
	r := servicesRun()
	const quote = "first-packet RTT 1,113 µs with kube-proxy iptables"
	r.Experiment.Spec = &results.Spec{Sweeps: []results.Sweep{{Name: "services",
		Figures: &results.Figures{Reference: map[string]string{"latency_p50_us": quote}}}}}
	rep := Build(r, nil)
	with := 0
	for _, f := range rep.Figures {
		has := strings.Contains(f.Caption, "The seed measured: "+quote)
		want := f.Kind == "sweep" && strings.Contains(f.ID, "latency-p50-us")
		if has != want {
			t.Errorf("figure %s (%s): reference in caption %v, want %v: %s", f.ID, f.Kind, has, want, f.Caption)
		}
		if has {
			with++
			if f.Plot.Note != f.Caption {
				t.Errorf("figure %s: the drawn note is not the caption", f.ID)
			}
		}
	}
	if with == 0 {
		t.Error("no figure of latency_p50_us")
	}
}
