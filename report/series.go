package report

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/report/plot"
)

// PointSeries is a point's per-second series, sample by sample (`cnlab
// report DIR --series POINT`), and the figures drawn of them.
type PointSeries struct {
	Point    string         `json:"point"`
	Sweep    string         `json:"sweep"`
	Series   string         `json:"series"` // the point's series in its sweep's figures
	Workload string         `json:"workload"`
	Samples  []SampleSeries `json:"samples"`
	// Missing are the repetitions that have no series (measured before
	// cnlab recorded them, or by a workload that reports no seconds).
	Missing []int          `json:"missing,omitempty"`
	Figures []SeriesFigure `json:"figures"`
}

// SampleSeries is one sample's series, as in its file.
type SampleSeries struct {
	Repetition int             `json:"repetition"`
	File       string          `json:"file"` // relative to the results directory
	Series     *results.Series `json:"series"`
}

// SeriesFigure is one metric of a point, every sample overlaid.
type SeriesFigure struct {
	ID     string       `json:"id"`
	Metric string       `json:"metric"`
	SVG    string       `json:"svg"` // where Write put it
	Plot   *plot.Figure `json:"-"`
}

// seriesOrder puts a series' metrics in the order the figures go: the
// registry's (throughput first, then retransmits; transactions, then
// latencies), unknown ones last by name.
func seriesOrder(names []string) []string {
	reg := results.MetricNames()
	out := slices.Clone(names)
	rank := func(n string) int {
		if i := slices.Index(reg, n); i >= 0 {
			return i
		}
		return len(reg)
	}
	slices.SortStableFunc(out, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

// LoadPointSeries reads the series of point id's samples from the
// results directory dir and draws one figure per metric, the samples
// overlaid (one line per repetition). A point whose samples have no
// series is an error that says why.
func LoadPointSeries(dir string, r *results.Results, id string) (*PointSeries, error) {
	i := slices.IndexFunc(r.Points, func(p results.PointResult) bool { return p.ID == id })
	if i < 0 {
		return nil, fmt.Errorf("no point %s in %s (points: %s)", id, dir, pointRange(r))
	}
	p := &r.Points[i]
	ps := &PointSeries{Point: p.ID, Sweep: p.Sweep, Series: p.Series, Workload: p.Workload.Name()}
	for _, s := range p.Samples {
		if s.Series == "" {
			ps.Missing = append(ps.Missing, s.Repetition)
			continue
		}
		ser, err := results.LoadSeries(dir, s.Series)
		if err != nil {
			return nil, err
		}
		ps.Samples = append(ps.Samples, SampleSeries{Repetition: s.Repetition, File: s.Series, Series: ser})
	}
	if len(ps.Samples) == 0 {
		why := "its run recorded no series (runs before cnlab kept them have none)"
		switch {
		case len(p.Samples) == 0:
			why = "it has no samples (status " + p.Status + ")"
		case p.Workload.Kind == results.Ping || p.Workload.Kind == results.AB:
			why = "its workload (" + p.Workload.Kind + ") reports no seconds"
		}
		return nil, fmt.Errorf("point %s has no per-second series: %s", id, why)
	}
	ps.draw()
	return ps, nil
}

// pointRange names the run's first and last point, for an error.
func pointRange(r *results.Results) string {
	switch n := len(r.Points); n {
	case 0:
		return "none"
	case 1:
		return r.Points[0].ID
	default:
		return fmt.Sprintf("%s to %s", r.Points[0].ID, r.Points[n-1].ID)
	}
}

// draw makes one figure per metric that any sample has.
func (ps *PointSeries) draw() {
	var names []string
	for _, s := range ps.Samples {
		for _, n := range s.Series.Names() {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, name := range seriesOrder(names) {
		m := MetricInfo(name)
		title := fmt.Sprintf("%s second by second — %s %s", m.Label, ps.Point, ps.Workload)
		if ps.Series != "" {
			title += " (" + ps.Series + ")"
		}
		f := &plot.Figure{ID: "series-" + ps.Point + "-" + strings.ReplaceAll(name, "_", "-"),
			Title:  title,
			XLabel: "time since the warm-up ended (s)", YLabel: m.Label,
			Note: fmt.Sprintf("Each line is one repetition of the point (%s with a series), a value per interval as the measuring tool reported it, at the interval's end (docs/methodology.md).", plural.N(len(ps.Samples), "sample"))}
		end := 0.0
		for _, s := range ps.Samples {
			vs, ok := s.Series.Values[name]
			if !ok {
				continue
			}
			ser := plot.Series{Name: fmt.Sprintf("repetition %d", s.Repetition), Style: plot.LineMarkers}
			for i, t := range s.Series.T {
				ser.Points = append(ser.Points, plot.Point{X: t, Y: vs[i]})
				end = max(end, t)
			}
			f.Series = append(f.Series, ser)
		}
		f.XLimits = plot.Limits{Min: 0, Max: max(end, math.Round(end))} // iperf3's last interval ends a little before or after its second
		ps.Figures = append(ps.Figures, SeriesFigure{ID: f.ID, Metric: name, Plot: f})
	}
}

// Write writes the figures as SVG into dir's figures/ (dir: the results
// directory) and returns the files written.
func (ps *PointSeries) Write(dir string) ([]string, error) {
	figDir := filepath.Join(dir, "figures")
	if err := files.Mkdir(figDir); err != nil {
		return nil, err
	}
	var written []string
	for i := range ps.Figures {
		f := &ps.Figures[i]
		data, err := f.Plot.SVG()
		if err != nil {
			return written, fmt.Errorf("figure %s: %w", f.ID, err)
		}
		path := filepath.Join(figDir, f.ID+".svg")
		if err := files.WriteAtomic(path, data); err != nil {
			return written, err
		}
		f.SVG = path
		written = append(written, path)
	}
	return written, nil
}
