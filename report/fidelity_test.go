package report

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/experiment/results"
)

// recorded are the metrics a workload kind's samples carry (as
// experiment/workload.go records them), for synthetic samples.
var recorded = map[string][]string{
	results.TCPStream: {"throughput_gbps", "sent_gbps", "retransmits", "sender_cpu_pct", "receiver_cpu_pct"},
	results.UDPStream: {"throughput_gbps", "sent_gbps", "packets_per_s", "loss_pct", "jitter_ms", "sender_cpu_pct", "receiver_cpu_pct"},
	results.TCPRR:     {"transactions_per_s", "latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us", "latency_p999_us"},
	results.TCPCRR: {"transactions_per_s", "latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us", "latency_p999_us",
		"connect_p50_us", "connect_p99_us"},
	results.Ping: {"first_rtt_us", "rtt_us", "loss_pct"},
	results.HTTP: {"requests_per_s", "latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us", "unexpected", "errors",
		"client_cpu_pct", "proxy_cpu_pct"},
	results.AB: {"requests_per_s", "latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us", "unexpected", "errors",
		"client_cpu_pct", "proxy_cpu_pct"},
}

var drawnAs = regexp.MustCompile("^`([a-z0-9_]+)`(?: vs `([A-Za-z0-9]+)`)?$")

// TestFidelityTable keeps docs/fidelity.md true: every row that names a
// figure must be one that the quick run of its file draws, in its sweep,
// with that metric against that x.
func TestFidelityTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/fidelity.md")
	if err != nil {
		t.Fatal(err)
	}
	panelsOf := map[string][]*Panel{}
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 8 || !regexp.MustCompile(`^\s*\d{3}\s*$`).MatchString(cells[1]) {
			continue
		}
		seed, fig, file, sweep, drawn := trim(cells[1]), trim(cells[2]), trim(cells[3]), trim(cells[4]), trim(cells[5])
		rows++
		if file == "—" || drawn == "—" || drawn == "— (profiled runs)" {
			if !strings.Contains(cells[5]+cells[6], "not") && !strings.Contains(drawn, "profiled") {
				t.Errorf("seed %s figure %s: no file and no reason", seed, fig)
			}
			continue
		}
		m := drawnAs.FindStringSubmatch(drawn)
		if m == nil {
			t.Errorf("seed %s figure %s: %q is not `metric` or `metric` vs `x`", seed, fig, drawn)
			continue
		}
		metric, x := m[1], m[2]
		ps, ok := panelsOf[file]
		if !ok {
			ps = quickPanels(t, filepath.Join("../experiments", file))
			panelsOf[file] = ps
		}
		found := false
		for _, p := range ps {
			if slices.Contains(strings.Split(p.Sweep, "+"), sweep) && p.Metric.Name == metric && p.XDim == x {
				found = true
			}
		}
		if !found {
			var have []string
			for _, p := range ps {
				have = append(have, p.Sweep+": "+p.Metric.Name+" vs "+p.XDim)
			}
			t.Errorf("seed %s figure %s: the quick run of %s draws no %s vs %q in sweep %s; it draws:\n%s", seed, fig, file, metric, x, sweep, strings.Join(have, "\n"))
		}
	}
	if rows < 20 {
		t.Errorf("%d rows read from docs/fidelity.md: is the table still there?", rows)
	}
}

func trim(s string) string { return strings.TrimSpace(s) }

// quickPanels expands an experiment file's quick run and gives every
// point samples of the metrics its workload records, then draws it.
func quickPanels(t *testing.T, path string) []*Panel {
	t.Helper()
	return panels(quickResults(t, path))
}

// quickResults are the results of an experiment file's quick run, every
// point given samples of the metrics its workload records.
func quickResults(t *testing.T, path string) *results.Results {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := experiment.Parse(data, path, true)
	if err != nil && strings.Contains(err.Error(), "--backend "+results.BackendKubernetes+" only") {
		// A file for a cluster (k8s-smoke.yaml): expanded as a cluster run.
		s, err = experiment.ParseFor(data, path, true, results.BackendKubernetes)
	}
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: s.Name, File: path, Text: string(data), Spec: &s.Spec}}
	for i, p := range pts {
		pr := results.PointResult{Point: p, Status: results.PointDone}
		for rep := 1; rep <= 3; rep++ {
			ms := map[string]float64{}
			for _, name := range recorded[p.Workload.Kind] {
				ms[name] = float64(10 + i + rep)
			}
			pr.Samples = append(pr.Samples, results.Sample{Repetition: rep, Metrics: ms})
		}
		r.Points = append(r.Points, pr)
	}
	return r
}

// TestFigureXKnown: the x axes an experiment file may ask for are the
// report's.
func TestFigureXKnown(t *testing.T) {
	var names []string
	for _, d := range xDims {
		names = append(names, d.name)
	}
	if !slices.Equal(names, results.FigureX) {
		t.Errorf("report x dimensions %v, results.FigureX %v", names, results.FigureX)
	}
	for _, m := range results.FigureMetrics {
		if MetricInfo(m).Better == 0 { // every registered metric says which way is better
			t.Errorf("metric %s may be asked for but the report does not know it", m)
		}
	}
}
