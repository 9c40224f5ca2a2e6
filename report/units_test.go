package report

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// bentRun is a run whose curves bend at 100 policies, so the report
// gives linear fits, bends and their sentences: iptables tcp-rr latency
// flat at 10 µs, then 50 ns more per policy; its throughput flat at
// 10 Gb/s, then 20 Mb/s less per policy; udp-stream loss flat at 1%, then
// 0.05 points more per policy. 0.2% noise, 5 samples per point.
func bentRun() *results.Results {
	rng := rand.New(rand.NewPCG(11, 3))
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "bent", File: "bent.yaml", Text: "name: bent\n"}}
	bent := func(n int, flat, after float64) float64 { return flat + after*float64(max(n-100, 0)) }
	add := func(w results.Workload, n int, metrics func(n int) map[string]float64) {
		pr := results.PointResult{Point: results.Point{ID: fmt.Sprintf("p%04d", len(r.Points)), Sweep: "scaling",
			Params:   results.Params{Topology: "single-host", Datapath: "iptables", Policies: n, PolicyMode: "no-match"},
			Workload: w, Series: "iptables no-match", Repetitions: 5}, Status: results.PointDone}
		for i := 0; i < 5; i++ {
			m := metrics(n)
			for k, v := range m {
				m[k] = v * (1 + 0.002*rng.NormFloat64())
			}
			pr.Samples = append(pr.Samples, results.Sample{Repetition: i + 1, Metrics: m})
		}
		r.Points = append(r.Points, pr)
	}
	for _, n := range []int{0, 25, 50, 75, 100, 125, 150, 175, 200} {
		add(results.Workload{Kind: results.TCPRR, RequestSize: 100, ResponseSize: 200}, n, func(n int) map[string]float64 {
			l := bent(n, 10, 0.05)
			return map[string]float64{"latency_p50_us": l, "latency_p99_us": 2 * l, "transactions_per_s": 1e6 / l}
		})
		add(results.Workload{Kind: results.TCPStream}, n, func(n int) map[string]float64 {
			return map[string]float64{"throughput_gbps": bent(n, 10, -0.02)}
		})
		add(results.Workload{Kind: results.UDPStream}, n, func(n int) map[string]float64 {
			return map[string]float64{"throughput_gbps": bent(n, 5, -0.01), "loss_pct": bent(n, 1, 0.05)}
		})
	}
	return r
}

// TestSlopeUnits: every slope the report states, in a fit or a sentence,
// linear or either side of a bend, gives one metric in one unit: the
// metric's smaller unit for latency (ns) and throughput (Mb/s), its own
// for the others.
func TestSlopeUnits(t *testing.T) {
	rep := Build(bentRun(), nil)
	// A panel's ID ends with its metric's name.
	metricOf := func(panel string) string {
		best := ""
		for _, name := range results.MetricNames() {
			if s := strings.ReplaceAll(name, "_", "-"); strings.HasSuffix(panel, "-"+s) && len(name) > len(best) {
				best = name
			}
		}
		return best
	}
	perStep := regexp.MustCompile(`(\S+) per (policy|rule|term|hop|switch|flow|byte)\b`)
	units := map[string]map[string][]string{} // metric → unit → texts
	note := func(panel, text string) {
		m := metricOf(panel)
		if m == "" {
			t.Fatalf("panel %s: no metric", panel)
		}
		for _, sm := range perStep.FindAllStringSubmatch(text, -1) {
			if sm[1] == "start" { // "% of the fitted start per policy": a relative slope
				continue
			}
			if units[m] == nil {
				units[m] = map[string][]string{}
			}
			units[m][sm[1]] = append(units[m][sm[1]], text)
		}
	}
	bends := 0
	for _, f := range rep.Fits {
		note(f.Panel, f.Text)
		if f.Kind == "bend" {
			bends++
		}
	}
	for _, f := range rep.Findings {
		note(f.Panel, f.Text)
	}
	if bends < 3 {
		t.Fatalf("%d bends found, want the latency, throughput and loss curves bent", bends)
	}
	want := map[string]string{"latency_p50_us": "ns", "latency_p99_us": "ns", "throughput_gbps": "Mb/s", "loss_pct": "%"}
	for m, u := range want {
		if len(units[m]) == 0 {
			t.Errorf("%s: no slope stated", m)
		}
		var got []string
		for unit := range units[m] {
			got = append(got, unit)
		}
		sort.Strings(got)
		if len(got) != 1 || got[0] != u {
			t.Errorf("%s: slopes in %q, want %s only:", m, got, u)
			for _, unit := range got {
				if unit != u {
					t.Logf("  in %s: %s", unit, units[m][unit][0])
				}
			}
		}
	}
}
