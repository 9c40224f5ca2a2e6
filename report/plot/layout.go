package plot

import (
	"math"
	"strconv"
)

// Look: sizes in CSS pixels and colours.
const (
	pad         = 14.0 // outer margin
	titleSize   = 16.0
	labelSize   = 13.0
	tickSize    = 11.5
	legendSize  = 12.0
	noteSize    = 11.0
	refSize     = 10.5
	tickLen     = 5.0
	markerR     = 4.0
	lineWidth   = 2.0
	errWidth    = 1.2
	legendRowH  = 18.0
	legendLineW = 28.0
	legendBoxW  = 13.0
	lineHeight  = 1.25 // times the font size
)

var (
	white    = rgba{255, 255, 255, 255}
	textCol  = mustHex("#222222")
	tickCol  = mustHex("#444444")
	axisCol  = mustHex("#333333")
	gridCol  = mustHex("#e5e5e5")
	zeroCol  = mustHex("#aaaaaa")
	refCol   = mustHex("#777777")
	noteCol  = mustHex("#555555")
	faintCol = mustHex("#888888")
	barErr   = mustHex("#222222")
	labelBg  = rgba{255, 255, 255, 204} // translucent white behind labels in the plot
	bandCol  = rgba{119, 119, 119, 38}  // a reference band: translucent grey
)

var (
	dashSeries = []float64{7, 4}
	dashRef    = []float64{4, 3}
)

// axis maps data values to pixels along one direction.
type axis struct {
	lo, hi     float64 // data range shown
	p0, p1     float64 // pixel positions of lo and hi
	ticks      []float64
	labels     []string
	step       float64
	categories bool
	log        bool      // logarithmic: px maps log10(v)
	minor      []float64 // unlabelled ticks (a log axis's 2–9 × 10^k)
}

func (a *axis) px(v float64) float64 {
	if a.log {
		return a.p0 + (math.Log10(v)-math.Log10(a.lo))/(math.Log10(a.hi)-math.Log10(a.lo))*(a.p1-a.p0)
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// seriesInfo is a series with its finite points and its look.
type seriesInfo struct {
	s     *Series
	pts   []Point
	color rgba
	shape markerShape
}

type legendEntry struct {
	name string
	si   *seriesInfo
}

// dataRange collects finite values.
type dataRange struct {
	lo, hi float64
	n      int
}

func (r *dataRange) add(v float64) {
	if !finite(v) {
		return
	}
	if r.n == 0 || v < r.lo {
		r.lo = v
	}
	if r.n == 0 || v > r.hi {
		r.hi = v
	}
	r.n++
}

// padEqual turns a zero-width range into a sensible one.
func padEqual(lo, hi float64) (float64, float64) {
	if lo < hi {
		return lo, hi
	}
	if lo == 0 {
		return 0, 1
	}
	d := math.Abs(lo) * 0.1
	return lo - d, hi + d
}

func (f *Figure) categories() []string {
	if len(f.Categories) > 0 {
		return f.Categories
	}
	if f.Kind != Bars {
		return nil
	}
	n := 0
	for _, s := range f.Series {
		for _, p := range s.Points {
			if finite(p.X) && p.X >= 0 && p.X == math.Trunc(p.X) && p.X < 1000 {
				n = max(n, int(p.X)+1)
			}
		}
	}
	cats := make([]string, n)
	for i := range cats {
		cats[i] = strconv.Itoa(i)
	}
	return cats
}

func (f *Figure) layout(fs *fontSet) (*drawing, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	W, H := float64(defaultWidth), float64(defaultHeight)
	if f.Width != 0 {
		W = float64(f.Width)
	}
	if f.Height != 0 {
		H = float64(f.Height)
	}
	d := &drawing{w: W, h: H, id: f.ID, title: f.Title, desc: f.Note}
	d.rect("background", 0, 0, W, H, white, rgba{}, 0)

	cats := f.categories()
	bars := f.Kind == Bars
	xlog := f.LogX()

	// Series: finite points and look.
	infos := make([]*seriesInfo, len(f.Series))
	auto := 0
	var xr, yr dataRange
	for i := range f.Series {
		s := &f.Series[i]
		// shapes shift by one per palette cycle, so colour+shape pairs stay
		// unique well past 8 series
		si := &seriesInfo{s: s, shape: markerShape((auto + auto/len(palette)) % int(numMarkers))}
		if c, ok := parseHex(s.Color); ok && s.Color != "" {
			si.color = c
		} else {
			si.color = mustHex(PaletteColor(auto))
			auto++
		}
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			if bars && (p.X < 0 || p.X != math.Trunc(p.X) || int(p.X) >= len(cats)) {
				continue
			}
			si.pts = append(si.pts, p)
			xr.add(p.X)
			yr.add(p.Y)
			if p.HasErr() {
				yr.add(p.YLow)
				yr.add(p.YHigh)
			}
		}
		infos[i] = si
	}
	hasData := yr.n > 0
	for _, r := range f.HLines {
		yr.add(r.Value)
	}
	for _, b := range f.HBands {
		yr.add(b.From)
		yr.add(b.To)
	}
	if cats == nil {
		for _, r := range f.VLines {
			xr.add(r.Value)
		}
	}

	// Y data range.
	ylo, yhi := 0.0, 1.0
	zeroForced := !f.YFromData || bars
	if yr.n > 0 {
		ylo, yhi = yr.lo, yr.hi
		if zeroForced {
			ylo, yhi = math.Min(ylo, 0), math.Max(yhi, 0)
		}
		ylo, yhi = padEqual(ylo, yhi)
	}
	// X data range (numeric axes).
	xlo, xhi := 0.0, 1.0
	if xr.n > 0 {
		xlo, xhi = padEqual(xr.lo, xr.hi)
	}

	// Legend entries.
	var entries []legendEntry
	maxNameW := math.Min(220, W*0.28)
	var names []string
	for _, si := range infos {
		if si.s.Name == "" {
			continue
		}
		names = append(names, si.s.Name)
		entries = append(entries, legendEntry{si: si})
	}
	for i, n := range legendNames(fs, names, maxNameW) {
		entries[i].name = n
	}
	sampleW := legendLineW
	if bars {
		sampleW = legendBoxW
	}
	nameW := 0.0
	for _, e := range entries {
		nameW = math.Max(nameW, fs.width(e.name, legendSize, false))
	}
	legendRightW := 8 + sampleW + 6 + nameW + 4

	// Title and note.
	titleLines := fs.wrapBalanced(f.Title, titleSize, true, W-2*pad, 2)
	noteLines := fs.wrap(f.Note, noteSize, false, W-2*pad, 3)
	top := pad + float64(len(titleLines))*titleSize*lineHeight
	if len(titleLines) > 0 {
		top += 8
	} else {
		top += 4
	}
	noteH := 0.0
	if len(noteLines) > 0 {
		noteH = float64(len(noteLines))*noteSize*lineHeight + 6
	}
	xlabelH := 0.0
	if f.XLabel != "" {
		xlabelH = labelSize*lineHeight + 4
	}
	ylabelW := 0.0
	if f.YLabel != "" {
		ylabelW = labelSize*lineHeight + 6
	}

	placement := f.Legend
	if len(entries) == 0 {
		placement = LegendNone
	}
	if placement == LegendAuto {
		placement = LegendRight
		estPlotH := H - top - noteH - xlabelH - 40 - pad
		if legendRightW > W*0.3 || float64(len(entries))*legendRowH > estPlotH {
			placement = LegendBelow
		}
	}
	if placement == LegendBelow {
		// Below the plot a name has up to half the width (two a row), not
		// the right legend's column: long names (a combined report's
		// "kube-proxy iptables (real, cluster), measured Service last")
		// keep the part that tells them apart.
		for i, n := range legendNames(fs, names, math.Max(maxNameW, W*0.46-sampleW-24)) {
			entries[i].name = n
		}
	}
	// Below-legend rows (flow layout, computed once: independent of plot).
	type slot struct {
		e    legendEntry
		x, w float64
		row  int
	}
	var belowSlots []slot
	belowRows := 0
	if placement == LegendBelow {
		avail := W - 2*pad
		var rowSlots []slot
		rowW := 0.0
		flush := func() {
			off := pad + (avail-rowW)/2
			for _, s := range rowSlots {
				s.x += off
				belowSlots = append(belowSlots, s)
			}
			rowSlots, rowW = nil, 0
			belowRows++
		}
		for _, e := range entries {
			w := sampleW + 6 + fs.width(e.name, legendSize, false)
			gap := 0.0
			if len(rowSlots) > 0 {
				gap = 18
			}
			if len(rowSlots) > 0 && rowW+gap+w > avail {
				flush()
				gap = 0
			}
			rowSlots = append(rowSlots, slot{e: e, x: rowW + gap, w: w, row: belowRows})
			rowW += gap + w
		}
		if len(rowSlots) > 0 {
			flush()
		}
	}
	legendBelowH := 0.0
	if placement == LegendBelow {
		legendBelowH = float64(belowRows)*legendRowH + 6
	}

	// Iterate the margins: y tick labels set the left margin, x tick labels
	// (which depend on the plot width) set the bottom margin.
	var xa, ya axis
	var left, right, bottom float64
	var catLines [][]string
	tickLines := 1
	rightExtra := 8.0
	for iter := 0; iter < 4; iter++ {
		tickLH := tickSize * lineHeight
		bottom = pad + noteH + legendBelowH + xlabelH + float64(tickLines)*tickLH + tickLen + 4
		plotH := math.Max(40, H-top-bottom)

		// Y axis.
		ya = axis{p0: top + plotH, p1: top}
		target := int(math.Round(plotH / 55))
		target = max(3, min(target, 10))
		if f.YLimits.set() {
			ya.lo, ya.hi = f.YLimits.Min, f.YLimits.Max
			_, _, ya.step, ya.ticks = niceTicks(ya.lo, ya.hi, target, false)
		} else {
			ya.lo, ya.hi, ya.step, ya.ticks = niceTicks(ylo, yhi, target, true)
			// A small margin keeps extreme markers off the frame, except at
			// a forced zero baseline.
			m := (ya.hi - ya.lo) * 0.02
			if !(ya.lo == 0 && zeroForced) {
				ya.lo -= m
			}
			if !(ya.hi == 0 && zeroForced) {
				ya.hi += m
			}
		}
		ya.labels = formatTicks(ya.ticks, ya.step)
		ytw := fs.maxWidth(ya.labels, tickSize, false)

		left = pad + ylabelW + ytw + tickLen + 4
		right = pad + rightExtra
		if placement == LegendRight {
			right = pad + math.Max(legendRightW+10, rightExtra)
		}
		plotW := math.Max(60, W-left-right)
		xa = axis{p0: left, p1: left + plotW}

		// X axis.
		needLines := 1
		newRightExtra := 8.0
		if cats != nil {
			xa.categories = true
			xa.lo, xa.hi = -0.5, float64(len(cats))-0.5
			if len(cats) == 0 {
				xa.lo, xa.hi = -0.5, 0.5
			}
			slotW := plotW / math.Max(1, float64(len(cats)))
			catLines = make([][]string, len(cats))
			xa.ticks = nil
			for i, c := range cats {
				catLines[i] = fs.wrapBalanced(c, tickSize, false, math.Max(slotW-6, 12), 2)
				needLines = max(needLines, len(catLines[i]))
				xa.ticks = append(xa.ticks, float64(i))
			}
		} else if xlog {
			xa.log = true
			if f.XLimits.set() {
				xa.lo, xa.hi = f.XLimits.Min, f.XLimits.Max
			} else {
				// The data range and a margin, in decades: the axis is not
				// widened to whole powers of ten (3 to 5,000 would take
				// 1 to 10k and waste a third of the width).
				l0, l1 := math.Log10(xlo), math.Log10(xhi)
				m := (l1 - l0) * 0.03
				xa.lo, xa.hi = math.Pow(10, l0-m), math.Pow(10, l1+m)
			}
			xa.ticks, xa.labels, xa.minor = logTicks(xa.lo, xa.hi, plotW, func(s string) float64 { return fs.width(s, tickSize, false) })
			if n := len(xa.labels); n > 0 {
				over := fs.width(xa.labels[n-1], tickSize, false)/2 - (xa.p1 - xa.px(xa.ticks[n-1]))
				newRightExtra = math.Max(8, over+2)
			}
		} else {
			target := int(math.Round(plotW / 85))
			target = max(2, min(target, 12))
			for ; ; target-- {
				if f.XLimits.set() {
					xa.lo, xa.hi = f.XLimits.Min, f.XLimits.Max
					_, _, xa.step, xa.ticks = niceTicks(xa.lo, xa.hi, target, false)
				} else {
					var tlo, thi float64
					tlo, thi, xa.step, xa.ticks = niceTicks(xlo, xhi, target, true)
					m := (thi - tlo) * 0.02
					xa.lo, xa.hi = tlo-m, thi+m
				}
				xa.labels = formatTicks(xa.ticks, xa.step)
				spacing := plotW * xa.step / (xa.hi - xa.lo)
				if fs.maxWidth(xa.labels, tickSize, false)+10 <= spacing || target <= 2 {
					break
				}
			}
			if n := len(xa.labels); n > 0 {
				over := fs.width(xa.labels[n-1], tickSize, false)/2 - (xa.p1 - xa.px(xa.ticks[n-1]))
				newRightExtra = math.Max(8, over+2)
			}
		}
		// tickLines only grows, so this settles; the last pass keeps
		// whatever it computed.
		if (needLines <= tickLines && math.Abs(newRightExtra-rightExtra) < 0.5) || iter == 3 {
			break
		}
		tickLines, rightExtra = max(tickLines, needLines), newRightExtra
	}

	d.xa, d.ya = xa, ya
	plotL, plotR := xa.p0, xa.p1
	plotT, plotB := ya.p1, ya.p0

	// Gridlines and the zero line.
	for _, t := range ya.ticks {
		y := crisp(ya.px(t), 1)
		d.line("grid", plotL, y, plotR, y, gridCol, 1, nil)
	}
	if !xa.categories {
		for _, t := range xa.ticks {
			x := crisp(xa.px(t), 1)
			d.line("grid", x, plotT, x, plotB, gridCol, 1, nil)
		}
	}
	if ya.lo < 0 && ya.hi > 0 {
		y := crisp(ya.px(0), 1)
		d.line("zero", plotL, y, plotR, y, zeroCol, 1, nil)
	}

	// Reference bands and lines (under the data).
	for _, b := range f.HBands {
		if !finite(b.From) || !finite(b.To) || b.From > b.To || b.To < ya.lo || b.From > ya.hi {
			continue
		}
		yTop, yBot := crisp(ya.px(math.Min(b.To, ya.hi)), 1), crisp(ya.px(math.Max(b.From, ya.lo)), 1)
		d.rect("refband", plotL, yTop, plotR-plotL, yBot-yTop, bandCol, rgba{}, 0)
		for _, v := range []float64{b.From, b.To} {
			if v >= ya.lo && v <= ya.hi {
				y := crisp(ya.px(v), 1)
				d.line("refband-edge", plotL, y, plotR, y, refCol, 1, dashRef)
			}
		}
		if b.Label != "" {
			lbl := fs.truncate(b.Label, refSize, false, (plotR-plotL)*0.6)
			ty := yTop + refSize + 3
			if yTop-refSize-4 >= plotT && yBot-yTop < refSize+6 {
				ty = yTop - 4 // a thin band: above it
			}
			tw := fs.width(lbl, refSize, false)
			d.rect("refband-label-bg", plotR-4-tw-2, ty-capHeight(refSize)-2, tw+4, capHeight(refSize)+4, labelBg, rgba{}, 0)
			d.text("refband-label", lbl, plotR-4, ty, refSize, anchorEnd, noteCol, false, false)
		}
	}
	for _, r := range f.HLines {
		if !finite(r.Value) || r.Value < ya.lo || r.Value > ya.hi {
			continue
		}
		y := crisp(ya.px(r.Value), 1)
		d.line("refline", plotL, y, plotR, y, refCol, 1, dashRef)
		lbl := r.Label
		if lbl == "" {
			lbl = formatValue(r.Value)
		}
		lbl = fs.truncate(lbl, refSize, false, (plotR-plotL)*0.6)
		ty := y - 4
		if ty-refSize < plotT {
			ty = y + refSize + 3
		}
		tw := fs.width(lbl, refSize, false)
		d.rect("refline-label-bg", plotR-4-tw-2, ty-capHeight(refSize)-2, tw+4, capHeight(refSize)+4, labelBg, rgba{}, 0)
		d.text("refline-label", lbl, plotR-4, ty, refSize, anchorEnd, noteCol, false, false)
	}
	for _, r := range f.VLines {
		if !finite(r.Value) || r.Value < xa.lo || r.Value > xa.hi {
			continue
		}
		x := crisp(xa.px(r.Value), 1)
		d.line("refline", x, plotT, x, plotB, refCol, 1, dashRef)
		lbl := r.Label
		if lbl == "" {
			lbl = formatValue(r.Value)
		}
		a, tx := anchorStart, x+4
		if x > (plotL+plotR)/2 {
			a, tx = anchorEnd, x-4
		}
		lbl = fs.truncate(lbl, refSize, false, (plotR-plotL)*0.45)
		tw := fs.width(lbl, refSize, false)
		bgx := tx - 2
		if a == anchorEnd {
			bgx = tx - tw - 2
		}
		d.rect("refline-label-bg", bgx, plotT+refSize+3-capHeight(refSize)-2, tw+4, capHeight(refSize)+4, labelBg, rgba{}, 0)
		d.text("refline-label", lbl, tx, plotT+refSize+3, refSize, a, noteCol, false, false)
	}

	// Axes (spines) and ticks: under the markers so they stay whole, over
	// the bars so the baseline stays visible.
	bx := crisp(plotL, 1)
	by := crisp(plotB, 1)
	drawAxes := func() {
		d.line("axis", bx, plotT, bx, by, axisCol, 1, nil)
		d.line("axis", bx, by, plotR, by, axisCol, 1, nil)
		for _, t := range ya.ticks {
			y := crisp(ya.px(t), 1)
			d.line("tick", bx-tickLen, y, bx, y, axisCol, 1, nil)
		}
		for _, t := range xa.ticks {
			if !bars {
				x := crisp(xa.px(t), 1)
				d.line("tick", x, by, x, by+tickLen, axisCol, 1, nil)
			}
		}
		for _, t := range xa.minor {
			x := crisp(xa.px(t), 1)
			d.line("tick-minor", x, by, x, by+tickLen*0.6, axisCol, 1, nil)
		}
	}
	if !bars {
		drawAxes()
	}

	// Data.
	clipX0, clipX1 := plotL, plotR
	clipY0, clipY1 := plotT, plotB
	inPlot := func(p pt) bool {
		return p.x >= clipX0-0.5 && p.x <= clipX1+0.5 && p.y >= clipY0-0.5 && p.y <= clipY1+0.5
	}
	clampY := func(v float64) float64 { return math.Max(ya.lo, math.Min(ya.hi, v)) }
	errBar := func(x, lo, hi, capW float64, col rgba) {
		ylo, yhi := clampY(lo), clampY(hi)
		if x < clipX0-0.5 || x > clipX1+0.5 || ylo == yhi {
			return
		}
		sub := [][]pt{{{x, ya.px(ylo)}, {x, ya.px(yhi)}}}
		if lo >= ya.lo {
			sub = append(sub, []pt{{x - capW/2, ya.px(lo)}, {x + capW/2, ya.px(lo)}})
		}
		if hi <= ya.hi {
			sub = append(sub, []pt{{x - capW/2, ya.px(hi)}, {x + capW/2, ya.px(hi)}})
		}
		d.path("errorbar", sub, col, errWidth, nil)
	}

	if bars {
		n, m := len(cats), len(infos)
		if n > 0 && m > 0 {
			slotW := (plotR - plotL) / float64(n)
			groupW := slotW * 0.8
			barW := groupW / float64(m)
			inset := math.Min(1.5, barW*0.1)
			base := clampY(0)
			for j, si := range infos {
				for _, p := range si.pts {
					i := int(p.X)
					x0 := xa.px(float64(i)) - groupW/2 + float64(j)*barW
					y0, y1 := ya.px(base), ya.px(clampY(p.Y))
					if y1 < y0 {
						y0, y1 = y1, y0
					}
					switch {
					case y1-y0 > 0 && si.s.Style == Reference:
						d.rect("bar", x0+inset+1, y0, barW-2*inset-2, y1-y0, white, si.color, 2)
					case y1-y0 > 0:
						d.rect("bar", x0+inset, y0, barW-2*inset, y1-y0, si.color, rgba{}, 0)
					}
				}
			}
			for j, si := range infos {
				for _, p := range si.pts {
					if p.HasErr() {
						x := xa.px(float64(int(p.X))) - groupW/2 + (float64(j)+0.5)*barW
						errBar(x, p.YLow, p.YHigh, math.Min(10, barW*0.5), barErr)
					}
				}
			}
		}
	} else {
		for _, si := range infos {
			var line []pt
			for _, p := range si.pts {
				q := pt{xa.px(p.X), ya.px(p.Y)}
				line = append(line, q)
				if p.HasErr() {
					errBar(q.x, p.YLow, p.YHigh, 8, si.color)
				}
			}
			style := si.s.Style
			if style != MarkersOnly && len(line) > 1 {
				dash := []float64(nil)
				w := lineWidth
				if style == DashedLine || style == Reference {
					dash, w = dashSeries, 1.8
				}
				d.path("series-line", clipPolyline(line, clipX0, clipY0, clipX1, clipY1), si.color, w, dash)
			}
			showMarkers := style == LineMarkers || style == MarkersOnly || style == Reference || len(line) == 1
			if showMarkers {
				for _, q := range line {
					switch {
					case !inPlot(q):
					case style == Reference:
						d.hollowMarker("marker", si.shape, q.x, q.y, markerR+0.5, si.color)
					default:
						d.marker("marker", si.shape, q.x, q.y, markerR, si.color)
					}
				}
			}
		}
	}
	if bars {
		drawAxes()
	}
	if !hasData {
		d.text("nodata", "no data", (plotL+plotR)/2, (plotT+plotB)/2+capHeight(14)/2, 14, anchorMiddle, faintCol, false, false)
	}

	// Tick labels.
	for i, t := range ya.ticks {
		y := crisp(ya.px(t), 1)
		d.text("tick-label", ya.labels[i], bx-tickLen-3, y+capHeight(tickSize)/2, tickSize, anchorEnd, tickCol, false, false)
	}
	tickBase := by + tickLen + 3 + tickSize*0.8
	for i, t := range xa.ticks {
		x := xa.px(t)
		if xa.categories {
			for k, l := range catLines[i] {
				d.text("tick-label", l, x, tickBase+float64(k)*tickSize*lineHeight, tickSize, anchorMiddle, tickCol, false, false)
			}
		} else {
			d.text("tick-label", xa.labels[i], x, tickBase, tickSize, anchorMiddle, tickCol, false, false)
		}
	}

	// Axis labels.
	xlabelBase := by + tickLen + 4 + float64(tickLines)*tickSize*lineHeight + labelSize*0.95
	if f.XLabel != "" {
		lbl := fs.truncate(f.XLabel, labelSize, false, W-2*pad)
		cx := (plotL + plotR) / 2
		hw := fs.width(lbl, labelSize, false) / 2
		cx = math.Max(pad+hw, math.Min(W-pad-hw, cx))
		d.text("xlabel", lbl, cx, xlabelBase, labelSize, anchorMiddle, textCol, false, false)
	}
	if f.YLabel != "" {
		lbl := fs.truncate(f.YLabel, labelSize, false, H-2*pad)
		cy := (plotT + plotB) / 2
		hw := fs.width(lbl, labelSize, false) / 2
		cy = math.Max(pad+hw, math.Min(H-pad-hw, cy))
		d.text("ylabel", lbl, pad+labelSize*0.95, cy, labelSize, anchorMiddle, textCol, false, true)
	}

	// Title.
	for i, l := range titleLines {
		d.text("title", l, W/2, pad+titleSize*0.95+float64(i)*titleSize*lineHeight, titleSize, anchorMiddle, textCol, true, false)
	}

	// Legend.
	drawEntry := func(e legendEntry, x, cy float64) {
		si := e.si
		switch {
		case bars && si.s.Style == Reference:
			d.rect("legend-swatch", x+1, cy-legendBoxW/2+1, legendBoxW-2, legendBoxW-2, white, si.color, 2)
		case bars:
			d.rect("legend-swatch", x, cy-legendBoxW/2, legendBoxW, legendBoxW, si.color, rgba{}, 0)
		default:
			style := si.s.Style
			if style != MarkersOnly {
				var dash []float64
				w := lineWidth
				if style == DashedLine || style == Reference {
					dash, w = dashSeries, 1.8
				}
				d.line("legend-line", x, cy, x+legendLineW, cy, si.color, w, dash)
			}
			switch style {
			case LineMarkers, MarkersOnly:
				d.marker("legend-marker", si.shape, x+legendLineW/2, cy, markerR, si.color)
			case Reference:
				d.hollowMarker("legend-marker", si.shape, x+legendLineW/2, cy, markerR+0.5, si.color)
			}
		}
		d.text("legend", e.name, x+sampleW+6, cy+capHeight(legendSize)/2, legendSize, anchorStart, textCol, false, false)
	}
	switch placement {
	case LegendRight:
		x := plotR + 18
		for i, e := range entries {
			drawEntry(e, x, plotT+4+legendRowH*(float64(i)+0.5))
		}
	case LegendBelow:
		y0 := xlabelBase + 8
		if f.XLabel == "" {
			y0 = by + tickLen + 4 + float64(tickLines)*tickSize*lineHeight + 4
		}
		for _, s := range belowSlots {
			drawEntry(s.e, s.x, y0+legendRowH*(float64(s.row)+0.5))
		}
	}

	// Note.
	for i, l := range noteLines {
		base := H - pad - float64(len(noteLines)-1-i)*noteSize*lineHeight
		d.text("note", l, pad, base, noteSize, anchorStart, noteCol, false, false)
	}
	return d, nil
}
