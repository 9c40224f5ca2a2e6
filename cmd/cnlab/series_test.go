package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// TestReportSeriesCLI draws a point's series from the committed run, to
// which it gives a series, and refuses what has none.
func TestReportSeriesCLI(t *testing.T) {
	dir := fixtureCopy(t)
	r, err := results.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &r.Points[0] // a tcp-stream
	s := &results.Series{T: []float64{1, 2}, Values: map[string]results.Floats{"throughput_gbps": {2.9, 3.0}, "retransmits": {0, 4}}}
	name := results.SeriesName(p.ID, p.Samples[0].Repetition)
	if err := results.WriteSeries(dir, name, s); err != nil {
		t.Fatal(err)
	}
	p.Samples[0].Series = name
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runCLI(t, "report", dir, "--series", p.ID)
	svg := filepath.Join(dir, "figures", "series-"+p.ID+"-throughput-gbps.svg")
	if code != 0 || !strings.Contains(out, "throughput_gbps: "+svg) || !strings.Contains(out, "without one") {
		t.Errorf("report --series: exit %d\n%s\n%s", code, out, errs)
	}
	out, _, code = runCLI(t, "report", dir, "--timeseries", p.ID, "-o", "json")
	var js struct {
		Point   string `json:"point"`
		Samples []struct {
			Series results.Series `json:"series"`
		} `json:"samples"`
		Figures []struct{ SVG string } `json:"figures"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.Point != p.ID || len(js.Samples) != 1 || len(js.Figures) != 2 ||
		js.Samples[0].Series.Values["retransmits"][1] != 4 {
		t.Errorf("report --series -o json: exit %d\n%.400s", code, out)
	}
	for _, bad := range [][]string{
		{"report", dir, "--series", "p9999"},
		{"report", dir, "--series", r.Points[1].ID}, // no series
		{"report", dir, dir, "--series", p.ID},
		{"report", dir, "--series", p.ID, "--combine", t.TempDir()},
	} {
		if _, errs, code := runCLI(t, bad...); code != 2 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d (want 2, one line)\n%s", bad, code, errs)
		}
	}
}
