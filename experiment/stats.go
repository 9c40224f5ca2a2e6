package experiment

import (
	"math"
	"sort"
)

// Summary describes the samples of one metric at one point.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	Stdev  float64 `json:"stdev"` // sample standard deviation (n-1)
	CV     float64 `json:"cv"`    // stdev / mean; 0 when the mean is 0
	CILow  float64 `json:"ci95Low"`
	CIHigh float64 `json:"ci95High"` // 95% confidence interval of the mean (Student's t)
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize computes a Summary. With one sample the stdev is 0 and the
// confidence interval is the sample itself: it cannot be estimated.
func Summarize(xs []float64) Summary {
	n := len(xs)
	if n == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(n)
	var ss float64
	for _, x := range s {
		ss += (x - mean) * (x - mean)
	}
	out := Summary{N: n, Median: median(s), Mean: mean, Min: s[0], Max: s[n-1], CILow: mean, CIHigh: mean}
	if n > 1 {
		out.Stdev = math.Sqrt(ss / float64(n-1))
		half := tQuantile975(n-1) * out.Stdev / math.Sqrt(float64(n))
		out.CILow, out.CIHigh = mean-half, mean+half
	}
	if mean != 0 {
		out.CV = out.Stdev / math.Abs(mean)
	}
	return out
}

// median of sorted values.
func median(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// t975 are the 0.975 quantiles of Student's t distribution for 1 to 30
// degrees of freedom.
var t975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// tQuantile975 is the two-sided 95% critical value of Student's t with df
// degrees of freedom; beyond the table, a series in 1/df around the
// normal's 1.96 (error below 0.001 for df > 30).
func tQuantile975(df int) float64 {
	if df < 1 {
		return math.NaN()
	}
	if df <= len(t975) {
		return t975[df-1]
	}
	d := float64(df)
	return 1.959964 + 2.37227/d + 2.82218/(d*d)
}
