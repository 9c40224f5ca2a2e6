package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
)

// fixtureCopy copies the report package's committed real run into a
// temporary results directory.
func fixtureCopy(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	for _, f := range []string{"results.json", "environment.json"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "report", "testdata", "run", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := files.WriteAtomic(filepath.Join(dir, f), data); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReportCLI(t *testing.T) {
	dir := fixtureCopy(t)
	out, errs, code := runCLI(t, "report", dir)
	if code != 0 || !strings.Contains(out, "Findings:") || !strings.Contains(out, "report: "+filepath.Join(dir, "report.html")) {
		t.Fatalf("report: exit %d\n%s\n%s", code, out, errs)
	}
	pngs, _ := filepath.Glob(filepath.Join(dir, "figures", "*.png"))
	if len(pngs) == 0 {
		t.Error("no figures/*.png")
	}
	out, _, code = runCLI(t, "report", dir, "-o", "json")
	var js struct {
		Findings []struct{ Text string } `json:"findings"`
		Figures  []struct{ PNG string }  `json:"figures"`
		HTML     string                  `json:"html"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js.Findings) == 0 || len(js.Figures) != len(pngs) || js.HTML == "" {
		t.Errorf("report -o json: exit %d, %d findings, %d figures (%d PNGs)\n%.300s", code, len(js.Findings), len(js.Figures), len(pngs), out)
	}
	for _, bad := range [][]string{
		{"report", filepath.Join(dir, "nowhere")},
		{"report", filepath.Join(dir, "results.json")},
		{"report", t.TempDir()},
		{"compare", dir, t.TempDir()},
		{"compare", dir, dir, "--threshold", "-3"},
		{"report", dir, "-o", "yaml"},
	} {
		if _, errs, code := runCLI(t, bad...); code != 2 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d (want 2, one line)\n%s", bad, code, errs)
		}
	}
}

// TestReportCombineCLI: two runs drawn in one report written to a
// directory of its own, their lines told apart by their directories;
// several runs without --combine, or --combine into one of them, are bad
// input.
func TestReportCombineCLI(t *testing.T) {
	a, b := fixtureCopy(t), fixtureCopy(t)
	out := filepath.Join(t.TempDir(), "both")
	stdout, errs, code := runCLI(t, "report", a, b, "--combine", out)
	if code != 0 || !strings.Contains(stdout, "note: Combined from 2 runs") || !strings.Contains(stdout, "report: "+filepath.Join(out, "report.html")) {
		t.Fatalf("report --combine: exit %d\n%s\n%s", code, stdout, errs)
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := results.Load(a); len(r.Points) != 2*len(n.Points) || !strings.HasSuffix(r.Points[0].Series, "[run#1]") {
		t.Errorf("combined: %d points, first series %q", len(r.Points), r.Points[0].Series)
	}
	for _, bad := range [][]string{
		{"report", a, b},
		{"report", a, b, "--combine", a},
	} {
		if _, errs, code := runCLI(t, bad...); code != 2 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d (want 2, one line)\n%s", bad, code, errs)
		}
	}
}

// TestCompareCLI: a run against itself is all "~" and passes the gate; a
// copy whose point failed is a regression under --threshold (exit 1) and
// only a listed difference without it.
func TestCompareCLI(t *testing.T) {
	a := fixtureCopy(t)
	out, errs, code := runCLI(t, "compare", a, a, "--threshold", "5")
	if code != 0 || strings.Contains(out, "REGRESSION") || !strings.Contains(out, "0 of ") {
		t.Fatalf("compare with itself: exit %d\n%s\n%s", code, out, errs)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "p0") && !strings.HasSuffix(strings.TrimSpace(line), "~") {
			t.Errorf("not ~ against itself: %s", line)
		}
	}
	b := fixtureCopy(t)
	r, err := results.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	p := &r.Points[0]
	p.Status, p.Error, p.Samples, p.Summary = results.PointFailed, "iperf3: connection refused", nil, nil
	if err := files.WriteJSON(filepath.Join(b, "results.json"), r, true); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := runCLI(t, "compare", a, b); code != 0 || !strings.Contains(out, "measured in A, not in B") {
		t.Errorf("compare without a gate: exit %d\n%s\n%s", code, out, errs)
	}
	html := filepath.Join(t.TempDir(), "c.html")
	out, errs, code = runCLI(t, "compare", a, b, "--threshold", "5", "--html", html, "-o", "json")
	var c struct {
		Regressions int `json:"regressions"`
		Missing     []struct {
			PointA string `json:"pointA"`
		} `json:"missing"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &c) != nil || c.Regressions != 1 || len(c.Missing) != 1 || c.Missing[0].PointA != p.ID {
		t.Errorf("compare gate: exit %d, %+v\n%s\n%s", code, c, out, errs)
	}
	if page, err := os.ReadFile(html); err != nil || !strings.Contains(string(page), "</html>") {
		t.Errorf("compare --html: %v", err)
	}
	// Reference speeds apart: said in text and JSON.
	for i, dir := range []string{a, b} {
		env, err := results.LoadEnvironment(dir)
		if err != nil {
			t.Fatal(err)
		}
		k := float64(1 + i)
		env.Reference = &results.ReferenceSpeed{StreamGbps: []float64{13 / k, 13.1 / k, 12.9 / k}, RRP50Us: []float64{8.3 * k, 8.2 * k, 8.3 * k}}
		if err := env.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	if out, errs, code := runCLI(t, "compare", a, b); code != 0 || !strings.Contains(out, "warning: reference speed") || !strings.Contains(out, "differ by more than their noise") {
		t.Errorf("compare of runs on machines apart: exit %d\n%s\n%s", code, out, errs)
	}
	out, _, _ = runCLI(t, "compare", a, b, "-o", "json")
	var rj struct {
		Reference struct{ Differ bool } `json:"referenceSpeed"`
	}
	if json.Unmarshal([]byte(out), &rj) != nil || !rj.Reference.Differ {
		t.Errorf("compare -o json: no referenceSpeed.differ: %s", out)
	}
}

// TestCompareJSONPercent: every relative value `compare -o json` writes
// is a percentage under a name that says so: a point whose samples are
// all 10% lower in B has deltaPercent −10 (not −0.1), one 25% higher
// +25; --min-change 3 and --threshold 5 come back as 3 and 5, the default
// minimum as 2; no fraction is written under delta, minChange or
// threshold.
func TestCompareJSONPercent(t *testing.T) {
	a, b := fixtureCopy(t), fixtureCopy(t)
	r, err := results.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	scale := map[string]float64{"p0001": 0.9, "p0002": 1.25}
	for i := range r.Points {
		if k, ok := scale[r.Points[i].ID]; ok {
			for _, s := range r.Points[i].Samples {
				for m := range s.Metrics {
					s.Metrics[m] *= k
				}
			}
		}
	}
	if err := files.WriteJSON(filepath.Join(b, "results.json"), r, true); err != nil {
		t.Fatal(err)
	}
	compare := func(args ...string) map[string]any {
		t.Helper()
		out, errs, code := runCLI(t, append([]string{"compare", a, b, "-o", "json"}, args...)...)
		var c map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &c) != nil {
			t.Fatalf("compare %v: exit %d\n%.500s\n%s", args, code, out, errs)
		}
		for _, k := range []string{"minChange", "threshold", "delta"} {
			if _, ok := c[k]; ok {
				t.Errorf("compare %v writes %q", args, k)
			}
		}
		return c
	}
	c := compare("--min-change", "3", "--threshold", "5")
	if c["minChangePercent"] != 3.0 || c["thresholdPercent"] != 5.0 {
		t.Errorf("minChangePercent %v, thresholdPercent %v; want 3 and 5", c["minChangePercent"], c["thresholdPercent"])
	}
	changes, _ := c["changes"].([]any)
	seen := map[string]bool{}
	for _, x := range changes {
		ch := x.(map[string]any)
		if _, ok := ch["delta"]; ok {
			t.Errorf("a change writes delta: %v", ch)
		}
		ma, mb, d := ch["medianA"].(float64), ch["medianB"].(float64), ch["deltaPercent"].(float64)
		if ma == 0 {
			continue
		}
		if want := 100 * (mb - ma) / math.Abs(ma); math.Abs(d-want) > 1e-9*math.Abs(want)+1e-12 {
			t.Errorf("%s %s: deltaPercent %v, want 100 × (%v − %v) / %v = %v", ch["pointA"], ch["metric"], d, mb, ma, ma, want)
		}
		p := ch["pointA"].(string)
		want, scaled := map[string]float64{"p0001": -10, "p0002": 25}[p]
		switch {
		case scaled && math.Abs(d-want) > 1e-6:
			t.Errorf("%s %s: deltaPercent %v, want %v", p, ch["metric"], d, want)
		case !scaled && d != 0:
			t.Errorf("%s %s: deltaPercent %v for an unchanged point", p, ch["metric"], d)
		}
		seen[p] = true
	}
	if !seen["p0001"] || !seen["p0002"] {
		t.Errorf("the scaled points are not compared: %v", seen)
	}
	if c := compare(); c["minChangePercent"] != 2.0 || c["thresholdPercent"] != nil {
		t.Errorf("defaults: minChangePercent %v (want 2), thresholdPercent %v (want none)", c["minChangePercent"], c["thresholdPercent"])
	}
}
