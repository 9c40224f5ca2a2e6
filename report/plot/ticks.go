package plot

import (
	"math"
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
