package report

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/stats"
)

// Fit is one fitted law of one curve.
type Fit struct {
	Panel  string `json:"panel"`
	Series string `json:"series"`
	Kind   string `json:"kind"` // linear, power-law, bend
	N      int    `json:"n"`    // samples used
	// linear: metric = Intercept + Slope·x
	Intercept float64        `json:"intercept,omitempty"`
	Slope     float64        `json:"slope,omitempty"`
	SlopeCI   stats.Interval `json:"slopeCI"`
	// Relative is the slope as a fraction of the intercept per unit of x,
	// with its interval (the intercept taken as known); 0 when undefined.
	Relative   float64        `json:"relativeSlope,omitempty"`
	RelativeCI stats.Interval `json:"relativeSlopeCI"`
	Flat       bool           `json:"flat,omitempty"` // the slope's CI contains 0
	// power-law: t(n) = T1·(1−Loss)^(n−1)
	T1     float64        `json:"t1,omitempty"`
	Loss   float64        `json:"loss,omitempty"`
	LossCI stats.Interval `json:"lossCI"`
	// bend: a hinge at X0, slopes before and after
	X0          float64 `json:"x0,omitempty"`
	SlopeBefore float64 `json:"slopeBefore,omitempty"`
	SlopeAfter  float64 `json:"slopeAfter,omitempty"`
	P           float64 `json:"p,omitempty"`
	R2          float64 `json:"r2"`
	Text        string  `json:"text"`
	Note        string  `json:"note,omitempty"` // why a fit was not made
}

// Finding is one generated sentence, with the panel and points it rests
// on.
type Finding struct {
	Panel  string   `json:"panel"`
	Points []string `json:"points"`
	Text   string   `json:"text"`
}

// bootstrap settings of the findings' intervals: fixed, so a report is
// reproducible.
const (
	bootIters = 2000
	bootSeed  = 1
	// minCI is the fewest samples per side for a bootstrap interval: with
	// two, resampling gives three medians and no honest interval.
	minCI = 3
	// bendP is the p-value below which a bend is reported: the hinge's
	// F test picks its own breakpoint and calls a straight line bent more
	// often than its nominal 5% (see package stats).
	bendP = 0.01
)

// isCount reports whether x counts rules, policies or services: the axes
// whose slope is a per-rule (per-policy, per-service) cost, with baseline
// bars at the first x and a search for a bend.
func isCount(d string) bool {
	return d == "policies" || d == "firewallRules" || d == "services" || d == "l7Rules"
}

// unitOf is the unit of one step of x, for "per policy".
func unitOf(pn *Panel) (one, many string) {
	switch pn.XDim {
	case "policies":
		if strings.HasPrefix(pn.XLabel, "L4") {
			return "rule", "L4 rules"
		}
		if strings.HasPrefix(pn.XLabel, "matchLabels") {
			return "term", "matchLabels terms"
		}
		return "policy", "policies"
	case "firewallRules":
		return "rule", "rules"
	case "services":
		return "service", "services"
	case "l7Rules":
		return "rule", "L7 rules"
	case "chainLength":
		return "hop", "hops"
	case "switches":
		return "switch", "switches"
	case "flows":
		return "flow", "flows"
	case "size":
		return "byte", "bytes"
	case "mtu":
		return "byte of MTU", "bytes of MTU"
	}
	return "step", ""
}

// analyze fits every curve of a panel and says what it shows.
func analyze(pn *Panel) ([]Fit, []Finding) {
	var fits []Fit
	var finds []Finding
	if pn.XDim == "" {
		return nil, baseline(pn)
	}
	one, many := unitOf(pn)
	m := pn.Metric
	for _, c := range pn.Curves {
		if len(c.X) < 2 {
			continue
		}
		xs, ys := c.all()
		if pn.XDim == "chainLength" && m.Name == "throughput_gbps" {
			f := Fit{Panel: pn.ID, Series: c.Series, Kind: "power-law"}
			pl, err := stats.PowerLawFit(xs, ys)
			if err != nil {
				f.Note = fitNote(err)
			} else {
				f.N, f.T1, f.Loss, f.LossCI, f.R2 = pl.N, pl.T1, pl.Loss, pl.LossCI, pl.R2
				f.Text = fmt.Sprintf("t(n) = %s·(1 − l)^(n−1), l = %s%% per hop (95%% CI %s to %s%%), R² %.3f",
					fmtNum(pl.T1), signed(100*pl.Loss), signed(100*pl.LossCI.Lo), signed(100*pl.LossCI.Hi), pl.R2)
				var what string
				switch {
				case pl.LossCI.Contains(0):
					what = fmt.Sprintf("no per-hop loss is detectable (l = %s%% per hop, 95%% CI %s to %s%%)",
						signed(100*pl.Loss), signed(100*pl.LossCI.Lo), signed(100*pl.LossCI.Hi))
				case pl.Loss > 0:
					what = fmt.Sprintf("each hop costs %s%% of the throughput (95%% CI %s–%s%%)",
						fmtNum(100*pl.Loss), fmtNum(100*pl.LossCI.Lo), fmtNum(100*pl.LossCI.Hi))
				default:
					what = fmt.Sprintf("the throughput grows %s%% per hop (95%% CI %s–%s%%)",
						fmtNum(-100*pl.Loss), fmtNum(-100*pl.LossCI.Hi), fmtNum(-100*pl.LossCI.Lo))
				}
				finds = append(finds, Finding{Panel: pn.ID, Points: endPoints(c), Text: fmt.Sprintf(
					"%s (%s): %s, from %s Gb/s with one hop (fitted t(n) = t(1)·(1 − l)^(n−1); R² %.2f over %s).",
					c.Series, pn.ctx(), what, fmtNum(pl.T1), pl.R2, plural.N(pl.N, "sample"))})
			}
			fits = append(fits, f)
			continue
		}
		f := Fit{Panel: pn.ID, Series: c.Series, Kind: "linear"}
		lin, err := stats.LinearFit(xs, ys)
		if err != nil {
			f.Note = fitNote(err)
		} else {
			f.N, f.Intercept, f.Slope, f.SlopeCI, f.R2 = lin.N, lin.Intercept, lin.Slope, lin.SlopeCI, lin.R2
			f.Flat = lin.SlopeCI.Contains(0)
			if lin.Intercept > 0 && m.Unit != "%" { // a share of a percentage reads as percentage points
				f.Relative = lin.Slope / lin.Intercept
				f.RelativeCI = stats.Interval{Lo: lin.SlopeCI.Lo / lin.Intercept, Hi: lin.SlopeCI.Hi / lin.Intercept}
			}
			v, ci := slopeText(m.Unit, lin.Slope, lin.SlopeCI, one)
			f.Text = fmt.Sprintf("%s (%s)%s, R² %.3f", v, ci, relText(f), lin.R2)
		}
		fits = append(fits, f)
		finds = append(finds, change(pn, c, f, one, many))
		if isCount(pn.XDim) {
			if b, ok := bend(pn, c, one); ok {
				fits = append(fits, b)
				unit, k := slopeUnit(m.Unit)
				finds = append(finds, Finding{Panel: pn.ID, Points: endPoints(c), Text: fmt.Sprintf(
					"%s (%s): the curve bends at about %s %s (slope %s%s per %s before, %s after; p = %.2g).",
					c.Series, pn.ctx(), fmtX(b.X0), many, signed(k*b.SlopeBefore), unitSuffix(unit), one, signed(k*b.SlopeAfter), b.P)})
			}
		}
	}
	finds = append(finds, baseline(pn)...)
	return fits, finds
}

func fitNote(err error) string {
	switch {
	case errors.Is(err, stats.ErrTooFewPoints):
		return "too few points to fit"
	case errors.Is(err, stats.ErrNonPositive):
		return "a zero or negative value: no power law"
	}
	return err.Error()
}

func relText(f Fit) string {
	if f.Relative == 0 {
		return ""
	}
	return fmt.Sprintf(" = %s%% (%s to %s%%)", signed(100*f.Relative), signed(100*f.RelativeCI.Lo), signed(100*f.RelativeCI.Hi))
}

// change says how much a curve moves from its first x to its last, and
// whether its slope differs from 0.
func change(pn *Panel, c *Curve, f Fit, one, many string) Finding {
	m := pn.Metric
	x0, x1 := c.X[0], c.X[len(c.X)-1]
	a, b := c.Samples[x0], c.Samples[x1]
	ma, mb := stats.Median(a), stats.Median(b)
	var s strings.Builder
	fmt.Fprintf(&s, "%s (%s): %s ", c.Series, pn.ctx(), m.Label)
	if ma != 0 {
		ch := (mb - ma) / math.Abs(ma)
		verb := "rises"
		if ch < 0 {
			verb = "falls"
		}
		fmt.Fprintf(&s, "%s %s%% from %s to %s %s (median %s → %s %s", verb, fmtNum(math.Abs(100*ch)), fmtX(x0), fmtX(x1), many, fmtNum(ma), fmtNum(mb), m.Unit)
		if len(a) >= minCI && len(b) >= minCI {
			if lo, hi, err := stats.BootstrapMedianDiffCI(a, b, 0.95, bootIters, bootSeed); err == nil {
				fmt.Fprintf(&s, "; 95%% CI of the change %s to %s%%", signed(100*lo), signed(100*hi))
			}
		} else {
			fmt.Fprintf(&s, "; %d and %s: no interval", len(a), plural.N(len(b), "sample"))
		}
		s.WriteString(")")
	} else {
		fmt.Fprintf(&s, "goes from %s to %s %s from %s to %s %s", fmtNum(ma), fmtNum(mb), m.Unit, fmtX(x0), fmtX(x1), many)
	}
	switch {
	case f.N == 0:
		s.WriteString(".")
	case f.Flat:
		v, ci := slopeText(m.Unit, f.Slope, f.SlopeCI, one)
		fmt.Fprintf(&s, "; its slope is not different from 0 (%s, %s).", v, ci)
	default:
		v, ci := slopeText(m.Unit, f.Slope, f.SlopeCI, one)
		fmt.Fprintf(&s, "; slope %s (%s)", v, ci)
		if f.Relative != 0 {
			fmt.Fprintf(&s, ", %s%% of the fitted start per %s", signed(100*f.Relative), one)
		}
		s.WriteString(".")
	}
	return Finding{Panel: pn.ID, Points: endPoints(c), Text: s.String()}
}

// bend fits a hinge where a curve has enough distinct x, and keeps it
// when the bend is clear.
func bend(pn *Panel, c *Curve, one string) (Fit, bool) {
	if len(c.X) < 5 {
		return Fit{}, false
	}
	xs, ys := c.all()
	sg, err := stats.Breakpoint(xs, ys)
	// A bend is reported when the F test is clear and the two slopes'
	// intervals do not overlap: a report has a dozen curves, and the test
	// alone would call about one straight line in a hundred bent.
	disjoint := sg.SlopeBeforeCI.Hi < sg.SlopeAfterCI.Lo || sg.SlopeAfterCI.Hi < sg.SlopeBeforeCI.Lo
	if err != nil || sg.P >= bendP || !disjoint {
		return Fit{}, false
	}
	unit, k := slopeUnit(pn.Metric.Unit)
	return Fit{Panel: pn.ID, Series: c.Series, Kind: "bend", N: sg.N, X0: sg.X0, SlopeBefore: sg.SlopeBefore, SlopeAfter: sg.SlopeAfter,
		P: sg.P, R2: sg.R2, Text: fmt.Sprintf("bends at x = %s: %s then %s%s per %s (p = %.2g vs a line)",
			fmtX(sg.X0), signed(k*sg.SlopeBefore), signed(k*sg.SlopeAfter), unitSuffix(unit), one, sg.P)}, true
}

// baseline compares the curves at their common first x (seed 000's
// baseline figures).
func baseline(pn *Panel) []Finding {
	if len(pn.Curves) < 2 {
		return nil
	}
	x := firstX(pn)
	type v struct {
		c   *Curve
		med float64
	}
	var vs []v
	for _, c := range pn.Curves {
		if s, ok := c.Samples[x]; ok {
			vs = append(vs, v{c, stats.Median(s)})
		}
	}
	if len(vs) < 2 {
		return nil
	}
	best := vs[0]
	for _, w := range vs[1:] {
		if pn.Metric.Better >= 0 && w.med > best.med || pn.Metric.Better < 0 && w.med < best.med {
			best = w
		}
	}
	word := "highest"
	if pn.Metric.Better < 0 {
		word = "lowest"
	}
	var s strings.Builder
	at := ""
	if pn.XDim != "" {
		_, many := unitOf(pn)
		if x == 1 {
			many, _ = unitOf(pn) // "at 1 hop"
		}
		at = fmt.Sprintf(" at %s %s", fmtX(x), many)
	}
	fmt.Fprintf(&s, "%s%s (%s), %s has the %s %s: %s %s", upperFirst(pn.Metric.Label), at, pn.ctx(), best.c.Series, word, "median", fmtNum(best.med), pn.Metric.Unit)
	var pts []string
	pts = append(pts, best.c.Points[x]...)
	var others []string
	for _, w := range vs {
		if w.c == best.c {
			continue
		}
		pts = append(pts, w.c.Points[x]...)
		rel := ""
		if best.med != 0 {
			rel = fmt.Sprintf(" (%s%%)", signed(100*(w.med-best.med)/math.Abs(best.med)))
		}
		others = append(others, fmt.Sprintf("%s %s%s", w.c.Series, fmtNum(w.med), rel))
	}
	fmt.Fprintf(&s, "; %s.", strings.Join(others, ", "))
	return []Finding{{Panel: pn.ID, Points: pts, Text: s.String()}}
}

// ctx is a panel's workload and topology for a sentence.
func (p *Panel) ctx() string {
	parts := []string{p.Workload, p.Topology}
	if sw := p.namedSweep(); sw != "" {
		parts = append(parts, "sweep "+sw)
	}
	return strings.Join(parts, ", ")
}

// namedSweep is the sweep a panel names: one sweep is named (unless it is
// named as its topology); sweeps drawn together are not, their series say
// which is which ("scaling+iptables+top-of-chain" reads as one series).
func (p *Panel) namedSweep() string {
	if p.Sweep == p.Topology || strings.Contains(p.Sweep, "+") {
		return ""
	}
	return p.Sweep
}

func endPoints(c *Curve) []string {
	return append(append([]string(nil), c.Points[c.X[0]]...), c.Points[c.X[len(c.X)-1]]...)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// fmtNum prints a number with about three significant digits.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// fmtX prints a parameter value: whole numbers as such (200 policies, 4
// hops), others as fmtNum.
func fmtX(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmtNum(v)
}

// signed is fmtNum with a sign, and a real minus.
func signed(v float64) string {
	s := fmtNum(v)
	if v > 0 {
		return "+" + s
	}
	return strings.Replace(s, "-", "−", 1)
}

// firstX is the smallest x of a panel's curves: where baselines are
// compared.
func firstX(pn *Panel) float64 {
	x := pn.Curves[0].X[0]
	for _, c := range pn.Curves {
		if c.X[0] < x {
			x = c.X[0]
		}
	}
	return x
}

// slopeText is a slope with its interval, in the metric's slope unit
// (slopeUnit).
func slopeText(unit string, v float64, ci stats.Interval, per string) (value, interval string) {
	unit, k := slopeUnit(unit)
	return fmt.Sprintf("%s%s per %s", signed(k*v), unitSuffix(unit), per), fmt.Sprintf("95%% CI %s to %s", signed(k*ci.Lo), signed(k*ci.Hi))
}

// slopeUnit is the unit every slope of a metric in unit is stated in, and
// the factor from unit to it. Slopes are small next to the metric itself,
// so they are always given in the smaller unit of the metric (10.4 ns per
// policy, not 0.0104 µs; Mb/s per rule for every throughput), the same in
// every fit and finding, linear or either side of a bend, whatever their
// size. Fit's numbers (Slope, SlopeCI, SlopeBefore, SlopeAfter) stay in
// the metric's own unit.
func slopeUnit(unit string) (string, float64) {
	switch unit {
	case "µs":
		return "ns", 1e3
	case "Gb/s":
		return "Mb/s", 1e3
	}
	return unit, 1
}

// unitSuffix is a unit after a number: " ns", or nothing for a count.
func unitSuffix(unit string) string {
	if unit == "" {
		return ""
	}
	return " " + unit
}

// UnitCost is what each added unit of a sweep's axis costs per packet
// (streams), per transaction (rr), per connection (crr) or per request
// (http, ab): the slope of the time per packet, 1/rate, against x, fitted
// on every sample, with its 95% interval. A throughput's relative drop
// depends on the machine's per-packet base cost; this cost carries across
// machines and days (docs/methodology.md, "Costs per packet").
type UnitCost struct {
	Panel  string `json:"panel"`
	Series string `json:"series"`
	Per    string `json:"per"` // one unit of x: policy, rule, hop
	Of     string `json:"of"`  // packet, transaction, connection, request
	// Source is the metric the rate is: skb_per_s (the server's rx
	// packet counter), packets_per_s (iperf3's datagrams),
	// transactions_per_s, requests_per_s; or "throughput_gbps/MSS" where
	// no counter was recorded (MSS bytes per packet, assumed).
	Source string `json:"source"`
	MSS    int    `json:"mss,omitempty"`
	// MSSMax is the largest segment size of the fallback's samples when
	// they differ (MSS is then the smallest).
	MSSMax int `json:"mssMax,omitempty"`
	// TSOOn: bytes/MSS on points whose TSO was not off, where the stack's
	// packets were larger than a segment (the cost per packet is then
	// understated and the packets overstated).
	TSOOn bool `json:"tsoNotOff,omitempty"`
	N     int  `json:"n"`
	// BaseNs is the fitted time per packet at x = 0, Ns the slope: ns per
	// unit of x per packet, with its 95% interval (Student's t, n−2).
	BaseNs float64        `json:"baseNs"`
	Ns     float64        `json:"ns"`
	CI     stats.Interval `json:"ci95"`
	Flat   bool           `json:"flat,omitempty"` // the interval contains 0
	// CPUFirst and CPULast are the medians of the CPU time per packet
	// (per transaction) at the first and last x, in µs, where recorded.
	// Outliers counts the samples whose time per packet is more than 5×
	// the curve's median: a stalled sample's 1/rate is huge, and weighs
	// on the least squares as much as it is far.
	Outliers int     `json:"outliers,omitempty"`
	CPUFirst float64 `json:"cpuUsFirst,omitempty"`
	CPULast  float64 `json:"cpuUsLast,omitempty"`
	// Seed is the seed's own cost, computed from its published values,
	// where it published enough (seedCosts).
	Seed *SeedCost `json:"seed,omitempty"`
	Text string    `json:"text"`
	Note string    `json:"note,omitempty"` // why no cost was fitted
}

// SeedCost is a seed's per-unit cost per packet, from two published
// throughputs at two x and the segment size it sent.
type SeedCost struct {
	Source string  `json:"source"` // "the thesis (seed 000), Fig. 7.2"
	From   float64 `json:"fromGbps"`
	To     float64 `json:"toGbps"`
	X0     float64 `json:"x0"`
	X1     float64 `json:"x1"`
	MSS    int     `json:"mss"`
	Ns     float64 `json:"ns"`
}

// seedCost is one published comparison: which curve it belongs to.
type seedCost struct {
	experimentPrefix string // the experiment's name starts with it
	kind, xdim, topo string
	datapath, mode   string
	mtu              int  // the seed's MTU (the points' own or the machine's default)
	tsoOff           bool // the seed ran with TSO off
	cost             SeedCost
}

// seedCosts are the seeds' published throughputs that give a cost per
// packet (docs/methodology.md, "Costs per packet"): the thesis, chapter
// 7, Fig. 7.2 (single host, iptables with no matching rule, one iperf3
// TCP stream, MTU 1500, TSO off as its §8.1.3 found): 3.17 Gb/s with no
// policy, 2.26 Gb/s with 200 ("a performance loss of 29%"). Its
// multi-host Fig. 7.4 gives no value at 200 policies, its latency
// figures none past the baselines, and its TSO-on test of §8.1.3 (19.97
// → 17.10 Gb/s, 1 and 200 rules) no packet size.
var seedCosts = []seedCost{
	{experimentPrefix: "thesis-", kind: results.TCPStream, xdim: "policies", topo: "single-host", datapath: "iptables", mode: "no-match",
		mtu: 1500, tsoOff: true,
		cost: SeedCost{Source: "the thesis (seed 000), Fig. 7.2", From: 3.17, To: 2.26, X0: 0, X1: 200, MSS: 1448}},
}

// packetSizeAxes are the x axes that change the packet or message itself:
// no cost per unit of them per packet is derived.
var packetSizeAxes = map[string]bool{"mtu": true, "size": true, "offloads": true}

// tsoOff reports whether an offloads setting turns TSO off: "off" (every
// offload) or a "tso=off" among its comma-separated entries.
func tsoOff(offloads string) bool {
	if offloads == "off" {
		return true
	}
	for _, e := range strings.Split(offloads, ",") {
		if strings.TrimSpace(e) == "tso=off" {
			return true
		}
	}
	return false
}

func init() {
	for i := range seedCosts {
		c := &seedCosts[i].cost
		c.Ns = perPacketNs(c.From, c.To, c.X0, c.X1, c.MSS)
	}
}

// perPacketNs is the cost per unit of x per packet between two
// throughputs (Gb/s) of mss-byte packets at x0 and x1.
func perPacketNs(from, to, x0, x1 float64, mss int) float64 {
	bits := float64(mss) * 8
	return (bits/to - bits/from) / (x1 - x0) // bits / (Gb/s) = ns
}

// mssOf is a TCP segment's payload at MTU 1500 with timestamps
// (1500 − 20 IP − 20 TCP − 12 options: 1448 bytes), the fallback's
// packet size.
func mssOf(mtu int) int {
	if mtu <= 0 {
		mtu = 1500
	}
	return mtu - 52
}

// rateSource picks what a curve's time per packet is computed from: the
// first of the candidates every sample of the curve has.
func rateSource(kind string) (of string, candidates []string) {
	switch kind {
	case results.TCPStream:
		return "packet", []string{"skb_per_s", "throughput_gbps"}
	case results.UDPStream:
		return "packet", []string{"skb_per_s", "packets_per_s"}
	case results.TCPRR, results.UDPRR:
		return "transaction", []string{"transactions_per_s"}
	case results.TCPCRR:
		return "connection", []string{"transactions_per_s"}
	case results.HTTP, results.AB:
		return "request", []string{"requests_per_s"}
	}
	return "", nil
}

// unitCosts derives, for every curve of a headline panel with an x axis,
// the cost per packet (transaction, connection, request) of each unit of
// x.
func unitCosts(r *results.Results, env *results.Environment, pn *Panel) []UnitCost {
	if pn.XDim == "" || pn.Cost != nil || pn.Metric != MetricInfo(pn.Metric.Name) || pn.Metric.Name != figureMetrics(pn.Kind)[0] {
		return nil
	}
	of, cands := rateSource(pn.Kind)
	if of == "" {
		return nil
	}
	byID := map[string]*results.PointResult{}
	for i := range r.Points {
		byID[r.Points[i].ID] = &r.Points[i]
	}
	if packetSizeAxes[pn.XDim] {
		// x changes the packet (or the message) itself: a cost per unit
		// of it per packet compares packets of different sizes.
		return nil
	}
	one, many := unitOf(pn)
	var out []UnitCost
	for _, c := range pn.Curves {
		if len(c.X) < 2 {
			continue
		}
		uc := UnitCost{Panel: pn.ID, Series: c.Series, Per: one, Of: of}
		var pts []*results.PointResult
		for _, x := range c.X {
			for _, id := range c.Points[x] {
				if p := byID[id]; p != nil {
					pts = append(pts, p)
				}
			}
		}
		for _, m := range cands {
			all := true
			for _, p := range pts {
				if len(samplesOf(p, m)) != len(p.Samples) || len(p.Samples) == 0 {
					all = false
				}
			}
			if all {
				uc.Source = m
				break
			}
		}
		if uc.Source == "" {
			uc.Note = "not every sample has " + strings.Join(cands, " or ")
			out = append(out, uc)
			continue
		}
		metric := uc.Source
		if uc.Source == "throughput_gbps" {
			uc.Source = "throughput_gbps/MSS"
			metric = "throughput_gbps"
		}
		cpuMetric := "cpu_us_per_transaction"
		if of == "packet" {
			cpuMetric = "cpu_us_per_packet"
		}
		var xs, ts []float64
		cpuAt := map[float64][]float64{}
		for _, x := range c.X {
			for _, id := range c.Points[x] {
				p := byID[id]
				if p == nil {
					continue
				}
				for _, s := range p.Samples {
					v, ok := s.Metrics[metric]
					if !ok || v <= 0 {
						continue
					}
					rate := v
					if metric == "throughput_gbps" {
						mtu := p.Params.MTU
						if mtu == 0 && env != nil {
							mtu = env.DefaultMTU
						}
						mss := mssOf(mtu)
						if uc.MSS == 0 || mss < uc.MSS {
							uc.MSS = mss
						}
						uc.MSSMax = max(uc.MSSMax, mss)
						uc.TSOOn = uc.TSOOn || !tsoOff(p.Params.Offloads)
						rate = v * 1e9 / 8 / float64(mss)
					}
					xs = append(xs, x)
					ts = append(ts, 1e9/rate)
					if cv, ok := s.Metrics[cpuMetric]; ok {
						cpuAt[x] = append(cpuAt[x], cv)
					}
				}
			}
		}
		if v := cpuAt[c.X[0]]; len(v) > 0 {
			uc.CPUFirst = stats.Median(v)
		}
		if v := cpuAt[c.X[len(c.X)-1]]; len(v) > 0 {
			uc.CPULast = stats.Median(v)
		}
		if len(ts) > 0 {
			med := stats.Median(ts)
			for _, t := range ts {
				if t > 5*med {
					uc.Outliers++
				}
			}
		}
		lin, err := stats.LinearFit(xs, ts)
		if err != nil {
			uc.Note = fitNote(err)
			out = append(out, uc)
			continue
		}
		uc.N, uc.BaseNs, uc.Ns, uc.CI = lin.N, lin.Intercept, lin.Slope, lin.SlopeCI
		uc.Flat = lin.SlopeCI.Contains(0)
		if uc.MSSMax == uc.MSS {
			uc.MSSMax = 0
		}
		uc.Seed = seedCostFor(r, env, pn, pts)
		uc.Text = unitCostText(pn, uc, many)
		out = append(out, uc)
	}
	return out
}

// seedCostFor is the seed's published cost for a curve's points (nil if
// none applies).
func seedCostFor(r *results.Results, env *results.Environment, pn *Panel, pts []*results.PointResult) *SeedCost {
	for _, sc := range seedCosts {
		if !strings.HasPrefix(r.Experiment.Name, sc.experimentPrefix) || pn.Kind != sc.kind || pn.XDim != sc.xdim {
			continue
		}
		ok := len(pts) > 0
		for _, p := range pts {
			mtu := p.Params.MTU
			if mtu == 0 && env != nil {
				mtu = env.DefaultMTU
			}
			if mtu == 0 {
				mtu = 1500 // a lab's default
			}
			// The seed's conditions: the same packets (MTU, TSO off) on
			// the same path.
			if p.Params.Topology != sc.topo || string(p.Params.Datapath) != sc.datapath || p.Params.PolicyMode != sc.mode ||
				mtu != sc.mtu || tsoOff(p.Params.Offloads) != sc.tsoOff {
				ok = false
			}
		}
		if ok {
			c := sc.cost
			return &c
		}
	}
	return nil
}

// sourceText says where a unit cost's packets come from.
func sourceText(uc UnitCost) string {
	switch uc.Source {
	case "skb_per_s":
		return "packets counted at the server's interfaces"
	case "packets_per_s":
		return "datagrams iperf3 counted"
	case "throughput_gbps/MSS":
		seg := fmt.Sprintf("%d-byte", uc.MSS)
		if uc.MSSMax > uc.MSS {
			seg = fmt.Sprintf("%d- to %d-byte", uc.MSS, uc.MSSMax)
		}
		s := fmt.Sprintf("bytes over %s segments, assumed: no packet counter in this run", seg)
		if uc.TSOOn {
			s += "; TSO was not off, so the stack's packets were larger and fewer"
		}
		return s
	}
	return uc.Source
}

// unitCostText is a unit cost as a sentence: "iptables no-match
// (tcp-stream, single-host): +2.2 ns per policy per packet (95% CI +1.6
// to +2.8) ...".
func unitCostText(pn *Panel, uc UnitCost, many string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s (%s): ", uc.Series, pn.ctx())
	if uc.Flat {
		fmt.Fprintf(&s, "no cost per %s per %s different from 0 (%s ns, 95%% CI %s to %s)", uc.Per, uc.Of, signed(uc.Ns), signed(uc.CI.Lo), signed(uc.CI.Hi))
	} else {
		fmt.Fprintf(&s, "%s ns per %s per %s (95%% CI %s to %s)", signed(uc.Ns), uc.Per, uc.Of, signed(uc.CI.Lo), signed(uc.CI.Hi))
	}
	fmt.Fprintf(&s, ", on %s ns per %s at 0 %s (fitted; %s, %s)", fmtNum(uc.BaseNs), uc.Of, many, sourceText(uc), plural.N(uc.N, "sample"))
	if uc.Outliers > 0 {
		fmt.Fprintf(&s, "; %s more than 5× the median time per %s (a stalled sample: it weighs on the fit as much as it is far; cnlab report --exclude-noisy may leave it out)", plural.N(uc.Outliers, "sample"), uc.Of)
	}
	if uc.CPUFirst > 0 && uc.CPULast > 0 {
		fmt.Fprintf(&s, "; CPU time per %s %s → %s µs", uc.Of, fmtNum(uc.CPUFirst), fmtNum(uc.CPULast))
	}
	if sc := uc.Seed; sc != nil {
		fmt.Fprintf(&s, "; %s: %s ns (%s → %s Gb/s from %s to %s %s, %d-byte segments)", sc.Source, fmtNum(sc.Ns), fmtNum(sc.From), fmtNum(sc.To), fmtX(sc.X0), fmtX(sc.X1), many, sc.MSS)
	}
	s.WriteString(".")
	return s.String()
}
