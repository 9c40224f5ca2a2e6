package plot

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// niceStep returns the smallest step of the form {1,2,5}×10^k that is at
// least raw (raw > 0).
func niceStep(raw float64) float64 {
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	f := raw / base
	switch {
	case f <= 1+1e-9:
		return base
	case f <= 2+1e-9:
		return 2 * base
	case f <= 5+1e-9:
		return 5 * base
	default:
		return 10 * base
	}
}

// clean rounds away floating-point noise (0.30000000000000004 → 0.3).
func clean(v float64) float64 {
	c, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	if err != nil {
		return v
	}
	if c == 0 {
		return 0 // no negative zero
	}
	return c
}

// niceTicks chooses about target+1 ticks with a 1-2-5 step for the data
// range [lo, hi] (lo < hi, both finite). With expand the range is widened to
// whole steps (the returned lo/hi are the first and last tick); otherwise the
// range is kept and only the ticks inside it are returned.
//
// Candidate steps around span/target are scored on how far their tick count
// is from target+1 and, when expanding, on how much of the axis the data
// covers; the lowest score wins (ties go to the larger step).
func niceTicks(lo, hi float64, target int, expand bool) (nlo, nhi, step float64, ticks []float64) {
	if target < 2 {
		target = 2
	}
	span := hi - lo
	raw := span / float64(target)
	const eps = 1e-9
	bounds := func(st float64) (float64, float64) {
		if expand {
			return math.Floor(lo/st + eps), math.Ceil(hi/st - eps)
		}
		return math.Ceil(lo/st - eps), math.Floor(hi/st + eps)
	}
	best, bestScore := 0.0, math.Inf(1)
	for st := niceStep(raw / 4); st <= raw*4; st = nextNice(st) {
		i0, i1 := bounds(st)
		n := i1 - i0 + 1
		score := math.Abs(n-float64(target+1)) / float64(target+1)
		if expand {
			score += 1 - span/((i1-i0)*st)
		} else if n < 2 {
			score += 1
		}
		if score <= bestScore+1e-9 {
			best, bestScore = st, score
		}
	}
	step = best
	i0, i1 := bounds(step)
	for i := i0; i <= i1; i++ {
		ticks = append(ticks, clean(i*step))
	}
	if expand {
		nlo, nhi = clean(i0*step), clean(i1*step)
	} else {
		nlo, nhi = lo, hi
	}
	return nlo, nhi, clean(step), ticks
}

// nextNice returns the 1-2-5 step after st.
func nextNice(st float64) float64 {
	return niceStep(st * 1.5)
}

type siPrefix struct {
	mult float64
	sym  string
}

var bigPrefixes = [...]siPrefix{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}}
var smallPrefixes = [...]siPrefix{{1e-6, "µ"}, {1e-9, "n"}, {1e-12, "p"}}

// decimalsFor returns how many decimals show a multiple of step exactly.
func decimalsFor(step float64) int {
	if step <= 0 || !finite(step) {
		return 0
	}
	d := int(math.Ceil(-math.Log10(step) - 1e-9))
	// steps like 0.25 (not produced by niceStep, but from Limits) need one more
	for d < 12 {
		scaled := step * math.Pow(10, float64(d))
		if math.Abs(scaled-math.Round(scaled)) < 1e-6*scaled {
			break
		}
		d++
	}
	return max(d, 0)
}

func fixedDec(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// formatTicks formats the tick values of one axis compactly: 0, 5, 10; 0.5;
// 1k, 10k, 2.5M; tiny values with µ/n/p prefixes. step is the tick spacing.
func formatTicks(ticks []float64, step float64) []string {
	out := make([]string, len(ticks))
	maxAbs := 0.0
	for _, t := range ticks {
		maxAbs = math.Max(maxAbs, math.Abs(t))
	}
	small := maxAbs > 0 && maxAbs < 1e-3 && step < 1e-4
	for i, t := range ticks {
		out[i] = formatTick(t, step, maxAbs, small)
	}
	return out
}

func formatTick(v, step, maxAbs float64, small bool) string {
	if math.Abs(v) < step*1e-6 || v == 0 {
		return "0"
	}
	av := math.Abs(v)
	if av >= 1e15 || maxAbs < 1e-12 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	if small {
		for _, p := range smallPrefixes {
			if maxAbs >= p.mult || p.sym == "p" {
				return fixedDec(v/p.mult, decimalsFor(step/p.mult)) + p.sym
			}
		}
	}
	for _, p := range bigPrefixes {
		if av >= p.mult {
			return fixedDec(v/p.mult, decimalsFor(step/p.mult)) + p.sym
		}
	}
	return fixedDec(v, decimalsFor(step))
}

// formatValue formats a single value compactly (used for reference line
// labels when the caller gives none).
func formatValue(v float64) string {
	if v == 0 {
		return "0"
	}
	av := math.Abs(v)
	step := math.Pow(10, math.Floor(math.Log10(av))-2)
	return formatTick(clean(v), step, av, av < 1e-3)
}

// LogX reports whether the figure's x axis is drawn logarithmic: XLog is
// set, the figure is a Lines figure without Categories, and every x it
// would draw (finite points, VLines, XLimits) is above zero, with at
// least one.
func (f *Figure) LogX() bool {
	if !f.XLog || f.Kind != Lines || len(f.Categories) > 0 {
		return false
	}
	if f.XLimits.set() {
		if f.XLimits.Min <= 0 {
			return false
		}
	}
	n := 0
	for _, s := range f.Series {
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			if p.X <= 0 {
				return false
			}
			n++
		}
	}
	for _, r := range f.VLines {
		if finite(r.Value) && r.Value <= 0 {
			return false
		}
	}
	return n > 0 || f.XLimits.set()
}

// LogSpace returns n ≥ 2 values from lo to hi (0 < lo < hi) evenly spaced
// in log x: the x at which to sample a curve drawn over a log axis, where
// values evenly spaced in x would crowd into its last decade. It returns
// nil when lo or hi is not positive and finite or n < 2.
func LogSpace(lo, hi float64, n int) []float64 {
	if !(lo > 0) || !(hi > 0) || !finite(lo) || !finite(hi) || n < 2 {
		return nil
	}
	l0, l1 := math.Log10(lo), math.Log10(hi)
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Pow(10, l0+(l1-l0)*float64(i)/float64(n-1))
	}
	out[0], out[n-1] = lo, hi // exact ends
	return out
}

// logLabel is the label of a tick of a log axis: 1, 10, 100, 1k, 10k, 1M;
// 0.1, 0.01; 100µ; 2, 20, 5k for the 2 and 5 ticks.
func logLabel(v float64) string {
	v = clean(v)
	step := clean(math.Pow(10, math.Floor(math.Log10(v)+1e-9)))
	return formatTick(v, step, v, v < 1e-3)
}

// logTicks chooses the ticks of a logarithmic axis showing [lo, hi]
// (0 < lo < hi) over plotW pixels; width measures a label. When the range
// holds two or more powers of ten, they are the labelled ticks (every
// stride-th one, the smallest stride whose labels do not collide) and the
// others, with 2–9 × 10^k when a decade is at least 40 px wide, are minor
// ticks. A narrower range gets the 1-2-5 ticks of a linear axis placed on
// the log scale, less any label that would collide with the one before it.
func logTicks(lo, hi, plotW float64, width func(string) float64) (ticks []float64, labels []string, minor []float64) {
	l0, l1 := math.Log10(lo), math.Log10(hi)
	perDecade := plotW / (l1 - l0)
	const eps = 1e-9
	k0, k1 := int(math.Ceil(l0-eps)), int(math.Floor(l1+eps))
	pow := func(k int) float64 { return clean(math.Pow(10, float64(k))) }
	if k1-k0+1 >= 2 {
		maxW := 0.0
		for k := k0; k <= k1; k++ {
			maxW = math.Max(maxW, width(logLabel(pow(k))))
		}
		// Strides are counted from 10^0, so that 1 keeps its label where
		// it is in range (1, 100, 10k rather than 10, 1k, 100k).
		on := func(k, s int) bool { return ((k%s)+s)%s == 0 }
		count := func(s int) int {
			n := 0
			for k := k0; k <= k1; k++ {
				if on(k, s) {
					n++
				}
			}
			return n
		}
		stride := 1
		for _, s := range []int{1, 2, 3, 4, 5, 10, 20, 50, 100} {
			if count(s) < 2 {
				break // keep two labels at least, even crowded
			}
			stride = s
			if maxW+10 <= perDecade*float64(s) {
				break
			}
		}
		for k := k0; k <= k1; k++ {
			if on(k, stride) {
				ticks = append(ticks, pow(k))
				labels = append(labels, logLabel(pow(k)))
			} else {
				minor = append(minor, pow(k))
			}
		}
		if stride == 1 && perDecade >= 40 {
			for k := k0 - 1; k <= k1; k++ {
				for m := 2; m <= 9; m++ {
					if v := clean(float64(m) * math.Pow(10, float64(k))); v >= lo && v <= hi {
						minor = append(minor, v)
					}
				}
			}
			sort.Float64s(minor)
		}
		return ticks, labels, minor
	}
	// Less than two decades: linear 1-2-5 ticks, on the log scale.
	target := max(2, min(12, int(math.Round(plotW/85))))
	_, _, step, lin := niceTicks(lo, hi, target, false)
	all := formatTicks(lin, step)
	px := func(v float64) float64 { return (math.Log10(v) - l0) * perDecade }
	lastRight := math.Inf(-1)
	for i, v := range lin {
		if v <= 0 {
			continue
		}
		w := width(all[i])
		if px(v)-w/2 < lastRight+6 {
			minor = append(minor, v)
			continue
		}
		ticks = append(ticks, v)
		labels = append(labels, all[i])
		lastRight = px(v) + w/2
	}
	return ticks, labels, minor
}
