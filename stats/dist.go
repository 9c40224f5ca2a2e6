package stats

import "math"

// t975 holds the two-sided 95% critical values of Student's t,
// t(0.975, df) for df = 1..30 (index df−1), to six decimals.
var t975 = [30]float64{
	12.706205, 4.302653, 3.182446, 2.776445, 2.570582,
	2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
	2.200985, 2.178813, 2.160369, 2.144787, 2.131450,
	2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
	2.079614, 2.073873, 2.068658, 2.063899, 2.059539,
	2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
}

// TQuantile975 returns the two-sided 95% critical value of Student's t
// with df degrees of freedom, the t such that P(T ≤ t) = 0.975: from a
// table for df 1..30, and from TQuantile beyond. It is NaN for df < 1.
func TQuantile975(df int) float64 {
	switch {
	case df < 1:
		return math.NaN()
	case df <= len(t975):
		return t975[df-1]
	}
	return TQuantile(0.975, float64(df))
}

// normalCDF returns P(Z ≤ z) for a standard normal Z.
func normalCDF(z float64) float64 {
	return 0.5 * math.Erfc(-z/math.Sqrt2)
}

// normalQuantile returns the z with P(Z ≤ z) = p for a standard normal
// Z; NaN unless 0 < p < 1.
func normalQuantile(p float64) float64 {
	if !(p > 0 && p < 1) {
		return math.NaN()
	}
	return -math.Sqrt2 * math.Erfcinv(2*p)
}

// TCDF returns P(T ≤ t) for Student's t with df > 0 degrees of freedom
// (df need not be an integer); NaN for df ≤ 0 or NaN arguments.
func TCDF(t, df float64) float64 {
	if !(df > 0) || math.IsNaN(t) {
		return math.NaN()
	}
	if math.IsInf(t, 0) {
		if t > 0 {
			return 1
		}
		return 0
	}
	// P(T > |t|) = I_x(df/2, 1/2)/2 with x = df/(df+t²).
	tail := 0.5 * regIncBeta(df/2, 0.5, df/(df+t*t))
	if t > 0 {
		return 1 - tail
	}
	return tail
}

// tSF2 is the two-sided tail P(|T| ≥ |t|), computed without the
// cancellation of 1 − TCDF.
func tSF2(t, df float64) float64 {
	if math.IsInf(t, 0) {
		return 0
	}
	return regIncBeta(df/2, 0.5, df/(df+t*t))
}

// TQuantile returns the t with P(T ≤ t) = p for Student's t with df > 0
// degrees of freedom (df need not be an integer); NaN unless 0 < p < 1
// and df > 0. It inverts the regularized incomplete beta function by
// bisection, to about 1e-12 relative; for df > 1e5 it uses the
// Cornish–Fisher expansion around the normal quantile instead.
func TQuantile(p, df float64) float64 {
	if !(p > 0 && p < 1) || !(df > 0) {
		return math.NaN()
	}
	if p == 0.5 {
		return 0
	}
	if p < 0.5 {
		return -TQuantile(1-p, df)
	}
	if df > 1e5 {
		return cornishFisherT(normalQuantile(p), df)
	}
	// Solve P(T > t) = q for t > 0; q is computed as 1−p, which is exact
	// enough for the p callers use.
	q := 1 - p
	upper := func(t float64) float64 { return 0.5 * regIncBeta(df/2, 0.5, df/(df+t*t)) }
	lo, hi := 0.0, 1.0
	for upper(hi) > q {
		lo = hi
		hi *= 2
		if math.IsInf(hi, 0) {
			return math.Inf(1)
		}
	}
	for i := 0; i < 200 && hi-lo > 1e-13*hi; i++ {
		mid := lo + (hi-lo)/2
		if upper(mid) > q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// cornishFisherT expands the t quantile in powers of 1/df around the
// normal quantile z (Abramowitz & Stegun 26.7.5); for df > 1e5 the first
// omitted term is below 1e-20.
func cornishFisherT(z, df float64) float64 {
	z2 := z * z
	g1 := (z2 + 1) * z / 4
	g2 := ((5*z2+16)*z2 + 3) * z / 96
	g3 := (((3*z2+19)*z2+17)*z2 - 15) * z / 384
	return z + g1/df + g2/(df*df) + g3/(df*df*df)
}

// FCDF returns P(F ≤ f) for the F distribution with d1 and d2 degrees of
// freedom; NaN unless d1, d2 > 0.
func FCDF(f, d1, d2 float64) float64 {
	if !(d1 > 0 && d2 > 0) || math.IsNaN(f) {
		return math.NaN()
	}
	if f <= 0 {
		return 0
	}
	if math.IsInf(f, 1) {
		return 1
	}
	return regIncBeta(d1/2, d2/2, d1*f/(d1*f+d2))
}

// FSurvival returns P(F > f), the p-value of an F statistic, computed
// directly rather than as 1 − FCDF so small p-values keep their digits;
// NaN unless d1, d2 > 0.
func FSurvival(f, d1, d2 float64) float64 {
	if !(d1 > 0 && d2 > 0) || math.IsNaN(f) {
		return math.NaN()
	}
	if f <= 0 {
		return 1
	}
	if math.IsInf(f, 1) {
		return 0
	}
	return regIncBeta(d2/2, d1/2, d2/(d2+d1*f))
}

// regIncBeta is I_x(a, b) by the continued fraction of Numerical Recipes
// (§6.4); a, b > 0, evaluated with the modified Lentz method on whichever side of
// the mean converges fast.
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the continued fraction of the incomplete beta function.
func betaCF(a, b, x float64) float64 {
	const (
		tiny  = 1e-300
		eps   = 1e-16
		iters = 100000
	)
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= iters; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
