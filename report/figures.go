package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/report/plot"
	"github.com/cnlab/cnlab/stats"
)

// Figure is one figure of a report with what it shows.
type Figure struct {
	ID      string       `json:"id"`
	Kind    string       `json:"kind"` // sweep, baseline, profile, cost, seed (seedNormalised)
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

// seedCaption is what a caption adds when a figure carries a seed's
// values.
const seedCaption = " Dashed with hollow markers (outlined bars): the seed's published values (%s), in this figure's unit; flat across the figure where the seed stated no x."

// panelSeedValues are the seed values the experiment file gives for a
// panel (figures.seedValues of any of its sweeps, once each): those of
// its metric, topology and workload. A panel whose metric is drawn
// otherwise than recorded (relative to a line, a cost) gets none.
func panelSeedValues(r *results.Results, pn *Panel) []results.SeedValues {
	if pn.Cost != nil || pn.Metric.Label != MetricInfo(pn.Metric.Name).Label {
		return nil
	}
	var out []results.SeedValues
	seen := map[string]bool{}
	for _, sw := range strings.Split(pn.Sweep, "+") {
		f := sweepFigures(r, sw)
		if f == nil {
			continue
		}
		for _, v := range f.SeedValues {
			switch {
			case v.Metric != pn.Metric.Name,
				v.Topology != "" && !slices.Contains(strings.Split(pn.Topology, "+"), v.Topology),
				v.Workload != "" && pn.Workload != v.Workload && !strings.HasPrefix(pn.Workload, v.Workload+" "),
				seen[v.Label]:
				continue
			}
			seen[v.Label] = true
			out = append(out, v)
		}
	}
	return out
}

// addSeedValues draws a panel's seed values on its figure (sweepFigure's
// or, with baseline set to its x, baselineFigure's): on a line figure one
// Reference series per seed series, in the colour of cnlab's line of the
// same name (a value without x: flat across the figure); on a bar
// figure one series of outlined bars per table, in the category of
// cnlab's bar of the same name or in a category of its own.
func addSeedValues(fig *Figure, vs []results.SeedValues, pn *Panel, baseline *float64) {
	if len(vs) == 0 {
		return
	}
	f := fig.Plot
	var labels []string
	drawn := false
	if f.Kind == plot.Bars {
		f.Series[0].Name = "cnlab (this run)"
		f.Legend = plot.LegendAuto
		for _, v := range vs {
			s := plot.Series{Name: v.Label, Style: plot.Reference, Color: seedGrey(len(f.Series) - 1)}
			for _, p := range v.Points {
				if baseline != nil && (p.X == nil || *p.X != *baseline) {
					continue
				}
				i := slices.Index(f.Categories, p.Line)
				if p.Line == "" {
					i = slices.Index(f.Categories, p.Series)
				}
				if i < 0 {
					i = len(f.Categories)
					f.Categories = append(f.Categories, p.Series)
				}
				s.Points = append(s.Points, seedPoint(float64(i), p))
			}
			if len(s.Points) > 0 {
				f.Series = append(f.Series, s)
				labels = append(labels, v.Label)
			}
		}
		drawn = len(labels) > 0
	} else {
		colour := map[string]string{}
		for i, c := range pn.Curves {
			colour[c.Series] = plot.PaletteColor(i)
		}
		extra := 0
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range panelXs(pn) {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		for _, v := range vs {
			var order []string
			by := map[string]*plot.Series{}
			for _, p := range v.Points {
				xs := []float64{lo, hi} // a value at no stated x: across the figure
				if p.X != nil {
					xs = []float64{*p.X}
				}
				s := by[p.Series]
				if s == nil {
					c, ok := colour[p.Series]
					if p.Line != "" {
						c, ok = colour[p.Line]
					}
					if !ok {
						c = seedGrey(extra)
						extra++
					}
					s = &plot.Series{Name: v.Label + ": " + p.Series, Style: plot.Reference, Color: c}
					by[p.Series] = s
					order = append(order, p.Series)
				}
				for _, x := range xs {
					s.Points = append(s.Points, seedPoint(x, p))
				}
			}
			for _, n := range order {
				s := by[n]
				sort.SliceStable(s.Points, func(i, j int) bool { return s.Points[i].X < s.Points[j].X })
				f.Series = append(f.Series, *s)
				widen(&f.XLimits, s.Points)
			}
			if len(order) > 0 {
				labels = append(labels, v.Label)
				drawn = true
			}
		}
	}
	if drawn {
		fig.Caption += fmt.Sprintf(seedCaption, strings.Join(labels, "; "))
		f.Note = fig.Caption
	}
}

// seedPoint is a published value at x, with its range as an error bar.
func seedPoint(x float64, p results.SeedPoint) plot.Point {
	q := plot.Point{X: x, Y: p.Y}
	if p.Low != nil && p.High != nil {
		q.YLow, q.YHigh = *p.Low, *p.High
	}
	return q
}

// widen makes fixed x limits (the dodge's) take in points drawn at their
// own x.
func widen(l *plot.Limits, ps []plot.Point) {
	if !(l.Min < l.Max) {
		return
	}
	for _, p := range ps {
		l.Min, l.Max = math.Min(l.Min, p.X), math.Max(l.Max, p.X)
	}
}

// seedScale is how far apart (a factor) the seed's values and cnlab's may
// be on one figure before a normalised figure is drawn as well: beyond
// it, the smaller of the two lies flat along the axis.
const seedScale = 4

// seedNormalised is, for a line figure whose seed values are far from
// cnlab's (seedScale), the same lines each divided by its own value at
// its first x, in percent, the seed's series (those with two values or
// more) likewise: the shapes side by side where the scales differ
// (seed 001's 155 Gb/s on an 8-core machine). ok is false when the
// scales are close or no seed series has a shape.
func seedNormalised(pn *Panel, vs []results.SeedValues) (Figure, bool) {
	if pn.XDim == "" || len(vs) == 0 {
		return Figure{}, false
	}
	ours, theirs := 0.0, 0.0
	for _, c := range pn.Curves {
		for _, x := range c.X {
			ours = math.Max(ours, math.Abs(c.summary(x).Median))
		}
	}
	for _, v := range vs {
		for _, p := range v.Points {
			theirs = math.Max(theirs, math.Abs(p.Y))
		}
	}
	if ours == 0 || theirs == 0 || (theirs/ours < seedScale && ours/theirs < seedScale) {
		return Figure{}, false
	}
	id := pn.ID + "-seed-normalised"
	f := &plot.Figure{ID: id, Title: pn.Metric.Label + ", % of each line's first x, with the seed's — " + pn.ctx(),
		XLabel: pn.XLabel, YLabel: "% of the line's value at its first x", YFromData: true, Scale: 2}
	colour := map[string]string{}
	for i, c := range pn.Curves {
		colour[c.Series] = plot.PaletteColor(i)
		base := c.summary(c.X[0]).Median
		if base == 0 {
			continue
		}
		s := plot.Series{Name: c.Series, Color: plot.PaletteColor(i)}
		for _, x := range c.X {
			s.Points = append(s.Points, plot.Point{X: x, Y: 100 * c.summary(x).Median / base})
		}
		f.Series = append(f.Series, s)
	}
	extra, shapes := 0, 0
	var labels []string
	for _, v := range vs {
		var order []string
		by := map[string][]results.SeedPoint{}
		for _, p := range v.Points {
			if p.X == nil {
				continue
			}
			if by[p.Series] == nil {
				order = append(order, p.Series)
			}
			by[p.Series] = append(by[p.Series], p)
		}
		for _, n := range order {
			ps := by[n]
			if len(ps) < 2 {
				continue
			}
			sort.SliceStable(ps, func(i, j int) bool { return *ps[i].X < *ps[j].X })
			if ps[0].Y == 0 {
				continue
			}
			c, ok := colour[ps[0].Line]
			if !ok {
				if c, ok = colour[n]; !ok {
					c = seedGrey(extra)
					extra++
				}
			}
			s := plot.Series{Name: v.Label + ": " + n, Style: plot.Reference, Color: c}
			for _, p := range ps {
				s.Points = append(s.Points, plot.Point{X: *p.X, Y: 100 * p.Y / ps[0].Y})
			}
			f.Series = append(f.Series, s)
			shapes++
			if !slices.Contains(labels, v.Label) {
				labels = append(labels, v.Label)
			}
		}
	}
	if shapes == 0 {
		return Figure{}, false
	}
	if logAxis(panelXs(pn)) {
		f.XLog, f.XLabel = true, logLabel(f.XLabel)
	}
	f.Note = fmt.Sprintf("The seed's values (%s) and cnlab's medians are %s apart in scale (another machine): each line here is divided by its own value at its first x, the seed's dashed with hollow markers, so that their shapes compare.",
		strings.Join(labels, "; "), scaleWords(theirs/ours))
	return Figure{ID: id, Kind: "seed", Title: f.Title, Caption: f.Note, XLog: f.XLog, Plot: f}, true
}

// scaleWords says how far apart two scales are: "12× the seed's larger".
func scaleWords(r float64) string {
	if r >= 1 {
		return fmt.Sprintf("%s× (the seed's larger)", fmtNum(r))
	}
	return fmt.Sprintf("%s× (cnlab's larger)", fmtNum(1/r))
}

// seedGreys colour the seed's series that stand beside no line of cnlab's
// (IPVS; a seed's pod 1 and pod 2): greys, so that none is taken for the
// partner of a cnlab line of the palette's colour.
var seedGreys = [...]string{"#4d4d4d", "#8c8c8c", "#262626", "#a6a6a6"}

func seedGrey(i int) string { return seedGreys[i%len(seedGreys)] }
