package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// kneeData draws y = 10 for x < 40 and 10 − 0.1·(x − 40) beyond, x in
// 0..200 step 10, reps samples per x with N(0, sd²) noise.
func kneeData(rng *rand.Rand, knee, sd float64, reps int) (x, y []float64) {
	for xi := 0.0; xi <= 200; xi += 10 {
		for range reps {
			x = append(x, xi)
			y = append(y, 10-0.1*math.Max(0, xi-knee)+sd*rng.NormFloat64())
		}
	}
	return x, y
}

func TestBreakpointRecovers(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		x, y := kneeData(rand.New(rand.NewPCG(seed, 0)), 40, 0.2, 3)
		s, err := Breakpoint(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if !near(s.X0, 40, 10) {
			t.Errorf("seed %d: x0 = %v, want 40 ± 10", seed, s.X0)
		}
		if !near(s.SlopeBefore, 0, 0.02) || !near(s.SlopeAfter, -0.1, 0.01) {
			t.Errorf("seed %d: slopes %v, %v; want 0, −0.1", seed, s.SlopeBefore, s.SlopeAfter)
		}
		if !s.Significant || s.P > 1e-6 || s.N != 63 || s.SSE >= s.LineSSE {
			t.Errorf("seed %d: bend not found: %+v", seed, s)
		}
	}
}

// Noise-free data pins the search: at a data x, and between two.
func TestBreakpointExact(t *testing.T) {
	for _, knee := range []float64{40, 43.7, 150} {
		x, y := kneeData(rand.New(rand.NewPCG(1, 0)), knee, 0, 1)
		s, err := Breakpoint(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if !near(s.X0, knee, 1e-4) || !near(s.SlopeBefore, 0, 1e-9) || !near(s.SlopeAfter, -0.1, 1e-9) || !near(s.Y0, 10, 1e-6) || !near(s.R2, 1, 1e-9) {
			t.Errorf("knee %v: %+v", knee, s)
		}
		if !near(s.Predict(200), 10-0.1*(200-knee), 1e-6) {
			t.Errorf("knee %v: Predict(200) = %v", knee, s.Predict(200))
		}
	}
}

// On a straight line with noise the bend must not be significant in most
// seeds. The test is approximate (x0 is searched), so the false-positive
// rate is allowed somewhat above 5%, but not far.
func TestBreakpointStraightLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(99, 0))
	const runs = 200
	bent := 0
	for range runs {
		var x, y []float64
		for xi := 0.0; xi <= 200; xi += 10 {
			for range 3 {
				x = append(x, xi)
				y = append(y, 5+0.03*xi+0.3*rng.NormFloat64())
			}
		}
		s, err := Breakpoint(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if s.Significant {
			bent++
		}
	}
	t.Logf("straight line called bent in %d of %d seeds", bent, runs)
	if bent > runs*15/100 {
		t.Errorf("straight line called bent in %d of %d seeds", bent, runs)
	}
}

func TestBreakpointTooFew(t *testing.T) {
	// 12 points but only 4 distinct x: not enough.
	x := []float64{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4}
	y := []float64{1, 2, 1, 2, 3, 2, 3, 4, 3, 3, 3, 3}
	if _, err := Breakpoint(x, y); !errors.Is(err, ErrTooFewPoints) {
		t.Errorf("4 distinct x: err = %v", err)
	}
	// 5 distinct x is the minimum, and must work.
	s, err := Breakpoint([]float64{1, 2, 3, 4, 5}, []float64{1, 2, 3, 3.1, 2.9})
	if err != nil || s.N != 5 || s.X0 < 2 || s.X0 > 4 {
		t.Errorf("5 distinct x: %+v, %v", s, err)
	}
	if _, err := Breakpoint([]float64{1, 2, 3, 4, 5}, []float64{1, 2, 3}); !errors.Is(err, ErrLengthMismatch) {
		t.Errorf("mismatch: %v", err)
	}
}
