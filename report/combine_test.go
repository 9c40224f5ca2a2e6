package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
)

// seed004Run is a synthetic run of seed 004's services sweep: ping's
// first-packet RTT and tcp-crr's connect p50 grow per Service by the
// slope of each series (µs per Service), the measured Service first or
// last; extra adds a sweep the other runs do not have.
func seed004Run(seed uint64, backend, proxy string, series map[string]float64, extra bool) *results.Results {
	rng := rand.New(rand.NewPCG(seed, 4))
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete, Backend: backend, StartedAt: now, FinishedAt: &now,
		Experiment: results.ExperimentInfo{Name: "seed004", File: "seed004.yaml", Text: "name: seed004\n", Quick: true,
			Spec: &results.Spec{Name: "seed004", Sweeps: []results.Sweep{{Name: "services",
				Figures: &results.Figures{Reference: map[string]string{"first_rtt_us": "1,113 µs with kube-proxy iptables."}}}}}}}
	if proxy != "" {
		r.Cluster = &results.ClusterInfo{KubeProxy: proxy, CNI: "bridge"}
		r.Builds = []results.Build{{Key: "b1", ServiceApply: []results.ServiceApply{
			{Services: 100, Backends: 1, Seconds: 4, ReadySeconds: 5},
			{Services: 1000, Backends: 1, Seconds: 40, ReadySeconds: 41},
			{Services: 1000, Backends: 1, Seconds: 42, ReadySeconds: 44},
		}}}
	}
	ping := results.Workload{Kind: results.Ping, Count: 20}
	crr := results.Workload{Kind: results.TCPCRR, RequestSize: 1, ResponseSize: 1}
	add := func(sweep, ser string, w results.Workload, n int, pos string, m map[string]float64) {
		id := fmt.Sprintf("p%04d", len(r.Points)+1)
		pr := results.PointResult{Point: results.Point{ID: id, Sweep: sweep, Series: ser, Repetitions: 5, Workload: w,
			Params: results.Params{Topology: "single-host", Services: n, ServiceBackends: 1, ServicePosition: pos}},
			Status: results.PointDone}
		for i := range 5 {
			s := map[string]float64{}
			for k, v := range m {
				s[k] = v * (1 + 0.01*rng.NormFloat64())
			}
			pr.Samples = append(pr.Samples, results.Sample{Repetition: i + 1, Metrics: s, Log: "logs/" + id + ".log", Series: "series/" + id + "-r1.json"})
			r.Order = append(r.Order, results.Job{Point: id, Repetition: i + 1})
		}
		pr.Summarize()
		r.Points = append(r.Points, pr)
	}
	for _, ser := range slices.Sorted(func(yield func(string) bool) {
		for k := range series {
			if !yield(k) {
				return
			}
		}
	}) {
		slope := series[ser]
		for _, n := range []int{1, 100, 1000} {
			for _, pos := range []string{results.PositionFirst, results.PositionLast} {
				if n == 1 && pos == results.PositionFirst {
					continue
				}
				f := slope
				if pos == results.PositionFirst {
					f = 0
				}
				add("services", ser, ping, n, pos, map[string]float64{"first_rtt_us": 100 + f*float64(n), "rtt_us": 50})
				add("services", ser, crr, n, pos, map[string]float64{"connect_p50_us": 60 + f*float64(n), "connect_p99_us": 120 + f*float64(n), "transactions_per_s": 5000})
			}
		}
		if extra {
			add("through", ser, crr, 0, "", map[string]float64{"connect_p50_us": 50, "transactions_per_s": 6000})
		}
	}
	return r
}

func writeRun(t *testing.T, dir string, r *results.Results, env *results.Environment) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	if env != nil {
		if err := env.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCombineSeed004: two cluster runs (kube-proxy iptables, nftables)
// and a lab run of cnlab's proxies become one report: one figure per
// metric with every line, named after where it was measured, each with
// its own per-Service slope; the lab's extra sweep is left out and said
// so; the combined results.json reads back with the same lines.
func TestCombineSeed004(t *testing.T) {
	root := t.TempDir()
	ipt := writeRun(t, filepath.Join(root, "s4-ipt"), seed004Run(1, results.BackendKubernetes, "iptables", map[string]float64{"cluster": 0.05}, false), nil)
	nft := writeRun(t, filepath.Join(root, "s4-nft"), seed004Run(2, results.BackendKubernetes, "nftables", map[string]float64{"cluster": 0.01}, false), nil)
	lab := writeRun(t, filepath.Join(root, "s4-lab"), seed004Run(3, results.BackendLab, "",
		map[string]float64{"iptables no-match": 0.02, "nftables": 0.005}, true),
		&results.Environment{Hostname: "vm"})
	out := filepath.Join(root, "s4")
	rep, err := LoadCombined([]string{ipt, nft, lab}, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"iptables (cnlab, lab)", "nftables (cnlab, lab)",
		"kube-proxy iptables (real, cluster)", "kube-proxy nftables (real, cluster)",
	}
	wantSlope := map[string]float64{want[0]: 0.02, want[1]: 0.005, want[2]: 0.05, want[3]: 0.01}
	figs := map[string]bool{}
	for _, f := range rep.Figures {
		for _, m := range []string{"first_rtt_us", "connect_p50_us"} {
			if !strings.Contains(f.ID, strings.ReplaceAll(m, "_", "-")) || f.Kind != "sweep" {
				continue
			}
			figs[m] = true
			if m == "first_rtt_us" && !strings.Contains(f.Caption, "The seed measured: 1,113 µs") {
				t.Errorf("figure %s: no seed reference in its caption %q", f.ID, f.Caption)
			}
			var got []string
			for _, s := range f.Plot.Series {
				got = append(got, s.Name)
			}
			for _, w := range want {
				for _, pos := range []string{"first", "last"} {
					name := w + ", measured Service " + pos
					if !slices.Contains(got, name) {
						t.Errorf("figure %s: no line %q; lines %q", f.ID, name, got)
					}
				}
			}
		}
	}
	if !figs["first_rtt_us"] || !figs["connect_p50_us"] {
		t.Fatalf("figures of first_rtt_us and connect_p50_us: got %v", figs)
	}
	// One linear per-Service slope per line and metric.
	slopes := map[string]float64{}
	for _, f := range rep.Fits {
		if f.Kind != "linear" || !strings.Contains(f.Panel, "connect-p50") {
			continue
		}
		if _, dup := slopes[f.Series]; dup {
			t.Errorf("two fits of %q in %s", f.Series, f.Panel)
		}
		slopes[f.Series] = f.Slope
	}
	for _, w := range want {
		s, ok := slopes[w+", measured Service last"]
		if !ok {
			t.Errorf("no connect_p50 fit of %q: %v", w, slopes)
			continue
		}
		if math.Abs(s-wantSlope[w]) > 0.002 {
			t.Errorf("%s: slope %.4g µs per Service, want %.4g", w, s, wantSlope[w])
		}
		if !strings.Contains(fitText(rep, w+", measured Service last"), "per service") {
			t.Errorf("%s: the fit does not say per service: %q", w, fitText(rep, w+", measured Service last"))
		}
	}
	// Notes: which run is which, what was left out, Service installs.
	notes := strings.Join(rep.Notes, "\n")
	for _, s := range []string{"Combined from 3 runs", "s4-ipt (seed004, cluster, kube-proxy iptables, CNI bridge",
		"s4-lab (seed004, lab", "2 points of sweeps the other runs do not have left out",
		"s4-nft: installing the Services took 100 Services: median 4 s (1 install), answering after 5 s; 1000 Services: median 41 s (2 installs), answering after 42.5 s"} {
		if !strings.Contains(notes, s) {
			t.Errorf("notes lack %q:\n%s", s, notes)
		}
	}
	for _, p := range rep.Results.Points {
		if p.Sweep != "services" {
			t.Errorf("point %s of sweep %s kept", p.ID, p.Sweep)
		}
		if !strings.HasPrefix(p.ID, "s4-") || !strings.Contains(p.ID, "/p") {
			t.Errorf("point ID %q not prefixed with its run", p.ID)
		}
		if l := p.Samples[0].Log; !strings.HasPrefix(l, "../s4-") {
			t.Errorf("%s: sample log %q not relative to its run", p.ID, l)
		}
		if l := p.Samples[0].Series; !strings.HasPrefix(l, "../s4-") || !strings.HasSuffix(l, "/series/"+strings.Split(p.ID, "/")[1]+"-r1.json") {
			t.Errorf("%s: sample series %q not relative to its run", p.ID, l)
		}
	}
	if rep.Env == nil || rep.Env.Hostname != "vm" || rep.Env.Cluster != nil {
		t.Errorf("environment: %+v, want the lab's, without a cluster (two were measured)", rep.Env)
	}
	if rep.Results.Backend != "kubernetes+lab" || rep.Results.Cluster != nil {
		t.Errorf("backend %q, cluster %+v: want kubernetes+lab and none", rep.Results.Backend, rep.Results.Cluster)
	}
	// Written, then read back as one run: the same lines.
	if _, err := rep.WriteCombined(out); err != nil {
		t.Fatal(err)
	}
	again, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := again.Results.Check(); len(bad) > 0 {
		t.Errorf("combined results.json: %q", bad)
	}
	var names []string
	for _, f := range again.Fits {
		if !slices.Contains(names, f.Series) {
			names = append(names, f.Series)
		}
	}
	for _, w := range want {
		if !slices.Contains(names, w+", measured Service last") {
			t.Errorf("re-read combined run: no line %q in %q", w, names)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
}

func fitText(rep *Report, series string) string {
	for _, f := range rep.Fits {
		if f.Series == series && f.Kind == "linear" {
			return f.Text
		}
	}
	return ""
}

// TestCombineNames: two runs that would name a line alike (two clusters
// in the same kube-proxy mode) get their directory's name; runs without a
// sweep in common are refused.
func TestCombineNames(t *testing.T) {
	a := seed004Run(1, results.BackendKubernetes, "iptables", map[string]float64{"cluster same-node": 0.05}, false)
	b := seed004Run(2, results.BackendKubernetes, "iptables", map[string]float64{"cluster same-node": 0.05}, false)
	c, err := Combine([]Source{{Dir: "/r/before", Results: a}, {Dir: "/r/after", Results: b}}, "/r/both")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range c.Results.Points {
		got[p.Series] = true
	}
	for _, w := range []string{"kube-proxy iptables (real, cluster same-node) [before]", "kube-proxy iptables (real, cluster same-node) [after]"} {
		if !got[w] {
			t.Errorf("no series %q: %v", w, got)
		}
	}
	if len(got) != 2 {
		t.Errorf("series %v, want 2", got)
	}
	if c.Results.Backend != results.BackendKubernetes {
		t.Errorf("backend %q", c.Results.Backend)
	}
	// The same directory name twice: told apart by position.
	if ls := sourceLabels([]Source{{Dir: "/x/run"}, {Dir: "/y/run/"}}); ls[0] != "run#1" || ls[1] != "run#2" {
		t.Errorf("labels %q", ls)
	}
	other := seed004Run(3, results.BackendLab, "", map[string]float64{"ebpf": 0}, false)
	for i := range other.Points {
		other.Points[i].Sweep = "elsewhere"
	}
	if _, err := Combine([]Source{{Dir: "/r/a", Results: a}, {Dir: "/r/o", Results: other}}, "/r/x"); err == nil || !strings.Contains(err.Error(), "no sweep in common") {
		t.Errorf("no common sweep: err %v", err)
	}
}

// TestCombineSubSweeps draws a run's sweep "services.nft" with the other
// runs' "services": one run may bring lines whose matrices cannot be one
// sweep (ipsets apply to iptables only) to one figure.
func TestCombineSubSweeps(t *testing.T) {
	root := t.TempDir()
	ipt := writeRun(t, filepath.Join(root, "s4-ipt"), seed004Run(1, results.BackendKubernetes, "iptables", map[string]float64{"cluster": 0.05}, false), nil)
	lr := seed004Run(3, results.BackendLab, "", map[string]float64{"iptables no-match": 0.02, "nftables": 0.005}, false)
	for i := range lr.Points {
		if strings.HasPrefix(lr.Points[i].Series, "nftables") {
			lr.Points[i].Sweep = "services.nft"
		}
	}
	lab := writeRun(t, filepath.Join(root, "s4-lab"), lr, &results.Environment{Hostname: "vm"})
	rep, err := LoadCombined([]string{ipt, lab}, filepath.Join(root, "s4"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Figures {
		if f.Kind != "sweep" || !strings.Contains(f.ID, "first-rtt-us") {
			continue
		}
		var got []string
		for _, s := range f.Plot.Series {
			got = append(got, s.Name)
		}
		for _, w := range []string{"nftables (cnlab, lab), measured Service last", "iptables (cnlab, lab), measured Service last", "kube-proxy iptables (real, cluster), measured Service last"} {
			if !slices.Contains(got, w) {
				t.Errorf("figure %s: no line %q; lines %q", f.ID, w, got)
			}
		}
		found = true
	}
	if !found {
		t.Fatal("no first_rtt_us figure")
	}
	if CombinedSweep("terms.ipsets") != "terms" || CombinedSweep("terms") != "terms" {
		t.Error("CombinedSweep")
	}
}

// TestSourceSeriesCNI names a cluster's points without Services by its CNI
// (a policy sweep measures the policy engine), with Services by its
// kube-proxy.
func TestSourceSeriesCNI(t *testing.T) {
	r := &results.Results{Backend: results.BackendKubernetes, Cluster: &results.ClusterInfo{CNI: "cilium", KubeProxy: "replaced by cilium"}}
	p := &results.PointResult{Point: results.Point{Series: "cluster same-node", Params: results.Params{Policies: 100}}}
	if got, want := SourceSeries(r, p), "cilium (real, cluster same-node)"; got != want {
		t.Errorf("policy point: %q, want %q", got, want)
	}
	p.Params.Services = 10
	if got, want := SourceSeries(r, p), "kube-proxy replaced by cilium (real, cluster same-node)"; got != want {
		t.Errorf("Service point: %q, want %q", got, want)
	}
}
