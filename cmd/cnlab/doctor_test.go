package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestDoctor runs the calibration at its smallest: four rows (tcp-rr and
// tcp-stream, pinned and not) with measured medians and spreads, an
// estimate for a file, and no lab left behind (TestMain checks).
func TestDoctor(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	stdout, stderr, code := runCLI(t, "doctor", "../../experiments/thesis-policy-scaling.yaml", "--quick", "--samples", "3", "-o", "json")
	if code != 0 {
		t.Fatalf("doctor: exit %d: %s", code, stderr)
	}
	var out struct {
		Calibration struct {
			Rows []struct {
				Workload string
				Pinned   bool
				Samples  int
				Median   float64
				CVPct    float64 `json:"cvPercent"`
			}
		}
		Estimate struct {
			Experiment      string
			MeasuredSeconds float64
		}
		Reference struct {
			StreamGbps []float64 `json:"streamGbps"`
			RRP50Us    []float64 `json:"rrP50Us"`
			Error      string    `json:"error"`
		} `json:"referenceSpeed"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(out.Calibration.Rows) != 4 {
		t.Fatalf("rows: %+v", out.Calibration.Rows)
	}
	for _, r := range out.Calibration.Rows {
		if r.Samples != 3 || r.Median <= 0 || r.CVPct < 0 {
			t.Errorf("row %+v", r)
		}
	}
	if out.Estimate.Experiment != "thesis-policy-scaling" || out.Estimate.MeasuredSeconds <= 0 {
		t.Errorf("estimate %+v", out.Estimate)
	}
	// The reference speed, on a veth pair of its own (removed: TestMain
	// checks that no namespace is left).
	if r := out.Reference; r.Error != "" || len(r.StreamGbps) < 2 || len(r.RRP50Us) < 2 || r.StreamGbps[0] <= 0 || r.RRP50Us[0] <= 0 {
		t.Errorf("reference speed %+v", r)
	}
	if _, stderr, code := runCLI(t, "doctor", "--samples", "2"); code != 2 || !strings.Contains(stderr, "--samples 2: between 3 and 100") {
		t.Errorf("--samples 2: exit %d: %s", code, stderr)
	}
}
