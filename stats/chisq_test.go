package stats

import (
	"math"
	"testing"
)

// TestChiSquareCritical checks the critical values against the χ² table
// (upper 10⁻³ points) and values computed independently (10⁻⁶).
func TestChiSquareCritical(t *testing.T) {
	for _, c := range []struct {
		df          int
		alpha, want float64
	}{
		{1, 1e-3, 10.828}, {2, 1e-3, 13.816}, {3, 1e-3, 16.266}, {7, 1e-3, 24.322}, {20, 1e-3, 45.315},
		{1, 1e-6, 23.928}, {2, 1e-6, 27.631}, {3, 1e-6, 30.665}, {10, 1e-6, 46.863},
	} {
		got := ChiSquareCritical(c.df, c.alpha)
		if math.Abs(got-c.want) > 0.002 {
			t.Errorf("df %d alpha %g: %.3f, want %.3f", c.df, c.alpha, got, c.want)
		}
	}
	for _, c := range []struct {
		df    int
		alpha float64
	}{{0, 0.05}, {-1, 0.05}, {1, 0}, {1, 1}, {1, math.NaN()}} {
		if got := ChiSquareCritical(c.df, c.alpha); !math.IsNaN(got) {
			t.Errorf("ChiSquareCritical(%d, %g) = %v, want NaN", c.df, c.alpha, got)
		}
	}
}

// TestUpperGammaClosedForms checks Q(a, x) where it has a closed form, on
// both sides of x = a+1 (the series and the continued fraction):
// Q(n, x) = e^(−x)·Σ_{k<n} x^k/k! for an integer n, and
// Q(1/2, x) = erfc(√x).
func TestUpperGammaClosedForms(t *testing.T) {
	integer := func(n int, x float64) float64 {
		sum, term := 0.0, 1.0
		for k := 0; k < n; k++ {
			sum += term
			term *= x / float64(k+1)
		}
		return math.Exp(-x) * sum
	}
	for _, n := range []int{1, 2, 3, 5, 10, 30} {
		for _, x := range []float64{0.01, 0.5, 1, 2.5, float64(n), float64(n) + 1.5, 3 * float64(n), 80} {
			want := integer(n, x)
			if got := upperGamma(float64(n), x); math.Abs(got-want)/want > 1e-10 {
				t.Errorf("Q(%d, %g) = %.15g, want %.15g", n, x, got, want)
			}
		}
	}
	for _, x := range []float64{1e-6, 0.1, 1, 1.49, 1.51, 4, 20} {
		want := math.Erfc(math.Sqrt(x))
		if got := upperGamma(0.5, x); math.Abs(got-want)/want > 1e-10 {
			t.Errorf("Q(1/2, %g) = %.15g, want %.15g", x, got, want)
		}
	}
	if got := upperGamma(3, 0); got != 1 {
		t.Errorf("Q(3, 0) = %v, want 1", got)
	}
}

// TestChiSquareSurvival checks P(X > x) against closed forms: with 2
// degrees of freedom it is e^(−x/2), with 1 it is erfc(√(x/2)); and the
// textbook 5% points (3.841 for df 1, 11.070 for df 5).
func TestChiSquareSurvival(t *testing.T) {
	for _, x := range []float64{0.1, 1, 3, 10, 40} {
		if got, want := ChiSquareSurvival(x, 2), math.Exp(-x/2); math.Abs(got-want)/want > 1e-12 {
			t.Errorf("df 2, x %g: %.15g, want %.15g", x, got, want)
		}
		if got, want := ChiSquareSurvival(x, 1), math.Erfc(math.Sqrt(x/2)); math.Abs(got-want)/want > 1e-10 {
			t.Errorf("df 1, x %g: %.15g, want %.15g", x, got, want)
		}
	}
	for _, c := range []struct{ x, df float64 }{{3.841459, 1}, {11.070498, 5}} {
		if got := ChiSquareSurvival(c.x, c.df); math.Abs(got-0.05) > 1e-6 {
			t.Errorf("ChiSquareSurvival(%g, %g) = %.8f, want 0.05", c.x, c.df, got)
		}
	}
	if got := ChiSquareSurvival(-1, 3); got != 1 {
		t.Errorf("ChiSquareSurvival(-1, 3) = %v, want 1", got)
	}
	for _, df := range []float64{0, -2, math.NaN()} {
		if got := ChiSquareSurvival(1, df); !math.IsNaN(got) {
			t.Errorf("ChiSquareSurvival(1, %v) = %v, want NaN", df, got)
		}
	}
	// The critical value inverts the survival function.
	for _, df := range []int{1, 4, 9, 31} {
		for _, alpha := range []float64{0.05, 1e-3, 1e-6} {
			if got := ChiSquareSurvival(ChiSquareCritical(df, alpha), float64(df)); math.Abs(got-alpha)/alpha > 1e-9 {
				t.Errorf("df %d alpha %g: survival of the critical value is %g", df, alpha, got)
			}
		}
	}
}
