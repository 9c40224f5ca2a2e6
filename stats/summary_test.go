package stats

import (
	"math"
	"testing"
)

func TestSummarizeHandComputed(t *testing.T) {
	xs := []float64{9, 2, 4, 4, 5, 4, 7, 5} // sorted: 2 4 4 4 5 5 7 9
	s := Summarize(xs)
	// Hand: mean 40/8 = 5; Σ(x−5)² = 9+1+1+1+0+0+4+16 = 32; var = 32/7;
	// median (4+5)/2; CI half-width t(0.975,7)·sd/√8 = 2.364624·0.755929.
	sd := math.Sqrt(32.0 / 7)
	checks := []struct {
		name      string
		got, want float64
	}{
		{"median", s.Median, 4.5},
		{"mean", s.Mean, 5},
		{"stdev", s.Stdev, sd},
		{"cv", s.CV, sd / 5},
		{"ci lo", s.MeanCI.Lo, 5 - 1.7874879182362098},
		{"ci hi", s.MeanCI.Hi, 5 + 1.7874879182362098},
		{"min", s.Min, 2},
		{"max", s.Max, 9},
	}
	for _, c := range checks {
		if !near(c.got, c.want, 1e-6) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if s.N != 8 {
		t.Errorf("N = %d", s.N)
	}
	if xs[0] != 9 {
		t.Error("Summarize modified its input")
	}
}

func TestSummarizeOneValue(t *testing.T) {
	s := Summarize([]float64{3.5})
	want := Summary{N: 1, Median: 3.5, Mean: 3.5, MeanCI: Interval{3.5, 3.5}, Min: 3.5, Max: 3.5}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
}

func TestSummarizeAllEqual(t *testing.T) {
	s := Summarize([]float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1})
	if s.Stdev != 0 || s.CV != 0 || s.Mean != 0.1 || s.Median != 0.1 || s.MeanCI != (Interval{0.1, 0.1}) {
		t.Errorf("all-equal sample: %+v", s)
	}
}

func TestSummarizeEmptyAndZeroMean(t *testing.T) {
	if s := Summarize(nil); s != (Summary{}) {
		t.Errorf("empty: %+v", s)
	}
	s := Summarize([]float64{-1, 1})
	if s.Mean != 0 || s.CV != 0 || !near(s.Stdev, math.Sqrt2, 1e-15) {
		t.Errorf("zero mean: %+v", s)
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) should be NaN")
	}
}
