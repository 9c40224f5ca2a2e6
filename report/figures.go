package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/report/plot"
	"github.com/cnlab/cnlab/stats"
)

// Figure is one figure of a report with what it shows.
type Figure struct {
	ID      string       `json:"id"`
	Kind    string       `json:"kind"` // sweep, baseline, profile, cost
	Title   string       `json:"title"`
	Caption string       `json:"caption"`
	XLog    bool         `json:"xLog,omitempty"` // the x axis is logarithmic (logAxis)
	Plot    *plot.Figure `json:"-"`
}

// logSpan is the ratio of the largest x to the smallest from which a
// figure's x axis is logarithmic: two decades (1 to 100 policies; 1 to
// 10,000 services).
const logSpan = 100

// logAxis reports whether a figure over xs draws its x axis on a log
// scale: every x is above zero and they span two decades or more. One x at
// zero or below (0 policies, a direct pair of 0 hops) keeps it linear, so
// that no point is dropped.
func logAxis(xs []float64) bool {
	if len(xs) == 0 {
		return false
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		if !(x > 0) || math.IsInf(x, 0) {
			return false
		}
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return hi >= logSpan*lo
}

// logLabel is an axis label that says its axis is logarithmic: "number of
// services (log scale)", "message size (bytes; log scale)".
func logLabel(label string) string {
	if strings.HasSuffix(label, ")") {
		return strings.TrimSuffix(label, ")") + "; log scale)"
	}
	return label + " (log scale)"
}

// logCaption is what a caption adds for a log x axis.
const logCaption = " x axis: log scale (the x values span two decades or more)."

// panelXs is every x of a panel's curves.
func panelXs(pn *Panel) []float64 {
	var xs []float64
	for _, c := range pn.Curves {
		xs = append(xs, c.X...)
	}
	return xs
}

// sweepFigure draws a panel: the median of each x with its 95% CI, one
// line per series, and the fitted power laws as dashed curves.
func sweepFigure(pn *Panel, fits []Fit) Figure {
	f := &plot.Figure{ID: pn.ID, Title: pn.Title(), XLabel: pn.XLabel, YLabel: pn.Metric.Label, Scale: 2}
	caption := "Median of the samples at each point; error bars: 95% confidence interval of the mean (Student's t), cut at the metric's possible range; lines sharing an x are drawn slightly apart."
	if pn.XDim == "" {
		f.Kind = plot.Bars
		s := plot.Series{Name: pn.Metric.Label}
		for i, c := range pn.Curves {
			f.Categories = append(f.Categories, c.Series)
			s.Points = append(s.Points, pn.ciPoint(float64(i), c.summary(c.X[0])))
		}
		f.Series = []plot.Series{s}
		f.Legend = plot.LegendNone
		f.Title = pn.Metric.Label + " — " + pn.ctx()
	} else {
		// Lines sharing an x are drawn a little apart ("dodged"), so that
		// their error bars do not hide each other; the fits are not. On a
		// log axis the dodge is a factor: the same distance on the page at
		// 1 service as at 10,000.
		logX := logAxis(panelXs(pn))
		f.XLog = logX
		if logX {
			f.XLabel = logLabel(f.XLabel)
			caption += logCaption
		}
		// t maps x to where the axis is linear (log10 x on a log axis), u
		// maps back.
		t, u := func(x float64) float64 { return x }, func(v float64) float64 { return v }
		if logX {
			t, u = math.Log10, func(v float64) float64 { return math.Pow(10, v) }
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, c := range pn.Curves {
			lo, hi = math.Min(lo, c.X[0]), math.Max(hi, c.X[len(c.X)-1])
		}
		step := 0.008 * (t(hi) - t(lo))
		if n := float64(len(pn.Curves)); n > 1 && hi > lo {
			pad := (n/2 + 1) * step
			f.XLimits = plot.Limits{Min: u(t(lo) - pad), Max: u(t(hi) + pad)} // the dodge does not widen the axis
		}
		for i, c := range pn.Curves {
			col := plot.PaletteColor(i)
			s := plot.Series{Name: c.Series, Color: col}
			dx := (float64(i) - float64(len(pn.Curves)-1)/2) * step
			for _, x := range c.X {
				s.Points = append(s.Points, pn.ciPoint(u(t(x)+dx), c.summary(x)))
			}
			f.Series = append(f.Series, s)
			for _, ft := range fits {
				if ft.Kind == "power-law" && ft.Series == c.Series && ft.N > 0 {
					// The fit is named in its data's legend entry: one
					// entry a line, however many lines are fitted.
					f.Series[len(f.Series)-1].Name += fmt.Sprintf(" (fit: l = %s%%/hop)", fmtNum(100*ft.Loss))
					fs := plot.Series{Style: plot.DashedLine, Color: col}
					for _, n := range fitXs(c.X[0], c.X[len(c.X)-1], logX) {
						fs.Points = append(fs.Points, plot.Point{X: n, Y: (stats.PowerLaw{T1: ft.T1, Loss: ft.Loss}).Predict(n)})
					}
					f.Series = append(f.Series, fs)
					if !strings.Contains(caption, "Dashed") {
						caption += " Dashed: t(n) = t(1)·(1 − l)^(n−1) fitted to every sample."
					}
				}
			}
		}
	}
	f.Note = caption
	return Figure{ID: pn.ID, Kind: "sweep", Title: f.Title, Caption: caption, XLog: f.XLog, Plot: f}
}

// fitXs are the x at which a fitted curve from lo to hi is drawn: the
// plot joins them with straight segments, so they are spaced evenly where
// the axis is linear, in log x on a log axis (evenly in x, 40 of 41
// points would crowd into the last decade, and a curve, a straight line
// in x among them, would be drawn as a few chords).
func fitXs(lo, hi float64, logX bool) []float64 {
	if logX && lo > 0 && hi > lo {
		return plot.LogSpace(lo, hi, 81) // 20 a decade over four decades
	}
	xs := make([]float64, 41)
	for k := range xs {
		xs[k] = lo + (hi-lo)*float64(k)/40
	}
	return xs
}

func ciPoint(m Metric, x float64, s stats.Summary) plot.Point {
	p := plot.Point{X: x, Y: s.Median}
	if s.N > 1 {
		p.YLow, p.YHigh = m.Clamp(s.MeanCI.Lo, s.MeanCI.Hi)
	}
	return p
}

// baselineFigure draws the bars of every series at a panel's first x,
// as seed 000's baseline figures (7.1, 7.3, 7.5, 7.7).
func baselineFigure(pn *Panel) (Figure, bool) {
	if !isCount(pn.XDim) || len(pn.Curves) < 2 {
		return Figure{}, false
	}
	x := firstX(pn)
	one, many := unitOf(pn)
	if x == 1 {
		many = one // "at 1 service"
	}
	id := pn.ID + "-baseline"
	f := &plot.Figure{ID: id, Kind: plot.Bars, Title: fmt.Sprintf("Baseline at %s %s: %s — %s", fmtX(x), many, pn.Metric.Label, pn.ctx()),
		YLabel: pn.Metric.Label, Legend: plot.LegendNone, Scale: 2}
	s := plot.Series{Name: pn.Metric.Label}
	for _, c := range pn.Curves {
		if _, ok := c.Samples[x]; !ok {
			continue
		}
		s.Points = append(s.Points, ciPoint(pn.Metric, float64(len(f.Categories)), c.summary(x)))
		f.Categories = append(f.Categories, c.Series)
	}
	if len(f.Categories) < 2 {
		return Figure{}, false
	}
	f.Series = []plot.Series{s}
	f.Note = "Median; error bars: 95% confidence interval of the mean."
	return Figure{ID: id, Kind: "baseline", Title: f.Title, Caption: f.Note, Plot: f}, true
}

// profileFigures draw, per sweep, topology and series, the share of CPU
// samples of the datapath's kernel functions against the swept parameter
// (seed 000 figure 7.10 counted ipt_do_table events with kprobes; this
// kernel has none, so perf's share of samples stands in).
func profileFigures(r *results.Results, first int) []Figure {
	type key struct{ sweep, topo, series, wl string }
	var keys []key
	byKey := map[key][]*results.PointResult{}
	for i := range r.Points {
		p := &r.Points[i]
		if p.Prof == nil || p.Prof.Kernel == nil || !p.Prof.Kernel.Available {
			continue
		}
		k := key{p.Sweep, p.Params.Topology, p.Series, workloadKey(p.Workload)}
		if byKey[k] == nil {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], p)
	}
	var out []Figure
	for _, k := range keys {
		pts := byKey[k]
		// x: the first dimension that varies among the profiled points.
		x := xAxis(pts)
		if x == "" {
			continue
		}
		names := map[string]bool{}
		byName := map[string][]plot.Point{}
		events := map[string][]plot.Point{} // perf samples in the table walkers
		var xs []float64
		for _, p := range pts {
			var xv float64
			fmt.Sscan(dimByName(x).value(p), &xv)
			xs = append(xs, xv)
			sh := map[string]float64{}
			for _, g := range p.Prof.Kernel.Groups {
				switch g.Name {
				case "idle", "other", "user": // not the datapath: they would flatten the rest
				default:
					sh["group "+g.Name] += g.Percent
				}
			}
			for _, s := range p.Prof.Kernel.Top {
				if s.Name == "ipt_do_table" || s.Name == "nft_do_chain" {
					sh[s.Name] += s.Percent
					events[s.Name] = append(events[s.Name], plot.Point{X: xv, Y: float64(s.Samples)})
				}
			}
			for n, v := range sh {
				if v > 0 {
					names[n] = true
				}
				byName[n] = append(byName[n], plot.Point{X: xv, Y: v})
			}
		}
		var ns []string
		for n := range names {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		id := fmt.Sprintf("fig%02d-%s", first+len(out), slug("profile "+k.sweep+" "+k.topo+" "+k.series+" "+k.wl))
		f := &plot.Figure{ID: id, Title: fmt.Sprintf("Share of CPU samples vs %s — %s, %s, %s (perf)", xLabel(x, pts), k.series, k.wl, k.topo),
			XLabel: xLabel(x, pts), YLabel: "% of all CPU samples", Scale: 2}
		logX := logAxis(xs)
		note := ""
		if logX {
			f.XLog, f.XLabel, note = true, logLabel(f.XLabel), logCaption
		}
		for _, n := range ns {
			ps := byName[n]
			sort.Slice(ps, func(i, j int) bool { return ps[i].X < ps[j].X })
			f.Series = append(f.Series, plot.Series{Name: strings.TrimPrefix(n, "group "), Points: ps})
		}
		f.Note = "The datapath's kernel functions by group, one profiled run per point (perf record -a, cpu-clock; idle, user and other samples not drawn)." + note
		out = append(out, Figure{ID: id, Kind: "profile", Title: f.Title, Caption: f.Note, XLog: logX, Plot: f})
		if len(events) == 0 {
			continue
		}
		// Seed 000's figure 7.10 as drawn: the number of perf events
		// (samples) in ipt_do_table, from its perf report.
		id = fmt.Sprintf("fig%02d-%s", first+len(out), slug("events "+k.sweep+" "+k.topo+" "+k.series+" "+k.wl))
		ev := &plot.Figure{ID: id, Title: fmt.Sprintf("Number of perf events in the table walker vs %s — %s, %s, %s", xLabel(x, pts), k.series, k.wl, k.topo),
			XLabel: f.XLabel, YLabel: "perf samples", XLog: logX, Scale: 2}
		for _, n := range sortedKeys(events) {
			ps := events[n]
			sort.Slice(ps, func(i, j int) bool { return ps[i].X < ps[j].X })
			ev.Series = append(ev.Series, plot.Series{Name: n, Points: ps})
		}
		ev.Note = fmt.Sprintf("Samples of perf record -a (%d Hz per CPU) in ipt_do_table or nft_do_chain during one profiled run per point: seed 000's figure 7.10, whose \"ipt_do_table events\" came from its perf report. A count depends on the run's length and the sampling rate; compare points of one run.", pts[0].Prof.Kernel.Frequency) + note
		out = append(out, Figure{ID: id, Kind: "profile", Title: ev.Title, Caption: ev.Note, XLog: logX, Plot: ev})
	}
	return out
}
