package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/stats"
)

// PairedComparison compares, within one run, the points that differ only
// in one parameter (A and B), round by round: the samples of A and B taken
// in the same round are a pair, so drift of the machine over the run moves
// both and cancels in their ratio.
type PairedComparison struct {
	Run     string         `json:"run"`
	Param   string         `json:"param"`
	A       string         `json:"a"`
	B       string         `json:"b"`
	Alpha   float64        `json:"alpha"`
	Changes []PairedChange `json:"changes"`
}

// PairedChange is one metric of one pair of points.
type PairedChange struct {
	PointA   string `json:"pointA"`
	PointB   string `json:"pointB"`
	Params   string `json:"params"` // A's parameters
	Workload string `json:"workload"`
	Metric   string `json:"metric"`
	// Ratio is B/A with its 95% interval (stats.Paired), as a
	// percentage change in the text.
	stats.PairedRatio
	Significant bool `json:"significant"`
	// UnpairedP is the Mann–Whitney p of the same samples taken as
	// unpaired, for contrast.
	UnpairedP float64 `json:"unpairedP"`
}

// ComparePaired pairs the points of r whose parameter param (a Params
// JSON name: datapath, policies, hostRouting, ...) is a and b and that
// agree on every other parameter and the workload (in any sweep: the
// rounds are the run's).
func ComparePaired(r *results.Results, param, a, b string) (*PairedComparison, error) {
	c := &PairedComparison{Run: r.Experiment.Name, Param: param, A: a, B: b, Alpha: Alpha}
	type keyed struct {
		rest string
		p    *results.PointResult
	}
	var as, bs []keyed
	known := false
	for i := range r.Points {
		p := &r.Points[i]
		m := map[string]any{}
		raw, _ := json.Marshal(p.Params)
		_ = json.Unmarshal(raw, &m)
		v, ok := m[param]
		if !ok {
			continue
		}
		known = true
		delete(m, param)
		rest, _ := json.Marshal(m)
		k := keyed{string(rest) + " " + p.Workload.Name(), p}
		switch fmt.Sprint(v) {
		case a:
			as = append(as, k)
		case b:
			bs = append(bs, k)
		}
	}
	if !known {
		return nil, fmt.Errorf("no point has a parameter %q (datapath, policies, topology, hostRouting, flows, ...)", param)
	}
	for _, pa := range as {
		for _, pb := range bs {
			if pa.rest != pb.rest {
				continue
			}
			for _, m := range PrimaryMetrics(pa.p.Workload.Kind) {
				xa, xb := pairedSamples(pa.p, pb.p, m)
				pr, err := stats.Paired(xa, xb)
				if err != nil {
					continue
				}
				_, up := stats.MannWhitney(xa, xb)
				c.Changes = append(c.Changes, PairedChange{PointA: pa.p.ID, PointB: pb.p.ID,
					Params: strings.TrimSpace(pa.p.Params.Text()), Workload: pa.p.Workload.Name(), Metric: m,
					PairedRatio: pr, Significant: pr.P < Alpha, UnpairedP: up})
			}
		}
	}
	if len(c.Changes) == 0 {
		return nil, fmt.Errorf("no two points differ only in %s (%s vs %s) with two rounds of samples in common", param, a, b)
	}
	sort.SliceStable(c.Changes, func(i, j int) bool { return c.Changes[i].PointA < c.Changes[j].PointA })
	return c, nil
}

// pairedSamples returns the values of a metric that A and B measured in
// the same rounds, in round order.
func pairedSamples(a, b *results.PointResult, metric string) (xa, xb []float64) {
	byRound := map[int]float64{}
	for _, s := range b.Samples {
		if v, ok := s.Metrics[metric]; ok {
			byRound[s.Repetition] = v
		}
	}
	for _, s := range a.Samples {
		va, ok := s.Metrics[metric]
		vb, okb := byRound[s.Repetition]
		if ok && okb {
			xa, xb = append(xa, va), append(xb, vb)
		}
	}
	return xa, xb
}

// Text prints the paired comparison as a table.
func (c *PairedComparison) Text(w io.Writer) error {
	fmt.Fprintf(w, "%s: %s=%s (A) vs %s=%s (B), paired by round (geometric mean of B/A, 95%% CI; paired t-test on the log ratios)\n", c.Run, c.Param, c.A, c.Param, c.B)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POINTS\tPARAMS\tWORKLOAD\tMETRIC\tPAIRS\tB vs A\t95% CI\tP\tUNPAIRED P")
	weak := ""
	for _, ch := range c.Changes {
		d := signed(100*(ch.Ratio-1)) + "%"
		if !ch.Significant {
			d = "~ (" + d + ")"
		}
		p := fmt.Sprintf("%.3g", ch.P)
		if ch.FewPairs != "" {
			p += fmt.Sprintf(" (%d pairs: weak*)", ch.N)
			weak = ch.FewPairs
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%d\t%s\t%s to %s%%\t%s\t%.3g\n", ch.PointA, ch.PointB, ch.Params, ch.Workload, ch.Metric, ch.N, d,
			signed(100*(ch.CI.Lo-1)), signed(100*(ch.CI.Hi-1)), p, ch.UnpairedP)
	}
	if err := tw.Flush(); err != nil || weak == "" {
		return err
	}
	_, err := fmt.Fprintf(w, "* %s\n", weak)
	return err
}
