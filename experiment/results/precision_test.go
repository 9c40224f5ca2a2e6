package results

import "testing"

// pointWith is a tcp-rr point with a precision target and these p50s.
func pointWith(target float64, minReps, maxReps int, p50s ...float64) *PointResult {
	pr := &PointResult{Point: Point{ID: "p0001", Workload: Workload{Kind: TCPRR}, Repetitions: minReps,
		Precision: &Precision{Target: Percent(target), MaxRepetitions: maxReps}}, Status: PointPending}
	for i, v := range p50s {
		pr.Samples = append(pr.Samples, Sample{Repetition: i, Metrics: map[string]float64{"latency_p50_us": v}})
	}
	pr.Summarize()
	return pr
}

func TestJudgePrecision(t *testing.T) {
	cases := []struct {
		name  string
		pr    *PointResult
		more  bool
		state string
	}{
		// 3 samples of 100±1: t(2)=4.30, sd 1, half-width 2.48% of 100.
		{"minimum not measured yet", pointWith(2, 3, 10, 100, 101), false, PrecisionPending},
		{"wide after the minimum", pointWith(2, 3, 10, 99, 100, 101), true, PrecisionPending},
		{"within ±3%", pointWith(3, 3, 10, 99, 100, 101), false, PrecisionReached},
		{"at the cap", pointWith(0.1, 3, 4, 99, 100, 101, 100), false, PrecisionCapReps},
		{"two identical samples are not precise", pointWith(3, 2, 10, 100, 100), true, PrecisionPending},
		{"a minimum above the cap is the cap", pointWith(0.1, 5, 4, 99, 100, 101, 100, 99), false, PrecisionCapReps},
	}
	for _, c := range cases {
		if more := c.pr.JudgePrecision(false); more != c.more || c.pr.Reached.State != c.state {
			t.Errorf("%s: more=%v state %s (half-width %.3g%%), want more=%v %s", c.name, more, c.pr.Reached.State, c.pr.Reached.HalfWidthPct, c.more, c.state)
		}
	}
	pr := pointWith(2, 3, 10, 99, 100, 101)
	if pr.JudgePrecision(true) || pr.Reached.State != PrecisionCapTime {
		t.Errorf("time up: state %s, want %s", pr.Reached.State, PrecisionCapTime)
	}
	if got := pointWith(3, 3, 10, 99, 100, 101); got.JudgePrecision(false) || got.Reached.HalfWidthPct < 2.4 || got.Reached.HalfWidthPct > 2.5 {
		t.Errorf("half-width of 99, 100, 101: %.4g%%, want 2.48%% (t(2) = 4.303)", got.Reached.HalfWidthPct)
	}
}
