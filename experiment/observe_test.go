package experiment

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// TestObserveAxis: observe: [off, drops, all] gives each point's lab its
// level, a lab per level (until lab.SetObserve), the level in the
// point's words; bad values, chains and the kubernetes backend are
// refused naming the file, the key and the value.
func TestObserveAxis(t *testing.T) {
	pts := mustPoints(t, "workloads: [{kind: tcp-crr}]\nmatrix: {datapath: [iptables, ebpf], observe: [off, drops, all]}\n", false)
	if len(pts) != 6 {
		t.Fatalf("%d points, want 6", len(pts))
	}
	s, err := Parse([]byte("workloads: [{kind: tcp-crr}]\n"), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, p := range pts {
		spec, err := s.labSpec(p.Params, "h-obsexp")
		if err != nil {
			t.Fatal(err)
		}
		if spec.ObserveLevel() != p.Params.Observe {
			t.Errorf("%s: lab observe %s, want %s", p.ID, spec.ObserveLevel(), p.Params.Observe)
		}
		if want := "observe=" + p.Params.Observe; !strings.Contains(p.Params.Text(), want) {
			t.Errorf("%s: text %q lacks %q", p.ID, p.Params.Text(), want)
		}
		if p.Series != series(results.Params{Datapath: p.Params.Datapath, PolicyMode: p.Params.PolicyMode}) {
			t.Errorf("%s: series %q: the level names lines in the report, not the series", p.ID, p.Series)
		}
		keys[labKey(p.Params)] = true
	}
	if len(keys) != 6 {
		t.Errorf("%d labs for 6 points, want one per datapath and level", len(keys))
	}
	// Unset: the topology's own level (off for a preset).
	pts = mustPoints(t, "workloads: [{kind: tcp-crr}]\n", false)
	if spec, err := s.labSpec(pts[0].Params, "h-obsexp"); err != nil || spec.ObserveLevel() != topology.ObserveOff {
		t.Errorf("no observe key: %v, %v", spec, err)
	}

	base := "workloads: [{kind: tcp-rr}]\n"
	for _, c := range []struct{ text, want string }{
		{base + "matrix: {observe: [off, verbose]}\n", `x.yaml: matrix.observe[1]: "verbose": give off, drops or all`},
		{base + "sweeps: [{name: a, matrix: {observe: [on]}}]\n", `x.yaml: sweeps[0].matrix.observe[0]: "on": give off, drops or all`},
		{base + "matrix: {topology: [chain], observe: [drops]}\n", "x.yaml: matrix.observe: drops: a chain has no policy datapath to observe"},
		{base + "matrix: {observe: [1]}\n", "x.yaml: matrix.observe"},
	} {
		if _, err := Parse([]byte(c.text), "x.yaml", false); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
	// A chain with observe off is a chain without it.
	if _, err := Parse([]byte(base+"matrix: {topology: [chain], observe: [off]}\n"), "x.yaml", false); err != nil {
		t.Errorf("chain, observe off: %v", err)
	}
	_, err = ParseFor([]byte(base+"matrix: {observe: [off, all]}\n"), "x.yaml", false, results.BackendKubernetes)
	if want := "x.yaml: matrix.observe: cannot apply with --backend kubernetes: flow visibility on a cluster is its CNI's"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("kubernetes: error %v, want %q", err, want)
	}
}
