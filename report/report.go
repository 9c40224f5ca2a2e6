package report

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/stats"
)

// CVWarn is the coefficient of variation above which a point is flagged
// as noisy.
const CVWarn = 0.05

// Report is everything a report page shows.
type Report struct {
	Dir      string               `json:"dir"`
	Results  *results.Results     `json:"-"`
	Env      *results.Environment `json:"environment,omitempty"`
	Figures  []Figure             `json:"figures"`
	Fits     []Fit                `json:"fits"`
	Findings []Finding            `json:"findings"`
	Rows     []Row                `json:"table"`
	// Proxy is what the L7 proxy adds over the L3/L4 path, per proxied
	// L7 point (runs with l7Mode l4 and http-any or rules).
	Proxy []ProxyRow `json:"proxyOverhead,omitempty"`
	Noisy int        `json:"noisyPoints"` // rows whose CV is above CVWarn
	// Precision counts the points with a precision target by how they
	// ended (results.PrecisionReached, ...).
	Precision map[string]int `json:"precision,omitempty"`
	// NoisySamples counts the samples taken under unusual noise
	// (results.NoisyRule) that the report includes; Excluded those
	// it left out (--exclude-noisy).
	NoisySamples int      `json:"noisySamples"`
	Excluded     int      `json:"excludedSamples"`
	Notes        []string `json:"notes,omitempty"`

	// UnitCosts are, per curve of every sweep's headline figure, what
	// each unit of its x costs per packet (transaction, connection).
	UnitCosts []UnitCost `json:"unitCosts,omitempty"`
}

// Row is one metric of one point in the table.
type Row struct {
	Point    string         `json:"point"`
	Sweep    string         `json:"sweep,omitempty"`
	Topology string         `json:"topology"`
	Series   string         `json:"series"`
	Params   string         `json:"params"`
	Workload string         `json:"workload"`
	Metric   string         `json:"metric"`
	N        int            `json:"n"`
	Median   float64        `json:"median"`
	CI       stats.Interval `json:"ci95"`
	CV       float64        `json:"cv"`
	Noisy    bool           `json:"noisy,omitempty"`
	Status   string         `json:"status"`
	Error    string         `json:"error,omitempty"`
	// Precision is how close the point's headline metric came to its
	// precision target (on that metric's row only).
	Precision *results.PrecisionResult `json:"precision,omitempty"`
}

// Options change what a report takes from a run.
type Options struct {
	// ExcludeNoisy leaves out the samples taken under unusual noise
	// (results.NoisyRule); the report says how many.
	ExcludeNoisy bool
}

// Load reads a results directory (results.json and, if present,
// environment.json) and builds its report.
func Load(dir string) (*Report, error) { return LoadWith(dir, Options{}) }

// LoadWith is Load with options.
func LoadWith(dir string, o Options) (*Report, error) {
	r, err := results.Load(dir)
	if err != nil {
		return nil, err
	}
	excluded := -1
	if o.ExcludeNoisy {
		excluded = r.ExcludeNoisy()
	}
	env, err := results.LoadEnvironment(dir)
	if errors.Is(err, fs.ErrNotExist) {
		env = nil // a run from before environment.json: the report says less
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	rep := Build(r, env)
	rep.Dir = dir
	if excluded >= 0 {
		rep.Excluded = excluded
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s left out (--exclude-noisy): %s.", plural.N(excluded, "noisy sample"), results.NoisyRule))
	}
	return rep, nil
}

// Build analyses results: panels, figures, fits, findings, table.
func Build(r *results.Results, env *results.Environment) *Report {
	r = withoutUnresolved(r)
	rep := &Report{Results: r, Env: env}
	pns := panels(r)
	for _, pn := range pns {
		if pn.Cost != nil {
			// Its figure only: the findings are the measured panel's.
			rep.Figures = append(rep.Figures, costFigure(pn))
			continue
		}
		fits, finds := analyze(pn)
		if pn.Metric.Name == figureMetrics(pn.Kind)[0] {
			// The headline metric gets findings; the others (p99) only
			// their figure and fits.
			rep.Findings = append(rep.Findings, finds...)
			if b, ok := baselineFigure(pn); ok {
				x := firstX(pn)
				addSeedValues(&b, panelSeedValues(r, pn), pn, &x)
				rep.Figures = append(rep.Figures, b)
			}
		}
		rep.Fits = append(rep.Fits, fits...)
		rep.UnitCosts = append(rep.UnitCosts, unitCosts(r, env, pn)...)
		f := sweepFigure(pn, fits)
		seed := panelSeedValues(r, pn)
		addSeedValues(&f, seed, pn, nil)
		if ref := reference(r, pn); ref != "" {
			f.Caption += " The seed measured: " + ref
			f.Plot.Note = f.Caption
		}
		rep.Figures = append(rep.Figures, f)
		if n, ok := seedNormalised(pn, seed); ok {
			rep.Figures = append(rep.Figures, n)
		}
	}
	rep.Figures = append(rep.Figures, profileFigures(r, len(pns)+1)...)
	rep.table()
	rep.proxyTable()
	rep.precisionNote()
	if noisy, recorded := r.CountNoisy(); noisy > 0 {
		rep.NoisySamples = noisy
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d of %s were taken under unusual noise (%s); cnlab report --exclude-noisy leaves them out.",
			noisy, plural.N(recorded, "sample"), results.NoisyRule))
	}
	switch r.Status {
	case results.StatusInterrupted:
		rep.Notes = append(rep.Notes, "The run was interrupted: the figures show the points it finished.")
	case results.StatusRunning:
		rep.Notes = append(rep.Notes, "The run is still going (or was killed): the figures show the samples taken so far.")
	}
	if line := enforcementTimes(r); line != "" {
		rep.Notes = append(rep.Notes, line)
	}
	if n, why := unenforced(r); n > 0 {
		cni := "unknown"
		if r.Cluster != nil {
			cni = r.Cluster.CNI
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("The cluster (CNI %s) did not enforce the policies in %s as they say (%s): the points were measured anyway (--unenforced), so differences across policies are not the cost of enforcing them.",
			cni, plural.N(n, "policy update"), why))
	}
	switch {
	case r.Experiment.Quick && rep.Precision != nil:
		rep.Notes = append(rep.Notes, "A --quick run: short samples, repeated until the precision above; small differences within those intervals are noise.")
	case r.Experiment.Quick:
		rep.Notes = append(rep.Notes, "A --quick run: few, short samples. It shows shapes; intervals are wide and small differences are noise.")
	}
	return rep
}

// table lists the primary metrics of every point.
func (rep *Report) table() {
	pts := append([]results.PointResult(nil), rep.Results.Points...)
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].ID < pts[j].ID })
	for _, p := range pts {
		base := Row{Point: p.ID, Sweep: p.Sweep, Topology: p.Params.Topology, Series: p.Series, Params: p.Params.Text(),
			Workload: p.Workload.Name(), Status: p.Status, Error: p.Error}
		any := false
		for _, m := range PrimaryMetrics(p.Workload.Kind) {
			xs := samplesOf(&p, m)
			if len(xs) == 0 {
				continue
			}
			any = true
			s := stats.Summarize(xs)
			row := base
			row.Metric, row.N, row.Median, row.CI, row.CV = m, s.N, s.Median, s.MeanCI, s.CV
			row.CI.Lo, row.CI.Hi = MetricInfo(m).Clamp(s.MeanCI.Lo, s.MeanCI.Hi)
			row.Noisy = s.N > 1 && s.CV > CVWarn
			if p.Reached != nil && p.Reached.Metric == m {
				row.Precision = p.Reached
			}
			if row.Noisy {
				rep.Noisy++
			}
			rep.Rows = append(rep.Rows, row)
		}
		if !any {
			rep.Rows = append(rep.Rows, base)
		}
	}
}

// Write writes report.html and figures/*.png into dir (the results
// directory) and returns the files written.
func (rep *Report) Write(dir string) ([]string, error) {
	figDir := filepath.Join(dir, "figures")
	if err := files.Mkdir(figDir); err != nil {
		return nil, err
	}
	// Figures of an earlier report go: their numbers may have shifted.
	old, _ := filepath.Glob(filepath.Join(figDir, "fig*.png"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	var written []string
	for _, f := range rep.Figures {
		data, err := f.Plot.PNG()
		if err != nil {
			return written, fmt.Errorf("figure %s: %w", f.ID, err)
		}
		path := filepath.Join(figDir, f.ID+".png")
		if err := files.WriteAtomic(path, data); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	page, err := rep.HTML()
	if err != nil {
		return written, err
	}
	path := filepath.Join(dir, "report.html")
	if err := files.WriteAtomic(path, page); err != nil {
		return written, err
	}
	return append(written, path), nil
}

// precisionNote counts how the points with a precision target ended and
// says so, naming those that stopped short of it.
func (rep *Report) precisionNote() {
	var short []string
	for _, p := range rep.Results.Points {
		pr := p.Reached
		if pr == nil {
			continue
		}
		if rep.Precision == nil {
			rep.Precision = map[string]int{}
		}
		rep.Precision[pr.State]++
		if pr.State != results.PrecisionReached {
			hw := "unknown"
			if pr.HalfWidthPct >= 0 {
				hw = fmt.Sprintf("±%.2g%%", pr.HalfWidthPct)
			}
			short = append(short, fmt.Sprintf("%s (%s, %s of ±%g%% after %s)", p.ID, pr.State, hw, pr.TargetPct, plural.N(pr.Samples, "sample")))
		}
	}
	if rep.Precision == nil {
		return
	}
	n := 0
	for _, c := range rep.Precision {
		n += c
	}
	msg := fmt.Sprintf("Precision targets (95%% confidence half-width of the headline metric's mean, %s): %d of the %d points with a target reached it.",
		targets(rep.Results), rep.Precision[results.PrecisionReached], n)
	if len(short) > 0 {
		sort.Strings(short)
		if len(short) > 12 {
			short = append(short[:12], fmt.Sprintf("and %d more", len(short)-12))
		}
		msg += " Short of it: " + strings.Join(short, ", ") + "."
	}
	rep.Notes = append(rep.Notes, msg)
}

// targets lists the precision targets of a run's points by workload.
func targets(r *results.Results) string {
	by := map[string]float64{}
	for _, p := range r.Points {
		if p.Reached != nil {
			by[p.Workload.Kind] = p.Reached.TargetPct
		}
	}
	var parts []string
	for _, k := range sortedKindKeys(by) {
		parts = append(parts, fmt.Sprintf("%s ±%g%%", k, by[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKindKeys(m map[string]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// unenforced counts the policy applies a cluster did not enforce as the
// model says, with the first mismatch.
func unenforced(r *results.Results) (int, string) {
	n, why := 0, ""
	for _, b := range r.Builds {
		for _, a := range b.PolicyApply {
			if a.Enforced != nil && !*a.Enforced {
				n++
				if why == "" {
					why = a.Mismatch
				}
			}
		}
	}
	return n, why
}

// enforcementTimes sums up a cluster's time to enforcement (from a policy
// apply until the probe saw it enforced, for the applies that changed a
// probed connection's verdict) and to a Service answering, by number of
// policies and Services ("" when the run recorded none).
func enforcementTimes(r *results.Results) string {
	type key struct {
		n    int
		mode string
	}
	pol := map[key][]float64{}
	svc := map[key][]float64{}
	for _, b := range r.Builds {
		for _, a := range b.PolicyApply {
			if a.Enforced != nil && *a.Enforced && a.ChangedCells > 0 {
				k := key{a.Policies, a.PolicyMode}
				pol[k] = append(pol[k], a.EnforcedSeconds)
			}
		}
		for _, a := range b.ServiceApply {
			if a.ReadySeconds > 0 {
				k := key{a.Services, ""}
				svc[k] = append(svc[k], a.ReadySeconds)
			}
		}
	}
	part := func(m map[key][]float64, what string) []string {
		var keys []key
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].mode != keys[j].mode {
				return keys[i].mode < keys[j].mode
			}
			return keys[i].n < keys[j].n
		})
		var out []string
		for _, k := range keys {
			xs := m[k]
			sort.Float64s(xs)
			label := plural.N(k.n, what)
			if k.mode != "" {
				label += " " + k.mode
			}
			out = append(out, fmt.Sprintf("%s: median %.3g s (%s, %.3g–%.3g)", label, stats.Median(xs), plural.N(len(xs), "apply"), xs[0], xs[len(xs)-1]))
		}
		return out
	}
	var parts []string
	if p := part(pol, "policy"); len(p) > 0 {
		parts = append(parts, "time from a policy apply until the probe saw it enforced — "+strings.Join(p, "; "))
	}
	if p := part(svc, "Service"); len(p) > 0 {
		parts = append(parts, "time from installing Services until the measured one answered — "+strings.Join(p, "; "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "On the cluster: " + strings.Join(parts, ". ") + " (builds[].policyApply and serviceApply in results.json)."
}

// withoutUnresolved is r without the values no client measured: ab's
// latency percentiles below its 1 ms resolution (recorded as 0 µs by runs
// before that was known, left out since). A point with any sample below
// it loses the metric in every sample: a median of only the samples that
// reached 1 ms would be biased up, as those below are below all of them.
// r itself is left as it is; a point that loses a metric is summarized
// again.
func withoutUnresolved(r *results.Results) *results.Results {
	var cp *results.Results
	for i := range r.Points {
		p := &r.Points[i]
		var drop []string
		for _, m := range []string{"latency_p50_us", "latency_p90_us", "latency_p99_us"} {
			if resolutionOf(p.Workload.Kind, m) > 0 && censored(p, m) > 0 && len(samplesOf(p, m)) > 0 {
				drop = append(drop, m)
			}
		}
		if len(drop) == 0 {
			continue
		}
		if cp == nil {
			c := *r
			c.Points = slices.Clone(r.Points)
			cp = &c
		}
		q := &cp.Points[i]
		q.Samples = slices.Clone(p.Samples)
		for j := range q.Samples {
			q.Samples[j].Metrics = maps.Clone(q.Samples[j].Metrics)
			for _, m := range drop {
				delete(q.Samples[j].Metrics, m)
			}
		}
		q.Summarize()
	}
	if cp == nil {
		return r
	}
	return cp
}
