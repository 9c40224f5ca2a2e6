package experiment

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/report"
	"github.com/cnlab/cnlab/traffic"
)

// TestIperf3Series adds up two flows' recorded intervals second by
// second, the omitted second left out.
func TestIperf3Series(t *testing.T) {
	read := func(name string) *traffic.Iperf3Result {
		b, err := os.ReadFile(filepath.Join("..", "traffic", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		r, err := traffic.ParseIperf3(b)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	one := read("iperf3-tcp-omit.json")
	s := iperf3Series([]*traffic.Iperf3Result{one, one}, false, false)
	if s == nil || len(s.T) != 3 || s.Check() != nil {
		t.Fatalf("series %+v", s)
	}
	if g := s.Values["throughput_gbps"][0]; math.Abs(g-2*3.1681521354731083) > 1e-9 || s.Values["retransmits"][0] != 20 {
		t.Errorf("first second: %v Gb/s, %v retransmits", g, s.Values["retransmits"][0])
	}
	b := iperf3Series([]*traffic.Iperf3Result{read("iperf3-tcp-bidir-P2-omit.json")}, false, true)
	up, down, sum := b.Values["throughput_up_gbps"], b.Values["throughput_down_gbps"], b.Values["throughput_gbps"]
	if len(up) != 3 || math.Abs(up[1]+down[1]-sum[1]) > 1e-9 || math.Abs(down[1]-3.9553236815321927) > 1e-9 {
		t.Errorf("bidir: up %v down %v sum %v", up, down, sum)
	}
	if u := iperf3Series([]*traffic.Iperf3Result{read("iperf3-udp.json")}, true, false); u == nil || u.Values["sent_gbps"] == nil || u.Values["throughput_gbps"] != nil {
		t.Errorf("udp: %+v", u)
	}
	// A second without a transaction has no latency.
	rr := rrSeries(&traffic.RRSeries{T: []float64{1, 2}, Transactions: []uint64{10, 0}, PerSecond: []float64{10, 0}, P50Us: []float64{5, 0}, P99Us: []float64{9, 0}})
	if rr.Values["latency_p50_us"][0] != 5 || !math.IsNaN(rr.Values["latency_p99_us"][1]) || rr.Values["transactions_per_s"][1] != 0 {
		t.Errorf("rr: %+v", rr)
	}
}

// seriesExp measures a bidirectional stream and tcp-rr once each, with a
// warm-up second (iperf3's -O) before two measured seconds.
const seriesExp = `
name: series
warmup: 1s
duration: 2s
repetitions: 1
seed: 3
workloads:
  - {kind: tcp-stream, bidirectional: true}
  - {kind: tcp-rr}
sweeps:
  - name: ebpf
    matrix: {datapath: [ebpf]}
`

// TestRunSeriesAndBidirectional runs a short experiment: every sample
// keeps its per-second series in a file of its own, the bidirectional
// stream reports both directions, and the report draws a point's series.
func TestRunSeriesAndBidirectional(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	out := filepath.Join(t.TempDir(), "run")
	r, err := runShort(t, context.Background(), seriesExp, Options{Out: out, LabName: "t-exp-series"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Points) != 2 {
		t.Fatalf("%d points", len(r.Points))
	}
	for _, p := range r.Points {
		if p.Status != results.PointDone || len(p.Samples) != 1 {
			t.Fatalf("%s: %s %q", p.ID, p.Status, p.Error)
		}
		smp := p.Samples[0]
		if smp.Series == "" {
			t.Fatalf("%s: no series", p.ID)
		}
		s, err := results.LoadSeries(out, smp.Series)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.T) != 2 || s.T[0] < 0.9 || s.T[0] > 1.1 {
			t.Errorf("%s: seconds %v, want the two measured ones", p.ID, s.T)
		}
		m := smp.Metrics
		switch p.Workload.Kind {
		case results.TCPStream:
			up, down := m["throughput_up_gbps"], m["throughput_down_gbps"]
			if up <= 0 || down <= 0 || math.Abs(up+down-m["throughput_gbps"]) > 1e-9 {
				t.Errorf("%s: bidirectional up %g down %g sum %g", p.ID, up, down, m["throughput_gbps"])
			}
			for _, k := range []string{"throughput_gbps", "throughput_up_gbps", "throughput_down_gbps", "retransmits"} {
				if len(s.Values[k]) != 2 {
					t.Errorf("%s: series %s: %v", p.ID, k, s.Values[k])
				}
			}
			if v := s.Values["throughput_down_gbps"]; len(v) == 2 && v[1] <= 0 {
				t.Errorf("%s: down %v", p.ID, v)
			}
		case results.TCPRR:
			tx := s.Values["transactions_per_s"]
			p50, p99 := s.Values["latency_p50_us"], s.Values["latency_p99_us"]
			if len(tx) != 2 || tx[0] < 100 || !(p50[0] > 0 && p50[0] <= p99[0]) {
				t.Errorf("%s: rr series %v", p.ID, s.Values)
			}
			// The seconds add up to the sample's transactions.
			if mean := (tx[0] + tx[1]) / 2; math.Abs(mean-m["transactions_per_s"]) > 0.05*m["transactions_per_s"] {
				t.Errorf("%s: seconds' mean %g /s, sample %g /s", p.ID, mean, m["transactions_per_s"])
			}
		}
		// The report draws it.
		back, err := results.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := report.LoadPointSeries(out, back, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		files, err := ps.Write(out)
		if err != nil || len(files) < 2 {
			t.Fatalf("%s: %v %v", p.ID, files, err)
		}
		svg, err := os.ReadFile(files[0])
		if err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "repetition 0") {
			t.Errorf("%s: %s is not the figure: %v", p.ID, files[0], err)
		}
	}
}

// TestBidirectionalOnlyStreams: bidirectional on another workload than
// tcp-stream is an error naming the file and the field.
func TestBidirectionalOnlyStreams(t *testing.T) {
	for _, kind := range []string{"tcp-rr", "udp-stream", "http"} {
		src := "name: x\nworkloads:\n  - {kind: " + kind + ", bidirectional: true}\nsweeps:\n  - name: a\n    matrix: {datapath: [ebpf]}\n"
		_, err := Parse([]byte(src), "bidir.yaml", false)
		if err == nil || !strings.Contains(err.Error(), "bidir.yaml") || !strings.Contains(err.Error(), "workloads[0].bidirectional") || !strings.Contains(err.Error(), "tcp-stream") {
			t.Errorf("%s: %v", kind, err)
		}
	}
	src := "name: x\nworkloads:\n  - {kind: tcp-stream, bidirectional: true}\nsweeps:\n  - name: a\n    matrix: {datapath: [ebpf]}\n"
	s, err := Parse([]byte(src), "bidir.yaml", false)
	if err != nil || !s.Workloads[0].Bidirectional || s.Workloads[0].Name() != "tcp-stream bidir" {
		t.Errorf("tcp-stream: %v", err)
	}
}

// TestMergeSeries: rr under load keeps rr's seconds with the load's
// throughput beside them, cut or padded to rr's.
func TestMergeSeries(t *testing.T) {
	rr := &results.Series{T: []float64{1, 2, 3}, Values: map[string]results.Floats{"latency_p50_us": {10, 11, 12}}}
	load := &results.Series{T: []float64{1, 2}, Values: map[string]results.Floats{"throughput_gbps": {2, 3}, "latency_p50_us": {1, 1}}}
	m := mergeSeries(rr, load)
	if tp := m.Values["throughput_gbps"]; len(tp) != 3 || tp[1] != 3 || !math.IsNaN(tp[2]) || m.Values["latency_p50_us"][0] != 10 || m.Check() != nil {
		t.Errorf("merged %+v", m)
	}
	if mergeSeries(nil, load) != nil || mergeSeries(rr, nil) != rr {
		t.Error("a missing side")
	}
	// The profiled run keeps nothing.
	var e, le sampleEnv
	underLoadSeries(&e, &le)()
	if e.series != nil || le.series != nil {
		t.Error("sinks given to a run that keeps no series")
	}
}
