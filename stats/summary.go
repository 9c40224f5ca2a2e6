package stats

import (
	"math"
	"slices"
)

// Interval is a closed interval [Lo, Hi], a confidence interval.
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Contains reports whether v lies in [Lo, Hi].
func (iv Interval) Contains(v float64) bool { return iv.Lo <= v && v <= iv.Hi }

// Summary describes one sample, such as the throughputs of the repeated
// runs of one measurement.
type Summary struct {
	// N is the number of values; when it is 0 every other field is 0.
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	// Stdev is the sample standard deviation (divisor N−1); 0 for N = 1.
	Stdev float64 `json:"stdev"`
	// CV is the coefficient of variation Stdev/|Mean|; 0 when Mean is 0.
	CV float64 `json:"cv"`
	// MeanCI is the 95% confidence interval of the mean, Mean ±
	// t(0.975, N−1)·Stdev/√N; for N = 1 it is the value itself.
	MeanCI Interval `json:"mean_ci"`
	Min    float64  `json:"min"`
	Max    float64  `json:"max"`
}

// Summarize returns the Summary of xs, which must hold finite values. It
// does not modify xs.
func Summarize(xs []float64) Summary {
	n := len(xs)
	if n == 0 {
		return Summary{}
	}
	s := Summary{N: n, Median: Median(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
	if s.Min == s.Max {
		// All values equal: say so exactly, without rounding noise.
		s.Mean = s.Min
		s.MeanCI = Interval{s.Min, s.Min}
		return s
	}
	s.Mean = mean(xs)
	var ss float64
	for _, x := range xs {
		d := x - s.Mean
		ss += d * d
	}
	s.Stdev = math.Sqrt(ss / float64(n-1))
	if s.Mean != 0 {
		s.CV = s.Stdev / math.Abs(s.Mean)
	}
	half := TQuantile975(n-1) * s.Stdev / math.Sqrt(float64(n))
	s.MeanCI = Interval{s.Mean - half, s.Mean + half}
	return s
}

// Median returns the median of xs (the mean of the two middle values when
// len(xs) is even), or NaN when xs is empty. It does not modify xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedMedian(s)
}

// sortedMedian is the median of a sorted, non-empty slice.
func sortedMedian(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1] + (s[n/2]-s[n/2-1])/2
}

// mean is the arithmetic mean of a non-empty slice.
func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// quantileSorted is the p-quantile (0 ≤ p ≤ 1) of a sorted, non-empty
// slice, interpolating linearly between order statistics (the default of
// R and NumPy).
func quantileSorted(s []float64, p float64) float64 {
	h := p * float64(len(s)-1)
	i := int(math.Floor(h))
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	if i < 0 {
		return s[0]
	}
	return s[i] + (h-float64(i))*(s[i+1]-s[i])
}
