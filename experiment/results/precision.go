package results

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/cnlab/cnlab/stats"
)

// Precision asks for repetitions until a point's headline metric is known
// well enough, as netperf's -I: after the experiment's `repetitions` (the
// minimum), a point gets another sample in each further round until the
// 95% confidence interval of its headline metric's mean is within Target
// of the mean (half-width over mean), or it has MaxRepetitions samples,
// or the run has taken MaxTime. The rule looks only at the interval's
// width, never at a difference between points, so stopping early cannot
// make a difference look significant.
type Precision struct {
	Target Percent `yaml:"target" json:"target,omitempty"`
	// ByWorkload sets the target of a workload kind (tcp-rr: 3%), for
	// the kinds it names; Target applies to the others (none: fixed
	// repetitions for them).
	ByWorkload     map[string]Percent `yaml:"byWorkload" json:"byWorkload,omitempty"`
	MaxRepetitions int                `yaml:"maxRepetitions" json:"maxRepetitions"`
	MaxTime        Duration           `yaml:"maxTime" json:"maxTime,omitempty"`
}

// Default caps of a precision target.
const (
	DefaultMaxRepetitions = 20
)

// Percent is a share written "2%" or 2 (percent); it is held and written
// to JSON as a percentage (2 for 2%).
type Percent float64

// UnmarshalYAML reads "2%" or 2.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := ParsePercent(s)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*p = Percent(v)
	return nil
}

// ParsePercent reads "2%", "2" or "0.5%" as a percentage.
func ParsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a percentage (e.g. 2%%)", s)
	}
	return v, nil
}

// TargetOf is the target of a workload kind, in percent (0: none).
func (p *Precision) TargetOf(kind string) float64 {
	if p == nil {
		return 0
	}
	if t, ok := p.ByWorkload[kind]; ok {
		return float64(t)
	}
	return float64(p.Target)
}

// MinJudged is the fewest samples a precision is judged reached from: two
// can agree by chance, and a quantized metric (rr percentiles come from a
// histogram) gives identical samples, an interval of width 0.
const MinJudged = 3

// Precision states of a point (PrecisionResult.State).
const (
	PrecisionPending = "pending"         // still short of its target, may get more samples
	PrecisionReached = "reached"         // the interval is within the target
	PrecisionCapReps = "cap-repetitions" // stopped at maxRepetitions short of the target
	PrecisionCapTime = "cap-time"        // stopped at maxTime short of the target
	PrecisionStopped = "stopped"         // the run ended (interrupted, or the point failed) first
)

// PrecisionResult is how close a point with a precision target came.
type PrecisionResult struct {
	Metric string `json:"metric"` // the headline metric judged
	// TargetPct and HalfWidthPct are the target and the achieved 95%
	// confidence half-width of the mean, as percentages of the mean.
	TargetPct    float64 `json:"targetPct"`
	HalfWidthPct float64 `json:"halfWidthPct"`
	Samples      int     `json:"samples"`
	State        string  `json:"state"`
}

// relHalfWidth is a summary's 95% half-width as a percentage of its mean
// (+Inf with fewer than two samples or a zero mean).
func relHalfWidth(s stats.Summary) float64 {
	if s.N < 2 || s.Mean == 0 {
		return math.Inf(1)
	}
	return (s.MeanCI.Hi - s.MeanCI.Lo) / 2 / math.Abs(s.Mean) * 100
}

// JudgePrecision updates a point's precision result from its samples and
// reports whether it needs another sample.
func (p *PointResult) JudgePrecision(timeUp bool) bool {
	target := p.Precision.TargetOf(p.Workload.Kind)
	if target == 0 {
		return false
	}
	m := Headline(p.Workload.Kind)
	sm := p.Summary[m]
	hw := relHalfWidth(stats.Summary{N: sm.N, Mean: sm.Mean, MeanCI: stats.Interval{Lo: sm.CILow, Hi: sm.CIHigh}})
	res := &PrecisionResult{Metric: m, TargetPct: target, HalfWidthPct: hw, Samples: len(p.Samples)}
	if math.IsInf(hw, 0) {
		res.HalfWidthPct = -1 // not known yet (JSON has no infinity)
	}
	p.Reached = res
	switch {
	case p.Status == PointFailed:
		res.State = PrecisionStopped
		return false
	case len(p.Samples) < p.Repetitions:
		res.State = PrecisionPending
		return false // the minimum rounds are already scheduled
	case len(p.Samples) >= MinJudged && hw <= target:
		res.State = PrecisionReached
		return false
	case len(p.Samples) >= max(p.Repetitions, p.Precision.MaxRepetitions):
		res.State = PrecisionCapReps
		return false
	case timeUp:
		res.State = PrecisionCapTime
		return false
	}
	res.State = PrecisionPending
	return true
}

// String is the target in words: "±2%", or per workload "tcp-stream
// ±5%, tcp-rr ±3%, ±2% otherwise".
func (p *Precision) String() string {
	var parts []string
	for _, k := range WorkloadKinds {
		if t, ok := p.ByWorkload[k]; ok {
			parts = append(parts, fmt.Sprintf("%s ±%g%%", k, float64(t)))
		}
	}
	if p.Target > 0 {
		if len(parts) > 0 {
			parts = append(parts, fmt.Sprintf("±%g%% otherwise", float64(p.Target)))
		} else {
			parts = append(parts, fmt.Sprintf("±%g%%", float64(p.Target)))
		}
	}
	return strings.Join(parts, ", ")
}
