package stats

import (
	"errors"
	"fmt"
	"math"
)

// PairedRatio is B/A estimated from pairs (a_i, b_i) measured together
// (in the same round of a run), as the geometric mean of the ratios b_i/a_i
// with a Student's t interval on their logarithms, and the p-value of a
// paired t-test that the mean log ratio is 0. Drift of the machine that
// moves both members of a pair cancels in their ratio.
type PairedRatio struct {
	N     int      `json:"n"`
	Ratio float64  `json:"ratio"`
	CI    Interval `json:"ci95"`
	P     float64  `json:"p"`
	// FewPairs says, with fewer than MinPairs pairs, how little the test
	// can tell (empty otherwise).
	FewPairs string `json:"fewPairs,omitempty"`
}

// MinPairs is the number of pairs below which Paired's p and interval
// come with a warning: the t-test estimates the spread of the log ratios
// from the pairs themselves, and with 2 to 4 of them (1 to 3 degrees of
// freedom) that estimate is so loose that the interval spans ±12.7
// (2 pairs), ±4.3 (3) or ±3.2 (4) standard errors, against ±2.8 at 5.
const MinPairs = 5

// fewPairs is the warning of n pairs.
func fewPairs(n int) string {
	if n >= MinPairs {
		return ""
	}
	return fmt.Sprintf("%d pairs: a paired t-test with %d degree%s of freedom: the spread is estimated from %d values, the p rests on their being normal, which so few cannot show, and the 95%% interval spans ±%.3g standard errors (±%.3g with %d pairs); give %d or more repetitions",
		n, n-1, map[bool]string{true: "", false: "s"}[n == 2], n, TQuantile975(n-1), TQuantile975(MinPairs-1), MinPairs, MinPairs)
}

// Paired computes PairedRatio. It needs two pairs at least, and positive
// values (a ratio of a value to 0 or below has no log).
func Paired(a, b []float64) (PairedRatio, error) {
	if len(a) != len(b) {
		return PairedRatio{}, errors.New("paired samples of different lengths")
	}
	n := len(a)
	if n < 2 {
		return PairedRatio{}, errors.New("fewer than two pairs")
	}
	d := make([]float64, n)
	for i := range a {
		if a[i] <= 0 || b[i] <= 0 || math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			return PairedRatio{}, errors.New("a value is not positive")
		}
		d[i] = math.Log(b[i] / a[i])
	}
	m := mean(d)
	ss := 0.0
	for _, x := range d {
		ss += (x - m) * (x - m)
	}
	se := math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
	half := TQuantile975(n-1) * se
	r := PairedRatio{N: n, Ratio: math.Exp(m), CI: Interval{Lo: math.Exp(m - half), Hi: math.Exp(m + half)}, P: 1, FewPairs: fewPairs(n)}
	switch {
	case se > 0:
		r.P = math.Min(1, 2*(1-TCDF(math.Abs(m)/se, float64(n-1))))
	case m != 0:
		r.P = 0 // every pair moved by the same ratio
	}
	return r, nil
}
