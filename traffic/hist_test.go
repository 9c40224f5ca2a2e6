package traffic

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

// TestHistogramQuantiles records known distributions and checks every
// quantile against the exact one from sorting, within the histogram's
// relative error (0.1%).
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for name, gen := range map[string]func() time.Duration{
		"uniform 10-100us": func() time.Duration { return time.Duration(10000 + rng.Intn(90000)) },
		"exponential":      func() time.Duration { return time.Duration(rng.ExpFloat64() * 50000) },
		"small exact":      func() time.Duration { return time.Duration(rng.Intn(1000)) },
		"seconds":          func() time.Duration { return time.Duration(rng.Int63n(int64(10 * time.Second))) },
	} {
		h := NewHistogram()
		var xs []int64
		for i := 0; i < 100000; i++ {
			d := gen()
			h.Record(d)
			xs = append(xs, int64(d))
		}
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
			rank := int(q*float64(len(xs))+0.999999) - 1
			rank = max(rank, 0)
			want := xs[rank]
			got := int64(h.Quantile(q))
			if diff := got - want; diff > 0 || -diff > want/1000+1 {
				t.Errorf("%s: q%g = %d, exact %d", name, q, got, want)
			}
		}
		if h.Count() != 100000 || int64(h.Min()) != xs[0] || int64(h.Max()) != xs[len(xs)-1] {
			t.Errorf("%s: count %d min %v max %v", name, h.Count(), h.Min(), h.Max())
		}
	}
}

func TestHistogramMergeAndEmpty(t *testing.T) {
	a, b := NewHistogram(), NewHistogram()
	if a.Quantile(0.5) != 0 || a.Mean() != 0 || a.Min() != 0 {
		t.Error("empty histogram is not all zero")
	}
	for i := 1; i <= 100; i++ {
		a.Record(time.Duration(i) * time.Microsecond)
		b.Record(time.Duration(100+i) * time.Microsecond)
	}
	a.Merge(b)
	if a.Count() != 200 || a.Quantile(0.5) < 99*time.Microsecond || a.Quantile(0.5) > 100*time.Microsecond || a.Max() != 200*time.Microsecond {
		t.Errorf("merged: n=%d p50=%v max=%v", a.Count(), a.Quantile(0.5), a.Max())
	}
	a.Record(-time.Second)
	if a.Min() != 0 {
		t.Errorf("negative duration recorded as %v", a.Min())
	}
}
