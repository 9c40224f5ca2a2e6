package probe

import (
	"math"
	"testing"
)

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
