package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/report/plot"
	"github.com/cnlab/cnlab/stats"
)

// costPanel is pn's lines that differ from a line of the same series only
// by c.Axis's value, each as its cost against that line with c.Base: at
// each x, every sample's change from the base line's median, in percent
// of it, positive when worse (less of a metric where more is better,
// more of one where less is). Nil when the axis does not name pn's lines
// or no line has a base.
func costPanel(pn *Panel, pts []*results.PointResult, sdims []dim, c *results.Cost) *Panel {
	i := slices.IndexFunc(sdims, func(d dim) bool { return d.name == c.Axis })
	if i < 0 {
		return nil
	}
	ad := sdims[i]
	rest := slices.Delete(slices.Clone(sdims), i, i+1)
	byID := map[string]*results.PointResult{}
	rank := map[string]int{} // the axis's values in the matrix's order
	for _, p := range pts {
		byID[p.ID] = p
		if _, ok := rank[ad.value(p)]; !ok {
			rank[ad.value(p)] = len(rank)
		}
	}
	// Each curve's line without the axis, and its value of the axis.
	type line struct{ group, value string }
	of := map[*Curve]line{}
	bases := map[string]*Curve{}
	var groups []string
	for _, cv := range pn.Curves {
		p := byID[cv.Points[cv.X[0]][0]]
		g := seriesName(p, rest)
		if strings.HasSuffix(cv.Series, " ["+p.Sweep+"]") {
			g += " [" + p.Sweep + "]"
		}
		of[cv] = line{g, ad.value(p)}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if ad.value(p) == c.Base {
			bases[g] = cv
		}
	}
	sign := 1.0 // lower is better, or neither: the increase
	if pn.Metric.Better > 0 {
		sign = -1 // higher is better: the decrease
	}
	cp := *pn
	cp.Metric = results.Metric{Name: pn.Metric.Name, Label: fmt.Sprintf("cost in %s (%% of %s)", pn.Metric.Label, ad.show(c.Base)), Unit: "%", Better: -1}
	cp.Curves, cp.Groups, cp.Cost = nil, nil, c
	for _, g := range groups {
		b := bases[g]
		if b == nil {
			continue
		}
		var lines []*Curve
		for _, cv := range pn.Curves {
			if cv != b && of[cv].group == g {
				lines = append(lines, cv)
			}
		}
		slices.SortStableFunc(lines, func(x, y *Curve) int { return rank[of[x].value] - rank[of[y].value] })
		for _, cv := range lines {
			rc := &Curve{Series: cv.Series, Samples: map[float64][]float64{}, Points: map[float64][]string{}}
			for _, x := range cv.X {
				ref := b.summary(x).Median
				if len(b.Samples[x]) == 0 || ref == 0 {
					continue
				}
				rc.X = append(rc.X, x)
				for _, v := range cv.Samples[x] {
					rc.Samples[x] = append(rc.Samples[x], sign*100*(v-ref)/ref)
				}
				rc.Points[x] = cv.Points[x]
			}
			if len(rc.X) > 0 {
				cp.Curves = append(cp.Curves, rc)
				cp.Groups = append(cp.Groups, [2]string{g, ad.show(of[cv].value)})
			}
		}
	}
	if len(cp.Curves) == 0 {
		return nil
	}
	return &cp
}

// costFigure draws a cost panel: with nothing on the x axis, a group of
// bars per line (the datapaths), a bar per value of the axis (drops,
// all); otherwise the lines of sweepFigure. Both with their medians and
// 95% CIs, not cut at zero (a cost may be negative), and the band
// someone else reported, shaded between dashed lines and labelled.
func costFigure(pn *Panel) Figure {
	var f *plot.Figure
	if pn.XDim != "" {
		f = sweepFigure(pn, nil).Plot
	} else {
		f = &plot.Figure{ID: pn.ID, Kind: plot.Bars, Title: pn.Metric.Label + " — " + pn.ctx(), YLabel: pn.Metric.Label, Scale: 2}
		var values []string
		for _, gv := range pn.Groups {
			if !slices.Contains(f.Categories, gv[0]) {
				f.Categories = append(f.Categories, gv[0])
			}
			if !slices.Contains(values, gv[1]) {
				values = append(values, gv[1])
			}
		}
		for _, v := range values {
			s := plot.Series{Name: v}
			for i, cv := range pn.Curves {
				if pn.Groups[i][1] == v {
					s.Points = append(s.Points, pn.ciPoint(float64(slices.Index(f.Categories, pn.Groups[i][0])), cv.summary(cv.X[0])))
				}
			}
			f.Series = append(f.Series, s)
		}
	}
	f.YFromData = true
	caption := fmt.Sprintf("Cost of each value of %s against %s of the same line: every sample's change from the median of %s at the same point, in percent of it, positive when worse; median and 95%% confidence interval of the mean (Student's t; the median of %s is taken as exact).",
		pn.Cost.Axis, pn.Cost.Base, pn.Cost.Base, pn.Cost.Base)
	if b := pn.Cost.Reference; b != nil {
		f.HBands = append(f.HBands, plot.Band{From: b.From, To: b.To, Label: b.Label})
		caption += fmt.Sprintf(" Shaded between dashed lines: %s, from %g%% to %g%%, for comparison, not measured here.", b.Label, b.From, b.To)
	}
	f.Note = caption
	return Figure{ID: pn.ID, Kind: "cost", Title: f.Title, Caption: caption, Plot: f}
}

// ciPoint is a median at x with its 95% CI, cut at the metric's possible
// range unless the panel's values are costs, which may be negative.
func (pn *Panel) ciPoint(x float64, s stats.Summary) plot.Point {
	if pn.Cost == nil {
		return ciPoint(pn.Metric, x, s)
	}
	p := plot.Point{X: x, Y: s.Median}
	if s.N > 1 {
		p.YLow, p.YHigh = s.MeanCI.Lo, s.MeanCI.Hi
	}
	return p
}
