package results

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if s.N != 8 || s.Median != 4.5 || s.Mean != 5 || math.Abs(s.Stdev-2.138) > 0.001 || math.Abs(s.CV-0.4276) > 0.001 {
		t.Errorf("%+v", s)
	}
	half := 2.365 * s.Stdev / math.Sqrt(8)
	if math.Abs(s.CILow-(5-half)) > 1e-3 || math.Abs(s.CIHigh-(5+half)) > 1e-3 { // t(7) = 2.3646
		t.Errorf("CI %g..%g", s.CILow, s.CIHigh)
	}
	one := Summarize([]float64{3})
	if one.Stdev != 0 || one.CILow != 3 || one.CIHigh != 3 || one.Median != 3 {
		t.Errorf("one sample: %+v", one)
	}
}
