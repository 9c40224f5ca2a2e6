package report

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/stats"
)

// Source is one run of a combined report: its results directory and what
// it holds.
type Source struct {
	Dir     string
	Results *results.Results
	Env     *results.Environment // nil when the run has no environment.json
}

// Combined is several runs merged into one: their points, renamed so that
// every line says where it was measured.
type Combined struct {
	Results *results.Results
	Env     *results.Environment
	Notes   []string
}

// SourceSeries names a point's line in a combined report: a cluster's
// points with Services by the cluster's kube-proxy ("kube-proxy iptables
// (real, cluster)"), without by its CNI ("cilium (real, cluster)"), a
// lab's by cnlab's series ("iptables (cnlab, lab)"). A
// lab's iptables series without policies loses its filler mode
// ("no-match"): with no policy there is no filler rule to place.
func SourceSeries(r *results.Results, p *results.PointResult) string {
	if r.Backend == results.BackendKubernetes {
		proxy := "unknown"
		if r.Cluster != nil && r.Cluster.KubeProxy != "" {
			proxy = r.Cluster.KubeProxy
		}
		where := "real, cluster"
		if rest := strings.TrimSpace(strings.TrimPrefix(p.Series, "cluster")); rest != "" {
			where += " " + rest // placement, host network
		}
		// A point without Services measures the CNI (and its policy
		// engine), one with Services the cluster's kube-proxy.
		if p.Params.Services == 0 && r.Cluster != nil && r.Cluster.CNI != "" && r.Cluster.CNI != "unknown" {
			return fmt.Sprintf("%s (%s)", r.Cluster.CNI, where)
		}
		return fmt.Sprintf("kube-proxy %s (%s)", proxy, where)
	}
	s := p.Series
	if p.Params.Policies == 0 && (p.Params.PolicyMode == "" || p.Params.PolicyMode == results.ModeNoMatch) {
		s = strings.Replace(s, " "+kind.FillerNoMatch, "", 1)
	}
	if s == "" || s == string(kind.None) {
		s = "no datapath"
	}
	return s + " (cnlab, lab)"
}

// CombinedSweep is the sweep a point is drawn in when runs are combined:
// its sweep's name up to the first '.', so that one run may bring several
// sweeps to one figure (sweeps "terms" and "terms.ipsets" of a lab, whose
// matrices cannot be one, beside a cluster's "terms").
func CombinedSweep(name string) string {
	base, _, _ := strings.Cut(name, ".")
	return base
}

// Combine merges runs into one set of results for one report (written
// to out): the points of the sweeps every run has (by name), their IDs
// prefixed with their run's directory name, their series renamed by
// SourceSeries (and suffixed "[DIR]" when two runs would give the same
// name), their sample logs pointed at their run's directory. The
// experiment and environment are the first run's that has them; the
// notes say which run is which, what was left out, and how long each
// run's Service installs took.
func Combine(srcs []Source, out string) (*Combined, error) {
	if len(srcs) == 0 {
		return nil, errors.New("no run to combine")
	}
	labels := sourceLabels(srcs)
	// The sweeps every run has.
	common := map[string]int{}
	for _, s := range srcs {
		seen := map[string]bool{}
		for _, p := range s.Results.Points {
			if sw := CombinedSweep(p.Sweep); !seen[sw] {
				seen[sw] = true
				common[sw]++
			}
		}
	}
	keep := func(sweep string) bool { return common[CombinedSweep(sweep)] == len(srcs) }
	// Series names, made unique across runs.
	owner := map[string]int{}
	clash := map[string]bool{}
	for i, s := range srcs {
		for j := range s.Results.Points {
			n := SourceSeries(s.Results, &s.Results.Points[j])
			if o, ok := owner[n]; ok && o != i {
				clash[n] = true
			}
			owner[n] = i
		}
	}
	first := srcs[0].Results
	c := &Combined{Results: &results.Results{
		Schema:     first.Schema,
		Cnlab:      first.Cnlab,
		Experiment: first.Experiment,
		Seed:       first.Seed,
		Lab:        "combined",
		StartedAt:  first.StartedAt,
		FinishedAt: first.FinishedAt,
		Status:     results.StatusComplete,
	}}
	var what []string
	for i, s := range srcs {
		r := s.Results
		if c.Env == nil && s.Env != nil {
			c.Env = s.Env
		}
		if r.StartedAt.Before(c.Results.StartedAt) {
			c.Results.StartedAt = r.StartedAt
		}
		if r.FinishedAt != nil && (c.Results.FinishedAt == nil || r.FinishedAt.After(*c.Results.FinishedAt)) {
			c.Results.FinishedAt = r.FinishedAt
		}
		if r.Status != results.StatusComplete {
			c.Results.Status = r.Status
		}
		rel, err := filepath.Rel(out, s.Dir)
		if err != nil {
			rel = s.Dir
		}
		var names []string
		left := 0
		for _, p := range r.Points {
			if !keep(p.Sweep) {
				left++
				continue
			}
			n := SourceSeries(r, &p)
			if clash[n] {
				n += " [" + labels[i] + "]"
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
			p.ID = labels[i] + "/" + p.ID
			p.Series = n
			p.Sweep = CombinedSweep(p.Sweep)
			p.Samples = slices.Clone(p.Samples)
			for k := range p.Samples {
				if p.Samples[k].Log != "" {
					p.Samples[k].Log = filepath.Join(rel, p.Samples[k].Log)
				}
				if p.Samples[k].Series != "" { // read from its run's directory, as the log
					p.Samples[k].Series = filepath.Join(rel, p.Samples[k].Series)
				}
			}
			c.Results.Points = append(c.Results.Points, p)
		}
		for _, j := range r.Order {
			if k := slices.IndexFunc(r.Points, func(p results.PointResult) bool { return p.ID == j.Point }); k >= 0 && keep(r.Points[k].Sweep) {
				c.Results.Order = append(c.Results.Order, results.Job{Point: labels[i] + "/" + j.Point, Repetition: j.Repetition})
			}
		}
		line := fmt.Sprintf("%s (%s, %s, cnlab %s): %s", labels[i], r.Experiment.Name, backendWords(r), r.Cnlab, strings.Join(names, "; "))
		if r.Experiment.Quick {
			line += ", --quick"
		}
		if left > 0 {
			line += fmt.Sprintf("; %s of sweeps the other runs do not have left out", plural.N(left, "point"))
		}
		what = append(what, line)
		if t := serviceApplyTimes(r); t != "" {
			c.Notes = append(c.Notes, labels[i]+": "+t)
		}
	}
	c.Notes = append([]string{"Combined from " + plural.N(len(srcs), "run") + " (the sweeps they all have; their samples are never pooled): " + strings.Join(what, ". ") + "."}, c.Notes...)
	if len(c.Results.Points) == 0 {
		return nil, errors.New("the runs have no sweep in common (by name): nothing to draw together")
	}
	// Where they were measured: one backend, or "kubernetes+lab"; the
	// environment table's cluster rows only when one cluster was measured
	// (the notes name each run's).
	var backends []string
	var clusters []Source
	for _, s := range srcs {
		b := s.Results.Backend
		if b == "" {
			b = results.BackendLab
		}
		if !slices.Contains(backends, b) {
			backends = append(backends, b)
		}
		if s.Results.Cluster != nil {
			clusters = append(clusters, s)
		}
	}
	slices.Sort(backends)
	c.Results.Backend = strings.Join(backends, "+")
	c.Results.Cluster = nil
	if len(clusters) == 1 {
		c.Results.Cluster = clusters[0].Results.Cluster
	}
	if c.Env != nil && (c.Env.Cluster != nil) != (c.Results.Cluster != nil) {
		env := *c.Env
		env.Cluster = c.Results.Cluster
		c.Env = &env
	}
	return c, nil
}

// sourceLabels are the runs' directory names, made unique with their
// position when two are the same.
func sourceLabels(srcs []Source) []string {
	var ls []string
	count := map[string]int{}
	for _, s := range srcs {
		b := filepath.Base(filepath.Clean(s.Dir))
		count[b]++
		ls = append(ls, b)
	}
	for i, l := range ls {
		if count[l] > 1 {
			ls[i] = fmt.Sprintf("%s#%d", l, i+1)
		}
	}
	return ls
}

// backendWords says where a run measured.
func backendWords(r *results.Results) string {
	if r.Backend != results.BackendKubernetes {
		return "lab"
	}
	if r.Cluster == nil {
		return "cluster"
	}
	return fmt.Sprintf("cluster, kube-proxy %s, CNI %s", r.Cluster.KubeProxy, r.Cluster.CNI)
}

// serviceApplyTimes sums up how long a run's Service installs took, by
// number of Services: the apply itself and, on a cluster, until the
// measured Service answered ("" when none was recorded).
func serviceApplyTimes(r *results.Results) string {
	apply := map[int][]float64{}
	ready := map[int][]float64{}
	for _, b := range r.Builds {
		for _, a := range b.ServiceApply {
			if a.Error != "" {
				continue
			}
			apply[a.Services] = append(apply[a.Services], a.Seconds)
			if a.ReadySeconds > 0 {
				ready[a.Services] = append(ready[a.Services], a.ReadySeconds)
			}
		}
	}
	var ns []int
	for n := range apply {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	var parts []string
	for _, n := range ns {
		part := fmt.Sprintf("%s: median %.3g s (%s)", plural.N(n, "Service"), stats.Median(apply[n]), plural.N(len(apply[n]), "install"))
		if xs := ready[n]; len(xs) > 0 {
			part += fmt.Sprintf(", answering after %.3g s", stats.Median(xs))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	return "installing the Services took " + strings.Join(parts, "; ") + " (builds[].serviceApply in its results.json)."
}

// LoadCombined reads the runs in dirs, combines them (Combine) and
// builds the report of out, where Write puts it; WriteCombined saves the
// combined results.json and environment.json there too.
func LoadCombined(dirs []string, out string, o Options) (*Report, error) {
	var srcs []Source
	for _, d := range dirs {
		r, err := results.Load(d)
		if err != nil {
			return nil, err
		}
		if o.ExcludeNoisy {
			r.ExcludeNoisy()
		}
		env, err := results.LoadEnvironment(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		srcs = append(srcs, Source{Dir: d, Results: r, Env: env})
	}
	c, err := Combine(srcs, out)
	if err != nil {
		return nil, err
	}
	rep := Build(c.Results, c.Env)
	rep.Dir = out
	rep.Notes = append(c.Notes, rep.Notes...)
	return rep, nil
}

// WriteCombined saves a combined report's results (results.json,
// results.csv, environment.json) into dir, so that cnlab report and
// cnlab compare can read it again, then writes the report.
func (rep *Report) WriteCombined(dir string) ([]string, error) {
	if err := files.Mkdir(dir); err != nil {
		return nil, err
	}
	if err := rep.Results.Write(dir); err != nil {
		return nil, err
	}
	if rep.Env != nil {
		if err := rep.Env.Write(dir); err != nil {
			return nil, err
		}
	}
	return rep.Write(dir)
}
