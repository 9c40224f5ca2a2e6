package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// costRun is a thesis-like run: one tcp-stream per policy count whose
// time per packet grows by nsPer ns per policy from 4000 ns, with the
// server's packet counter (skb_per_s) when counted, and a tcp-rr whose
// transaction grows by 10 ns per policy. Its points have TSO off, as the
// thesis's; withOffloads changes them.
func costRun(name string, nsPer float64, counted bool) *results.Results {
	return costRunWith(name, nsPer, counted, func(p *results.Params) { p.Offloads = "tso=off" })
}

func costRunWith(name string, nsPer float64, counted bool, set func(*results.Params)) *results.Results {
	rng := rand.New(rand.NewPCG(5, 7))
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: name, File: name + ".yaml", Text: "name: " + name + "\n"}}
	for _, n := range []int{0, 100, 200} {
		for _, w := range []results.Workload{{Kind: results.TCPStream}, {Kind: results.TCPRR, RequestSize: 100, ResponseSize: 200}} {
			pr := results.PointResult{Point: results.Point{ID: fmt.Sprintf("p%04d", len(r.Points)+1), Sweep: "iptables",
				Params:   results.Params{Topology: "single-host", Datapath: "iptables", Policies: n, PolicyMode: "no-match"},
				Workload: w, Series: "iptables no-match", Repetitions: 5}, Status: results.PointDone}
			set(&pr.Params)
			for i := 0; i < 5; i++ {
				m := map[string]float64{}
				if w.Kind == results.TCPStream {
					ns := (4000 + nsPer*float64(n)) * (1 + 0.003*rng.NormFloat64())
					m["throughput_gbps"] = 1448 * 8 / ns
					if counted {
						m["skb_per_s"] = 1e9 / ns
						m["cpu_us_per_packet"] = ns / 1000
					}
				} else {
					us := (20 + 0.01*float64(n)) * (1 + 0.003*rng.NormFloat64())
					m["latency_p50_us"], m["latency_p99_us"], m["transactions_per_s"] = us, 2*us, 1e6/us
				}
				pr.Samples = append(pr.Samples, results.Sample{Repetition: i + 1, Metrics: m})
			}
			r.Points = append(r.Points, pr)
		}
	}
	return r
}

func TestUnitCosts(t *testing.T) {
	for _, counted := range []bool{true, false} {
		rep := Build(costRun("thesis-policy-scaling", 2.2, counted), nil)
		var stream, rr *UnitCost
		for i, uc := range rep.UnitCosts {
			switch uc.Of {
			case "packet":
				stream = &rep.UnitCosts[i]
			case "transaction":
				rr = &rep.UnitCosts[i]
			}
		}
		if stream == nil || rr == nil {
			t.Fatalf("counted %v: unit costs %+v, want one per packet and one per transaction", counted, rep.UnitCosts)
		}
		if !stream.CI.Contains(2.2) || math.Abs(stream.Ns-2.2) > 0.3 || stream.Flat {
			t.Errorf("counted %v: %.3g ns per policy per packet (%v), want 2.2", counted, stream.Ns, stream.CI)
		}
		wantSrc := "skb_per_s"
		if !counted {
			wantSrc = "throughput_gbps/MSS"
			if stream.MSS != 1448 || stream.TSOOn || strings.Contains(stream.Text, "TSO was not off") || !strings.Contains(stream.Text, "1448-byte segments") {
				t.Errorf("fallback: MSS %d, TSO not off %v (the points have tso=off): %s", stream.MSS, stream.TSOOn, stream.Text)
			}
		}
		if stream.Source != wantSrc {
			t.Errorf("counted %v: source %q, want %q", counted, stream.Source, wantSrc)
		}
		if !rr.CI.Contains(10) {
			t.Errorf("rr: %.3g ns per policy per transaction (%v), want 10", rr.Ns, rr.CI)
		}
		if stream.Seed == nil || math.Abs(stream.Seed.Ns-7.36) > 0.01 || rr.Seed != nil {
			t.Fatalf("seed costs: stream %+v, rr %+v; want the thesis's 7.36 ns on the stream only", stream.Seed, rr.Seed)
		}
		for _, want := range []string{"ns per policy per packet", "the thesis (seed 000), Fig. 7.2: 7.36 ns (3.17 → 2.26 Gb/s"} {
			if !strings.Contains(stream.Text, want) {
				t.Errorf("text %q lacks %q", stream.Text, want)
			}
		}
		if counted && (stream.CPUFirst == 0 || !strings.Contains(stream.Text, "CPU time per packet")) {
			t.Errorf("no CPU per packet in %q", stream.Text)
		}
	}
	// The page's table.
	dir := t.TempDir()
	if _, err := Build(costRun("thesis-policy-scaling", 2.2, true), nil).Write(dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(page), `id="unit-costs"`) || !strings.Contains(string(page), "7.36 ns: the thesis (seed 000), Fig. 7.2") {
		t.Errorf("report.html: no table of costs per packet with the thesis's (%v)", err)
	}
	// Another experiment's iptables curve gets no thesis number.
	for _, uc := range Build(costRun("mine", 2.2, true), nil).UnitCosts {
		if uc.Seed != nil {
			t.Errorf("%s: seed cost %+v in an experiment that is not the thesis's", uc.Series, uc.Seed)
		}
	}
}

// TestSeedCostArithmetic: the two examples.
func TestSeedCostArithmetic(t *testing.T) {
	for _, c := range []struct{ from, to, want float64 }{{2.93, 2.64, 2.17}, {3.17, 2.26, 7.36}} {
		if got := perPacketNs(c.from, c.to, 0, 200, 1448); math.Abs(got-c.want) > 0.01 {
			t.Errorf("%g → %g Gb/s: %.3f ns per rule per packet, want %.2f", c.from, c.to, got, c.want)
		}
	}
}

func TestCompareReference(t *testing.T) {
	env := func(gbps, us []float64, cached bool) *results.Environment {
		return &results.Environment{Reference: &results.ReferenceSpeed{StreamGbps: gbps, RRP50Us: us, Cached: cached}}
	}
	same := CompareReference(env([]float64{13.0, 13.2, 12.9}, []float64{8.3, 8.2, 8.3, 8.3}, false), env([]float64{13.1, 12.8, 13.0}, []float64{8.2, 8.3, 8.3, 8.2}, false))
	if same == nil || same.Differ || !strings.Contains(same.Text, "within their noise") {
		t.Fatalf("same machine: %+v", same)
	}
	slow := CompareReference(env([]float64{13.0, 13.2, 12.9}, []float64{8.3, 8.2, 8.3, 8.3}, false), env([]float64{9.1, 9.0, 9.2}, []float64{18.2, 18.3, 18.1, 18.4}, true))
	if slow == nil || !slow.Differ || !slow.StreamDiffers || !slow.RRDiffers || !strings.Contains(slow.Text, "differ by more than their noise") || !strings.Contains(slow.Text, "reused") {
		t.Fatalf("slower day: %+v", slow)
	}
	c := &Comparison{Reference: slow}
	var found bool
	for _, l := range c.summary() {
		found = found || strings.HasPrefix(l, "warning: reference speed")
	}
	if !found {
		t.Errorf("summary %q: no warning about the reference speeds", c.summary())
	}
	if CompareReference(env([]float64{1, 2}, []float64{1, 2}, false), &results.Environment{}) != nil {
		t.Error("a run without a reference speed: compared")
	}
}

// The thesis's cost stands beside a curve measured as the thesis measured
// it only: TSO off ("off" turns every offload off, TSO included) at MTU
// 1500. TSO on, or MTU 9000, gets none; the fallback says TSO was not off
// only when it was not; an x axis that changes the packet (MTU) gets no
// cost per packet at all.
func TestUnitCostsSeedConditions(t *testing.T) {
	streamOf := func(r *results.Results, env *results.Environment) *UnitCost {
		for _, uc := range Build(r, env).UnitCosts {
			if uc.Of == "packet" {
				return &uc
			}
		}
		return nil
	}
	for _, c := range []struct {
		name     string
		set      func(*results.Params)
		env      *results.Environment
		seed     bool
		tsoNotOn bool
	}{
		{"offloads off", func(p *results.Params) { p.Offloads = "off" }, nil, true, false},
		{"tso and gso off", func(p *results.Params) { p.Offloads = "tso=off,gso=off" }, nil, true, false},
		{"offloads on", func(p *results.Params) { p.Offloads = "on" }, nil, false, true},
		{"no offloads set", func(p *results.Params) {}, nil, false, true},
		{"MTU 9000", func(p *results.Params) { p.Offloads, p.MTU = "tso=off", 9000 }, nil, false, false},
		{"machine's MTU 9000", func(p *results.Params) { p.Offloads = "tso=off" }, &results.Environment{DefaultMTU: 9000}, false, false},
		{"machine's MTU 1500", func(p *results.Params) { p.Offloads = "tso=off" }, &results.Environment{DefaultMTU: 1500}, true, false},
	} {
		uc := streamOf(costRunWith("thesis-offloads", 2.2, false, c.set), c.env)
		if uc == nil {
			t.Fatalf("%s: no cost per packet", c.name)
		}
		if (uc.Seed != nil) != c.seed {
			t.Errorf("%s: seed cost %+v, want one: %v", c.name, uc.Seed, c.seed)
		}
		if uc.TSOOn != c.tsoNotOn {
			t.Errorf("%s: TSO not off %v, want %v", c.name, uc.TSOOn, c.tsoNotOn)
		}
	}
	// An MTU sweep: no cost per byte of MTU per packet.
	r := costRunWith("thesis-offloads", 2.2, false, func(p *results.Params) { p.Offloads = "off" })
	for i := range r.Points {
		p := &r.Points[i]
		p.Params.MTU = []int{1500, 4000, 9000}[p.Params.Policies/100]
		p.Params.Policies = 0
	}
	for _, uc := range Build(r, nil).UnitCosts {
		t.Errorf("MTU sweep: a cost per packet %+v", uc)
	}
}
