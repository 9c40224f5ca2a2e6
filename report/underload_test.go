package report

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/experiment/results"
)

// TestUnderLoadBesideIdle: experiments/rrul.yaml's quick run draws
// tcp-rr-under-load on tcp-rr's figures, a line per datapath idle and one
// under load, and the load's throughput on a figure of its own lines.
func TestUnderLoadBesideIdle(t *testing.T) {
	const path = "../experiments/rrul.yaml"
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
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: s.Name, File: path, Text: string(data), Spec: &s.Spec}}
	for _, p := range pts {
		pr := results.PointResult{Point: p, Status: results.PointDone}
		for rep := range 3 {
			lat := 20.0
			ms := map[string]float64{}
			if p.Workload.Kind == results.TCPRRUnderLoad {
				lat = 200
				ms["throughput_gbps"] = 10 + float64(rep)
			}
			ms["latency_p50_us"], ms["latency_p99_us"] = lat+float64(rep), 3*lat+float64(rep)
			pr.Samples = append(pr.Samples, results.Sample{Repetition: rep, Metrics: ms})
		}
		r.Points = append(r.Points, pr)
	}
	rep := Build(r, nil)
	want := []string{"ebpf, idle", "ebpf, under load (4 streams)", "iptables no-match, idle", "iptables no-match, under load (4 streams)",
		"nftables, idle", "nftables, under load (4 streams)"}
	seen := map[string]bool{}
	for _, f := range rep.Figures {
		if f.Kind != "sweep" {
			continue
		}
		var names []string
		for _, sr := range f.Plot.Series {
			names = append(names, sr.Name)
		}
		switch {
		case strings.Contains(f.ID, "latency-p50-us"), strings.Contains(f.ID, "latency-p99-us"):
			if !slices.Equal(names, want) {
				t.Errorf("%s: lines %q, want %q", f.ID, names, want)
			}
		case strings.Contains(f.ID, "throughput-gbps"):
			if len(names) != 3 || !strings.HasSuffix(names[0], "under load (4 streams)") {
				t.Errorf("%s: lines %q, want the three datapaths under load", f.ID, names)
			}
		default:
			continue
		}
		seen[f.ID] = true
	}
	if len(seen) != 3 {
		var ids []string
		for _, f := range rep.Figures {
			ids = append(ids, f.ID+" "+f.Kind)
		}
		t.Errorf("%d figures of p50, p99 and throughput, want 3:\n%s", len(seen), strings.Join(ids, "\n"))
	}
}
