package policytest

import (
	"fmt"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Cluster policies built in Go, for the datapaths' tests of the cluster
// tiers (they need no parser): Admin and Baseline policies whose subject
// is the pods matching pods in the namespaces matching nss, with ordered
// rules per direction.

// Cluster returns a ClusterNetworkPolicy of tier t (BaselineAdminNetworkPolicy
// "default" when t is TierBaseline and name is "default").
func Cluster(t policy.Tier, name string, priority int, nss, pods map[string]string, ingress, egress []policy.Rule) *policy.Policy {
	kind := policy.KindClusterNP
	if t == policy.TierBaseline && name == "default" {
		kind, priority = policy.KindBaselineNP, 0
	}
	for i := range ingress {
		ingress[i].Path = fmt.Sprintf("spec.ingress[%d]", i)
	}
	for i := range egress {
		egress[i].Path = fmt.Sprintf("spec.egress[%d]", i)
	}
	return &policy.Policy{Kind: kind, Name: name, Tier: t, Priority: priority, Source: "go#" + name,
		Specs: []policy.Spec{{Subject: policy.Selector{MatchLabels: pods}, SubjectNamespaces: &policy.Selector{MatchLabels: nss},
			Ingress: policy.Direction{Ordered: ingress}, Egress: policy.Direction{Ordered: egress}}}}
}

// Rule is a cluster-tier rule: an action (policy.ActionAccept, ...),
// peers, and ports (none: every port).
func Rule(action string, peers []policy.Peer, ports ...policy.Port) policy.Rule {
	return policy.Rule{Action: action, Peers: peers, Ports: ports}
}

// Pods is a peer: the pods matching pods in the namespaces matching nss.
func Pods(nss, pods map[string]string) policy.Peer {
	return policy.Peer{Endpoints: &policy.EndpointSel{Pods: policy.Selector{MatchLabels: pods}, Namespaces: &policy.Selector{MatchLabels: nss}}}
}

// CIDR is a networks peer.
func CIDR(p string) policy.Peer { return policy.Peer{CIDR: netip.MustParsePrefix(p)} }

// L is a label set: L("ns", "x") is {ns: x}; L() is empty (matches all).
func L(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// CompilePolicies compiles policies built in Go against the scenario lab.
func CompilePolicies(t testing.TB, pols []*policy.Policy, ov topology.Overrides) (*topology.Spec, *policy.Model, *policy.Compiled) {
	t.Helper()
	return CompilePoliciesFor(t, pols, ov)
}

// CompilePoliciesFor compiles policies against the scenario lab with the
// address families fams (scenarios.LabFor; none: the IPv4 lab).
func CompilePoliciesFor(t testing.TB, pols []*policy.Policy, ov topology.Overrides, fams ...int) (*topology.Spec, *policy.Model, *policy.Compiled) {
	t.Helper()
	text := scenarios.Lab
	if len(fams) > 0 {
		text = scenarios.LabFor(fams...)
	}
	lab, err := topology.Parse([]byte(text), "scenario lab", ov)
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return lab, m, c
}

// Parse parses policy YAML (a scenario's), failing the test on an error.
func Parse(t testing.TB, yaml string) []*policy.Policy {
	t.Helper()
	if yaml == "" {
		return nil
	}
	pols, err := policy.Parse([]byte(yaml), "scenario.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pols
}

// Tiered is a fixed set of each thing the tiers do, on the scenario lab:
//
//   - Admin, priority 10: x/a's ingress denies namespace z (deny-z);
//   - Admin, priority 20: x/a's ingress passes namespace y on TCP 80
//     (then a NetworkPolicy decides), accepts namespace y otherwise;
//   - Admin, priority 30: y/b's ingress accepts x/c (overriding y's
//     NetworkPolicy isolation); y/b's egress denies UDP 81 to x;
//   - Baseline (BaselineAdminNetworkPolicy default): every pod of z denies
//     ingress from x and y; z's NetworkPolicy (see TieredNP) allows x/a.
func Tiered() []*policy.Policy {
	return []*policy.Policy{
		Cluster(policy.TierAdmin, "deny-z", 10, L("ns", "x"), L("pod", "a"),
			[]policy.Rule{Rule(policy.ActionDeny, []policy.Peer{Pods(L("ns", "z"), L())})}, nil),
		Cluster(policy.TierAdmin, "pass-y", 20, L("ns", "x"), L("pod", "a"),
			[]policy.Rule{
				Rule(policy.ActionPass, []policy.Peer{Pods(L("ns", "y"), L())}, policy.Port{Protocol: policy.TCP, Port: 80}),
				Rule(policy.ActionAccept, []policy.Peer{Pods(L("ns", "y"), L())}),
			}, nil),
		Cluster(policy.TierAdmin, "accept-xc", 30, L("ns", "y"), L("pod", "b"),
			[]policy.Rule{Rule(policy.ActionAccept, []policy.Peer{Pods(L("ns", "x"), L("pod", "c"))})},
			[]policy.Rule{Rule(policy.ActionDeny, []policy.Peer{Pods(L("ns", "x"), L())}, policy.Port{Protocol: policy.UDP, Port: 81})}),
		Cluster(policy.TierBaseline, "default", 0, L("ns", "z"), L(),
			[]policy.Rule{Rule(policy.ActionDeny, []policy.Peer{Pods(L("ns", "x"), L()), Pods(L("ns", "y"), L())})}, nil),
	}
}

// TieredNP are the NetworkPolicies beside Tiered: x/a's ingress allows
// y/b on TCP 80 (so of y's pods only y/b gets past the Pass), y/b's
// ingress is isolated (allows nothing), z's pods allow x/a (the one
// exception to the Baseline deny). z's NetworkPolicy isolates z's
// ingress, so Baseline decides nothing there; its default deny is seen
// on z/c, which no NetworkPolicy selects.
const TieredNP = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-yb, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchLabels: {pod: b}}}]
    ports: [{port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-isolated, namespace: y}
spec:
  podSelector: {matchLabels: {pod: b}}
  policyTypes: [Ingress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-xa, namespace: z}
spec:
  podSelector: {matchExpressions: [{key: pod, operator: In, values: [a, b]}]}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: a}}}]
`

// RandomTiered returns a random policy set with cluster tiers: maybe one
// scenario's NetworkPolicies or CiliumNetworkPolicies (an L7 one among
// them), and a few Admin and Baseline policies with random subjects,
// actions, peers and ports, priorities that may tie.
func RandomTiered(t testing.TB, rng *rand.Rand) []*policy.Policy {
	var pols []*policy.Policy
	switch rng.Intn(4) {
	case 0:
	case 1:
		pols = Parse(t, scenarios.L7[rng.Intn(len(scenarios.L7))].Policies)
	default:
		pols = Parse(t, scenarios.All[rng.Intn(len(scenarios.All))].Policies)
	}
	nsSel := func() map[string]string {
		switch rng.Intn(4) {
		case 0:
			return L()
		case 1:
			return L("tier", []string{"front", "back"}[rng.Intn(2)])
		}
		return L("ns", []string{"x", "y", "z"}[rng.Intn(3)])
	}
	podSel := func() map[string]string {
		switch rng.Intn(3) {
		case 0:
			return L()
		case 1:
			return L("pod", []string{"a", "b", "c"}[rng.Intn(3)])
		}
		return L("app", []string{"web", "db"}[rng.Intn(2)])
	}
	// IPv6 CIDRs too: they match the IPv6 addresses of a dual-stack lab
	// (scenarios.LabFor) and nothing on an IPv4 one.
	cidrs := []string{"10.0.191.0/24", "10.0.192.0/25", "10.0.192.8/29", "10.0.191.20/32", "0.0.0.0/0", "10.0.0.0/8",
		"fd00:0:191::/64", "fd00:0:192::8/125", "::/0"}
	rules := func(n int, baseline bool) []policy.Rule {
		var out []policy.Rule
		for i := 0; i < n; i++ {
			actions := []string{policy.ActionAccept, policy.ActionDeny, policy.ActionPass, policy.ActionAllow}
			if baseline {
				actions = []string{policy.ActionAccept, policy.ActionDeny, policy.ActionAllow}
			}
			var peers []policy.Peer
			for j := 0; j < 1+rng.Intn(2); j++ {
				if rng.Intn(3) == 0 {
					peers = append(peers, CIDR(cidrs[rng.Intn(len(cidrs))]))
				} else {
					peers = append(peers, Pods(nsSel(), podSel()))
				}
			}
			var ports []policy.Port
			for j := rng.Intn(3); j > 0; j-- {
				switch rng.Intn(6) {
				case 0:
					ports = append(ports, policy.Port{Protocol: policy.TCP, Port: 80})
				case 1:
					ports = append(ports, policy.Port{Protocol: policy.UDP, Port: 81})
				case 2:
					ports = append(ports, policy.Port{Protocol: policy.TCP, Port: 79, EndPort: 81})
				case 3:
					ports = append(ports, policy.Port{Protocol: policy.TCP, Name: "serve-80-tcp"})
				case 4:
					ports = append(ports, policy.Port{Protocol: policy.UDP})
				default:
					ports = append(ports, policy.Port{Protocol: policy.TCP, Port: 81})
				}
			}
			out = append(out, Rule(actions[rng.Intn(len(actions))], peers, ports...))
		}
		return out
	}
	for i, n := 0, rng.Intn(5); i < n; i++ {
		pols = append(pols, Cluster(policy.TierAdmin, fmt.Sprintf("admin-%d", i), rng.Intn(4), nsSel(), podSel(),
			rules(rng.Intn(4), false), rules(rng.Intn(3), false)))
	}
	for i, n := 0, rng.Intn(3); i < n; i++ {
		name := fmt.Sprintf("baseline-%d", i)
		if i == 0 && rng.Intn(2) == 0 {
			name = "default"
		}
		pols = append(pols, Cluster(policy.TierBaseline, name, rng.Intn(3), nsSel(), podSel(),
			rules(rng.Intn(4), true), rules(rng.Intn(3), true)))
	}
	return pols
}

// TieredYAML is Tiered as a policy file (ClusterNetworkPolicy and
// BaselineAdminNetworkPolicy), for tests that apply it to a lab.
const TieredYAML = `apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: deny-z}
spec:
  tier: Admin
  priority: 10
  subject: {pods: {namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: a}}}}
  ingress:
  - action: Deny
    from: [{namespaces: {matchLabels: {ns: z}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: pass-y}
spec:
  tier: Admin
  priority: 20
  subject: {pods: {namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: a}}}}
  ingress:
  - action: Pass
    from: [{namespaces: {matchLabels: {ns: y}}}]
    protocols: [{tcp: {destinationPort: {number: 80}}}]
  - action: Accept
    from: [{namespaces: {matchLabels: {ns: y}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: accept-xc}
spec:
  tier: Admin
  priority: 30
  subject: {pods: {namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchLabels: {pod: b}}}}
  ingress:
  - action: Accept
    from: [{pods: {namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: c}}}}]
  egress:
  - action: Deny
    to: [{namespaces: {matchLabels: {ns: x}}}]
    protocols: [{udp: {destinationPort: {number: 81}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {matchLabels: {ns: z}}}
  ingress:
  - action: Deny
    from: [{namespaces: {matchLabels: {ns: x}}}, {namespaces: {matchLabels: {ns: y}}}]
---
`

// L7PassYAML are cluster policies beside the L7 scenario "GET /public
// from the same namespace" (scenarios.L7[0], on x/a's port 80): an Admin
// Pass of x/c on TCP 80 (then the L7 rules judge it) ahead of an Admin
// Accept of namespace x (final: x/b's requests reach x/a without the
// proxy), and an Admin Accept of y/b into namespace x.
const L7PassYAML = `apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: pass-c}
spec:
  tier: Admin
  priority: 1
  subject: {pods: {namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: a}}}}
  ingress:
  - action: Pass
    from: [{pods: {namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: c}}}}]
    protocols: [{tcp: {destinationPort: {number: 80}}}]
  - action: Accept
    from: [{namespaces: {matchLabels: {ns: x}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: accept-yb}
spec:
  tier: Admin
  priority: 2
  subject: {namespaces: {matchLabels: {ns: x}}}
  ingress:
  - action: Accept
    from: [{pods: {namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchLabels: {pod: b}}}}]
---
`
