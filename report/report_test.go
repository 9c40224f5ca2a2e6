package report

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/plural"
)

// synth builds results with known laws: on one host, iptables no-match
// throughput falls 0.1% of 10 Gb/s per policy, eBPF stays at 12 Gb/s;
// on a chain, veth throughput loses 6% per hop from 20 Gb/s. Noise is
// multiplicative, 1%, seeded; reps samples per point.
func synth(reps int, seed uint64) *results.Results {
	rng := rand.New(rand.NewPCG(seed, 7))
	noise := func() float64 { return 1 + 0.01*rng.NormFloat64() }
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "synthetic", File: "synthetic.yaml", Text: "name: synthetic\n"}}
	add := func(sweep string, p results.Params, series string, w results.Workload, metric string, mean float64) {
		pr := results.PointResult{Point: results.Point{ID: "p" + string(rune('A'+len(r.Points)/26)) + string(rune('a'+len(r.Points)%26)),
			Sweep: sweep, Params: p, Workload: w, Series: series, Repetitions: reps}, Status: results.PointDone}
		for i := 0; i < reps; i++ {
			pr.Samples = append(pr.Samples, results.Sample{Repetition: i + 1, Metrics: map[string]float64{metric: mean * noise()}})
		}
		r.Points = append(r.Points, pr)
	}
	stream := results.Workload{Kind: results.TCPStream}
	for _, n := range []int{0, 10, 25, 50, 100, 150, 200} {
		add("scaling", results.Params{Topology: "single-host", Datapath: "ebpf", Policies: n, PolicyMode: "no-match"}, "ebpf", stream, "throughput_gbps", 12)
		add("scaling", results.Params{Topology: "single-host", Datapath: "iptables", Policies: n, PolicyMode: "no-match"}, "iptables no-match", stream,
			"throughput_gbps", 10*(1-0.001*float64(n)))
	}
	for _, n := range []int{1, 2, 4, 6, 8, 12, 16} {
		add("chain", results.Params{Topology: "chain", Link: "veth", ChainLength: n}, "none", stream, "throughput_gbps", 20*math.Pow(0.94, float64(n-1)))
	}
	return r
}

// TestFindingsRecoverLaws: the report's fits and sentences give back the
// laws the synthetic run was made with.
func TestFindingsRecoverLaws(t *testing.T) {
	rep := Build(synth(5, 1), nil)
	byKey := map[string]Fit{}
	for _, f := range rep.Fits {
		byKey[f.Series+"/"+f.Kind] = f
	}
	ipt, ok := byKey["iptables no-match/linear"]
	if !ok || math.Abs(ipt.Slope+0.01) > 0.001 || ipt.Flat || !ipt.SlopeCI.Contains(-0.01) {
		t.Errorf("iptables slope %+v, want −0.01 Gb/s per policy, not flat", ipt)
	}
	if math.Abs(ipt.Relative+0.001) > 0.0002 {
		t.Errorf("iptables relative slope %v, want −0.1%% per policy", ipt.Relative)
	}
	if e := byKey["ebpf/linear"]; !e.Flat {
		t.Errorf("ebpf slope %+v: its CI should contain 0", e)
	}
	pl, ok := byKey["veth/power-law"]
	if !ok || math.Abs(pl.Loss-0.06) > 0.005 || math.Abs(pl.T1-20)/20 > 0.03 || !pl.LossCI.Contains(0.06) {
		t.Errorf("chain power law %+v, want l 0.06, t1 20", pl)
	}
	text := ""
	for _, f := range rep.Findings {
		text += f.Text + "\n"
		if len(f.Points) == 0 {
			t.Errorf("finding without points: %s", f.Text)
		}
	}
	for _, want := range []string{
		`iptables no-match \(tcp-stream, single-host, sweep scaling\): throughput \(Gb/s\) falls (19|20)\.\d% from 0 to 200 policies`, // 10 → 8 Gb/s
		`ebpf \(tcp-stream, single-host, sweep scaling\): throughput \(Gb/s\) .* its slope is not different from 0`,
		`veth \(tcp-stream, chain\): each hop costs 6\.0\d% of the throughput`,
		`at 0 policies \(tcp-stream, single-host, sweep scaling\), ebpf has the highest median: 1[12]\.\d Gb/s; iptables no-match (9\.9\d|10\.0) \(−1[67]\.\d%\)`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("findings lack %q:\n%s", want, text)
		}
	}
	// Figures: the two sweeps, the baseline bars, and the fitted curve.
	kinds := map[string]int{}
	for _, f := range rep.Figures {
		kinds[f.Kind]++
		svg, err := f.Plot.SVG()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkXML(svg); err != nil {
			t.Errorf("%s: %v", f.ID, err)
		}
		if f.ID == "fig02-chain-chain-tcp-stream-throughput-gbps" && !strings.Contains(string(svg), "(fit −6.0") {
			t.Errorf("%s has no fitted curve", f.ID)
		}
	}
	if kinds["sweep"] != 2 || kinds["baseline"] != 1 {
		t.Errorf("figures %v, want 2 sweeps and 1 baseline", kinds)
	}
}

// TestSmallSamplesSayNoInterval: with two samples per point the change
// gets no bootstrap interval, and the sentence says so.
func TestSmallSamplesSayNoInterval(t *testing.T) {
	rep := Build(synth(2, 2), nil)
	for _, f := range rep.Findings {
		if strings.Contains(f.Text, "falls") && !strings.Contains(f.Text, "2 and 2 samples: no interval") {
			t.Errorf("two samples given an interval: %s", f.Text)
		}
	}
}

func TestNoisyPointsFlagged(t *testing.T) {
	r := synth(5, 3)
	p := &r.Points[0]
	for i := range p.Samples {
		p.Samples[i].Metrics["throughput_gbps"] = float64(10 + 3*i) // CV ≫ 5%
	}
	rep := Build(r, nil)
	if rep.Noisy != 1 || !rep.Rows[0].Noisy {
		t.Errorf("noisy rows %d, first row %+v", rep.Noisy, rep.Rows[0])
	}
	page, err := rep.HTML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "⚠") || !strings.Contains(string(page), "1 of ") {
		t.Error("the page does not warn about the noisy point")
	}
}

// TestCompare: a run against itself changes nothing; a 10% drop with 8
// samples a side is significant and, past a 5% threshold, a regression;
// with 2 samples a side it cannot be.
func TestCompare(t *testing.T) {
	a := synth(8, 4)
	c := Compare(a, a, 0.05, DefaultMinChange)
	for _, ch := range c.Changes {
		if ch.Significant || ch.Verdict != "~" {
			t.Errorf("a run against itself: %+v", ch)
		}
	}
	b := synth(8, 4) // the same samples, but eBPF's 10% lower
	for i := range b.Points {
		if b.Points[i].Series == "ebpf" {
			for _, s := range b.Points[i].Samples {
				s.Metrics["throughput_gbps"] *= 0.9
			}
		}
	}
	c = Compare(a, b, 0.05, DefaultMinChange)
	worse, other := 0, 0
	for _, ch := range c.Changes {
		switch {
		case ch.Series == "ebpf" && ch.Regression && ch.Verdict == "worse":
			worse++
		case ch.Series != "ebpf" && ch.Significant:
			other++
		}
	}
	if worse != 7 || c.Regressions != 7 {
		t.Errorf("%d ebpf regressions (want 7), %d in all", worse, c.Regressions)
	}
	if other > 0 {
		t.Errorf("%d unchanged points called significant", other)
	}
	// A significant but small shift (3%, noise 1%) is "~" under a 5%
	// minimum change, a change without it.
	d := synth(8, 4)
	for i := range d.Points {
		for _, s := range d.Points[i].Samples {
			s.Metrics["throughput_gbps"] *= 1.03
		}
	}
	if c := Compare(a, d, 0, 0.05); c.Changes[0].Verdict != "~" || !c.Changes[0].Small {
		t.Errorf("3%% shift with a 5%% minimum: %+v", c.Changes[0])
	}
	if c := Compare(a, d, 0, 0); c.Changes[0].Verdict != "better" {
		t.Errorf("3%% shift with no minimum: %+v", c.Changes[0])
	}
	// Equal pinning is not a difference; another pinning is.
	zero, one := 0, 1
	a.Experiment.Spec = &results.Spec{Pin: &results.Pin{Client: &zero, Server: &zero}}
	b.Experiment.Spec = &results.Spec{Pin: &results.Pin{Client: &zero, Server: &zero}}
	if m := Compare(a, b, 0.05, DefaultMinChange).Mismatch; len(m) != 0 {
		t.Errorf("same pinning reported as a difference: %v", m)
	}
	b.Experiment.Spec.Pin.Server = &one
	if m := Compare(a, b, 0.05, DefaultMinChange).Mismatch; len(m) != 1 || !strings.Contains(m[0], "server 0 in A") {
		t.Errorf("another pinning: %v", m)
	}
	c = Compare(synth(2, 6), synth(2, 7), 0, DefaultMinChange)
	if c.Unreachable != len(c.Changes) || c.Regressions != 0 {
		t.Errorf("2 vs 2 samples: %d of %d unreachable, %d regressions", c.Unreachable, len(c.Changes), c.Regressions)
	}
	var sb strings.Builder
	if err := c.Text(&sb); err != nil || !strings.Contains(sb.String(), "with 2 vs 2 samples the smallest possible p is 0.33") {
		t.Errorf("compare text: %v\n%s", err, sb.String())
	}
	page, err := c.HTML()
	if err != nil || checkXMLish(page) != nil {
		t.Errorf("compare page: %v", err)
	}
}

func checkXML(b []byte) error {
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		if _, err := d.Token(); err != nil {
			if err.Error() == "EOF" {
				return nil
			}
			return err
		}
	}
}

// checkXMLish checks an HTML page is not empty and is closed.
func checkXMLish(b []byte) error {
	if !strings.HasSuffix(strings.TrimSpace(string(b)), "</html>") {
		return xml.UnmarshalError("page not closed")
	}
	return nil
}

// TestNoisySamplesFlaggedAndExcluded marks one sample of the fixture as
// taken while the hypervisor stole 10% of a CPU: the report counts it and
// says so; with --exclude-noisy it is left out, said, and its point's
// summary has one sample fewer.
func TestNoisySamplesFlaggedAndExcluded(t *testing.T) {
	r, err := results.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	p := &r.Points[0]
	n := len(p.Samples)
	for i := range p.Samples {
		p.Samples[i].Noise = &results.Noise{StealPct: []float64{0, 0}, CPUPressurePct: 1}
	}
	p.Samples[0].Noise.StealPct = []float64{0, 10}
	rep := Build(r, nil)
	if rep.NoisySamples != 1 || !slices.ContainsFunc(rep.Notes, func(s string) bool {
		return strings.HasPrefix(s, "1 of "+plural.N(n, "sample")+" were taken under unusual noise")
	}) {
		t.Errorf("noisy samples %d, notes %q", rep.NoisySamples, rep.Notes)
	}
	if got := r.ExcludeNoisy(); got != 1 || len(p.Samples) != n-1 {
		t.Errorf("excluded %d, %d samples left of %d", got, len(p.Samples), n)
	}
	for m, s := range p.Summary {
		if s.N != n-1 {
			t.Errorf("%s: summary of %d samples after the exclusion, want %d", m, s.N, n-1)
		}
	}
}

// TestComparePaired on the fixture: iptables and eBPF points of the same
// policies are paired by round across their two sweeps; with 3 rounds the
// unpaired test cannot go below p = 0.1, while the paired one finds eBPF's
// lower p50 latency at 0 policies (every round's ratio near 0.82).
func TestComparePaired(t *testing.T) {
	r, err := results.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ComparePaired(r, "datapath", "iptables", "ebpf")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ch := range c.Changes {
		if ch.PointA == "p0008" && ch.PointB == "p0002" && ch.Metric == "latency_p50_us" {
			found = true
			if !ch.Significant || ch.N != 3 || ch.Ratio > 0.85 || ch.Ratio < 0.8 || ch.UnpairedP < 0.1 {
				t.Errorf("p50 at 0 policies: %+v", ch)
			}
		}
	}
	if !found || len(c.Changes) != 12 {
		t.Errorf("%d changes, p0008/p0002 p50 found: %v", len(c.Changes), found)
	}
	// 3 pairs: the p comes with how weak it is, in the text and in JSON.
	var b strings.Builder
	if err := c.Text(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(3 pairs: weak*)") || !strings.Contains(b.String(), "* 3 pairs: a paired t-test with 2 degrees of freedom") {
		t.Errorf("text does not say 3 pairs are weak:\n%s", b.String())
	}
	if data, _ := json.Marshal(c.Changes[0]); !strings.Contains(string(data), `"fewPairs":"3 pairs: `) {
		t.Errorf("JSON has no fewPairs: %s", data)
	}
	for _, bad := range [][3]string{{"datapath", "iptables", "ovs"}, {"colour", "a", "b"}} {
		if _, err := ComparePaired(r, bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestProfileFigures: profiled points give the share figure and seed 000's
// figure 7.10, the number of perf events in ipt_do_table, against the
// policies.
func TestProfileFigures(t *testing.T) {
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "p", File: "p.yaml", Text: "name: p\n"}}
	for i, n := range []int{0, 100, 200} {
		pr := results.PointResult{Point: results.Point{ID: fmt.Sprintf("p%d", i), Sweep: "iptables",
			Params:   results.Params{Topology: "single-host", Datapath: "iptables", Policies: n, PolicyMode: "no-match"},
			Workload: results.Workload{Kind: results.TCPStream}, Series: "iptables no-match", Repetitions: 1}, Status: results.PointDone}
		pr.Samples = []results.Sample{{Repetition: 1, Metrics: map[string]float64{"throughput_gbps": 10}}}
		pr.Prof = &results.ProfileResult{Kernel: &results.KernelProfile{Available: true, Frequency: 999, Samples: 10000,
			Top: []results.Symbol{{Name: "ipt_do_table", Kernel: true, Samples: int64(100 + 10*n), Percent: float64(100+10*n) / 100}}}}
		r.Points = append(r.Points, pr)
	}
	figs := profileFigures(r, 1)
	if len(figs) != 2 {
		t.Fatalf("%d profile figures, want the share and the events", len(figs))
	}
	ev := figs[1].Plot
	if !strings.Contains(ev.Title, "perf events") || len(ev.Series) != 1 || ev.Series[0].Name != "ipt_do_table" {
		t.Fatalf("events figure %q, series %+v", ev.Title, ev.Series)
	}
	for i, p := range ev.Series[0].Points {
		if want := []float64{100, 1100, 2100}[i]; p.Y != want || p.X != []float64{0, 100, 200}[i] {
			t.Errorf("point %d: (%v, %v), want y %v", i, p.X, p.Y, want)
		}
	}
}

// TestFiguresOptions: a sweep's figures: block joins its topologies in one
// figure (a line each) and adds a figure relative to a named line.
func TestFiguresOptions(t *testing.T) {
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "f", File: "f.yaml", Text: "name: f\n", Spec: &results.Spec{Sweeps: []results.Sweep{
			{Name: "complexity", Figures: &results.Figures{Topologies: true}},
			{Name: "htb", Figures: &results.Figures{RelativeTo: "no shaper"}},
			{Name: "no-shaper"},
		}}}}
	add := func(sweep string, p results.Params, series string, v float64) {
		pr := results.PointResult{Point: results.Point{ID: fmt.Sprintf("p%02d", len(r.Points)), Sweep: sweep, Params: p,
			Workload: results.Workload{Kind: results.TCPStream}, Series: series, Repetitions: 2}, Status: results.PointDone}
		for rep := 1; rep <= 2; rep++ {
			pr.Samples = append(pr.Samples, results.Sample{Repetition: rep, Metrics: map[string]float64{"throughput_gbps": v}})
		}
		r.Points = append(r.Points, pr)
	}
	for _, n := range []int{0, 40, 200} {
		add("complexity", results.Params{Topology: "single-host", Datapath: "ebpf", Policies: n, PolicyMode: results.ModeL4Rules}, "ebpf l4-rules", 10)
		add("complexity", results.Params{Topology: "multi-host", Datapath: "ebpf", Policies: n, PolicyMode: results.ModeL4Rules}, "ebpf l4-rules", 8)
	}
	for _, n := range []int{1, 3} {
		add("no-shaper", results.Params{Topology: "chain", Link: "veth", ChainLength: n}, "none", 8)
		add("htb", results.Params{Topology: "chain", Link: "veth", ChainLength: n, ShaperRate: "1tbit"}, "none", 4)
	}
	ps := panels(r)
	var joined, rel *Panel
	for _, p := range ps {
		switch {
		case p.Sweep == "complexity":
			if joined != nil {
				t.Errorf("complexity drawn twice (%s, %s): its topologies should share one figure", joined.ID, p.ID)
			}
			joined = p
		case strings.Contains(p.Metric.Label, "% of no shaper"):
			rel = p
		}
	}
	if joined == nil || len(joined.Curves) != 2 || joined.Topology != "single-host+multi-host" {
		t.Fatalf("joined panel %+v", joined)
	}
	for _, c := range joined.Curves {
		if !strings.Contains(c.Series, "host") {
			t.Errorf("a joined line %q does not name its topology", c.Series)
		}
	}
	if rel == nil || len(rel.Curves) != 1 {
		t.Fatalf("relative panel %+v", rel)
	}
	for _, x := range rel.Curves[0].X {
		for _, v := range rel.Curves[0].Samples[x] {
			if v != 50 {
				t.Errorf("shaper at %v hops: %v%% of no shaper, want 50", x, v)
			}
		}
	}
}

// TestCompareAcrossSystems: a lab run against a cluster run (or clusters
// with another CNI) gets a section of its own saying what each measured,
// in text, HTML and JSON, and no warning lines for it.
func TestCompareAcrossSystems(t *testing.T) {
	lab, cl := synth(4, 1), synth(4, 2)
	for i := range lab.Points {
		lab.Points[i].Params.Datapath = kind.IPTables
	}
	cl.Backend = results.BackendKubernetes
	cl.Cluster = &results.ClusterInfo{Server: "https://127.0.0.1:6443", Version: "v1.37.2", CNI: "bridge+kube-router", KubeProxy: "iptables",
		Nodes: []results.NodeInfo{{Name: "n1", Kernel: "6.18", ContainerRuntime: "containerd://1.6.20", Kubelet: "v1.37.2"}}}
	c := Compare(lab, cl, 0.05, DefaultMinChange)
	if len(c.Mismatch) != 0 {
		t.Errorf("mismatch lines: %v; want the systems section only", c.Mismatch)
	}
	want := map[string][2]string{
		"measured on":    {"lab: network namespaces on one machine", "cluster https://127.0.0.1:6443 (Kubernetes v1.37.2)"},
		"datapath / CNI": {"cnlab's iptables", "bridge+kube-router"},
		"service proxy":  {"none measured", "kube-proxy iptables"},
		"nodes":          {"hosts are namespaces of this machine", "1 node (containerd://1.6.20, kubelet v1.37.2)"},
	}
	for _, r := range c.Systems {
		if w, ok := want[r.What]; ok && (r.A != w[0] || r.B != w[1]) {
			t.Errorf("%s: %q / %q, want %q / %q", r.What, r.A, r.B, w[0], w[1])
		}
	}
	if len(c.Systems) != 5 {
		t.Errorf("%d system rows, want 5: %+v", len(c.Systems), c.Systems)
	}
	var sb strings.Builder
	if err := c.Text(&sb); err != nil || !strings.Contains(sb.String(), "Different systems") || strings.Contains(sb.String(), "warning: the runs were measured differently") {
		t.Errorf("text: %v\n%s", err, sb.String())
	}
	page, err := c.HTML()
	if err != nil || !strings.Contains(string(page), "<h2>Different systems</h2>") {
		t.Errorf("html: %v", err)
	}
	// The same system: no section.
	if s := Compare(lab, synth(4, 3), 0.05, DefaultMinChange).Systems; s != nil {
		t.Errorf("two labs: %+v", s)
	}
	other := *cl
	oc := *cl.Cluster
	oc.KubeProxy = "nftables"
	other.Cluster = &oc
	if s := Compare(cl, &other, 0.05, DefaultMinChange).Systems; len(s) != 5 || s[2].Same {
		t.Errorf("clusters with another kube-proxy: %+v", s)
	}
}

// abRun is a run of one ab point, its p50 p50 (none when nil).
func abRun(p50 *float64) *results.Results {
	r := &results.Results{Schema: results.Schema, Status: results.StatusComplete,
		Experiment: results.ExperimentInfo{Name: "ab", File: "ab.yaml", Text: "name: ab\n"}}
	p := results.PointResult{Point: results.Point{ID: "p0001", Params: results.Params{Topology: "single-host", Datapath: "iptables"},
		Workload: results.Workload{Kind: results.AB}, Repetitions: 3}, Status: results.PointDone}
	for i := range 3 {
		m := map[string]float64{"requests_per_s": 10000 + float64(i), "latency_p99_us": 2000}
		if p50 != nil {
			m["latency_p50_us"] = *p50
		}
		p.Samples = append(p.Samples, results.Sample{Repetition: i + 1, Metrics: m})
	}
	r.Points = append(r.Points, p)
	return r
}

// ab's latency percentiles are whole milliseconds: a p50 below 1 ms (0 in
// runs before that was known, absent since) is "below ab's 1 ms
// resolution", never "0 → 0" nor a change (issue 37).
func TestCompareABBelowResolution(t *testing.T) {
	run := abRun
	zero := 0.0
	c := Compare(run(&zero), run(nil), 0.05, DefaultMinChange)
	var b strings.Builder
	if err := c.Text(&b); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ch := range c.Changes {
		if ch.Metric == "latency_p50_us" {
			found = true
			if !ch.BelowResolution || ch.Regression || ch.Verdict != "~" {
				t.Errorf("p50: %+v", ch)
			}
		}
		if ch.Metric == "latency_p99_us" && ch.BelowResolution {
			t.Errorf("p99 of 2 ms is measured: %+v", ch)
		}
	}
	if !found || !strings.Contains(b.String(), "<1 ms") || !strings.Contains(b.String(), "below ab's 1 ms resolution") || strings.Contains(b.String(), "0 → 0") {
		t.Errorf("text:\n%s", b.String())
	}
}

// The report of a run that recorded ab's p50 as 0 µs (before its 1 ms
// resolution was known) has no p50 row: no client measured it. The
// caller's results keep their samples.
func TestReportABBelowResolution(t *testing.T) {
	zero := 0.0
	r := abRun(&zero)
	r.Points[0].Summarize()
	rep := Build(r, nil)
	metrics := map[string]bool{}
	for _, row := range rep.Rows {
		metrics[row.Metric] = true
	}
	if metrics["latency_p50_us"] || !metrics["latency_p99_us"] || !metrics["requests_per_s"] {
		t.Errorf("table metrics %v: want p99 and requests, no p50", metrics)
	}
	if _, ok := r.Points[0].Samples[0].Metrics["latency_p50_us"]; !ok {
		t.Error("Build changed its caller's samples")
	}
	if _, ok := r.Points[0].Summary["latency_p50_us"]; !ok {
		t.Error("Build changed its caller's summary")
	}
}

// One ab sample below 1 ms among measured ones: the point's p50 is not
// the median of the others (biased up), in the report as in compare.
func TestABPartlyBelowResolution(t *testing.T) {
	r := abRun(nil)
	for i, v := range []float64{1000, 2000} {
		r.Points[0].Samples[i+1].Metrics["latency_p50_us"] = v
	}
	r.Points[0].Summarize()
	for _, row := range Build(r, nil).Rows {
		if row.Metric == "latency_p50_us" {
			t.Errorf("a p50 row from the samples that reached 1 ms: %+v", row)
		}
	}
	full := abRun(nil)
	for i := range full.Points[0].Samples {
		full.Points[0].Samples[i].Metrics["latency_p50_us"] = 2000
	}
	for _, ch := range Compare(full, r, 0.05, DefaultMinChange).Changes {
		if ch.Metric == "latency_p50_us" && !ch.BelowResolution {
			t.Errorf("p50 with a sample below 1 ms compared as measured: %+v", ch)
		}
	}
}
