package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/stats"
	"github.com/cnlab/cnlab/traffic"
)

// Alpha is the significance level of compare.
const Alpha = 0.05

// DefaultMinChange is the smallest change compare calls a change: a
// significant shift of less (two pinned runs of the same experiment differ
// by up to ~1.5% in latency on the development VM, BENCHMARKS.md) prints
// as "~".
const DefaultMinChange = 0.02

// Change is one metric of one point in two runs.
type Change struct {
	Key      string  `json:"-"` // what matches the point across runs
	PointA   string  `json:"pointA"`
	PointB   string  `json:"pointB"`
	Topology string  `json:"topology"`
	Series   string  `json:"series"`
	Params   string  `json:"params"`
	Workload string  `json:"workload"`
	Metric   string  `json:"metric"`
	NA       int     `json:"nA"`
	NB       int     `json:"nB"`
	MedianA  float64 `json:"medianA"`
	MedianB  float64 `json:"medianB"`
	// Delta is (B − A) / |A|, a fraction here and a percentage in JSON
	// (deltaPercent, like every relative value compare writes); 0 with
	// DeltaDefined false when A's median is 0.
	Delta        float64 `json:"-"`
	DeltaPct     float64 `json:"deltaPercent"`
	DeltaDefined bool    `json:"deltaDefined"`
	P            float64 `json:"p"`    // two-sided Mann–Whitney U
	MinP         float64 `json:"minP"` // the smallest p these sample sizes allow
	Significant  bool    `json:"significant"`
	// Small: significant, but smaller than the comparison's MinChange.
	Small bool `json:"belowMinChange,omitempty"`
	// Verdict is "~" (not significant), "better" or "worse" (by the
	// metric's direction), or "changed" for a metric with none.
	Verdict string `json:"verdict"`
	// Regression is a significant change for the worse beyond the
	// threshold.
	Regression bool `json:"regression,omitempty"`
	// BelowResolution: a side's median is below the client's resolution
	// (ab's percentiles are whole milliseconds, and one below 1 ms is not
	// measured): no change is claimed, and that side prints "<1 ms".
	BelowResolution bool `json:"belowResolution,omitempty"`
}

// Comparison is `cnlab compare`'s result.
type Comparison struct {
	A, B      string   `json:"-"`
	RunA      string   `json:"runA"`
	RunB      string   `json:"runB"`
	Alpha     float64  `json:"alpha"`
	Threshold float64  `json:"-"`                          // fraction; negative: no gate
	Gate      *float64 `json:"thresholdPercent,omitempty"` // the --threshold given, if any
	MinChange float64  `json:"-"`                          // fraction
	MinPct    float64  `json:"minChangePercent"`           // the same, in percent
	Changes   []Change `json:"changes"`
	OnlyA     []string `json:"onlyInA,omitempty"` // point keys without a match
	OnlyB     []string `json:"onlyInB,omitempty"`
	// Missing are matched points that have samples in one run only (a
	// point that failed, or that an interrupted run did not reach).
	Missing  []Missing `json:"missing,omitempty"`
	Mismatch []string  `json:"mismatch,omitempty"` // how the two runs were measured differently
	// Systems says what each run measured when they are different systems
	// (a lab and a cluster, or clusters with another CNI or kube-proxy
	// mode): a section of its own, before the table.
	Systems     []SystemRow `json:"systems,omitempty"`
	Regressions int         `json:"regressions"`
	Unreachable int         `json:"unreachable"` // changes whose sample sizes cannot reach Alpha
	// Reference compares the runs' reference speeds, when both recorded
	// one (CompareReference).
	Reference *ReferenceComparison `json:"referenceSpeed,omitempty"`
}

// Missing is a matched point without samples in one of the runs.
type Missing struct {
	PointA  string `json:"pointA"`
	PointB  string `json:"pointB"`
	Point   string `json:"point"` // parameters and workload
	StatusA string `json:"statusA"`
	StatusB string `json:"statusB"`
	ErrorB  string `json:"errorB,omitempty"`
	// Regression: measured in A, not in B (B failed it or did not get
	// there), counted as a regression when a threshold is set.
	Regression bool `json:"regression,omitempty"`
}

// pointKey matches a point across two runs: its sweep, parameters and
// workload (point IDs differ when experiment files do).
func pointKey(p *results.PointResult) string {
	b, _ := json.Marshal(struct {
		P results.Params
		W results.Workload
	}{p.Params, p.Workload})
	return p.Sweep + " " + string(b)
}

// Compare matches the points of two runs and tests every primary metric
// of each pair. threshold (a fraction, e.g. 0.05) marks significant
// changes for the worse at least that large as regressions; a negative
// threshold marks none.
func Compare(a, b *results.Results, threshold, minChange float64) *Comparison {
	c := &Comparison{RunA: a.Experiment.Name, RunB: b.Experiment.Name, Alpha: Alpha, Threshold: threshold, MinChange: minChange, MinPct: 100 * minChange}
	if threshold >= 0 {
		pct := 100 * threshold
		c.Gate = &pct
	}
	bByKey := map[string]*results.PointResult{}
	for i := range b.Points {
		bByKey[pointKey(&b.Points[i])] = &b.Points[i]
	}
	seen := map[string]bool{}
	for i := range a.Points {
		pa := &a.Points[i]
		k := pointKey(pa)
		seen[k] = true
		pb := bByKey[k]
		if pb == nil {
			c.OnlyA = append(c.OnlyA, pa.ID+" "+pa.Params.Text()+" "+pa.Workload.Name())
			continue
		}
		if len(pa.Samples) == 0 || len(pb.Samples) == 0 {
			if len(pa.Samples) == 0 && len(pb.Samples) == 0 {
				continue
			}
			ms := Missing{PointA: pa.ID, PointB: pb.ID, Point: pa.Params.Text() + " " + pa.Workload.Name(), StatusA: pa.Status, StatusB: pb.Status, ErrorB: pb.Error}
			if len(pb.Samples) == 0 && threshold >= 0 {
				ms.Regression = true
				c.Regressions++
			}
			c.Missing = append(c.Missing, ms)
			continue
		}
		for _, m := range PrimaryMetrics(pa.Workload.Kind) {
			xa, xb := samplesOf(pa, m), samplesOf(pb, m)
			if res := resolutionOf(pa.Workload.Kind, m); res > 0 && (censored(pa, m) > 0 || censored(pb, m) > 0) {
				ch := Change{Key: k, PointA: pa.ID, PointB: pb.ID, Topology: pa.Params.Topology, Series: pa.Series, Params: pa.Params.Text(),
					Workload: pa.Workload.Name(), Metric: m, NA: len(xa), NB: len(xb), P: 1, MinP: 0, Verdict: "~", BelowResolution: true}
				if len(xa) > 0 {
					ch.MedianA = stats.Median(xa)
				}
				if len(xb) > 0 {
					ch.MedianB = stats.Median(xb)
				}
				c.Changes = append(c.Changes, ch)
				continue
			}
			if len(xa) == 0 || len(xb) == 0 {
				continue
			}
			cmp := stats.Compare(xa, xb, Alpha)
			ch := Change{Key: k, PointA: pa.ID, PointB: pb.ID, Topology: pa.Params.Topology, Series: pa.Series, Params: pa.Params.Text(),
				Workload: pa.Workload.Name(), Metric: m, NA: cmp.NA, NB: cmp.NB, MedianA: cmp.MedianA, MedianB: cmp.MedianB,
				Delta: cmp.Change, DeltaPct: 100 * cmp.Change, DeltaDefined: cmp.ChangeDefined, P: cmp.P, MinP: cmp.MinP, Significant: cmp.Significant, Verdict: "~"}
			if cmp.MinP >= Alpha {
				c.Unreachable++
			}
			ch.Small = ch.Significant && ch.DeltaDefined && math.Abs(ch.Delta) < minChange
			if ch.Significant && !ch.Small {
				dir := MetricInfo(m).Better
				up := ch.MedianB > ch.MedianA
				switch {
				case dir == 0:
					ch.Verdict = "changed"
				case up == (dir > 0):
					ch.Verdict = "better"
				default:
					ch.Verdict = "worse"
				}
				if ch.Verdict == "worse" && threshold >= 0 && (!ch.DeltaDefined || math.Abs(ch.Delta) >= threshold) {
					ch.Regression = true
					c.Regressions++
				}
			}
			c.Changes = append(c.Changes, ch)
		}
	}
	for i := range b.Points {
		if k := pointKey(&b.Points[i]); !seen[k] {
			p := &b.Points[i]
			c.OnlyB = append(c.OnlyB, p.ID+" "+p.Params.Text()+" "+p.Workload.Name())
		}
	}
	sort.SliceStable(c.Changes, func(i, j int) bool { return c.Changes[i].PointA < c.Changes[j].PointA })
	c.Mismatch = mismatch(a, b)
	c.Systems = systems(a, b)
	return c
}

// SystemRow is one aspect of the systems two runs measured.
type SystemRow struct {
	What string `json:"what"`
	A    string `json:"a"`
	B    string `json:"b"`
	Same bool   `json:"same"`
}

func backendOf(r *results.Results) string {
	if r.Backend == "" {
		return results.BackendLab
	}
	return r.Backend
}

// systems describes the systems of two runs side by side when they are
// not the same system: another backend, or clusters whose CNI or
// kube-proxy differ. Nil otherwise.
func systems(a, b *results.Results) []SystemRow {
	ba, bb := backendOf(a), backendOf(b)
	if ba == bb && (ba == results.BackendLab || a.Cluster == nil || b.Cluster == nil ||
		(a.Cluster.CNI == b.Cluster.CNI && a.Cluster.KubeProxy == b.Cluster.KubeProxy)) {
		return nil
	}
	type side struct{ where, datapath, proxy, nodes, versions string }
	describe := func(r *results.Results) side {
		if backendOf(r) == results.BackendLab || r.Cluster == nil {
			dps, proxies := map[string]bool{}, map[string]bool{}
			for _, p := range r.Points {
				if d := p.Params.Datapath.String(); d != "" {
					dps[d] = true
				}
				if p.Params.ServiceProxy != "" {
					proxies[string(p.Params.ServiceProxy)] = true
				}
			}
			proxy := "none measured"
			if len(proxies) > 0 {
				proxy = "cnlab's " + strings.Join(keysOr(proxies), ", ")
			}
			return side{where: "lab: network namespaces on one machine", datapath: "cnlab's " + strings.Join(keysOr(dps), ", "), proxy: proxy,
				nodes: "hosts are namespaces of this machine", versions: "cnlab " + r.Cnlab}
		}
		c := r.Cluster
		kernels, runtimes := map[string]bool{}, map[string]bool{}
		for _, n := range c.Nodes {
			kernels[n.Kernel] = true
			runtimes[n.ContainerRuntime+", kubelet "+n.Kubelet] = true
		}
		return side{where: "cluster " + c.Server + " (Kubernetes " + c.Version + ")", datapath: c.CNI, proxy: "kube-proxy " + c.KubeProxy,
			nodes:    fmt.Sprintf("%s (%s)", plural.N(len(c.Nodes), "node"), strings.Join(keysOr(runtimes), "; ")),
			versions: "kernel " + strings.Join(keysOr(kernels), ", ")}
	}
	sa, sb := describe(a), describe(b)
	row := func(what, x, y string) SystemRow { return SystemRow{What: what, A: x, B: y, Same: x == y} }
	return []SystemRow{
		row("measured on", sa.where, sb.where),
		row("datapath / CNI", sa.datapath, sb.datapath),
		row("service proxy", sa.proxy, sb.proxy),
		row("nodes", sa.nodes, sb.nodes),
		row("versions", sa.versions, sb.versions),
	}
}

// keysOr lists m's keys sorted, or "(default)" when it has none.
func keysOr(m map[string]bool) []string {
	if len(m) == 0 {
		return []string{"(default)"}
	}
	return sortedKeys(m)
}

// mismatch lists how two runs were measured differently: their samples
// are then not of the same experiment.
func mismatch(a, b *results.Results) []string {
	var out []string
	// Another backend, CNI or kube-proxy: Systems says so, as a section.
	if a.Experiment.Quick != b.Experiment.Quick {
		out = append(out, fmt.Sprintf("quick: %v in A, %v in B", a.Experiment.Quick, b.Experiment.Quick))
	}
	sa, sb := a.Experiment.Spec, b.Experiment.Spec
	if sa != nil && sb != nil {
		if sa.Duration != sb.Duration || sa.Warmup != sb.Warmup {
			out = append(out, fmt.Sprintf("duration/warm-up: %v/%v in A, %v/%v in B", time.Duration(sa.Duration), time.Duration(sa.Warmup),
				time.Duration(sb.Duration), time.Duration(sb.Warmup)))
		}
		if pa, pb := pinText(sa.Pin), pinText(sb.Pin); pa != pb {
			out = append(out, fmt.Sprintf("CPU pinning: %s in A, %s in B", pa, pb))
		}
	}
	return out
}

// resolutionOf is the step below which a client's metric was not
// measured: ab's latency percentiles are whole milliseconds (results
// before that was known recorded them as 0). 0 for every other metric.
func resolutionOf(kind, metric string) float64 {
	if kind == results.AB && strings.HasPrefix(metric, "latency_p") {
		return traffic.ABResolutionUs
	}
	return 0
}

// censored is how many of p's samples have metric below its client's
// resolution: absent (left out when recorded) or below the step (0 in
// runs from before); 0 for a metric every client measures.
func censored(p *results.PointResult, metric string) int {
	res := resolutionOf(p.Workload.Kind, metric)
	if res <= 0 {
		return 0
	}
	n := 0
	for _, s := range p.Samples {
		if v, ok := s.Metrics[metric]; !ok || v < res {
			n++
		}
	}
	return n
}

func samplesOf(p *results.PointResult, metric string) []float64 {
	var xs []float64
	for _, s := range p.Samples {
		if v, ok := s.Metrics[metric]; ok {
			xs = append(xs, v)
		}
	}
	return xs
}

// deltaText is a change as printed: "~" when not significant, as
// benchstat does.
func (ch Change) deltaText() string {
	if ch.BelowResolution {
		return "below ab's 1 ms resolution"
	}
	d := "n/a"
	if ch.DeltaDefined {
		d = signed(100*ch.Delta) + "%"
	}
	if !ch.Significant || ch.Small {
		return "~ (" + d + ")"
	}
	return d
}

// Text writes the comparison as a table.
func (c *Comparison) Text(w io.Writer) error {
	fmt.Fprintf(w, "A: %s (%s)\nB: %s (%s)\n\n", c.A, c.RunA, c.B, c.RunB)
	if len(c.Systems) > 0 {
		fmt.Fprintln(w, "Different systems: the changes below are between them, not of one system over time.")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\tA\tB")
		for _, r := range c.Systems {
			same := ""
			if r.Same {
				same = "  (same)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s%s\n", r.What, r.A, r.B, same)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POINT\tTOPOLOGY\tSERIES\tPARAMS\tWORKLOAD\tMETRIC\tA\tB\tCHANGE\tP\tN\tVERDICT")
	for _, ch := range c.Changes {
		v := ch.Verdict
		if ch.Regression {
			v = "REGRESSION"
		}
		if ch.BelowResolution {
			side := func(x float64) string {
				if x < resolutionOf(results.AB, ch.Metric) {
					return "<1 ms"
				}
				return fmtNum(x)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t-\t%d+%d\t%s\n", ch.PointA, ch.Topology, ch.Series, ch.Params, ch.Workload, ch.Metric,
				side(ch.MedianA), side(ch.MedianB), ch.deltaText(), ch.NA, ch.NB, v)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3g\t%d+%d\t%s\n", ch.PointA, ch.Topology, ch.Series, ch.Params, ch.Workload, ch.Metric,
			fmtNum(ch.MedianA), fmtNum(ch.MedianB), ch.deltaText(), ch.P, ch.NA, ch.NB, v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range c.summary() {
		fmt.Fprintln(w, s)
	}
	return nil
}

// summary is the lines under the table.
func (c *Comparison) summary() []string {
	var out []string
	sig, small := 0, 0
	for _, ch := range c.Changes {
		switch {
		case ch.Small:
			small++
		case ch.Significant:
			sig++
		}
	}
	out = append(out, fmt.Sprintf("%d of %s changed significantly (two-sided Mann–Whitney U, p < %g) by at least %g%%; \"~\" marks the others, with their change in parentheses.",
		sig, plural.N(len(c.Changes), "metric"), c.Alpha, 100*c.MinChange))
	if small > 0 {
		out = append(out, fmt.Sprintf("%d more changed significantly but by less than %g%% (--min-change): shown as ~.", small, 100*c.MinChange))
	}
	if c.Unreachable > 0 {
		var ex Change
		for _, ch := range c.Changes {
			if ch.MinP >= c.Alpha {
				ex = ch
				break
			}
		}
		out = append(out, fmt.Sprintf("%d of them have too few samples to ever reach p < %g (with %d vs %d samples the smallest possible p is %.2g; 4 vs 4 is the fewest that can): run more repetitions to detect changes.",
			c.Unreachable, c.Alpha, ex.NA, ex.NB, ex.MinP))
	}
	if c.Threshold >= 0 {
		out = append(out, fmt.Sprintf("%s (significant changes for the worse of at least %g%%, and points measured in A but not in B).", plural.N(c.Regressions, "regression"), 100*c.Threshold))
	}
	for _, m := range c.Missing {
		what := "no samples in A"
		if m.Regression {
			what = "measured in A, not in B (counted as a regression)"
		} else if m.StatusB != "" && m.StatusA == m.StatusB {
			what = "no samples in one run"
		} else if m.StatusA == results.PointDone || m.StatusA == results.PointPartial {
			what = "measured in A, not in B"
		}
		line := fmt.Sprintf("%s/%s %s: %s (A %s, B %s)", m.PointA, m.PointB, m.Point, what, m.StatusA, m.StatusB)
		if m.ErrorB != "" {
			line += ": " + m.ErrorB
		}
		out = append(out, line)
	}
	for _, m := range c.Mismatch {
		out = append(out, "warning: the runs were measured differently: "+m)
	}
	if rc := c.Reference; rc != nil {
		line := rc.Text + "."
		if rc.Differ {
			line = "warning: " + line
		}
		out = append(out, line)
	}
	if len(c.OnlyA) > 0 {
		out = append(out, fmt.Sprintf("%s only in A (not compared): %s", plural.N(len(c.OnlyA), "point"), firstFew(c.OnlyA)))
	}
	if len(c.OnlyB) > 0 {
		out = append(out, fmt.Sprintf("%s only in B (not compared): %s", plural.N(len(c.OnlyB), "point"), firstFew(c.OnlyB)))
	}
	return out
}

// HTML renders the comparison as a self-contained page.
func (c *Comparison) HTML() ([]byte, error) {
	var b bytes.Buffer
	err := comparePage.Execute(&b, map[string]any{"C": c, "Summary": c.summary()})
	return b.Bytes(), err
}

var comparePage = template.Must(template.New("compare").Funcs(template.FuncMap{"num": fmtNum,
	"delta": func(ch Change) string { return ch.deltaText() }}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>cnlab compare — {{.C.RunA}} vs {{.C.RunB}}</title>
<style>
body { font-family: system-ui, Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: .85em; width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: .25em .5em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.better td.v { color: #070; font-weight: bold; } tr.worse td.v { color: #b00; font-weight: bold; }
tr.regression td { background: #fde8e8; }
</style></head><body>
<h1>cnlab compare</h1>
<p>A: <code>{{.C.A}}</code> ({{.C.RunA}})<br>B: <code>{{.C.B}}</code> ({{.C.RunB}})</p>
{{if .C.Systems}}<h2>Different systems</h2>
<p>The changes below are between two systems, not of one system over time.</p>
<table><tr><th></th><th>A</th><th>B</th></tr>
{{range .C.Systems}}<tr><th>{{.What}}</th><td>{{.A}}</td><td>{{.B}}{{if .Same}} (same){{end}}</td></tr>
{{end}}</table>
<h2>Changes</h2>{{end}}
<table>
<tr><th>point</th><th>topology</th><th>series</th><th>parameters</th><th>workload</th><th>metric</th><th>A median</th><th>B median</th><th>change</th><th>p</th><th>n</th><th>verdict</th></tr>
{{range .C.Changes}}<tr class="{{.Verdict}}{{if .Regression}} regression{{end}}"><td>{{.PointA}}</td><td>{{.Topology}}</td><td>{{.Series}}</td><td>{{.Params}}</td><td>{{.Workload}}</td><td>{{.Metric}}</td>
<td class="n">{{num .MedianA}}</td><td class="n">{{num .MedianB}}</td><td class="n">{{delta .}}</td><td class="n">{{printf "%.3g" .P}}</td><td class="n">{{.NA}}+{{.NB}}</td><td class="v">{{if .Regression}}regression{{else}}{{.Verdict}}{{end}}</td></tr>
{{end}}</table>
{{range .Summary}}<p>{{.}}</p>
{{end}}</body></html>
`))

// firstFew lists up to five items.
func firstFew(xs []string) string {
	if len(xs) <= 5 {
		return strings.Join(xs, "; ")
	}
	return strings.Join(xs[:5], "; ") + fmt.Sprintf("; and %d more", len(xs)-5)
}

// pinText describes an experiment's CPU pinning.
func pinText(p *results.Pin) string {
	cpu := func(c *int) string {
		if c == nil {
			return "any"
		}
		return fmt.Sprint(*c)
	}
	if p == nil {
		return "unpinned"
	}
	return "client " + cpu(p.Client) + ", server " + cpu(p.Server)
}

// ReferenceComparison is the two runs' reference speeds
// (results.ReferenceSpeed): whether the machines (or days) they were
// measured on differ by more than the reference's own noise.
type ReferenceComparison struct {
	StreamA, StreamB stats.Summary `json:"-"`
	RRA, RRB         stats.Summary `json:"-"`
	// Medians and 95% CIs of the mean, per run.
	StreamGbpsA   float64        `json:"streamGbpsA"`
	StreamGbpsB   float64        `json:"streamGbpsB"`
	StreamCIA     stats.Interval `json:"streamCI95A"`
	StreamCIB     stats.Interval `json:"streamCI95B"`
	RRP50UsA      float64        `json:"rrP50UsA"`
	RRP50UsB      float64        `json:"rrP50UsB"`
	RRCIA         stats.Interval `json:"rrCI95A"`
	RRCIB         stats.Interval `json:"rrCI95B"`
	StreamDiffers bool           `json:"streamDiffers"`
	RRDiffers     bool           `json:"rrDiffers"`
	// StreamP and RRP are Welch's t-test's two-sided p of each
	// difference (both sides have two samples or more).
	StreamP float64 `json:"streamP"`
	RRP     float64 `json:"rrP"`
	// Differ: either differs, Welch's p below Alpha.
	Differ bool   `json:"differ"`
	Text   string `json:"text"`
}

// CompareReference compares the reference speeds in two runs'
// environments; nil when either has none (a run from before cnlab
// measured it, a cluster run, a failed measurement).
func CompareReference(a, b *results.Environment) *ReferenceComparison {
	if a == nil || b == nil || a.Reference == nil || b.Reference == nil {
		return nil
	}
	ra, rb := a.Reference, b.Reference
	if len(ra.StreamGbps) < 2 || len(rb.StreamGbps) < 2 || len(ra.RRP50Us) < 2 || len(rb.RRP50Us) < 2 {
		return nil
	}
	rc := &ReferenceComparison{StreamA: stats.Summarize(ra.StreamGbps), StreamB: stats.Summarize(rb.StreamGbps),
		RRA: stats.Summarize(ra.RRP50Us), RRB: stats.Summarize(rb.RRP50Us)}
	rc.StreamGbpsA, rc.StreamGbpsB, rc.StreamCIA, rc.StreamCIB = rc.StreamA.Median, rc.StreamB.Median, rc.StreamA.MeanCI, rc.StreamB.MeanCI
	rc.RRP50UsA, rc.RRP50UsB, rc.RRCIA, rc.RRCIB = rc.RRA.Median, rc.RRB.Median, rc.RRA.MeanCI, rc.RRB.MeanCI
	// Welch's t-test at compare's level: two 95% intervals apart would
	// be a test at about 0.005, with little power for 3 or 4 samples.
	_, _, rc.StreamP = stats.Welch(ra.StreamGbps, rb.StreamGbps)
	_, _, rc.RRP = stats.Welch(ra.RRP50Us, rb.RRP50Us)
	rc.StreamDiffers, rc.RRDiffers = rc.StreamP < Alpha, rc.RRP < Alpha
	rc.Differ = rc.StreamDiffers || rc.RRDiffers
	rel := func(a, b float64) string {
		if a == 0 {
			return "n/a"
		}
		return signed(100*(b-a)/a) + "%"
	}
	var s strings.Builder
	fmt.Fprintf(&s, "reference speed (one veth pair, pinned): stream %s → %s Gb/s (%s), tcp-rr p50 %s → %s µs (%s): ",
		fmtNum(rc.StreamGbpsA), fmtNum(rc.StreamGbpsB), rel(rc.StreamGbpsA, rc.StreamGbpsB), fmtNum(rc.RRP50UsA), fmtNum(rc.RRP50UsB), rel(rc.RRP50UsA, rc.RRP50UsB))
	if rc.Differ {
		var what []string
		if rc.StreamDiffers {
			what = append(what, "stream")
		}
		if rc.RRDiffers {
			what = append(what, "rr")
		}
		fmt.Fprintf(&s, "the machines (or days) differ by more than their noise (%s: Welch's t-test, p < %g), so raw throughput and latency differ for that reason too; compare costs per packet (cnlab report) instead", strings.Join(what, " and "), Alpha)
	} else {
		fmt.Fprintf(&s, "within their noise (Welch's t-test: stream p = %.2g, rr p = %.2g)", rc.StreamP, rc.RRP)
	}
	if ra.Cached || rb.Cached {
		s.WriteString("; one was measured earlier on the same boot and reused (environment.json, referenceSpeed.measuredAt)")
	}
	rc.Text = s.String()
	return rc
}
