package experiment

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/plural"
)

// DefaultText is the experiment `cnlab run` runs without a file: a quick
// policy-scaling sweep on one host across the datapaths (seed 000's
// figures 7.2 and 7.6 in miniature).
//
//go:embed default.yaml
var DefaultText []byte

// DefaultFile names the built-in experiment in messages and results.
const DefaultFile = "(built-in default experiment)"

// Estimate is how long a run should take: measured time plus a per-job
// and per-lab overhead measured on the development machine (2 cores),
// which a slower machine exceeds.
func (s *Spec) Estimate() (jobs, labs int, d time.Duration, err error) {
	points, err := s.Points()
	if err != nil {
		return 0, 0, 0, err
	}
	return s.estimate(points)
}

// EstimateMax is Estimate with every point that has a precision target
// taking its maximum number of repetitions: how long the run can take.
func (s *Spec) EstimateMax() (jobs, labs int, d time.Duration, err error) {
	points, err := s.Points()
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range points {
		if pr := points[i].Precision; pr != nil {
			points[i].Repetitions = max(points[i].Repetitions, pr.MaxRepetitions)
		}
	}
	return s.estimate(points)
}

// What a run on a cluster adds, measured on the test control plane
// (BENCHMARKS.md): a sample's exec round trips, and a deployment's pods
// with cnlab copied in and the first probe.
const (
	clusterRunCost    = 2 * time.Second
	clusterDeployCost = 5 * time.Second
)

func (s *Spec) estimate(points []results.Point) (jobs, labs int, d time.Duration, err error) {
	order := schedule(points, s.Repetitions, nil)
	prev := ""
	byID := map[string]results.Point{}
	for _, p := range points {
		byID[p.ID] = p
	}
	for _, j := range order {
		p := byID[j.Point]
		if k := labKey(p.Params); k != prev {
			labs++
			prev = k
		}
		d += time.Duration(s.Warmup+s.Duration) + 300*time.Millisecond
		if p.Workload.Kind == results.Ping {
			d -= time.Duration(s.Warmup + s.Duration)
			d += time.Duration(p.Workload.Count) * 15 * time.Millisecond
		}
		if s.Backend == results.BackendKubernetes {
			d += clusterRunCost
		}
	}
	d += time.Duration(labs) * 500 * time.Millisecond
	if s.Backend == results.BackendKubernetes {
		d += time.Duration(labs) * clusterDeployCost
	}
	return len(order), labs, d, nil
}

// String describes the spec in one line.
func (s *Spec) String() string {
	reps := plural.N(s.Repetitions, "repetition")
	if p := s.Precision; p != nil {
		reps = fmt.Sprintf("%d to %d repetitions, until %s", s.Repetitions, max(s.Repetitions, p.MaxRepetitions), p)
	}
	return fmt.Sprintf("%s (%v warm-up, %v measured, %s)", s.Name, time.Duration(s.Warmup), time.Duration(s.Duration), reps)
}
