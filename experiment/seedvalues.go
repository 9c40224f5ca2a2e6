package experiment

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
)

// Limits of a sweep's seed values (figures.seedValues).
const (
	maxSeedValues = 50  // tables or figures a sweep quotes
	maxSeedPoints = 200 // values of one
)

// checkSeedValues checks a sweep's figures.seedValues against the sweep's
// matrix m (its topologies, unless quick): a label, a metric a figure can draw, a
// topology the sweep has, a workload kind, and finite values, every range
// around its value. path is the list's YAML path.
func checkSeedValues(vs []results.SeedValues, m results.Matrix, s *Spec, path string) error {
	if len(vs) > maxSeedValues {
		return s.errf(path, "%d tables or figures: at most %d", len(vs), maxSeedValues)
	}
	var topologies []string
	if !s.quick { // a quick run may leave a topology out: the full run checks it
		topologies = results.AxisOf("topology").Strings(m)
	}
	for i, v := range vs {
		at := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case strings.TrimSpace(v.Label) == "" || len(v.Label) > 100:
			return s.errf(at+".label", "the seed and its table or figure (\"seed 000 thesis, Fig. 7.2\"), 1 to 100 characters")
		case !slices.Contains(results.FigureMetrics, v.Metric):
			return s.errf(at+".metric", "%q: one of %s", v.Metric, strings.Join(results.FigureMetrics, ", "))
		case v.Topology != "" && len(topologies) > 0 && !slices.Contains(topologies, v.Topology):
			return s.errf(at+".topology", "%q: not a topology of this sweep (%s)", v.Topology, strings.Join(topologies, ", "))
		case v.Workload != "" && !slices.Contains(results.WorkloadKinds, strings.Fields(v.Workload)[0]):
			return s.errf(at+".workload", "%q: a workload as a figure names it, starting with its kind (%s)", v.Workload, strings.Join(results.WorkloadKinds, ", "))
		case len(v.Points) == 0 || len(v.Points) > maxSeedPoints:
			return s.errf(at+".points", "%d values: 1 to %d", len(v.Points), maxSeedPoints)
		}
		for j, p := range v.Points {
			pat := fmt.Sprintf("%s.points[%d]", at, j)
			switch {
			case strings.TrimSpace(p.Series) == "" || len(p.Series) > 100:
				return s.errf(pat+".series", "the seed's name of the line or bar, 1 to 100 characters")
			case len(p.Line) > 200:
				return s.errf(pat+".line", "cnlab's line the series stands beside, at most 200 characters")
			case p.X != nil && !finite(*p.X):
				return s.errf(pat+".x", "%g: a finite number", *p.X)
			case !finite(p.Y):
				return s.errf(pat+".y", "%g: a finite number", p.Y)
			case (p.Low == nil) != (p.High == nil):
				return s.errf(pat, "low and high go together (the range the seed gave)")
			case p.Low != nil && !(finite(*p.Low) && finite(*p.High) && *p.Low <= p.Y && p.Y <= *p.High):
				return s.errf(pat, "low %g, y %g, high %g: a range around its value, low ≤ y ≤ high", *p.Low, p.Y, *p.High)
			}
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
