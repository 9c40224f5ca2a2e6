package stats

import (
	"math"
	"testing"
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// Reference values below are scipy 1.17.1's scipy.stats.t.ppf / t.cdf /
// f.cdf / f.sf for the same arguments.

func TestTQuantile975KnownValues(t *testing.T) {
	for _, c := range []struct {
		df   int
		want float64
	}{{1, 12.706}, {10, 2.228}, {100, 1.984}, {30, 2.042}, {31, 2.040}} {
		if got := TQuantile975(c.df); !near(got, c.want, 0.0006) {
			t.Errorf("TQuantile975(%d) = %v, want %v", c.df, got, c.want)
		}
	}
	if got := TQuantile975(100); !near(got, 1.9839715185235518, 1e-9) {
		t.Errorf("TQuantile975(100) = %.12f, want scipy's 1.983971518524", got)
	}
	if !math.IsNaN(TQuantile975(0)) {
		t.Error("TQuantile975(0) should be NaN")
	}
}

// The table and the incomplete-beta inversion are independent; they must
// agree to the table's six decimals.
func TestTQuantileMatchesTable(t *testing.T) {
	for df := 1; df <= 30; df++ {
		if got, want := TQuantile(0.975, float64(df)), t975[df-1]; !near(got, want, 6e-7) {
			t.Errorf("df %d: TQuantile = %.7f, table %.6f", df, got, want)
		}
	}
}

func TestTQuantileScipy(t *testing.T) {
	for _, c := range []struct{ p, df, want float64 }{
		{0.975, 100, 1.9839715185235518},
		{0.975, 1000, 1.9623390808264083},
		{0.975, 31, 2.039513446396408},
		{0.9, 2.5, 1.7302509288071766},
		{0.995, 7, 3.4994832973504924},
		{0.05, 4, -2.131846786326651},
		{0.6, 3, 0.2766706623326898},
		{0.999999, 1, 318309.88617359026},
		{0.975, 99999, 1.9599877077718442}, // incomplete beta, near the switch
		{0.975, 2e5, 1.959975845966768},    // Cornish–Fisher
		{0.999, 5e5, 3.090248606504611},    // Cornish–Fisher
	} {
		if got := TQuantile(c.p, c.df); !near(got, c.want, 1e-9*math.Max(1, math.Abs(c.want))) {
			t.Errorf("TQuantile(%v, %v) = %.15g, want %.15g", c.p, c.df, got, c.want)
		}
	}
	for _, bad := range [][2]float64{{0, 5}, {1, 5}, {0.5, 0}, {0.9, -1}, {math.NaN(), 3}} {
		if !math.IsNaN(TQuantile(bad[0], bad[1])) {
			t.Errorf("TQuantile(%v, %v) should be NaN", bad[0], bad[1])
		}
	}
	if TQuantile(0.5, 7) != 0 {
		t.Error("median of t must be 0")
	}
}

func TestTCDF(t *testing.T) {
	for _, c := range []struct{ x, df, want float64 }{
		{1.5, 3, 0.8847080673775886},
		{-2.0, 7.5, 0.041448497649083156},
		{0.3, 1, 0.5927735790777423},
		{4.0, 50, 0.9998954048768179},
	} {
		if got := TCDF(c.x, c.df); !near(got, c.want, 1e-12) {
			t.Errorf("TCDF(%v, %v) = %.15g, want %.15g", c.x, c.df, got, c.want)
		}
	}
	// Round trip.
	for _, df := range []float64{1, 2, 5, 17.5, 200} {
		for _, p := range []float64{0.01, 0.3, 0.8, 0.999} {
			if got := TCDF(TQuantile(p, df), df); !near(got, p, 1e-11) {
				t.Errorf("TCDF(TQuantile(%v, %v)) = %v", p, df, got)
			}
		}
	}
}

func TestFCDF(t *testing.T) {
	for _, c := range []struct{ f, d1, d2, cdf, sf float64 }{
		{1.0, 1, 1, 0.5000000000000001, 0.5000000000000001},
		{2.5, 2, 10, 0.8683127572016461, 0.13168724279835387},
		{4.0, 2, 17, 0.9623013534951914, 0.03769864650480858},
		{0.5, 5, 3, 0.2326239180000786, 0.7673760819999211},
		{3.1, 3, 40, 0.9626549534264229, 0.03734504657357704},
		{10.0, 2, 5, 0.9821114561800017, 0.01788854381999832},
	} {
		if got := FCDF(c.f, c.d1, c.d2); !near(got, c.cdf, 1e-12) {
			t.Errorf("FCDF(%v, %v, %v) = %.15g, want %.15g", c.f, c.d1, c.d2, got, c.cdf)
		}
		if got := FSurvival(c.f, c.d1, c.d2); !near(got, c.sf, 1e-12) {
			t.Errorf("FSurvival(%v, %v, %v) = %.15g, want %.15g", c.f, c.d1, c.d2, got, c.sf)
		}
	}
	// F(2, d2) has the closed form P(F > f) = (1 + 2f/d2)^(−d2/2).
	for _, d2 := range []float64{3, 8, 40} {
		for _, f := range []float64{0.1, 1, 7, 60} {
			want := math.Pow(1+2*f/d2, -d2/2)
			if got := FSurvival(f, 2, d2); !near(got, want, 1e-12*math.Max(want, 1e-3)) {
				t.Errorf("FSurvival(%v, 2, %v) = %g, want %g", f, d2, got, want)
			}
		}
	}
	if FCDF(-1, 2, 3) != 0 || FSurvival(0, 2, 3) != 1 || !math.IsNaN(FCDF(1, 0, 3)) {
		t.Error("FCDF edge cases wrong")
	}
}
