package stats

import (
	"math"
	"testing"
)

// R: t.test(c(3,4,5,6), c(1,2,3,4)) gives t = 2.1909, df = 6, p-value =
// 0.07103 (Welch; equal variances here, so df = n1 + n2 − 2).
func TestWelch(t *testing.T) {
	tt, df, p := Welch([]float64{1, 2, 3, 4}, []float64{3, 4, 5, 6})
	if math.Abs(tt-2.1909) > 1e-4 || math.Abs(df-6) > 1e-9 || math.Abs(p-0.07103) > 1e-4 {
		t.Errorf("t %.4f df %.4f p %.5f, want 2.1909, 6, 0.07103", tt, df, p)
	}
	// Unequal variances: df between the smaller n − 1 and n1 + n2 − 2.
	_, df, p = Welch([]float64{10, 10.1, 9.9}, []float64{12, 14, 10, 16, 8})
	if !(df > 2 && df < 6) || !(p > 0.05) {
		t.Errorf("df %.3g p %.3g", df, p)
	}
	if _, _, p := Welch([]float64{1}, []float64{2, 3}); !math.IsNaN(p) {
		t.Errorf("one value: p %v, want NaN", p)
	}
	if _, _, p := Welch([]float64{1, 1}, []float64{2, 2}); p != 0 {
		t.Errorf("no spread, means apart: p %v, want 0", p)
	}
}
