package experiment

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// TestKubernetesRefusals: what cannot apply on a cluster is refused with
// the file and the key, and a lab refuses the cluster's keys.
func TestKubernetesRefusals(t *testing.T) {
	base := "workloads: [{kind: tcp-rr}]\n"
	for _, c := range []struct{ text, want string }{
		{base + "matrix: {datapath: [ebpf]}\n", "x.yaml: matrix.datapath: cannot apply with --backend kubernetes: the cluster's CNI is the datapath"},
		{base + "matrix: {topology: [chain]}\n", "x.yaml: matrix.topology[0]: cannot apply with --backend kubernetes: chain"},
		{base + "matrix: {mtu: [9000]}\n", "x.yaml: matrix.mtu: cannot apply"},
		{base + "matrix: {offloads: [off]}\n", "x.yaml: matrix.offloads: cannot apply"},
		{base + "matrix: {services: [1], serviceProxy: [nftables]}\n", "x.yaml: matrix.serviceProxy: cannot apply"},
		{base + "matrix: {policies: [10], policyMode: [top-of-chain]}\n", "x.yaml: matrix.policyMode[0]: cannot apply"},
		{base + "profile: true\n", "x.yaml: profile: cannot apply"},
		{"workloads: [{kind: http}]\n", "x.yaml: workloads[0].kind: cannot apply with --backend kubernetes: http"},
		{base + "sweeps: [{name: a, matrix: {link: [vxlan]}}]\n", "x.yaml: sweeps[0].matrix.link: cannot apply"},
		{base + "sweeps: [{name: a, workloads: [{kind: tcp-rr}, {kind: ab}]}]\n", "x.yaml: sweeps[0].workloads[1].kind: cannot apply with --backend kubernetes: ab"},
		{base + "matrix: {placement: [far]}\n", `x.yaml: matrix.placement[0]: "far": same-node or cross-node`},
	} {
		_, err := ParseFor([]byte(c.text), "x.yaml", false, results.BackendKubernetes)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
	// pin is taskset in the agent pods, as on a lab.
	if _, err := ParseFor([]byte(base+"pin: {client: 0, server: 1}\n"), "x.yaml", false, results.BackendKubernetes); err != nil {
		t.Errorf("pin on the kubernetes backend: %v", err)
	}
	for _, c := range []struct{ text, want string }{
		{base + "matrix: {placement: [same-node]}\n", "x.yaml: matrix.placement: applies with --backend kubernetes only"},
		{base + "matrix: {network: [host]}\n", "x.yaml: matrix.network: applies with --backend kubernetes only"},
	} {
		_, err := Parse([]byte(c.text), "x.yaml", false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lab: %q: error %v, want %q", c.text, err, c.want)
		}
	}
	if _, err := ParseFor([]byte(base), "x.yaml", false, "nomad"); err == nil || !strings.Contains(err.Error(), `"nomad": lab or kubernetes`) {
		t.Errorf("backend nomad: %v", err)
	}
}

// TestKubernetesPoints: a cluster's points have no datapath, the
// cluster's series, and a deployment per placement and network.
func TestKubernetesPoints(t *testing.T) {
	s, err := ParseFor([]byte("workloads: [{kind: tcp-rr}, {kind: tcp-stream}]\nmatrix: {topology: [multi-host], placement: [same-node, cross-node], network: [pod, host]}\nsweeps: [{name: a, matrix: {policies: [0]}}, {name: b, matrix: {network: [pod], policies: [5]}}]\n"), "x.yaml", false, results.BackendKubernetes)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 12 {
		t.Fatalf("%d points, want 12", len(pts))
	}
	keys := map[string]bool{}
	for _, p := range pts {
		if p.Params.Datapath != "" {
			t.Errorf("%s: datapath %q on a cluster", p.ID, p.Params.Datapath)
		}
		if !strings.HasPrefix(p.Series, "cluster "+p.Params.Placement) {
			t.Errorf("%s: series %q", p.ID, p.Series)
		}
		keys[labKey(p.Params)] = true
	}
	if len(keys) != 4 {
		t.Errorf("%d deployments, want 4 (placement x network; policies are applied, not deployed)", len(keys))
	}
	if _, err := ParseFor([]byte("workloads: [{kind: tcp-rr}]\nmatrix: {network: [host], policies: [3]}\n"), "x.yaml", false, results.BackendKubernetes); err == nil || !strings.Contains(err.Error(), "x.yaml: matrix.policies: 3 with network host") {
		t.Errorf("policies in the host network: %v", err)
	}
	if !strings.Contains(policyText(pts[len(pts)-1].Params), "filler-4") {
		t.Error("no-match on a cluster is N NetworkPolicies")
	}
}

// TestProbeCells: the enforcement probe adds ports whose verdict the apply
// changes, so that an apply of N -> M generated policies is timed on the
// new set; after a failed apply nothing is timed.
func TestProbeCells(t *testing.T) {
	top, err := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(mode string, n int) []*policy.Policy {
		pols, err := parseGenerated(policyText(results.Params{Policies: n, PolicyMode: mode}))
		if err != nil {
			t.Fatal(err)
		}
		return pols
	}
	for _, mode := range []string{results.ModeNoMatch, results.ModeSelectors, results.ModeL4Rules} {
		for _, c := range []struct{ from, to int }{{0, 2}, {2, 0}, {2, 100}, {100, 2}} {
			cb := &clusterBackend{cur: top, inForce: gen(mode, c.from), inForceN: c.from, inForceKnown: true}
			cells, err := cb.probeCells(gen(mode, c.to), c.to)
			if err != nil {
				t.Fatal(err)
			}
			changed := 0
			for _, cell := range cells {
				if cell.changes {
					changed++
				}
			}
			if changed == 0 || cells[0].port != RRPort || !cells[0].allowed {
				t.Errorf("%s %d -> %d: cells %+v; want the rr port allowed and a cell the apply changes", mode, c.from, c.to, cells)
			}
			cb.inForceKnown = false
			cells, _ = cb.probeCells(gen(mode, c.to), c.to)
			for _, cell := range cells {
				if cell.changes {
					t.Errorf("%s %d -> %d after a failed apply: cell %+v counted as changed", mode, c.from, c.to, cell)
				}
			}
		}
	}
	cb := &clusterBackend{cur: top, inForceKnown: true}
	cells, _ := cb.probeCells(gen(results.ModeTerms, 5), 5)
	for _, cell := range cells {
		if cell.changes || !cell.allowed {
			t.Errorf("terms: cell %+v; want every port allowed and nothing changed (L3)", cell)
		}
	}
}
