package stats

import "math"

// ChiSquareSurvival returns P(X > x) for a χ² variable X with df > 0
// degrees of freedom (df need not be an integer): Q(df/2, x/2), Q the
// regularized upper incomplete gamma function. It is NaN unless df > 0,
// and 1 for x ≤ 0.
func ChiSquareSurvival(x, df float64) float64 {
	if !(df > 0) || math.IsNaN(x) {
		return math.NaN()
	}
	return upperGamma(df/2, x/2)
}

// ChiSquareCritical returns the value a χ² statistic with df ≥ 1 degrees
// of freedom exceeds with probability alpha: the root of
// ChiSquareSurvival(x, df) = alpha, by bisection. It is NaN unless df ≥ 1
// and 0 < alpha < 1.
func ChiSquareCritical(df int, alpha float64) float64 {
	if df < 1 || !(alpha > 0 && alpha < 1) {
		return math.NaN()
	}
	lo, hi := 0.0, 100.0+10*float64(df)
	for range 200 {
		mid := (lo + hi) / 2
		if upperGamma(float64(df)/2, mid/2) > alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// upperGamma is Q(a, x) = Γ(a, x)/Γ(a) for a > 0: a series below a+1, a
// continued fraction (modified Lentz) above, as Numerical Recipes' gammq
// (§6.2).
func upperGamma(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	front := math.Exp(-x + a*math.Log(x) - lg)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for n := a + 1; term > sum*1e-17; n++ {
			term *= x / n
			sum += term
		}
		return 1 - front*sum
	}
	const tiny = 1e-300
	b := x + 1 - a
	c, d := 1/tiny, 1/b
	h := d
	for i := 1.0; i < 10000; i++ {
		an := -i * (i - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		delta := d * c
		h *= delta
		if math.Abs(delta-1) < 1e-16 {
			break
		}
	}
	return front * h
}
