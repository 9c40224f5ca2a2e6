package experiment

import (
	"fmt"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// clusterPort is the first port of the generated cluster policies that
// no workload uses: Admin-tier policy i denies TCP clusterPort+2i (never
// adjacent, so no datapath merges two into a range; above fillerPort's
// ports, so they never meet the NetworkPolicies'), the Baseline policy
// TCP clusterPort-2. They lie above the kernel's ephemeral range
// (32768-60999): where pods share a host's network (the kubernetes
// backend's test control plane runs them as host processes), the
// enforcement probe listens on these ports, and a client's ephemeral port
// in that range once took one of them (bind: address already in use).
const clusterPort = 61002

// clusterPoliciesUnset marks a point whose matrix gives no
// clusterPolicies, until resolveClusterParams sets it to 0.
const clusterPoliciesUnset = -1

// resolveClusterParams fills the cluster keys' defaults and checks them.
// A matrix that gives clusterPolicies gives every point a match (none
// unless it says last), N = 0 included, so that the point without
// cluster policies lies on the none line; at N = 0 last is none (no
// policy to match: measured once).
func resolveClusterParams(p *results.Params, chain bool, bad func(key, format string, args ...any) error) error {
	if p.ClusterPolicies == clusterPoliciesUnset {
		p.ClusterPolicies = 0
		if p.ClusterPolicyMatch != "" {
			return bad("clusterPolicyMatch", "%s: applies with clusterPolicies (give clusterPolicies: [...])", p.ClusterPolicyMatch)
		}
		return nil
	}
	if p.ClusterPolicyMatch == "" || p.ClusterPolicies == 0 {
		p.ClusterPolicyMatch = results.ClusterMatchNone
	}
	switch {
	case p.ClusterPolicies == 0:
	case chain:
		return bad("clusterPolicies", "%d: a chain (and topology direct, no CNI) has no policy datapath", p.ClusterPolicies)
	case p.L7Mode != "":
		return bad("clusterPolicies", "%d: an L7 point's policy is the one l7Mode generates (leave clusterPolicies out of L7 sweeps)", p.ClusterPolicies)
	}
	return nil
}

// clusterPolicyText generates the point's cluster policies as
// policy.networking.k8s.io/v1alpha2 ClusterNetworkPolicy YAML ("" for
// none): ClusterPolicies Admin-tier policies of priorities 0 to N-1, each
// about the namespace of client and server (default), as a cluster
// admin's tenant rules are, with one rule denying ingress from that
// namespace on a port of its own that no workload uses: the measured
// connection's source is their peer, so every datapath walks them, and
// its port is not theirs. With match last, the last (priority N-1)
// accepts the client into the server on the workload ports instead.
// Behind them, one Baseline policy about the same namespace denies it on
// another unused port: the measured connection reaches the Baseline tier
// (when no NetworkPolicy isolates the server) and is not matched there
// either. ClusterNetworkPolicy rather than v1alpha1's
// AdminNetworkPolicy: one kind carries both tiers, and it is the API
// upstream develops (Accept, protocols); the datapaths compile both to
// the same entries.
func clusterPolicyText(p results.Params) string {
	n := p.ClusterPolicies
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	ns := fmt.Sprintf("{matchLabels: {kubernetes.io/metadata.name: %s}}", topology.DefaultNamespace)
	head := func(name, tier string, prio int, subject string) {
		fmt.Fprintf(&b, "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: %s}\nspec:\n  tier: %s\n  priority: %d\n  subject: %s\n  ingress:\n", name, tier, prio, subject)
	}
	deny := func(port int) {
		fmt.Fprintf(&b, "  - name: deny-tcp-%d\n    action: Deny\n    from: [{namespaces: %s}]\n    protocols: [{tcp: {destinationPort: {number: %d}}}]\n---\n", port, ns, port)
	}
	for i := range n {
		name := fmt.Sprintf("admin-%04d", i)
		if i == n-1 && p.ClusterPolicyMatch == results.ClusterMatchLast {
			head(name, "Admin", i, fmt.Sprintf("{pods: {namespaceSelector: %s, podSelector: {matchLabels: {app: server}}}}", ns))
			fmt.Fprintf(&b, "  - name: accept-workloads\n    action: Accept\n    from: [{pods: {namespaceSelector: %s, podSelector: {matchLabels: {app: client}}}}]\n    protocols:\n", ns)
			for _, proto := range []string{"tcp", "udp"} {
				fmt.Fprintf(&b, "    - {%s: {destinationPort: {range: {start: %d, end: %d}}}}\n    - {%s: {destinationPort: {number: %d}}}\n", proto, IperfPort, IperfPort+results.MaxFlows-1, proto, RRPort)
			}
			b.WriteString("---\n")
			continue
		}
		head(name, "Admin", i, "{namespaces: "+ns+"}")
		deny(clusterPort + 2*i)
	}
	head("baseline", "Baseline", 0, "{namespaces: "+ns+"}")
	deny(clusterPort - 2)
	return strings.TrimSuffix(b.String(), "---\n")
}

// recordCluster adds the point's cluster policies to the record of its
// policy update.
func recordCluster(a *results.Apply, p results.Params) {
	if p.ClusterPolicies > 0 {
		a.ClusterPolicies, a.ClusterPolicyMatch = p.ClusterPolicies, p.ClusterPolicyMatch
	}
}

// policiesLabel names a point's generated policies in an error: "100
// no-match policies", and its cluster policies when it has any.
func policiesLabel(p results.Params) string {
	s := fmt.Sprintf("%d %s policies", p.Policies, p.PolicyMode)
	if p.ClusterPolicies > 0 {
		s += fmt.Sprintf(" and %d cluster policies (match %s)", p.ClusterPolicies, p.ClusterPolicyMatch)
	}
	return s
}
