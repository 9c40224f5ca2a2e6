package stats

import (
	"math"
	"strings"
	"testing"
)

// TestPaired against values computed by hand: log ratios of (100, 102),
// (110, 111), (90, 92.7) are 0.019803, 0.009050, 0.029559 (mean 0.019471,
// sd 0.010259, se 0.005923); t(2) = 4.303 gives 0.019471 ± 0.025487, and
// t = 3.287 with 2 degrees of freedom (CDF 1/2 + t/(2√(2+t²))) a
// two-sided p of 0.0814.
func TestPaired(t *testing.T) {
	r, err := Paired([]float64{100, 110, 90}, []float64{102, 111, 92.7})
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol }
	if r.N != 3 || !near(r.Ratio, math.Exp(0.019471), 1e-5) || !near(r.CI.Lo, math.Exp(0.019471-0.025487), 1e-4) ||
		!near(r.CI.Hi, math.Exp(0.019471+0.025487), 1e-4) || !near(r.P, 0.0814, 0.0005) {
		t.Errorf("%+v", r)
	}
	// Drift that moves both members of every pair: unpaired, the ranges
	// overlap; paired, B is 2% above A in every round.
	a := []float64{100, 120, 140, 160, 180}
	b := []float64{102, 122.4, 142.8, 163.2, 183.6}
	r, _ = Paired(a, b)
	if !near(r.Ratio, 1.02, 1e-9) || r.P != 0 {
		t.Errorf("constant ratio: %+v", r)
	}
	if c := Compare(a, b, 0.05); c.Significant {
		t.Errorf("unpaired, the drift hides the 2%%: %+v", c)
	}
	for _, bad := range [][2][]float64{{{1}, {2}}, {{1, 2}, {1}}, {{1, 0}, {1, 2}}} {
		if _, err := Paired(bad[0], bad[1]); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// Fewer than MinPairs pairs come with a warning saying how weak the test
// is; MinPairs and more do not (issue 37).
func TestPairedFewPairs(t *testing.T) {
	r, err := Paired([]float64{1, 1}, []float64{1.1, 1.2})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.FewPairs, "2 pairs: a paired t-test with 1 degree of freedom") || !strings.Contains(r.FewPairs, "±12.7 standard errors") {
		t.Errorf("2 pairs: %q", r.FewPairs)
	}
	r, _ = Paired([]float64{1, 1, 1, 1, 1}, []float64{1.1, 1.2, 1.1, 1.3, 1.2})
	if r.FewPairs != "" {
		t.Errorf("5 pairs: %q", r.FewPairs)
	}
}
