package experiment

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// TestClusterPolicyKeys: bad values and combinations are refused naming
// the file, the key and what is wrong.
func TestClusterPolicyKeys(t *testing.T) {
	base := "workloads: [{kind: tcp-rr}]\n"
	for _, tc := range []struct{ src, want string }{
		{base + "matrix: {clusterPolicies: [0, -1]}\n", "x.yaml: matrix.clusterPolicies[1]: -1: between 0 and 1000"},
		{base + "matrix: {clusterPolicies: [1001]}\n", "x.yaml: matrix.clusterPolicies[0]: 1001: between 0 and 1000"},
		{base + "matrix: {clusterPolicies: [10], clusterPolicyMatch: [first]}\n", `x.yaml: matrix.clusterPolicyMatch[0]: "first": none or last`},
		{base + "matrix: {clusterPolicies: [ten]}\n", "x.yaml: matrix.clusterPolicies[0]:"},
		{base + "matrix: {clusterPolicyMatch: [last]}\n", "x.yaml: matrix.clusterPolicyMatch: last: applies with clusterPolicies"},
		{base + "matrix: {topology: [chain], clusterPolicies: [10]}\n", "x.yaml: matrix.clusterPolicies: 10: a chain (and topology direct, no CNI) has no policy datapath"},
		{"workloads: [{kind: http}]\nmatrix: {l7Mode: [l4], clusterPolicies: [10]}\n", "x.yaml: matrix.clusterPolicies: 10: an L7 point's policy is the one l7Mode generates"},
		{"workloads: [{kind: http}]\nmatrix: {clusterPolicies: [10], clusterPolicyMatch: [last]}\n", "x.yaml: matrix.clusterPolicyMatch: last: the last cluster policy accepts the iperf3 and rr ports, not port 80"},
	} {
		_, err := Parse([]byte(tc.src), "x.yaml", false)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s...", tc.src, err, tc.want)
			continue
		}
		if !input.Is(err) {
			t.Errorf("%q: %v is not an input error", tc.src, err)
		}
	}
	// The kubernetes backend applies them (docs/kubernetes.md, "Cluster
	// policies"), in the pod network only.
	src := base + "matrix: {topology: [multi-host], clusterPolicies: [0, 10], clusterPolicyMatch: [none, last]}\n"
	s, err := ParseFor([]byte(src), "x.yaml", false, results.BackendKubernetes)
	if err != nil {
		t.Fatalf("on the kubernetes backend: %v", err)
	}
	pts, err := s.Points()
	if err != nil || len(pts) != 3 || pts[2].Params.ClusterPolicies != 10 || pts[2].Params.ClusterPolicyMatch != results.ClusterMatchLast {
		t.Errorf("on the kubernetes backend: %d points (%v), want 3 with 10 and last last", len(pts), err)
	}
	_, err = ParseFor([]byte(base+"matrix: {topology: [multi-host], network: [host], clusterPolicies: [10]}\n"), "x.yaml", false, results.BackendKubernetes)
	if want := "x.yaml: matrix.clusterPolicies: 10 with network host: pods in the node's network are never a cluster policy's subjects"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("network host: error %v, want %s...", err, want)
	}
}

// TestClusterPolicyPoints: a matrix of cluster policies gives every point
// a match, the point without any is measured once on the none line, the
// points share one lab per datapath (the policies are applied to it),
// and their series is the datapath's alone.
func TestClusterPolicyPoints(t *testing.T) {
	pts := parsePoints(t, "workloads: [{kind: tcp-rr}]\nmatrix: {datapath: [iptables, ebpf], clusterPolicies: [0, 10], clusterPolicyMatch: [last, none]}\n", "x.yaml")
	var got []string
	keys := map[string]bool{}
	for _, p := range pts {
		got = append(got, p.Series+" | "+p.Params.Text())
		keys[labKey(p.Params)] = true
	}
	want := []string{
		"iptables | cluster-policies=0",
		"iptables | cluster-policies=10 cluster-match=last",
		"iptables | cluster-policies=10",
		"ebpf | cluster-policies=0",
		"ebpf | cluster-policies=10 cluster-match=last",
		"ebpf | cluster-policies=10",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("points:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if pts[0].Params.ClusterPolicyMatch != results.ClusterMatchNone || pts[1].Params.ClusterPolicyMatch != results.ClusterMatchLast {
		t.Errorf("matches: %+v, %+v", pts[0].Params, pts[1].Params)
	}
	if len(keys) != 2 {
		t.Errorf("%d labs, want one per datapath: %v", len(keys), keys)
	}
	// Without the keys nothing changes: no match, the filler mode named.
	for _, p := range parsePoints(t, "workloads: [{kind: tcp-rr}]\nmatrix: {datapath: [iptables], policies: [0, 5]}\n", "x.yaml") {
		if p.Params.ClusterPolicyMatch != "" || p.Params.ClusterPolicies != 0 || p.Series != "iptables no-match" {
			t.Errorf("a point without cluster policies: %s %+v", p.Series, p.Params)
		}
	}
}

// TestGeneratedClusterPolicies: the generated cluster policies parse,
// compile on the preset lab, and the model says what the match promises:
// none, the measured connections are allowed and no cluster policy
// decides them (with or without NetworkPolicies isolating the server);
// last, the last Admin-tier policy accepts them. Every Admin-tier policy
// is walked: its peer is the client, only its port differs, and a
// connection to that port is denied by it.
func TestGeneratedClusterPolicies(t *testing.T) {
	spec, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t", Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := spec.Endpoint("default/client")
	sv, _ := spec.Endpoint("default/server")
	if policyText(results.Params{Datapath: "ebpf", ClusterPolicyMatch: results.ClusterMatchNone}) != "" {
		t.Error("0 cluster policies: no policy at all")
	}
	for _, n := range []int{1, 2, 40, results.MaxClusterPolicies} {
		for _, match := range results.ClusterMatches {
			for _, nps := range []int{0, 3} {
				if n == results.MaxClusterPolicies && nps > 0 {
					continue // the most, once per match: compiling 1,000 takes a second
				}
				p := results.Params{Datapath: "ebpf", PolicyMode: results.ModeNoMatch, Policies: nps, ClusterPolicies: n, ClusterPolicyMatch: match}
				text := policyText(p)
				pols, err := policy.Parse([]byte(text), "gen")
				if err != nil {
					t.Fatalf("%d %s: %v", n, match, err)
				}
				var admin, baseline int
				for _, pol := range pols {
					switch pol.Tier {
					case policy.TierAdmin:
						admin++
					case policy.TierBaseline:
						baseline++
					}
				}
				if admin != n || baseline != 1 || len(pols) != n+1+nps+min(nps, 1) {
					t.Fatalf("%d %s %d: %d Admin, %d Baseline of %d policies, want %d, 1", n, match, nps, admin, baseline, len(pols), n)
				}
				m, c := compileGenerated(t, spec, text)
				if len(c.Rules) == 0 {
					t.Fatalf("%d %s: nothing compiled", n, match)
				}
				last := n - 1
				for _, port := range []int{IperfPort, IperfPort + results.MaxFlows - 1, RRPort} {
					for _, proto := range []string{"TCP", "UDP"} {
						v := m.Verdict(cl, sv, proto, port)
						if !v.Allowed {
							t.Errorf("%d %s %d: %s/%d denied: %+v", n, match, nps, proto, port, v.Ingress)
							continue
						}
						switch lastAccepts := match == results.ClusterMatchLast; {
						case lastAccepts && (v.Ingress.Tier != "Admin" || !strings.Contains(v.Ingress.Rule, adminName(last))):
							t.Errorf("%d %s %d: %s/%d decided by %q %q, want the Admin tier's %s", n, match, nps, proto, port, v.Ingress.Tier, v.Ingress.Rule, adminName(last))
						case !lastAccepts && v.Ingress.Tier != "":
							t.Errorf("%d %s %d: %s/%d decided by the %s tier (%s), want no cluster policy", n, match, nps, proto, port, v.Ingress.Tier, v.Ingress.Rule)
						}
					}
				}
				// The first and the last non-matching policies are walked
				// and deny their own port.
				for _, i := range []int{0, n - 2} {
					if i < 0 || (i == last && match == results.ClusterMatchLast) {
						continue
					}
					v := m.Verdict(cl, sv, "TCP", clusterPort+2*i)
					if v.Allowed || v.Ingress.Tier != "Admin" || !strings.Contains(v.Ingress.Rule, adminName(i)) {
						t.Errorf("%d %s %d: port %d: %+v, want denied by %s", n, match, nps, clusterPort+2*i, v.Ingress, adminName(i))
					}
				}
				// The Baseline policy selects them: it denies its port to a
				// server no NetworkPolicy isolates.
				if v := m.Verdict(cl, sv, "TCP", clusterPort-2); nps == 0 && (v.Allowed || v.Ingress.Tier != "Baseline") {
					t.Errorf("%d %s: the Baseline port: %+v, want denied by the Baseline tier", n, match, v.Ingress)
				}
			}
		}
	}
}

func adminName(i int) string { return fmt.Sprintf("admin-%04d", i) }

// TestClusterPoliciesProbed: on a cluster, the enforcement probe of the
// generated cluster policies connects on the last Admin-tier policy's
// port and the Baseline policy's, which they deny: a CNI that ignores
// the tiers fails the point.
func TestClusterPoliciesProbed(t *testing.T) {
	top, err := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	pols, err := parseGenerated(policyText(results.Params{ClusterPolicies: 10, ClusterPolicyMatch: results.ClusterMatchNone}))
	if err != nil {
		t.Fatal(err)
	}
	cb := &clusterBackend{cur: top, inForceKnown: true}
	cells, err := cb.probeCells(pols, 0)
	if err != nil {
		t.Fatal(err)
	}
	denied := map[int]bool{}
	for _, c := range cells {
		if c.changes && !c.allowed {
			denied[c.port] = true
		}
	}
	if !denied[clusterPort+2*9] || !denied[clusterPort-2] {
		t.Errorf("probe cells %+v: want ports %d and %d denied by the apply", cells, clusterPort+2*9, clusterPort-2)
	}
}
