package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// seriesRun is the committed real run (testdata/run, recorded before
// cnlab kept series) copied to a temporary directory, with series given
// to two of point p0002's (tcp-rr) three samples.
func seriesRun(t *testing.T) (string, *results.Results) {
	t.Helper()
	dir := t.TempDir()
	r, err := results.Load("testdata/run")
	if err != nil {
		t.Fatal(err)
	}
	p := &r.Points[1]
	if p.ID != "p0002" || p.Workload.Kind != results.TCPRR || len(p.Samples) < 3 {
		t.Fatalf("fixture's p0002: %s %s", p.ID, p.Workload.Kind)
	}
	for i := range 2 {
		s := &results.Series{T: []float64{1, 2, 3}, Values: map[string]results.Floats{
			"transactions_per_s": {1000, 0, 1100 + float64(i)},
			"latency_p50_us":     {40, math.NaN(), 41},
			"latency_p99_us":     {90, math.NaN(), 95},
		}}
		name := results.SeriesName(p.ID, p.Samples[i].Repetition)
		if err := results.WriteSeries(dir, name, s); err != nil {
			t.Fatal(err)
		}
		p.Samples[i].Series = name
	}
	return dir, r
}

func TestPointSeries(t *testing.T) {
	dir, r := seriesRun(t)
	ps, err := LoadPointSeries(dir, r, "p0002")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Samples) != 2 || len(ps.Missing) != 1 || ps.Missing[0] != r.Points[1].Samples[2].Repetition {
		t.Errorf("samples %d, missing %v", len(ps.Samples), ps.Missing)
	}
	// A second without a transaction reads back as none.
	if v := ps.Samples[0].Series.Values["latency_p50_us"]; !math.IsNaN(v[1]) || v[2] != 41 {
		t.Errorf("p50 %v", v)
	}
	// One figure per metric, in the registry's order, every sample a
	// line with a legend of its own.
	var metrics []string
	for _, f := range ps.Figures {
		metrics = append(metrics, f.Metric)
		if len(f.Plot.Series) != 2 || f.Plot.Series[0].Name == f.Plot.Series[1].Name {
			t.Errorf("%s: series %+v", f.ID, f.Plot.Series)
		}
	}
	if strings.Join(metrics, " ") != "transactions_per_s latency_p50_us latency_p99_us" {
		t.Errorf("figures of %v", metrics)
	}
	written, err := ps.Write(dir)
	if err != nil || len(written) != 3 {
		t.Fatalf("write: %v %v", written, err)
	}
	svg, err := os.ReadFile(written[1])
	if err != nil || !strings.HasPrefix(filepath.Base(written[1]), "series-p0002-") || !strings.Contains(string(svg), "p50 latency") {
		t.Errorf("%s: %v", written[1], err)
	}
}

// TestPointSeriesMissing: an unknown point, and a point of a run that
// kept no series, are errors that say so.
func TestPointSeriesMissing(t *testing.T) {
	dir, r := seriesRun(t)
	for id, want := range map[string]string{
		"p9999": "no point p9999",
		"p0001": "recorded no series",
	} {
		if _, err := LoadPointSeries(dir, r, id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", id, err, want)
		}
	}
	// A series file that is gone is an error naming it.
	if err := os.Remove(filepath.Join(dir, r.Points[1].Samples[0].Series)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPointSeries(dir, r, "p0002"); err == nil || !strings.Contains(err.Error(), "p0002-r") {
		t.Errorf("removed file: %v", err)
	}
}
