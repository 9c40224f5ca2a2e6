package probe

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
		got := chiSquareCritical(c.df, c.alpha)
		if math.Abs(got-c.want) > 0.002 {
			t.Errorf("df %d alpha %g: %.3f, want %.3f", c.df, c.alpha, got, c.want)
		}
	}
}

// TestDefaultConnections checks K: n·(1−1/n)^K, the chance that uniform
// picks miss one of n backends (union bound), stays below 10⁻⁶.
func TestDefaultConnections(t *testing.T) {
	for n := 2; n <= 64; n++ {
		k := DefaultConnections(n)
		if miss := float64(n) * math.Pow(1-1/float64(n), float64(k)); miss > missProbability {
			t.Errorf("n=%d K=%d: miss probability %.2g", n, k, miss)
		}
	}
	if DefaultConnections(1) != 20 || DefaultConnections(4) != 61 {
		t.Errorf("K(1)=%d K(4)=%d, want 20 and 61", DefaultConnections(1), DefaultConnections(4))
	}
}
