package report

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/stats"
)

// CVWarn is the coefficient of variation above which a point is flagged
// as noisy.
const CVWarn = 0.05

// Report is everything a report page shows.
type Report struct {
	Dir      string                  `json:"dir"`
	Results  *experiment.Results     `json:"-"`
	Env      *experiment.Environment `json:"environment,omitempty"`
	Figures  []Figure                `json:"figures"`
	Fits     []Fit                   `json:"fits"`
	Findings []Finding               `json:"findings"`
	Rows     []Row                   `json:"table"`
	Noisy    int                     `json:"noisyPoints"` // rows whose CV is above CVWarn
	Notes    []string                `json:"notes,omitempty"`
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
}

// Load reads a results directory (results.json and, if present,
// environment.json) and builds its report.
func Load(dir string) (*Report, error) {
	r, err := experiment.Load(dir)
	if err != nil {
		return nil, err
	}
	var env *experiment.Environment
	var e experiment.Environment
	switch err := files.ReadJSON(filepath.Join(dir, "environment.json"), &e); {
	case err == nil:
		env = &e
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	rep := Build(r, env)
	rep.Dir = dir
	return rep, nil
}

// Build analyses results: panels, figures, fits, findings, table.
func Build(r *experiment.Results, env *experiment.Environment) *Report {
	rep := &Report{Results: r, Env: env}
	pns := panels(r)
	for _, pn := range pns {
		fits, finds := analyze(pn)
		if pn.Metric.Name == figureMetrics(pn.Kind)[0] {
			// The headline metric gets findings; the others (p99) only
			// their figure and fits.
			rep.Findings = append(rep.Findings, finds...)
			if b, ok := baselineFigure(pn); ok {
				rep.Figures = append(rep.Figures, b)
			}
		}
		rep.Fits = append(rep.Fits, fits...)
		rep.Figures = append(rep.Figures, sweepFigure(pn, fits))
	}
	rep.Figures = append(rep.Figures, profileFigures(r, len(pns)+1)...)
	rep.table()
	switch r.Status {
	case experiment.StatusInterrupted:
		rep.Notes = append(rep.Notes, "The run was interrupted: the figures show the points it finished.")
	case experiment.StatusRunning:
		rep.Notes = append(rep.Notes, "The run is still going (or was killed): the figures show the samples taken so far.")
	}
	if r.Experiment.Quick {
		rep.Notes = append(rep.Notes, "A --quick run: few, short samples. It shows shapes; intervals are wide and small differences are noise.")
	}
	return rep
}

// table lists the primary metrics of every point.
func (rep *Report) table() {
	pts := append([]experiment.PointResult(nil), rep.Results.Points...)
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
