package main

import (
	"encoding/json"
	"os/exec"
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

// TestDoctorLab: doctor --lab finds nothing wrong in a fresh lab, and
// names a host's bridge set down and an endpoint's veth deleted, exit 1.
func TestDoctorLab(t *testing.T) {
	testutil.RequireRoot(t)
	name := "t-cli-doctor"
	if _, stderr, code := runCLI(t, "up", "--preset", "single-host", "--name", name, "--datapath", "iptables"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", name) })
	stdout, stderr, code := runCLI(t, "doctor", "--lab", name)
	if code != 0 || !strings.Contains(stdout, "nothing wrong found") {
		t.Fatalf("fresh lab: exit %d: %s%s", code, stdout, stderr)
	}
	st, _, _ := runCLI(t, "status", name, "-o", "json")
	var v struct {
		Hosts     []struct{ Name, Netns string }
		Endpoints []struct{ HostVeth string }
	}
	if err := json.Unmarshal([]byte(st), &v); err != nil || len(v.Hosts) == 0 || len(v.Endpoints) == 0 {
		t.Fatalf("status: %v %s", err, st)
	}
	hostNS := v.Hosts[0].Netns
	veth := v.Endpoints[0].HostVeth
	for _, args := range [][]string{{"-n", hostNS, "link", "set", "br0", "down"}, {"-n", hostNS, "link", "del", veth}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	stdout, _, code = runCLI(t, "doctor", "--lab", name, "-o", "json")
	var out struct {
		OK     bool
		Checks []struct {
			Check  string
			OK     bool
			Detail string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != 1 || out.OK {
		t.Fatalf("broken lab: exit %d, %v: %s", code, err, stdout)
	}
	found := false
	for _, c := range out.Checks {
		if c.Check == "devices" {
			found = true
			if c.OK || !strings.Contains(c.Detail, "down: br0") || !strings.Contains(c.Detail, "missing: "+veth) {
				t.Errorf("devices: %+v", c)
			}
		}
	}
	if !found {
		t.Errorf("no devices check: %s", stdout)
	}
}
