package plot

import (
	"math"
	"slices"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		target int
		want   []float64
		labels []string
	}{
		{0, 1, 6, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
		{0, 17.3, 6, []float64{0, 5, 10, 15, 20}, []string{"0", "5", "10", "15", "20"}},
		{3.2, 3.9, 6, []float64{3.2, 3.3, 3.4, 3.5, 3.6, 3.7, 3.8, 3.9}, []string{"3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9"}},
		{0, 200, 6, []float64{0, 50, 100, 150, 200}, []string{"0", "50", "100", "150", "200"}},
		{-5, 5, 6, []float64{-6, -4, -2, 0, 2, 4, 6}, []string{"-6", "-4", "-2", "0", "2", "4", "6"}},
		{0, 1e6, 6, []float64{0, 2e5, 4e5, 6e5, 8e5, 1e6}, []string{"0", "200k", "400k", "600k", "800k", "1M"}},
		{0, 12500, 5, []float64{0, 2000, 4000, 6000, 8000, 10000, 12000, 14000}, []string{"0", "2k", "4k", "6k", "8k", "10k", "12k", "14k"}},
		{1, 16, 6, []float64{0, 2, 4, 6, 8, 10, 12, 14, 16}, []string{"0", "2", "4", "6", "8", "10", "12", "14", "16"}},
		{0, 3500, 8, []float64{0, 500, 1000, 1500, 2000, 2500, 3000, 3500}, []string{"0", "500", "1k", "1.5k", "2k", "2.5k", "3k", "3.5k"}},
		{0, 1e-5, 5, []float64{0, 2e-6, 4e-6, 6e-6, 8e-6, 1e-5}, []string{"0", "2µ", "4µ", "6µ", "8µ", "10µ"}},
		{0, 0.003, 6, []float64{0, 0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003}, []string{"0", "0.0005", "0.001", "0.0015", "0.002", "0.0025", "0.003"}},
	}
	for _, c := range cases {
		lo, hi, step, ticks := niceTicks(c.lo, c.hi, c.target, true)
		if !slices.Equal(ticks, c.want) {
			t.Errorf("niceTicks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.target, ticks, c.want)
			continue
		}
		if lo > c.lo || hi < c.hi || lo != ticks[0] || hi != ticks[len(ticks)-1] {
			t.Errorf("niceTicks(%v, %v): range %v..%v does not cover the data with end ticks", c.lo, c.hi, lo, hi)
		}
		m := step / math.Pow(10, math.Floor(math.Log10(step)))
		if math.Abs(m-1) > 1e-9 && math.Abs(m-2) > 1e-9 && math.Abs(m-5) > 1e-9 {
			t.Errorf("step %v is not 1-2-5", step)
		}
		if got := formatTicks(ticks, step); !slices.Equal(got, c.labels) {
			t.Errorf("formatTicks(%v) = %q, want %q", ticks, got, c.labels)
		}
	}
}

func TestNiceTicksFixedRange(t *testing.T) {
	lo, hi, step, ticks := niceTicks(0.3, 2.7, 5, false)
	if lo != 0.3 || hi != 2.7 {
		t.Errorf("fixed range changed to %v..%v", lo, hi)
	}
	if want := []float64{0.5, 1, 1.5, 2, 2.5}; !slices.Equal(ticks, want) || step != 0.5 {
		t.Errorf("ticks %v step %v, want %v step 0.5", ticks, step, want)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 25: "25", 3.14159: "3.14", 12500: "12.5k", -0.5: "-0.5", 2.5e-6: "2.5µ"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestClipPolyline(t *testing.T) {
	// a line leaving and re-entering the box gives two pieces
	got := clipPolyline([]pt{{0, 5}, {5, 20}, {10, 5}}, 0, 0, 10, 10)
	if len(got) != 2 {
		t.Fatalf("got %d pieces: %v", len(got), got)
	}
	if got[0][0] != (pt{0, 5}) || got[1][len(got[1])-1] != (pt{10, 5}) {
		t.Errorf("pieces %v", got)
	}
	if got := clipPolyline([]pt{{20, 20}, {30, 30}}, 0, 0, 10, 10); got != nil {
		t.Errorf("outside line kept: %v", got)
	}
}

func TestDashPolyline(t *testing.T) {
	pieces := dashPolyline([]pt{{0, 0}, {10, 0}, {10, 12}}, []float64{4, 2})
	// on 0-4, 6-10, then the corner: (10,0)-(10,2)? no: off 10-12, on 12-16 ...
	total := 0.0
	for _, p := range pieces {
		for i := 0; i+1 < len(p); i++ {
			total += math.Hypot(p[i+1].x-p[i].x, p[i+1].y-p[i].y)
		}
	}
	// 22 units long, pattern 6: on 4 of each 6 → 4+4+4+4 (16..20 on) = 16 minus nothing; last 22..: 18-22 off→ 16 on? compute: on [0,4],[6,10],[12,16],[18,22] = 16
	if math.Abs(total-16) > 1e-9 {
		t.Errorf("dashed length %v, want 16 (%d pieces)", total, len(pieces))
	}
}
