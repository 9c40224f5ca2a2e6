package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func seq(from, to float64) []float64 {
	var s []float64
	for v := from; v <= to; v++ {
		s = append(s, v)
	}
	return s
}

// Reference values are scipy 1.17.1's scipy.stats.mannwhitneyu(a, b,
// alternative='two-sided') with the method named, for the same inputs.
func TestMannWhitneyScipy(t *testing.T) {
	big := struct{ a, b []float64 }{
		a: []float64{100.012, 102.987, 97.259, 91.094, 95.453, 90.084, 100.601, 113.402, 95.078, 93.795, 104.898, 103.569, 101.054, 90.695, 99.707, 106.953, 86.558, 95.424, 80.988, 87.105, 81.583, 97.649, 87.326, 102.713, 101.568},
		b: []float64{104.131, 80.832, 100.613, 105.515, 107.133, 90.699, 101.222, 96.215, 97.912, 116.609, 97.925, 105.675, 114.844, 100.164, 104.883, 107.105, 106.638, 93.749, 106.761, 119.588, 90.529, 114.594, 107.194},
	}
	a7 := []float64{12.1, 15.3, 9.8, 14.2, 11.7, 13.3, 10.4}
	b12 := []float64{13.9, 16.2, 17.5, 12.8, 18.1, 15.9, 19.4, 14.6, 16.8, 20.3, 17.2, 11.1}
	for _, c := range []struct {
		name string
		a, b []float64
		u, p float64
	}{
		// exact: 2 of the C(10,5) = 252 orderings are as extreme.
		{"exact 5v5 separated", seq(1, 5), seq(6, 10), 0, 2.0 / 252},
		{"exact 5v5 swapped", seq(6, 10), seq(1, 5), 25, 2.0 / 252},
		{"exact 7v12", a7, b12, 11, 0.007184250218305946},
		{"exact 12v7", b12, a7, 73, 0.007184250218305946},
		// method='asymptotic', use_continuity=True (ties force it here).
		{"ties, normal", []float64{1.1, 2.2, 2.2, 3.3, 4.4, 5.5, 5.5, 6.6}, []float64{2.2, 3.3, 5.5, 7.7, 8.8, 8.8, 9.9, 10.1, 11.2}, 12.5, 0.02595642538378026},
		// method='asymptotic' (25 and 23 values: beyond the exact range).
		{"25v23, normal", big.a, big.b, 155, 0.00644652919632283},
	} {
		u, p := MannWhitney(c.a, c.b)
		if u != c.u || !near(p, c.p, 1e-12) {
			t.Errorf("%s: u, p = %v, %.15g; want %v, %.15g", c.name, u, p, c.u, c.p)
		}
	}
}

func TestMannWhitneySameDistribution(t *testing.T) {
	if _, p := MannWhitney([]float64{1, 3, 5, 7, 9}, []float64{2, 4, 6, 8, 10}); p < 0.5 {
		t.Errorf("interleaved samples: p = %v, want large", p)
	}
	x := []float64{3, 1, 4, 1, 5, 9, 2, 6}
	if u, p := MannWhitney(x, x); p != 1 || u != 32 {
		t.Errorf("identical samples: u, p = %v, %v; want 32, 1", u, p)
	}
	if _, p := MannWhitney([]float64{7, 7, 7}, []float64{7, 7}); p != 1 {
		t.Errorf("all tied: p = %v", p)
	}
	if u, p := MannWhitney(nil, []float64{1}); u != 0 || p != 1 {
		t.Errorf("empty: %v, %v", u, p)
	}
	// Draws from one distribution: p is uniform, so p < 0.05 about 5%
	// of the time and never systematically.
	rng := rand.New(rand.NewPCG(11, 0))
	small := 0
	for range 400 {
		a, b := make([]float64, 10), make([]float64, 10)
		for i := range a {
			a[i], b[i] = rng.NormFloat64(), rng.NormFloat64()
		}
		if _, p := MannWhitney(a, b); p < 0.05 {
			small++
		}
	}
	if small > 40 {
		t.Errorf("same distribution: %d of 400 p-values below 0.05", small)
	}
}

func TestUCounts(t *testing.T) {
	if got := uCounts(2, 2); !slices.Equal(got, []float64{1, 1, 2, 1, 1}) {
		t.Errorf("uCounts(2,2) = %v", got)
	}
	c := uCounts(20, 20)
	var total float64
	for k := range c {
		total += c[k]
		if c[k] != c[len(c)-1-k] {
			t.Fatalf("uCounts(20,20) not symmetric at %d", k)
		}
	}
	if total != 137846528820 { // C(40, 20)
		t.Errorf("uCounts(20,20) sums to %v", total)
	}
}

func TestMinP(t *testing.T) {
	for _, c := range []struct {
		na, nb int
		want   float64
	}{{2, 2, 1.0 / 3}, {3, 3, 0.1}, {3, 4, 2.0 / 35}, {4, 4, 2.0 / 70}, {3, 5, 2.0 / 56}, {2, 8, 2.0 / 45}, {1, 1, 1}, {0, 4, 1}} {
		if got := MinP(c.na, c.nb); !near(got, c.want, 1e-12) {
			t.Errorf("MinP(%d, %d) = %v, want %v", c.na, c.nb, got, c.want)
		}
		// It is what the exact test gives for fully separated samples.
		if c.na > 0 && c.nb > 0 {
			if _, p := MannWhitney(seq(1, float64(c.na)), seq(100, float64(99+c.nb))); !near(p, c.want, 1e-12) {
				t.Errorf("separated %d v %d: p = %v, want %v", c.na, c.nb, p, c.want)
			}
		}
	}
}

func TestCompare(t *testing.T) {
	c := Compare([]float64{10, 11, 9, 10.5}, []float64{12, 12.5, 11.8, 13}, 0.05)
	if !c.Significant || !near(c.P, 2.0/70, 1e-12) || !near(c.Change, (12.25-10.25)/10.25, 1e-12) || !c.ChangeDefined {
		t.Errorf("4 v 4 separated: %+v", c)
	}
	c = Compare([]float64{10, 11, 9}, []float64{20, 21, 22}, 0.05)
	if c.Significant || !near(c.P, 0.1, 1e-12) || c.MinP != c.P {
		t.Errorf("3 v 3 cannot be significant at 0.05: %+v", c)
	}
	// One run against many is never significant.
	c = Compare([]float64{1}, seq(100, 160), 0.05)
	if c.P < 0.05 || c.Significant {
		t.Errorf("1 v 61: %+v", c)
	}
	c = Compare([]float64{0, 0, 0}, []float64{1, 2}, 0.05)
	if c.ChangeDefined || c.Change != 0 {
		t.Errorf("zero baseline: %+v", c)
	}
	if c := Compare(nil, []float64{1, 2}, 0.05); c.P != 1 || c.Significant || c.MedianB != 0 {
		t.Errorf("empty: %+v", c)
	}
}

func normalSample(rng *rand.Rand, n int, mu, sd float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = mu + sd*rng.NormFloat64()
	}
	return s
}

func TestBootstrapDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 0))
	a, b := normalSample(rng, 12, 50, 5), normalSample(rng, 9, 55, 5)
	lo1, hi1, err := BootstrapMedianDiffCI(a, b, 0.95, 1000, 42)
	if err != nil {
		t.Fatal(err)
	}
	lo2, hi2, _ := BootstrapMedianDiffCI(a, b, 0.95, 1000, 42)
	if lo1 != lo2 || hi1 != hi2 {
		t.Errorf("same seed, different CI: [%v %v] vs [%v %v]", lo1, hi1, lo2, hi2)
	}
	lo3, hi3, _ := BootstrapMedianDiffCI(a, b, 0.95, 1000, 43)
	if lo1 == lo3 && hi1 == hi3 {
		t.Error("another seed gave the very same CI")
	}
	if !(lo1 < hi1) {
		t.Errorf("empty CI [%v %v]", lo1, hi1)
	}
	lo9, hi9, _ := BootstrapMedianDiffCI(a, b, 0.5, 1000, 42)
	if !(lo9 >= lo1 && hi9 <= hi1) {
		t.Errorf("50%% CI [%v %v] not inside 95%% CI [%v %v]", lo9, hi9, lo1, hi1)
	}
}

// A 10% shift between normal samples of 30: the CI must exclude 0 and
// contain 0.10. Coverage is about 95% per dataset, so over 20 seeded
// datasets we ask for all to exclude 0 and at least 17 to contain 0.10.
func TestBootstrapDetectsShift(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 0))
	covered := 0
	for i := range 20 {
		a, b := normalSample(rng, 30, 100, 5), normalSample(rng, 30, 110, 5)
		lo, hi, err := BootstrapMedianDiffCI(a, b, 0.95, 2000, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		if lo <= 0 {
			t.Errorf("dataset %d: CI [%.4f, %.4f] does not exclude 0", i, lo, hi)
		}
		if lo <= 0.10 && 0.10 <= hi {
			covered++
		}
	}
	if covered < 17 {
		t.Errorf("CI contained the true 0.10 in %d of 20 datasets", covered)
	}
}

func TestBootstrapErrors(t *testing.T) {
	ok := []float64{1, 2, 3}
	for _, c := range []struct {
		a, b  []float64
		level float64
		iters int
	}{
		{nil, ok, 0.95, 100}, {ok, nil, 0.95, 100}, {ok, ok, 1, 100}, {ok, ok, 0, 100},
		{ok, ok, math.NaN(), 100}, {ok, ok, 0.95, 0}, {[]float64{0, 0, 1}, ok, 0.95, 100},
	} {
		if _, _, err := BootstrapMedianDiffCI(c.a, c.b, c.level, c.iters, 1); err == nil {
			t.Errorf("no error for %+v", c)
		}
	}
	if _, _, err := BootstrapMedianDiffCI([]float64{0, 0, 1}, ok, 0.95, 10, 1); !errors.Is(err, errZeroMedian) {
		t.Errorf("zero median: %v", err)
	}
}
