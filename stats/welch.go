package stats

import "math"

// Welch is Welch's two-sample t-test of a difference in means (unequal
// variances): the t statistic, the Welch–Satterthwaite degrees of freedom
// and the two-sided p. It needs two or more values on each side; p is NaN
// otherwise, or when both sides have no spread (p is then 0 if the means
// differ, 1 if not).
func Welch(a, b []float64) (t, df, p float64) {
	if len(a) < 2 || len(b) < 2 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	ma, mb := mean(a), mean(b)
	va, vb := variance(a, ma)/float64(len(a)), variance(b, mb)/float64(len(b))
	if va+vb == 0 {
		if ma == mb {
			return 0, math.Inf(1), 1
		}
		return math.Inf(sign(mb - ma)), math.Inf(1), 0
	}
	t = (mb - ma) / math.Sqrt(va+vb)
	df = (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	return t, df, tSF2(t, df)
}

// variance is the sample variance (n−1) of xs about their mean m.
func variance(xs []float64, m float64) float64 {
	var s float64
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return s / float64(len(xs)-1)
}

func sign(x float64) int {
	if x < 0 {
		return -1
	}
	return 1
}
