package lab

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// TestIPSetsProbeMatrix runs every scenario (seed 003's terms and a /0
// CIDR among them), one after the other (each an incremental change), on
// two labs side by side: iptables with a rule per
// peer address, and iptables with peers: ipsets. The probed TCP and UDP
// matrices must be identical cell by cell and equal to the model's; each
// host must hold exactly the sets its rules name (nothing left from the
// scenario before, no temporary set); deleting every policy must leave no
// set; and the lab's down (TestMain) must leave the root namespace's
// ipsets as they were.
func TestIPSetsProbeMatrix(t *testing.T) {
	plain := scenarioLab(t, "t-ipsets-plain", "iptables", "wire")
	sets := scenarioLab(t, "t-ipsets-sets", "iptables-ipsets", "wire")
	ctx := context.Background()
	matched := 0
	for _, sc := range scenarios.All {
		var pols []*policy.Policy
		if sc.Policies != "" {
			pols = mustParse(t, sc.Policies)
		}
		m, err := policy.NewModel(plain, pols)
		if err != nil {
			t.Fatal(err)
		}
		var cells [2][]probe.Cell
		for i, spec := range []*topology.Spec{plain, sets} {
			if _, err := Replace(ctx, spec.Name, pols); err != nil {
				t.Fatalf("%s: apply on %s: %v", sc.Name, spec.Name, err)
			}
			if cells[i], err = probe.Run(ctx, spec, targets(), probe.Options{Timeout: 750 * time.Millisecond}); err != nil {
				t.Fatalf("%s: probe %s: %v", sc.Name, spec.Name, err)
			}
		}
		if len(cells[0]) != len(cells[1]) {
			t.Fatalf("%s: %d cells without ipsets, %d with", sc.Name, len(cells[0]), len(cells[1]))
		}
		bad := 0
		for i, a := range cells[0] {
			b := cells[1][i]
			if a.From != b.From || a.To != b.To || a.Protocol != b.Protocol || a.Port != b.Port {
				t.Fatalf("%s: cell %d is %s -> %s %s/%d without ipsets, %s -> %s %s/%d with", sc.Name, i, a.From, a.To, a.Protocol, a.Port, b.From, b.To, b.Protocol, b.Port)
			}
			src, _ := plain.Endpoint(a.From)
			dst, _ := plain.Endpoint(a.To)
			want := m.Verdict(src, dst, a.Protocol, a.Port).Allowed
			if a.Allowed != b.Allowed || b.Allowed != want || b.Error != "" {
				if bad++; bad <= 6 {
					t.Errorf("%s: %s -> %s %s/%d: without ipsets %v, with ipsets %v (%s), model %v", sc.Name, a.From, a.To, a.Protocol, a.Port, a.Allowed, b.Allowed, b.Error, want)
				}
			}
		}
		matched += checkHostSets(t, sc.Name, sets)
		if n := checkHostSets(t, sc.Name, plain); n > 0 {
			t.Errorf("%s: the lab without ipsets matches %d sets", sc.Name, n)
		}
	}
	if matched == 0 {
		t.Error("no rule of the ipsets lab matched a set in any scenario")
	}
	if _, err := Delete(ctx, sets.Name, nil, true, ""); err != nil {
		t.Fatal(err)
	}
	if n := checkHostSets(t, "after delete --all", sets); n != 0 {
		t.Errorf("after delete --all, %d rules still match sets", n)
	}
}

// checkHostSets checks that each host of the lab holds exactly the cnlab
// sets its rules name, and returns the number of rules that match a set.
func checkHostSets(t *testing.T, what string, spec *topology.Spec) int {
	t.Helper()
	_, save, _ := spec.IPTables.Tools()
	rules := 0
	for _, h := range spec.Hosts {
		named, held, n, err := testutil.IPSets(context.Background(), h.Netns, save)
		if err != nil {
			t.Fatal(err)
		}
		rules += n
		if !slices.Equal(named, held) {
			t.Errorf("%s: host %s holds sets %v, its rules name %v", what, h.Name, held, named)
		}
	}
	return rules
}

// TestIPSetsGoWithTheLab forgets everything cnlab recorded about a lab
// with sets, as a killed run on a machine whose /run was cleared would:
// down finds the lab from its namespaces, and the sets, which live in the
// hosts' namespaces, go with them (TestMain checks the root namespace's
// ipsets are as they were).
func TestIPSetsGoWithTheLab(t *testing.T) {
	spec := scenarioLab(t, "t-ipsets-down", "iptables-ipsets", "wire")
	ctx := context.Background()
	if _, err := Apply(ctx, spec.Name, mustParse(t, scenarios.Named(scenarios.TermsName).Policies)); err != nil {
		t.Fatal(err)
	}
	if n := checkHostSets(t, "applied", spec); n != 3 {
		t.Fatalf("%d rules match sets, want 3 (one per term)", n)
	}
	if err := removeState(spec.Name); err != nil {
		t.Fatal(err)
	}
	if err := Down(spec.Name, nil); err != nil {
		t.Fatal(err)
	}
	if names, err := topology.Netns(spec.Name); err != nil || len(names) != 0 {
		t.Errorf("namespaces left: %v %v", names, err)
	}
}
