package scenarios

import "fmt"

// anp builds a v1alpha1 AdminNetworkPolicy document (spec lines under
// "spec:", after the priority).
func anp(name string, priority int, spec string) string {
	return fmt.Sprintf("apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata:\n  name: %s\nspec:\n  priority: %d\n%s---\n", name, priority, spec)
}

// banp builds the v1alpha1 BaselineAdminNetworkPolicy (always "default").
func banp(spec string) string {
	return "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata:\n  name: default\nspec:\n" + spec + "---\n"
}

// cnp2 builds a v1alpha2 ClusterNetworkPolicy of a tier.
func cnp2(name, tier string, priority int, spec string) string {
	return fmt.Sprintf("apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata:\n  name: %s\nspec:\n  tier: %s\n  priority: %d\n%s---\n", name, tier, priority, spec)
}

// Selector snippets of the cluster policies below.
const (
	subjX   = "  subject:\n    namespaces:\n      matchLabels: {ns: x}\n"
	subjY   = "  subject:\n    namespaces:\n      matchLabels: {ns: y}\n"
	subjZ   = "  subject:\n    namespaces:\n      matchLabels: {ns: z}\n"
	subjAll = "  subject:\n    namespaces: {}\n"
)

// Tiers is the scenario table of the cluster policy tiers
// (AdminNetworkPolicy, BaselineAdminNetworkPolicy, ClusterNetworkPolicy),
// every verdict worked out by hand from the network-policy-api
// documentation: the Admin tier by priority, rules in order, first match
// decides; Allow/Accept and Deny are final; Pass hands the connection to
// NetworkPolicy; the Baseline tier decides only for pods no NetworkPolicy
// isolates in that direction; each direction decides alone.
var Tiers = []Scenario{
	{Name: "admin: Deny ingress from a namespace", Policies: anp("no-y-into-x", 10, subjX+
		"  ingress:\n  - name: no-y\n    action: Deny\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), deny("y/c", "x/b", "UDP", 81), allow("z/a", "x/a", "TCP", 80), allow("x/b", "x/a", "TCP", 80), allow("x/a", "y/a", "TCP", 80)}},

	{Name: "admin: Deny wins over a NetworkPolicy allow", Policies: np("x", "allow-all", "  podSelector: {}\n  ingress:\n  - {}\n") +
		anp("no-y-into-x", 10, subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{deny("y/a", "x/b", "TCP", 80), allow("z/a", "x/b", "TCP", 80), allow("x/c", "x/b", "UDP", 81)}},

	{Name: "admin: Allow wins over a NetworkPolicy isolation", Policies: np("x", "deny-in", "  podSelector: {}\n  policyTypes: [Ingress]\n") +
		anp("z-into-x", 10, subjX+"  ingress:\n  - action: Allow\n    from:\n    - namespaces:\n        matchLabels: {ns: z}\n"),
		Expect: []Cell{allow("z/a", "x/a", "TCP", 80), allow("z/b", "x/c", "UDP", 81), deny("y/a", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80)}},

	{Name: "admin: Allow wins over a CiliumNetworkPolicy deny", Policies: cnp("x", "deny-z", "  endpointSelector: {}\n  enableDefaultDeny: {ingress: false}\n  ingressDeny:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: z\n") +
		anp("z-web-into-x", 10, subjX+"  ingress:\n  - action: Allow\n    from:\n    - namespaces:\n        matchLabels: {ns: z}\n    ports:\n    - portNumber: {protocol: TCP, port: 80}\n"),
		Expect: []Cell{allow("z/a", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 81), deny("z/b", "x/a", "UDP", 80), allow("y/a", "x/a", "TCP", 81)}},

	{Name: "admin: the lower priority number goes first", Policies: anp("deny-y", 20, subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n") +
		anp("allow-y-a", 10, subjX+"  ingress:\n  - action: Allow\n    from:\n    - pods:\n        namespaceSelector:\n          matchLabels: {ns: y}\n        podSelector:\n          matchLabels: {pod: a}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), deny("y/c", "x/b", "UDP", 81), allow("z/a", "x/a", "TCP", 80)}},

	{Name: "admin: rules in the order written", Policies: anp("ordered", 10, subjX+
		"  ingress:\n  - action: Allow\n    from:\n    - pods:\n        namespaceSelector:\n          matchLabels: {ns: y}\n        podSelector:\n          matchLabels: {pod: b}\n  - action: Deny\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n  - action: Allow\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{allow("y/b", "x/c", "TCP", 80), deny("y/a", "x/c", "TCP", 80), deny("y/c", "x/c", "UDP", 81), allow("z/c", "x/c", "TCP", 80)}},

	{Name: "admin: Pass hands the connection to NetworkPolicy", Policies: np("x", "from-y-a", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n      podSelector:\n        matchLabels: {pod: a}\n") +
		anp("pass-y", 5, subjX+"  ingress:\n  - action: Pass\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80), allow("x/a", "z/a", "TCP", 80)}},

	{Name: "admin: Pass skips the rest of the Admin tier", Policies: anp("pass-y", 1, subjX+"  ingress:\n  - action: Pass\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n") +
		anp("deny-all", 2, subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("y/b", "x/c", "UDP", 81), deny("z/a", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80)}},

	{Name: "admin: Pass with no NetworkPolicy reaches the Baseline tier", Policies: anp("pass-y", 1, subjX+"  ingress:\n  - action: Pass\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n") +
		banp(subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80), allow("x/a", "y/a", "TCP", 80)}},

	{Name: "baseline: default deny with NetworkPolicy exceptions", Policies: np("x", "from-y", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n") +
		banp(subjAll+"  ingress:\n  - name: default-deny\n    action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80), deny("x/a", "y/a", "TCP", 80), deny("y/a", "z/a", "UDP", 81), deny("z/b", "z/a", "TCP", 80)}},

	{Name: "baseline: an Allow before a Deny", Policies: banp(subjZ + "  ingress:\n  - action: Allow\n    from:\n    - namespaces:\n        matchLabels: {ns: x}\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("x/b", "z/a", "TCP", 80), deny("y/a", "z/a", "TCP", 80), deny("z/b", "z/a", "UDP", 81), allow("z/a", "x/a", "TCP", 80)}},

	{Name: "baseline: egress default deny with a NetworkPolicy exception", Policies: np("x", "out-to-z", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector:\n        matchLabels: {ns: z}\n") +
		banp(subjAll+"  egress:\n  - action: Deny\n    to:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("x/a", "z/a", "TCP", 80), deny("x/a", "y/a", "TCP", 80), deny("y/a", "x/a", "TCP", 80), deny("z/a", "z/b", "UDP", 81)}},

	{Name: "admin: a UDP port", Policies: anp("no-udp-81", 10, subjY+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n    ports:\n    - portNumber: {protocol: UDP, port: 81}\n"),
		Expect: []Cell{deny("x/a", "y/a", "UDP", 81), allow("x/a", "y/a", "TCP", 81), allow("x/a", "y/a", "UDP", 80)}},

	{Name: "admin: a port range, protocol TCP by default", Policies: anp("no-80-81", 10, subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n    ports:\n    - portRange: {start: 80, end: 81}\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), deny("y/a", "x/a", "TCP", 81), allow("y/a", "x/a", "UDP", 80), allow("y/a", "x/a", "UDP", 81)}},

	{Name: "admin: a named port", Policies: anp("no-serve-udp", 10, subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n    ports:\n    - namedPort: serve-81-udp\n"),
		Expect: []Cell{deny("z/a", "x/b", "UDP", 81), allow("z/a", "x/b", "UDP", 80), allow("z/a", "x/b", "TCP", 81)}},

	{Name: "admin: egress Deny from some pods to a namespace", Policies: anp("z-web-not-to-x", 10,
		"  subject:\n    pods:\n      namespaceSelector:\n        matchLabels: {ns: z}\n      podSelector:\n        matchLabels: {app: web}\n  egress:\n  - action: Deny\n    to:\n    - namespaces:\n        matchLabels: {ns: x}\n"),
		Expect: []Cell{deny("z/a", "x/b", "TCP", 80), allow("z/b", "x/b", "TCP", 80), allow("z/a", "y/a", "TCP", 80), allow("x/a", "z/a", "TCP", 80)}},

	{Name: "admin: egress Deny to networks", Policies: anp("y-not-to-flip", 10, subjY+"  egress:\n  - action: Deny\n    to:\n    - networks: [10.0.192.0/24]\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), allow("y/a", "x/b", "TCP", 80), deny("y/c", "z/c", "UDP", 81), allow("x/a", "y/a", "TCP", 80)}},

	{Name: "admin: egress Deny beats a NetworkPolicy egress allow", Policies: np("z", "out-all", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - {}\n") +
		anp("z-not-to-x-80", 10, subjZ+"  egress:\n  - action: Deny\n    to:\n    - namespaces:\n        matchLabels: {ns: x}\n    ports:\n    - portNumber: {protocol: TCP, port: 80}\n"),
		Expect: []Cell{deny("z/a", "x/a", "TCP", 80), allow("z/a", "x/a", "TCP", 81), allow("z/a", "y/a", "TCP", 80)}},

	{Name: "admin: each direction decides alone", Policies: np("y", "deny-in", "  podSelector: {}\n  policyTypes: [Ingress]\n") +
		anp("x-out-to-y", 10, subjX+"  egress:\n  - action: Allow\n    to:\n    - namespaces:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{deny("x/a", "y/a", "TCP", 80), deny("z/a", "y/a", "TCP", 80), allow("x/a", "z/a", "TCP", 80)}},

	{Name: "admin: a nodes peer selects no pod", Policies: anp("no-nodes", 10, subjAll+"  egress:\n  - action: Deny\n    to:\n    - nodes: {}\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), allow("z/c", "x/b", "UDP", 81)}},

	{Name: "v1alpha2: Accept, Pass and Deny", Policies: np("x", "deny-in", "  podSelector: {}\n  policyTypes: [Ingress]\n") +
		cnp2("x-admin", "Admin", 10, subjX+"  ingress:\n  - action: Accept\n    from:\n    - pods:\n        namespaceSelector:\n          matchLabels: {ns: y}\n        podSelector:\n          matchLabels: {pod: a}\n    protocols:\n    - tcp:\n        destinationPort: {number: 80}\n  - action: Pass\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("y/a", "x/a", "TCP", 81), deny("y/b", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80)}},

	{Name: "v1alpha2: Baseline tier with a UDP port range", Policies: cnp2("z-udp", "Baseline", 0, subjZ+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n    protocols:\n    - udp:\n        destinationPort:\n          range: {start: 80, end: 81}\n"),
		Expect: []Cell{deny("x/a", "z/a", "UDP", 80), deny("x/a", "z/a", "UDP", 81), allow("x/a", "z/a", "TCP", 80)}},

	{Name: "v1alpha2: destinationNamedPort", Policies: cnp2("no-serve-tcp", "Admin", 3, subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n    protocols:\n    - destinationNamedPort: serve-80-tcp\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), allow("y/a", "x/a", "TCP", 81), allow("y/a", "x/a", "UDP", 80)}},

	{Name: "v1alpha1 and v1alpha2 Admin policies by priority", Policies: anp("allow-y", 20, subjX+"  ingress:\n  - action: Allow\n    from:\n    - namespaces:\n        matchLabels: {ns: y}\n") +
		cnp2("deny-y-b", "Admin", 10, subjX+"  ingress:\n  - action: Deny\n    from:\n    - pods:\n        namespaceSelector: {}\n        podSelector:\n          matchLabels: {pod: b}\n") +
		np("x", "deny-in", "  podSelector: {}\n  policyTypes: [Ingress]\n"),
		Expect: []Cell{deny("y/b", "x/a", "TCP", 80), allow("y/a", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80), deny("x/b", "x/c", "TCP", 80)}},

	{Name: "baseline: a CiliumNetworkPolicy deny that isolates nothing is final", Policies: cnp("x", "deny-y", "  endpointSelector: {}\n  enableDefaultDeny: {ingress: false}\n  ingressDeny:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: y\n") +
		cnp2("accept-all", "Baseline", 5, subjX+"  ingress:\n  - action: Accept\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), allow("z/a", "x/a", "TCP", 80), allow("x/b", "x/a", "UDP", 81)}},

	{Name: "baseline: a CiliumNetworkPolicy allow that isolates nothing is final", Policies: cnp("x", "allow-y", "  endpointSelector: {}\n  enableDefaultDeny: {ingress: false}\n  ingress:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: y\n") +
		banp(subjX+"  ingress:\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80), deny("x/b", "x/a", "UDP", 81)}},

	{Name: "v1alpha2: a Baseline Pass allows", Policies: cnp2("pass-then-deny", "Baseline", 1, subjY+"  ingress:\n  - action: Pass\n    from:\n    - namespaces:\n        matchLabels: {ns: x}\n  - action: Deny\n    from:\n    - namespaces: {}\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), deny("z/a", "y/a", "TCP", 80)}},

	{Name: "admin: Deny to networks ::/0 leaves IPv4 alone", Policies: anp("no-v6-out-of-x", 10, subjX+
		"  egress:\n  - action: Deny\n    to:\n    - networks: ['::/0']\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), allow("x/b", "z/c", "UDP", 81), deny6("x/a", "y/a", "TCP", 80), deny6("x/b", "x/a", "UDP", 81), allow6("y/a", "x/a", "TCP", 80)}},
}
