package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment"
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
	r, err := experiment.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	p := &r.Points[0]
	p.Status, p.Error, p.Samples, p.Summary = experiment.PointFailed, "iperf3: connection refused", nil, nil
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
}
