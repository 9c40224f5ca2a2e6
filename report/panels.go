package report

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/stats"
)

// dim is a parameter points can differ in.
type dim struct {
	name  string
	value func(p *results.PointResult) string
	// show is the value as part of a series label ("" leaves it out).
	show func(v string) string
}

func num(v int) string { return strconv.Itoa(v) }

// fromWorkload are the axes whose value a point's workload holds (the
// matrix's flows, size and zerocopy apply to the workloads they fit, and
// a workload may set them itself).
var fromWorkload = map[string]func(p *results.PointResult) string{
	"flows":    func(p *results.PointResult) string { return num(p.Workload.Flows) },
	"size":     func(p *results.PointResult) string { return num(sizeOf(p)) },
	"zerocopy": func(p *results.PointResult) string { return strconv.FormatBool(p.Workload.Zerocopy) },
}

// axisDim is a matrix axis as a dimension: its value and words come from
// results.Axes.
func axisDim(key string) dim {
	a := results.AxisOf(key)
	value := fromWorkload[key]
	if value == nil {
		value = func(p *results.PointResult) string { return a.Value(p.Params) }
	}
	return dim{key, value, a.Show}
}

// xDims are the parameters a figure can have on its x axis, in the order
// they are chosen (results.FigureX): the first that varies in a panel is
// its x.
var xDims = func() []dim {
	var ds []dim
	for _, k := range results.FigureX {
		ds = append(ds, axisDim(k))
	}
	return ds
}()

// seriesDims are the other parameters: those that vary within a panel
// name its lines.
var seriesDims = []dim{
	// Only varies in a panel whose sweep asks for its topologies together.
	axisDim("topology"),
	{"series", func(p *results.PointResult) string { return p.Series }, func(v string) string {
		if v == string(kind.None) {
			return ""
		}
		return v
	}},
	axisDim("observe"),
	axisDim("ipFamily"),
	axisDim("link"),
	axisDim("switchLink"),
	axisDim("offloads"),
	axisDim("zerocopy"),
	axisDim("firewallStateful"),
	axisDim("firewallSpread"),
	// tcp-rr-under-load is drawn with the tcp-rr of its sizes (workloadKey):
	// its lines are the same series under load, the tcp-rr's idle.
	{"load", func(p *results.PointResult) string {
		if p.Workload.Kind == results.TCPRRUnderLoad {
			if p.Workload.Bidirectional {
				return num(p.Workload.Streams) + " each way"
			}
			return num(p.Workload.Streams)
		}
		return ""
	}, func(v string) string {
		if v == "" {
			return "idle"
		}
		n, way, _ := strings.Cut(v, " ")
		if way != "" {
			way = " " + way
		}
		if n == "1" {
			return "under load (1 stream" + way + ")"
		}
		return "under load (" + n + " streams" + way + ")"
	}},
	{"streams", func(p *results.PointResult) string {
		if p.Workload.Kind == results.TCPRRUnderLoad {
			return "0" // the load dimension names them
		}
		return num(p.Workload.Streams)
	}, func(v string) string {
		if v == "0" || v == "1" {
			return "1 stream"
		}
		return v + " streams"
	}},
	{"count", func(p *results.PointResult) string { return num(p.Workload.Count) }, func(v string) string { return v + " pings" }},
	axisDim("serviceBackends"),
	axisDim("servicePosition"),
	axisDim("clusterPolicyMatch"),
	axisDim("shaperDirection"),
	axisDim("shaperRate"),
}

// sizeOf is a point's message or datagram size.
func sizeOf(p *results.PointResult) int {
	if p.Workload.Length > 0 {
		return p.Workload.Length
	}
	return p.Params.Size
}

// xLabel is the axis label of an x dimension in a panel.
func xLabel(d string, pts []*results.PointResult) string {
	switch d {
	case "policies":
		mode := onePolicyMode(pts[0].Params.PolicyMode)
		for _, p := range pts {
			if onePolicyMode(p.Params.PolicyMode) != mode {
				mode = ""
			}
		}
		switch mode {
		case results.ModeL4Rules:
			return "L4 rules in one policy"
		case results.ModeTerms:
			return "matchLabels terms in one policy (selecting nobody)"
		}
	}
	if a := results.AxisOf(d); a != nil && a.XLabel != "" {
		return a.XLabel
	}
	return d
}

// Curve is one line of a panel: a series' samples at each x.
type Curve struct {
	Series  string
	X       []float64             // distinct, ascending
	Samples map[float64][]float64 // every sample at x
	Points  map[float64][]string  // the point IDs behind x
}

// Panel is one figure's worth of data: a metric of one workload in one
// sweep and topology, against one parameter, one curve per series.
type Panel struct {
	ID       string
	Sweep    string
	Topology string
	Workload string // workload kind, with rr sizes
	Kind     string // workload kind
	Metric   Metric
	XDim     string // "" when nothing varies: a bar per series
	XLabel   string
	Curves   []*Curve
	// Cost is set on a cost panel (costPanel), whose Groups give each
	// curve's line without the cost's axis and the axis's value shown.
	Cost   *results.Cost
	Groups [][2]string
}

// Title describes the panel in words.
func (p *Panel) Title() string {
	parts := []string{p.Metric.Label}
	if p.XDim != "" {
		parts = append(parts, "vs "+p.XLabel)
	}
	return strings.Join(parts, " ") + " — " + p.ctx()
}

// workloadKey names a workload without the options a matrix varies
// (flows, zerocopy, size become series or x).
func workloadKey(w results.Workload) string {
	switch w.Kind {
	case results.TCPRR, results.TCPCRR, results.UDPRR:
		return fmt.Sprintf("%s %d/%d", w.Kind, w.RequestSize, w.ResponseSize)
	case results.TCPRRUnderLoad: // on tcp-rr's figures: loaded beside idle
		return fmt.Sprintf("%s %d/%d", results.TCPRR, w.RequestSize, w.ResponseSize)
	case results.HTTP, results.AB:
		return w.Name()
	case results.UDPStream:
		if w.Rate != "" {
			return w.Kind + " " + w.Rate
		}
	}
	return w.Kind
}

// panels groups the points that have samples into panels, in the order
// of the experiment's points. Sweeps that vary the same parameter share
// their panels (seed 000's figure 7.2 draws the "scaling" and the
// "top-of-chain" sweeps together), except that L4 rules in one policy are
// never drawn on an axis of policies.
func panels(r *results.Results) []*Panel {
	type group struct {
		sweeps   []string
		topo, wl string
		kind, x  string
		pts      []*results.PointResult
	}
	group1 := func(key func(p *results.PointResult) string) ([]*group, map[string]*group) {
		var gs []*group
		by := map[string]*group{}
		for i := range r.Points {
			p := &r.Points[i]
			if len(p.Samples) == 0 {
				continue
			}
			k := key(p)
			g := by[k]
			if g == nil {
				g = &group{topo: p.Params.Topology, wl: workloadKey(p.Workload), kind: p.Workload.Kind}
				by[k] = g
				gs = append(gs, g)
			}
			g.pts = append(g.pts, p)
			if p.Workload.Kind == results.TCPRRUnderLoad {
				g.kind = p.Workload.Kind // tcp-rr drawn with it: its figures too
			}
			if !slices.Contains(g.sweeps, p.Sweep) {
				g.sweeps = append(g.sweeps, p.Sweep)
			}
			if !slices.Contains(strings.Split(g.topo, "+"), p.Params.Topology) {
				g.topo += "+" + p.Params.Topology
			}
		}
		return gs, by
	}
	topoKey := func(p *results.PointResult) string {
		if f := sweepFigures(r, p.Sweep); f != nil && f.Topologies {
			return "" // one figure for all topologies, a line each
		}
		return p.Params.Topology
	}
	base := func(p *results.PointResult) string {
		return topoKey(p) + "\x00" + workloadKey(p.Workload) + "\x00" + onePolicyMode(p.Params.PolicyMode)
	}
	// The x of each sweep on its own, then the points regrouped by it.
	bySweep, _ := group1(func(p *results.PointResult) string { return p.Sweep + "\x00" + base(p) })
	xOf := map[string]string{}
	for _, g := range bySweep {
		x := xAxis(g.pts)
		if f := sweepFigures(r, g.sweeps[0]); f != nil && f.X != "" && distinct(g.pts, dimByName(f.X)) > 1 {
			x = f.X
		}
		xOf[g.sweeps[0]+"\x00"+base(g.pts[0])] = x
	}
	groups, _ := group1(func(p *results.PointResult) string { return xOf[p.Sweep+"\x00"+base(p)] + "\x00" + base(p) })
	var out []*Panel
	for _, g := range groups {
		// The x the sweeps share, not one recomputed over them all: a
		// parameter fixed within each sweep but different between them
		// (one hop here, four there) names lines, it is not an axis.
		x := xOf[g.pts[0].Sweep+"\x00"+base(g.pts[0])]
		var sdims []dim
		for _, d := range append(append([]dim(nil), seriesDims...), xDims...) {
			if d.name != x && distinct(g.pts, d) > 1 {
				sdims = append(sdims, d)
			}
		}
		ms := figureMetrics(g.kind)
		for _, sw := range g.sweeps {
			if f := sweepFigures(r, sw); f != nil {
				for _, m := range f.Metrics {
					if !slices.Contains(ms, m) {
						ms = append(ms, m)
					}
				}
			}
		}
		for _, m := range ms {
			pn := &Panel{Sweep: strings.Join(g.sweeps, "+"), Topology: g.topo, Kind: g.kind, Workload: g.wl, Metric: MetricInfo(m), XDim: x, XLabel: xLabel(x, g.pts)}
			curves := map[string]*Curve{}
			// A series measured in several sweeps is drawn once per sweep:
			// its samples are different measurements (another repetition
			// count, a profiled sweep) and are not pooled.
			sweepsOf := map[string]map[string]bool{}
			for _, p := range g.pts {
				n := seriesName(p, sdims)
				if sweepsOf[n] == nil {
					sweepsOf[n] = map[string]bool{}
				}
				sweepsOf[n][p.Sweep] = true
			}
			for _, p := range g.pts {
				name := seriesName(p, sdims)
				if len(sweepsOf[name]) > 1 {
					name += " [" + p.Sweep + "]"
				}
				xv := 0.0
				if x != "" {
					xv, _ = strconv.ParseFloat(dimByName(x).value(p), 64)
				}
				vals := samplesOf(p, m)
				if len(vals) == 0 {
					continue
				}
				c := curves[name]
				if c == nil {
					c = &Curve{Series: name, Samples: map[float64][]float64{}, Points: map[float64][]string{}}
					curves[name] = c
					pn.Curves = append(pn.Curves, c)
				}
				if _, ok := c.Samples[xv]; !ok {
					c.X = append(c.X, xv)
				}
				c.Samples[xv] = append(c.Samples[xv], vals...)
				c.Points[xv] = append(c.Points[xv], p.ID)
			}
			if len(pn.Curves) == 0 {
				continue
			}
			for _, c := range pn.Curves {
				sort.Float64s(c.X)
			}
			sort.SliceStable(pn.Curves, func(i, j int) bool { return seriesLess(pn.Curves[i].Series, pn.Curves[j].Series) })
			pn.ID = fmt.Sprintf("fig%02d-%s", len(out)+1, slug(pn.namedSweep()+" "+pn.Topology+" "+pn.Workload+" "+m))
			out = append(out, pn)
			for _, sw := range g.sweeps {
				if f := sweepFigures(r, sw); f != nil && f.RelativeTo != "" {
					if rel := relativePanel(pn, f.RelativeTo); rel != nil {
						rel.ID = fmt.Sprintf("fig%02d-%s", len(out)+1, slug(pn.namedSweep()+" "+pn.Topology+" "+pn.Workload+" "+m+" relative"))
						out = append(out, rel)
					}
					break
				}
			}
			for _, sw := range g.sweeps {
				if f := sweepFigures(r, sw); f != nil && f.Cost != nil {
					if cp := costPanel(pn, g.pts, sdims, f.Cost); cp != nil {
						cp.ID = fmt.Sprintf("fig%02d-%s", len(out)+1, slug(pn.namedSweep()+" "+pn.Topology+" "+pn.Workload+" "+m+" cost of "+f.Cost.Axis))
						out = append(out, cp)
					}
					break
				}
			}
		}
	}
	return out
}

// relativePanel is pn with every line but the base one divided by the
// base line's median at the same x, in percent (x where the base has no
// samples are left out); nil when pn has no line named base.
func relativePanel(pn *Panel, base string) *Panel {
	var b *Curve
	for _, c := range pn.Curves {
		if c.Series == base {
			b = c
		}
	}
	if b == nil {
		return nil
	}
	rel := *pn
	rel.Metric = Metric{Name: pn.Metric.Name, Label: pn.Metric.Label + ", % of " + base, Unit: "%", Better: pn.Metric.Better}
	rel.Curves = nil
	for _, c := range pn.Curves {
		if c == b {
			continue
		}
		rc := &Curve{Series: c.Series, Samples: map[float64][]float64{}, Points: map[float64][]string{}}
		for _, x := range c.X {
			ref := b.summary(x).Median
			if len(b.Samples[x]) == 0 || ref == 0 {
				continue
			}
			rc.X = append(rc.X, x)
			for _, v := range c.Samples[x] {
				rc.Samples[x] = append(rc.Samples[x], 100*v/ref)
			}
			rc.Points[x] = c.Points[x]
		}
		if len(rc.X) > 0 {
			rel.Curves = append(rel.Curves, rc)
		}
	}
	if len(rel.Curves) == 0 {
		return nil
	}
	return &rel
}

// seriesLess orders lines as the seed thesis does: eBPF first, then
// iptables, then the rest, alphabetically within.
func seriesLess(a, b string) bool {
	rank := func(s string) int {
		switch {
		case strings.HasPrefix(s, string(kind.EBPF)):
			return 0
		case strings.HasPrefix(s, string(kind.IPTables)+" "+kind.FillerNoMatch):
			return 1
		case strings.HasPrefix(s, string(kind.IPTables)):
			return 2
		case strings.HasPrefix(s, string(kind.NFTables)):
			return 3
		}
		return 4
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra < rb
	}
	return naturalLess(a, b)
}

// naturalLess compares strings with their numbers as numbers ("2 flows"
// before "10 flows").
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		na, ra := leadingNum(a)
		nb, rb := leadingNum(b)
		if na >= 0 && nb >= 0 {
			if na != nb {
				return na < nb
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func leadingNum(s string) (int, string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 9 {
		return -1, s
	}
	n, _ := strconv.Atoi(s[:i])
	return n, s[i:]
}

// onePolicyMode is the policy mode whose "policies" count something in
// one policy (L4 rules, selector terms), never drawn on an axis of
// policies; "" for the modes that count policies.
func onePolicyMode(mode string) string {
	if mode == results.ModeL4Rules || mode == results.ModeTerms {
		return mode
	}
	return ""
}

// reference is what the experiment file quotes of the seed for a panel's
// metric, in any of the panel's sweeps ("" if nothing).
func reference(r *results.Results, pn *Panel) string {
	for _, sw := range strings.Split(pn.Sweep, "+") {
		if f := sweepFigures(r, sw); f != nil && f.Reference[pn.Metric.Name] != "" {
			return strings.TrimSpace(f.Reference[pn.Metric.Name])
		}
	}
	return ""
}

// sweepFigures is what the experiment file asks of a sweep's figures.
func sweepFigures(r *results.Results, sweep string) *results.Figures {
	if r.Experiment.Spec == nil {
		return nil
	}
	for _, sw := range r.Experiment.Spec.Sweeps {
		if sw.Name == sweep {
			return sw.Figures
		}
	}
	return nil
}

// xAxis is the first of xDims that varies among pts ("" if none does).
func xAxis(pts []*results.PointResult) string {
	for _, d := range xDims {
		if distinct(pts, d) > 1 {
			return d.name
		}
	}
	return ""
}

func dimByName(name string) dim {
	for _, d := range append(append([]dim(nil), xDims...), seriesDims...) {
		if d.name == name {
			return d
		}
	}
	panic("report: no dimension " + name)
}

func distinct(pts []*results.PointResult, d dim) int {
	seen := map[string]bool{}
	for _, p := range pts {
		seen[d.value(p)] = true
	}
	return len(seen)
}

func seriesName(p *results.PointResult, ds []dim) string {
	var parts []string
	for _, d := range ds {
		if s := d.show(d.value(p)); s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		switch {
		case p.Series != string(kind.None):
			return p.Series
		case p.Params.Link != "":
			return p.Params.Link // a chain: its link kind
		}
		return workloadKey(p.Workload)
	}
	return strings.Join(parts, ", ")
}

// slug makes an identifier for a file name or an HTML id.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// summary of a curve at x.
func (c *Curve) summary(x float64) stats.Summary { return stats.Summarize(c.Samples[x]) }

// all returns every (x, sample) pair of a curve, for fits.
func (c *Curve) all() (xs, ys []float64) {
	for _, x := range c.X {
		for _, y := range c.Samples[x] {
			xs = append(xs, x)
			ys = append(ys, y)
		}
	}
	return xs, ys
}
