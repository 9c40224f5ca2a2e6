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

// logWidth is a label width for logTicks tests: 7 px a character.
func logWidth(s string) float64 { return 7 * float64(len([]rune(s))) }

func TestLogTicks(t *testing.T) {
	cases := []struct {
		lo, hi, plotW float64
		ticks         []float64
		labels        []string
		minor         int // how many minor ticks; -1: do not check
	}{
		// Services 1 to 10,000 (with the layout's margin): every power of
		// ten, and 2–9 × 10^k between them.
		{0.76, 13200, 600, []float64{1, 10, 100, 1000, 10000}, []string{"1", "10", "100", "1k", "10k"}, 4*8 + 2},
		{1, 1e6, 600, []float64{1, 10, 100, 1000, 1e4, 1e5, 1e6}, []string{"1", "10", "100", "1k", "10k", "100k", "1M"}, -1},
		{0.001, 10, 500, []float64{0.001, 0.01, 0.1, 1, 10}, []string{"0.001", "0.01", "0.1", "1", "10"}, -1},
		{1e-6, 1e-3, 500, []float64{1e-6, 1e-5, 1e-4, 1e-3}, []string{"1µ", "10µ", "100µ", "0.001"}, -1},
		// Twenty decades in 300 px: every third power, counted from 10^0,
		// the others minor.
		{1, 1e20, 300, []float64{1, 1e3, 1e6, 1e9, 1e12, 1e15, 1e18}, []string{"1", "1k", "1M", "1G", "1T", "1e+15", "1e+18"}, 14},
		// Less than two decades: 1-2-5 ticks placed on the log scale.
		{20, 500, 600, nil, nil, -1},
	}
	for _, c := range cases {
		ticks, labels, minor := logTicks(c.lo, c.hi, c.plotW, logWidth)
		if c.ticks != nil && (!slices.Equal(ticks, c.ticks) || !slices.Equal(labels, c.labels)) {
			t.Errorf("logTicks(%v, %v, %v) = %v %q, want %v %q", c.lo, c.hi, c.plotW, ticks, labels, c.ticks, c.labels)
		}
		if c.minor >= 0 && len(minor) != c.minor {
			t.Errorf("logTicks(%v, %v, %v): %d minor ticks %v, want %d", c.lo, c.hi, c.plotW, len(minor), minor, c.minor)
		}
		if len(ticks) < 2 || len(ticks) != len(labels) {
			t.Errorf("logTicks(%v, %v): %d ticks, %d labels", c.lo, c.hi, len(ticks), len(labels))
		}
		// In range, ascending, and labels that do not overlap.
		l0 := math.Log10(c.lo)
		px := func(v float64) float64 { return (math.Log10(v) - l0) / (math.Log10(c.hi) - l0) * c.plotW }
		for i, v := range ticks {
			if v < c.lo || v > c.hi {
				t.Errorf("logTicks(%v, %v): tick %v out of range", c.lo, c.hi, v)
			}
			if i > 0 && px(v)-logWidth(labels[i])/2 < px(ticks[i-1])+logWidth(labels[i-1])/2 {
				t.Errorf("logTicks(%v, %v, %v): labels %q and %q overlap", c.lo, c.hi, c.plotW, labels[i-1], labels[i])
			}
		}
		for _, v := range minor {
			if v < c.lo || v > c.hi || slices.Contains(ticks, v) {
				t.Errorf("logTicks(%v, %v): minor tick %v out of range or on a major one", c.lo, c.hi, v)
			}
		}
	}
}

func TestLogLabel(t *testing.T) {
	for v, want := range map[float64]string{1: "1", 10: "10", 100: "100", 1000: "1k", 1e4: "10k", 1e5: "100k", 1e6: "1M", 1e9: "1G",
		0.1: "0.1", 0.01: "0.01", 2000: "2k", 5: "5", 1e-4: "100µ"} {
		if got := logLabel(v); got != want {
			t.Errorf("logLabel(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestLogSpace(t *testing.T) {
	xs := LogSpace(1, 10000, 5)
	want := []float64{1, 10, 100, 1000, 10000}
	for i := range want {
		if math.Abs(xs[i]-want[i]) > 1e-9*want[i] {
			t.Fatalf("LogSpace(1, 10000, 5) = %v, want %v", xs, want)
		}
	}
	if LogSpace(0, 10, 5) != nil || LogSpace(1, 10, 1) != nil || LogSpace(-1, 10, 5) != nil {
		t.Error("LogSpace accepted a non-positive end or n < 2")
	}
}

// TestLogAxis: a figure with XLog draws x at log10 positions (1, 10, 100
// equally spaced), labels the powers of ten, and has minor ticks; one x at
// zero or below keeps the axis linear and every point drawn.
func TestLogAxis(t *testing.T) {
	f := &Figure{Title: "t", XLabel: "services", YLabel: "y", XLog: true,
		Series: []Series{{Name: "a", Points: []Point{{X: 1, Y: 1}, {X: 10, Y: 2}, {X: 100, Y: 3}, {X: 1000, Y: 4}, {X: 10000, Y: 5}}}}}
	if !f.LogX() {
		t.Fatal("LogX false for positive x")
	}
	d := mustLayout(t, f)
	if !d.xa.log {
		t.Fatal("axis not logarithmic")
	}
	if s1, s2 := d.xa.px(10)-d.xa.px(1), d.xa.px(10000)-d.xa.px(1000); math.Abs(s1-s2) > 1e-6 || s1 <= 0 {
		t.Errorf("decades %v and %v px wide, want equal", s1, s2)
	}
	if want := []string{"1", "10", "100", "1k", "10k"}; !slices.Equal(d.xa.labels, want) {
		t.Errorf("labels %q, want %q", d.xa.labels, want)
	}
	if len(d.xa.minor) == 0 {
		t.Error("no minor ticks")
	}
	svg := parseSVG(t, mustSVG(t, f))
	if svg.classes["tick-minor"] != len(d.xa.minor) {
		t.Errorf("%d minor ticks drawn, want %d", svg.classes["tick-minor"], len(d.xa.minor))
	}
	for _, bad := range []float64{0, -1} {
		g := *f
		g.Series = []Series{{Name: "a", Points: append([]Point{{X: bad, Y: 0.5}}, f.Series[0].Points...)}}
		if g.LogX() {
			t.Errorf("LogX true with x = %v", bad)
		}
		d := mustLayout(t, &g)
		if d.xa.log || d.xa.lo > bad || len(d.xa.minor) != 0 {
			t.Errorf("x = %v: axis log %v from %v, want linear from %v or below", bad, d.xa.log, d.xa.lo, bad)
		}
	}
	g := *f
	g.VLines = []RefLine{{Value: 0}}
	if g.LogX() {
		t.Error("LogX true with a VLine at 0")
	}
	g = *f
	g.XLimits = Limits{Min: -1, Max: 2e4}
	if g.LogX() {
		t.Error("LogX true with XLimits from -1")
	}
	if (&Figure{XLog: true}).LogX() {
		t.Error("LogX true with no data")
	}
	if (&Figure{XLog: true, Kind: Bars, Series: f.Series}).LogX() {
		t.Error("LogX true for bars")
	}
}
