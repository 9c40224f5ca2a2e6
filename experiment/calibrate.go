package experiment

import (
	"context"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/stats"
)

// Calibration is what `cnlab doctor` measured: this machine's
// sample-to-sample spread now, for the workloads experiments use, pinned
// (client and server on CPU 0, as the shipped experiments) and unpinned.
type Calibration struct {
	At       time.Time          `json:"at"`
	Duration float64            `json:"sampleSeconds"` // measured seconds of each sample
	Rows     []CalibrationRow   `json:"rows"`
	Noise    map[string]float64 `json:"noise"` // the largest steal and CPU pressure seen, percent
	Dir      string             `json:"resultsDir,omitempty"`
}

// CalibrationRow is one workload, pinned or not.
type CalibrationRow struct {
	Workload string  `json:"workload"`
	Pinned   bool    `json:"pinned"`
	Metric   string  `json:"metric"`
	Samples  int     `json:"samples"`
	Median   float64 `json:"median"`
	CVPct    float64 `json:"cvPercent"`
	// Needed is the samples for a 95% half-width of ±2% and ±5% of the
	// mean at this CV (0: more than 1000).
	Needed2 int `json:"samplesFor2Percent"`
	Needed5 int `json:"samplesFor5Percent"`
}

// CalibrateOptions tune a calibration.
type CalibrateOptions struct {
	Samples  int           // per workload and pinning (default 8)
	Duration time.Duration // measured per sample (default 1s)
	Datapath string        // default: the default datapath
	RR       []string      // argv of cnlab's rr command
	Progress func(string)
	Out      string // keep the two runs' results here (default: a temporary directory, removed)
}

// calibrationExp is the experiment a calibration runs, twice.
const calibrationExp = `name: doctor-%s
warmup: 1s
duration: %s
repetitions: %d
seed: 1
%s
workloads: [{kind: tcp-rr}, {kind: tcp-stream}]
matrix: {topology: [single-host], datapath: [%s]}
`

// Calibrate measures tcp-rr and one tcp-stream between two endpoints of a
// single-host lab (its datapath with no policy), pinned and unpinned, in
// labs it builds and takes down.
func Calibrate(ctx context.Context, o CalibrateOptions) (*Calibration, error) {
	if o.Samples <= 0 {
		o.Samples = 8
	}
	if o.Duration <= 0 {
		o.Duration = time.Second
	}
	if o.Datapath == "" {
		o.Datapath = string(kind.Default)
	}
	out := o.Out
	if out == "" {
		dir, err := os.MkdirTemp("", "cnlab-doctor-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		out = dir
	}
	c := &Calibration{At: time.Now().UTC(), Duration: o.Duration.Seconds(), Noise: map[string]float64{"maxStealPct": 0, "maxCPUPressurePct": 0}}
	if o.Out != "" {
		c.Dir = o.Out
	}
	for _, pinned := range []bool{true, false} {
		name, pin := "unpinned", ""
		if pinned {
			name, pin = "pinned", "pin: {client: 0, server: 0}"
		}
		text := fmt.Sprintf(calibrationExp, name, o.Duration, o.Samples, pin, o.Datapath)
		s, err := Parse([]byte(text), "doctor-"+name+".yaml", false)
		if err != nil {
			return nil, err
		}
		if o.Progress != nil {
			o.Progress(fmt.Sprintf("calibrating %s: %d samples of tcp-rr and tcp-stream", name, o.Samples))
		}
		r, err := Run(ctx, s, []byte(text), Options{Out: filepath.Join(out, name), RR: o.RR, NoReference: true})
		if err != nil {
			return nil, err
		}
		for _, p := range r.Points {
			m := results.Headline(p.Workload.Kind)
			var xs []float64
			for _, smp := range p.Samples {
				if v, ok := smp.Metrics[m]; ok {
					xs = append(xs, v)
				}
				if n := smp.Noise; n != nil {
					for _, st := range n.StealPct {
						c.Noise["maxStealPct"] = math.Max(c.Noise["maxStealPct"], st)
					}
					c.Noise["maxCPUPressurePct"] = math.Max(c.Noise["maxCPUPressurePct"], n.CPUPressurePct)
				}
			}
			if len(xs) < 2 {
				return nil, fmt.Errorf("%s %s: %d samples: %s", name, p.Workload.Name(), len(xs), p.Error)
			}
			st := stats.Summarize(xs)
			c.Rows = append(c.Rows, CalibrationRow{Workload: p.Workload.Kind, Pinned: pinned, Metric: m, Samples: st.N,
				Median: st.Median, CVPct: 100 * st.CV, Needed2: SamplesFor(st.CV, 2), Needed5: SamplesFor(st.CV, 5)})
		}
	}
	sort.SliceStable(c.Rows, func(i, j int) bool { return c.Rows[i].Workload < c.Rows[j].Workload })
	return c, nil
}

// SamplesFor is the fewest samples whose 95% confidence half-width of the
// mean, t(n−1) × cv / √n, is within target percent of the mean, for a
// coefficient of variation cv (a fraction); at least results.MinJudged, 0 when
// more than MaxRepetitions would be needed.
func SamplesFor(cv, targetPct float64) int {
	for n := results.MinJudged; n <= MaxRepetitions; n++ {
		if stats.TQuantile975(n-1)*cv/math.Sqrt(float64(n))*100 <= targetPct {
			return n
		}
	}
	return 0
}

// EstimateFor says how long each point of s needs to reach its precision
// target (2% where it has none) at the spread the calibration measured
// for its workload and pinning, scaling the CV by √(calibration sample /
// the file's sample) (longer samples average more: an assumption, true of
// independent noise). It returns the total measured time and the points
// the calibration has no workload for.
func (c *Calibration) EstimateFor(s *Spec) (total time.Duration, unknown int, err error) {
	points, err := s.Points()
	if err != nil {
		return 0, 0, err
	}
	pinned := s.Pin != nil && (s.Pin.Client != nil || s.Pin.Server != nil)
	for _, p := range points {
		target := p.Precision.TargetOf(p.Workload.Kind)
		if target == 0 {
			target = 2
		}
		var row *CalibrationRow
		for i := range c.Rows {
			if c.Rows[i].Workload == p.Workload.Kind && c.Rows[i].Pinned == pinned {
				row = &c.Rows[i]
			}
		}
		if row == nil {
			unknown++
			continue
		}
		cv := row.CVPct / 100 * math.Sqrt(c.Duration/time.Duration(s.Duration).Seconds())
		n := SamplesFor(cv, target)
		if n == 0 {
			n = MaxRepetitions
		}
		n = max(n, p.Repetitions)
		total += time.Duration(n) * time.Duration(s.Warmup+s.Duration)
	}
	return total, unknown, nil
}
