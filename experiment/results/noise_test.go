package results

import (
	"slices"
	"testing"
)

func TestNoisySamples(t *testing.T) {
	quiet := func(psi float64) *Noise {
		return &Noise{StealPct: []float64{0, 0.5}, CPUPressurePct: psi}
	}
	p := &PointResult{Samples: []Sample{
		{Noise: quiet(3)}, {Noise: quiet(4)}, {Noise: quiet(3.5)},
		{Noise: &Noise{StealPct: []float64{0, 2.5}, CPUPressurePct: 3}}, // stolen
		{Noise: quiet(20)}, // pressure 20% > 5% and > 3x the median 3.75
		{Noise: quiet(9)},  // above the floor, under 3x the median
		{},                 // no record: never flagged
	}}
	if got := p.NoisySamples(); !slices.Equal(got, []int{3, 4}) {
		t.Errorf("noisy samples %v, want [3 4]", got)
	}
}
