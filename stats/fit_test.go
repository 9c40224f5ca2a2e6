package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// linearData draws y = a + b·x + N(0, sd²) at x = 1..10, reps samples
// per x.
func linearData(rng *rand.Rand, a, b, sd float64, reps int) (x, y []float64) {
	for xi := 1.0; xi <= 10; xi++ {
		for range reps {
			x = append(x, xi)
			y = append(y, a+b*xi+sd*rng.NormFloat64())
		}
	}
	return x, y
}

// Reference: scipy 1.17.1 scipy.stats.linregress on the same points
// (slope, intercept, stderr, intercept_stderr, rvalue², pvalue).
func TestLinearFitScipy(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5, 6, 7, 8, 2, 4}
	y := []float64{2.1, 3.9, 6.2, 7.8, 10.1, 12.2, 13.8, 16.1, 4.2, 7.7}
	l, err := LinearFit(x, y)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"slope", l.Slope, 1.9911764705882349},
		{"intercept", l.Intercept, 0.047058823529413374},
		{"slope se", l.SlopeSE, 0.029227363109341507},
		{"intercept se", l.InterceptSE, 0.13832912960358945},
		{"r2", l.R2, 0.99827931320638},
		{"slope p", l.SlopeP, 2.3986368938312717e-12},
	} {
		if !near(c.got, c.want, 1e-9*math.Max(1, math.Abs(c.want))) && !near(c.got/c.want, 1, 1e-6) {
			t.Errorf("%s = %.15g, want %.15g", c.name, c.got, c.want)
		}
	}
	if l.N != 10 {
		t.Errorf("N = %d, want all 10 points", l.N)
	}
	// t(0.975, 8) = 2.306004
	if !near(l.SlopeCI.Hi-l.Slope, 2.306004*0.029227363109341507, 1e-6) {
		t.Errorf("slope CI %+v", l.SlopeCI)
	}
}

func TestLinearFitRecoversSlope(t *testing.T) {
	x, y := linearData(rand.New(rand.NewPCG(1, 0)), 3, 0.5, 0.3, 5)
	l, err := LinearFit(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if l.N != 50 {
		t.Errorf("N = %d, want every sample (50)", l.N)
	}
	if !near(l.Slope, 0.5, 0.05) || !l.SlopeCI.Contains(0.5) {
		t.Errorf("slope %v CI %+v, want 0.5", l.Slope, l.SlopeCI)
	}
	if !near(l.Intercept, 3, 0.3) || !l.InterceptCI.Contains(3) {
		t.Errorf("intercept %v CI %+v, want 3", l.Intercept, l.InterceptCI)
	}
	if l.SlopeP > 1e-6 {
		t.Errorf("slope p = %v for a clear trend", l.SlopeP)
	}

	x, y = linearData(rand.New(rand.NewPCG(2, 0)), 3, 0, 0.3, 5)
	l, _ = LinearFit(x, y)
	if !l.SlopeCI.Contains(0) {
		t.Errorf("flat series: slope CI %+v excludes 0", l.SlopeCI)
	}
}

// Over 1000 seeded datasets the 95% slope CI must cover the true slope
// 93–97% of the time (binomial sd 0.7%, so the band is ±3 sd).
func TestLinearFitCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 0))
	covered := 0
	for range 1000 {
		x, y := linearData(rng, 3, 0.5, 1, 5)
		l, err := LinearFit(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if l.SlopeCI.Contains(0.5) {
			covered++
		}
	}
	if covered < 930 || covered > 970 {
		t.Errorf("95%% CI covered the slope in %d of 1000 datasets", covered)
	}
}

func TestLinearFitExactAndErrors(t *testing.T) {
	l, err := LinearFit([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7})
	if err != nil || !near(l.Slope, 2, 1e-12) || !near(l.R2, 1, 1e-12) || l.SlopeP != 0 || l.SlopeSE != 0 {
		t.Errorf("exact line: %+v, %v", l, err)
	}
	l, err = LinearFit([]float64{0, 1, 2}, []float64{4, 4, 4})
	if err != nil || l.R2 != 1 || l.Slope != 0 || l.SlopeP != 1 {
		t.Errorf("constant y: %+v, %v", l, err)
	}
	for _, c := range []struct {
		x, y []float64
		want error
	}{
		{[]float64{1, 2}, []float64{1, 2}, ErrTooFewPoints},
		{[]float64{1, 1, 1}, []float64{1, 2, 3}, ErrNoSpread},
		{[]float64{1, 2, 3}, []float64{1, 2}, ErrLengthMismatch},
		{[]float64{1, 2, math.NaN()}, []float64{1, 2, 3}, ErrNotFinite},
		{[]float64{1, 2, 3}, []float64{1, math.Inf(1), 3}, ErrNotFinite},
	} {
		if _, err := LinearFit(c.x, c.y); !errors.Is(err, c.want) {
			t.Errorf("LinearFit(%v, %v): %v, want %v", c.x, c.y, err, c.want)
		}
	}
}

func chain(t1, l float64) func(n float64) float64 {
	return func(n float64) float64 { return t1 * math.Pow(1-l, n-1) }
}

func TestPowerLawRecovers(t *testing.T) {
	f := chain(20, 0.07)
	for seed := uint64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		var n, tp []float64
		for c := 1.0; c <= 20; c++ {
			n = append(n, c)
			tp = append(tp, f(c)*(1+0.02*rng.NormFloat64()))
		}
		p, err := PowerLawFit(n, tp)
		if err != nil {
			t.Fatal(err)
		}
		if !near(p.Loss, 0.07, 0.005) || !near(p.T1/20, 1, 0.03) {
			t.Errorf("seed %d: l = %v, t1 = %v; want 0.07, 20", seed, p.Loss, p.T1)
		}
		if !(p.LossCI.Lo < p.Loss && p.Loss < p.LossCI.Hi) || !(p.T1CI.Lo < p.T1 && p.T1 < p.T1CI.Hi) {
			t.Errorf("seed %d: estimates outside their CIs: %+v", seed, p)
		}
		if p.R2 < 0.98 || p.R2Log < 0.98 || p.N != 20 {
			t.Errorf("seed %d: R2 %v, R2Log %v, N %d", seed, p.R2, p.R2Log, p.N)
		}
	}
}

func TestPowerLawExact(t *testing.T) {
	f := chain(20, 0.07)
	var n, tp []float64
	for c := 1.0; c <= 20; c++ {
		for range 3 { // repeated n: every sample counts
			n = append(n, c)
			tp = append(tp, f(c))
		}
	}
	p, err := PowerLawFit(n, tp)
	if err != nil {
		t.Fatal(err)
	}
	if !near(p.R2, 1, 1e-9) || !near(p.R2Log, 1, 1e-9) || !near(p.Loss, 0.07, 1e-12) || !near(p.T1, 20, 1e-10) || p.N != 60 {
		t.Errorf("exact data: %+v", p)
	}
	if !near(p.Predict(5), f(5), 1e-10) {
		t.Errorf("Predict(5) = %v, want %v", p.Predict(5), f(5))
	}
}

func TestPowerLawRefusesNonPositive(t *testing.T) {
	for _, tp := range [][]float64{{10, 9, 0, 7}, {10, 9, -1, 7}} {
		if _, err := PowerLawFit([]float64{1, 2, 3, 4}, tp); !errors.Is(err, ErrNonPositive) {
			t.Errorf("%v: err = %v", tp, err)
		}
	}
}
