package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
)

// exactMax is the largest sample size, on both sides, for which
// MannWhitney uses the exact distribution of U.
const exactMax = 20

// MannWhitney is the two-sided Mann–Whitney U (Wilcoxon rank-sum) test of
// whether the values of a and b come from the same distribution. u is the
// statistic of a: the number of pairs (a[i], b[j]) with a[i] > b[j], ties
// counting one half (scipy.stats.mannwhitneyu's convention); it ranges
// from 0 to len(a)·len(b). p is the two-sided p-value.
//
// When no value is tied and both samples have at most 20 values, p comes
// from the exact permutation distribution of U, computed by dynamic
// programming. Otherwise it comes from the normal approximation, with the
// variance corrected for ties and a continuity correction of 1/2.
//
// Small samples cannot reach significance whatever the data: with 2 runs
// against 2 the smallest two-sided p is 1/3, with 3 against 3 it is 0.1,
// and a test at α = 0.05 needs 4 runs against 4 (see MinP). With an empty
// sample there is no evidence either way: u is 0 and p is 1.
func MannWhitney(a, b []float64) (u, p float64) {
	na, nb := len(a), len(b)
	if na == 0 || nb == 0 {
		return 0, 1
	}
	ranks, ties := midranks(a, b)
	var ra float64
	for _, r := range ranks[:na] {
		ra += r
	}
	fa, fb := float64(na), float64(nb)
	u = ra - fa*(fa+1)/2
	if ties == 0 && na <= exactMax && nb <= exactMax {
		return u, exactMWP(na, nb, u)
	}
	n := fa + fb
	mu := fa * fb / 2
	v := fa * fb / 12 * ((n + 1) - ties/(n*(n-1)))
	if v <= 0 {
		// Every value is equal: the samples cannot be told apart.
		return u, 1
	}
	z := (math.Abs(u-mu) - 0.5) / math.Sqrt(v)
	if z <= 0 {
		return u, 1
	}
	return u, math.Min(1, 2*(1-normalCDF(z)))
}

// midranks ranks the values of a followed by those of b together, giving
// tied values the mean of their ranks (1-based). ties is Σ(t³ − t) over the
// groups of t tied values, 0 when there is no tie.
func midranks(a, b []float64) (ranks []float64, ties float64) {
	n := len(a) + len(b)
	vals := make([]float64, 0, n)
	vals = append(append(vals, a...), b...)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		switch {
		case vals[i] < vals[j]:
			return -1
		case vals[i] > vals[j]:
			return 1
		}
		return 0
	})
	ranks = make([]float64, n)
	for i := 0; i < n; {
		j := i + 1
		for j < n && vals[idx[j]] == vals[idx[i]] {
			j++
		}
		r := float64(i+j+1) / 2 // mean of ranks i+1 .. j
		for k := i; k < j; k++ {
			ranks[idx[k]] = r
		}
		if t := float64(j - i); t > 1 {
			ties += t*t*t - t
		}
		i = j
	}
	return ranks, ties
}

// uCounts returns, for samples of sizes m and n without ties, how many of
// the C(m+n, m) orderings give each value of U = 0..m·n. It uses the
// recurrence f(i, j, u) = f(i−1, j, u−j) + f(i, j−1, u): the largest value
// comes from the first sample (beating all j of the second) or from the
// second. Counts stay exact in float64 for m+n ≤ 40.
func uCounts(m, n int) []float64 {
	// prev[j] is f(i−1, j, ·), cur[j] is f(i, j, ·).
	prev := make([][]float64, n+1)
	for j := range prev {
		prev[j] = []float64{1} // f(0, j) = 1 at u = 0
	}
	for i := 1; i <= m; i++ {
		cur := make([][]float64, n+1)
		cur[0] = []float64{1}
		for j := 1; j <= n; j++ {
			f := make([]float64, i*j+1)
			for u, c := range prev[j] {
				f[u+j] += c
			}
			for u, c := range cur[j-1] {
				f[u] += c
			}
			cur[j] = f
		}
		prev = cur
	}
	return prev[n]
}

// exactMWP is the exact two-sided p-value of U = u for samples of sizes m
// and n without ties: twice the smaller tail, at most 1.
func exactMWP(m, n int, u float64) float64 {
	counts := uCounts(m, n)
	var total, lower, upper float64
	for k, c := range counts {
		total += c
		if float64(k) <= u {
			lower += c
		}
		if float64(k) >= u {
			upper += c
		}
	}
	return math.Min(1, 2*math.Min(lower, upper)/total)
}

// MinP returns the smallest two-sided p-value that MannWhitney's exact
// test can give for samples of sizes na and nb: 2/C(na+nb, na), when the
// two samples do not overlap at all (and 1 when either is empty). A
// comparison whose MinP is not below α cannot be significant, whatever
// the data. At α = 0.05: 2 vs 2 gives 0.333, 3 vs 3 gives 0.1, 3 vs 4
// gives 0.057, 4 vs 4 gives 0.029 (the smallest equal sizes that can
// reach it); unequal sizes 3 vs 5 (0.036) and 2 vs 8 (0.044) can too.
func MinP(na, nb int) float64 {
	if na <= 0 || nb <= 0 {
		return 1
	}
	// C(na+nb, na) by the multiplicative formula: every partial product
	// is itself a binomial coefficient, so it is exact while below 2^53.
	c := 1.0
	for i := 1; i <= min(na, nb); i++ {
		c = c * float64(max(na, nb)+i) / float64(i)
	}
	return math.Min(1, 2/c)
}

// Comparison says whether a measurement changed between run A and run B.
type Comparison struct {
	NA      int     `json:"n_a"`
	NB      int     `json:"n_b"`
	MedianA float64 `json:"median_a"`
	MedianB float64 `json:"median_b"`
	// Change is the relative change of the median, (MedianB −
	// MedianA)/MedianA; 0 when MedianA is 0 (undefined, see
	// ChangeDefined).
	Change        float64 `json:"change"`
	ChangeDefined bool    `json:"change_defined"`
	// U and P are MannWhitney's statistic and two-sided p-value.
	U float64 `json:"u"`
	P float64 `json:"p"`
	// MinP is the smallest p these sample sizes can give (see MinP).
	MinP float64 `json:"min_p"`
	// Alpha is the significance level asked for.
	Alpha float64 `json:"alpha"`
	// Significant is P < Alpha with at least 2 values on each side: a
	// single run has no spread and is never taken as a change, whatever
	// the other side holds (MannWhitney gives it p > 0.08 anyway). In
	// practice the exact test needs 4 values per side at α = 0.05, or
	// unequal sizes such as 3 vs 5 or 2 vs 8 (see MinP).
	Significant bool `json:"significant"`
}

// Compare compares sample a (run A, the baseline) with sample b (run B)
// by their medians and MannWhitney's test at significance level alpha
// (typically 0.05). An empty side gives zero medians, P = 1 and a
// non-significant result.
func Compare(a, b []float64, alpha float64) Comparison {
	c := Comparison{NA: len(a), NB: len(b), Alpha: alpha, MinP: MinP(len(a), len(b))}
	c.U, c.P = MannWhitney(a, b)
	if len(a) == 0 || len(b) == 0 {
		return c
	}
	c.MedianA, c.MedianB = Median(a), Median(b)
	if c.MedianA != 0 {
		c.Change = (c.MedianB - c.MedianA) / c.MedianA
		c.ChangeDefined = true
	}
	c.Significant = len(a) >= 2 && len(b) >= 2 && c.P < alpha
	return c
}

// BootstrapMedianDiffCI returns a percentile-bootstrap confidence interval
// at the given level (for example 0.95) of the relative change of the
// median, (median(b) − median(a))/median(a). Each of iters rounds
// resamples a and b independently, with replacement, at their own sizes.
// The random numbers come from a PCG generator seeded with seed, so the
// same arguments always give the same interval.
//
// It is an error for a or b to be empty, for level to lie outside (0, 1),
// for iters to be below 1, or for median(a) of the data or of any
// resample to be 0 (a relative change from 0 is undefined). With very few
// values per side the interval is coarse and too narrow: the bootstrap
// cannot invent spread that the sample does not show.
func BootstrapMedianDiffCI(a, b []float64, level float64, iters int, seed int64) (lo, hi float64, err error) {
	switch {
	case len(a) == 0 || len(b) == 0:
		return 0, 0, errors.New("bootstrap needs a non-empty sample on each side")
	case !(level > 0 && level < 1):
		return 0, 0, errors.New("bootstrap level must lie strictly between 0 and 1")
	case iters < 1:
		return 0, 0, errors.New("bootstrap needs at least 1 iteration")
	case Median(a) == 0:
		return 0, 0, errZeroMedian
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	ra := make([]float64, len(a))
	rb := make([]float64, len(b))
	diffs := make([]float64, iters)
	for i := range diffs {
		for k := range ra {
			ra[k] = a[rng.IntN(len(a))]
		}
		for k := range rb {
			rb[k] = b[rng.IntN(len(b))]
		}
		slices.Sort(ra)
		slices.Sort(rb)
		ma := sortedMedian(ra)
		if ma == 0 {
			return 0, 0, errZeroMedian
		}
		diffs[i] = (sortedMedian(rb) - ma) / ma
	}
	slices.Sort(diffs)
	tail := (1 - level) / 2
	return quantileSorted(diffs, tail), quantileSorted(diffs, 1-tail), nil
}

var errZeroMedian = errors.New("median of the baseline sample is 0: a relative change is undefined")
