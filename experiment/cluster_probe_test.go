package experiment

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// tierPolicies is n Admin-tier ClusterNetworkPolicies about the default
// namespace, policy i denying TCP 61002+2i, and a Baseline one denying
// TCP 61000: a CNI that ignores the tiers connects on those ports.
func tierPolicies(t *testing.T, n int) []*policy.Policy {
	t.Helper()
	var docs []string
	head := "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: %s}\nspec:\n  tier: %s\n  priority: %d\n  subject: {namespaces: {}}\n" +
		"  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: %d}}}]}]\n"
	for i := range n {
		docs = append(docs, fmt.Sprintf(head, fmt.Sprintf("admin-%d", i), "Admin", i, 40000+2*i))
	}
	if n > 0 {
		docs = append(docs, fmt.Sprintf(head, "baseline", "Baseline", 0, 39998))
	}
	pols, err := parseGenerated(strings.Join(docs, "---\n"))
	if err != nil {
		t.Fatal(err)
	}
	return pols
}

// TestProbeCellsClusterPolicies: the enforcement probe covers the cluster
// policies: a port of the last Admin-tier policy and of the Baseline one
// whose verdict the apply changes are probed, beside the NetworkPolicies'
// cells, and judged by the model with its tiers.
func TestProbeCellsClusterPolicies(t *testing.T) {
	top, err := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	type cell struct {
		port             int
		allowed, changes bool
	}
	for _, c := range []struct {
		from, to int
		want     []cell // besides the rr port and enforcePort
	}{
		{0, 3, []cell{{40004, false, true}, {39998, false, true}}},
		{3, 10, []cell{{40018, false, true}}},
		{10, 3, []cell{{40018, true, true}}},
		{3, 0, []cell{{40004, true, true}, {39998, true, true}}},
		{3, 3, nil},
	} {
		cb := &clusterBackend{cur: top, inForce: tierPolicies(t, c.from), inForceKnown: true}
		cells, err := cb.probeCells(tierPolicies(t, c.to), 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []cell
		for _, pc := range cells {
			if pc.port == RRPort || pc.port == enforcePort {
				if !pc.allowed || pc.changes {
					t.Errorf("%d -> %d: %+v; want allowed, unchanged (no NetworkPolicy)", c.from, c.to, pc)
				}
				continue
			}
			got = append(got, cell{pc.port, pc.allowed, pc.changes})
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%d -> %d cluster policies: cells %+v, want %+v", c.from, c.to, got, c.want)
		}
	}
}
