package scenarios

// np builds a NetworkPolicy document in namespace ns with the given spec
// (indented YAML under "spec:").
func np(ns, name, spec string) string {
	return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: " + name +
		"\n  namespace: " + ns + "\nspec:\n" + spec + "---\n"
}

// cnp builds a CiliumNetworkPolicy document.
func cnp(ns, name, spec string) string {
	return "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: " + name +
		"\n  namespace: " + ns + "\nspec:\n" + spec + "---\n"
}

// All is the scenario table: every point of Kubernetes NetworkPolicy, the
// L3/L4 part of CiliumNetworkPolicy and the cluster policy tiers that
// cnlab enforces.
var All = append(namespaced, Tiers...)

// namespaced are the scenarios of NetworkPolicy and CiliumNetworkPolicy.
var namespaced = []Scenario{
	{Name: "no policy allows everything", Expect: []Cell{
		allow("x/a", "y/b", "TCP", 80), allow("z/c", "x/a", "UDP", 81), allow("y/a", "y/c", "TCP", 81)}},

	{Name: "deny all ingress in x", Policies: np("x", "deny-in", "  podSelector: {}\n  policyTypes: [Ingress]\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), deny("x/b", "x/a", "UDP", 81), allow("x/a", "y/a", "TCP", 80), allow("y/a", "z/a", "TCP", 80)}},

	{Name: "deny all egress in x", Policies: np("x", "deny-out", "  podSelector: {}\n  policyTypes: [Egress]\n"),
		Expect: []Cell{deny("x/a", "y/a", "TCP", 80), deny("x/a", "x/b", "UDP", 81), allow("y/a", "x/a", "TCP", 80)}},

	{Name: "deny all both ways in x", Policies: np("x", "deny-both", "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n"),
		Expect: []Cell{deny("x/a", "y/a", "TCP", 80), deny("y/a", "x/a", "TCP", 80), allow("y/a", "z/b", "UDP", 80)}},

	{Name: "egress: [] does not isolate egress", Policies: np("x", "empty-egress", "  podSelector: {}\n  egress: []\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), deny("y/a", "x/a", "TCP", 80)}},

	{Name: "policyTypes: [] counts as unset", Policies: np("x", "empty-types", "  podSelector: {}\n  policyTypes: []\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), allow("x/a", "y/a", "TCP", 80)}},

	{Name: "ingress: [] in policyTypes Ingress denies all", Policies: np("y", "empty-list", "  podSelector: {}\n  policyTypes: [Ingress]\n  ingress: []\n"),
		Expect: []Cell{deny("x/a", "y/a", "TCP", 80), allow("y/a", "x/a", "TCP", 80)}},

	{Name: "allow all ingress with an empty rule", Policies: np("x", "deny-in", "  podSelector: {}\n  policyTypes: [Ingress]\n") +
		np("x", "allow-all", "  podSelector: {}\n  ingress:\n  - {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("z/c", "x/b", "UDP", 81)}},

	{Name: "allow from the same namespace", Policies: np("x", "same-ns", "  podSelector: {}\n  ingress:\n  - from:\n    - podSelector: {}\n"),
		Expect: []Cell{allow("x/b", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), deny("z/a", "x/c", "UDP", 81)}},

	{Name: "allow from one pod by label", Policies: np("x", "from-b", "  podSelector:\n    matchLabels: {pod: a}\n  ingress:\n  - from:\n    - podSelector:\n        matchLabels: {pod: b}\n"),
		Expect: []Cell{allow("x/b", "x/a", "TCP", 80), deny("x/c", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), allow("x/c", "x/b", "TCP", 80)}},

	{Name: "allow from a namespace by label", Policies: np("x", "from-y", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("y/c", "x/b", "UDP", 81), deny("x/b", "x/a", "TCP", 80), deny("z/a", "x/a", "TCP", 80)}},

	{Name: "empty namespaceSelector means every namespace", Policies: np("x", "from-all-ns", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector:\n        matchLabels: {app: web}\n"),
		Expect: []Cell{allow("y/a", "x/b", "TCP", 80), allow("z/a", "x/c", "TCP", 80), allow("x/a", "x/b", "TCP", 80), deny("y/b", "x/a", "TCP", 80)}},

	{Name: "podSelector AND namespaceSelector in one peer", Policies: np("x", "and", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n      podSelector:\n        matchLabels: {pod: c}\n"),
		Expect: []Cell{allow("y/c", "x/a", "TCP", 80), deny("y/a", "x/a", "TCP", 80), deny("x/c", "x/a", "TCP", 80), deny("z/c", "x/a", "TCP", 80)}},

	{Name: "podSelector OR namespaceSelector as two peers", Policies: np("x", "or", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n    - podSelector:\n        matchLabels: {pod: c}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("x/c", "x/a", "TCP", 80), deny("z/c", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80)}},

	{Name: "matchExpressions In", Policies: np("y", "in", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector:\n        matchExpressions:\n        - {key: pod, operator: In, values: [a, b]}\n"),
		Expect: []Cell{allow("x/a", "y/c", "TCP", 80), allow("z/b", "y/a", "TCP", 80), deny("x/c", "y/a", "TCP", 80)}},

	{Name: "matchExpressions NotIn", Policies: np("y", "notin", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector:\n        matchExpressions:\n        - {key: app, operator: NotIn, values: [db]}\n"),
		Expect: []Cell{allow("x/a", "y/b", "TCP", 80), allow("x/c", "y/b", "TCP", 80), deny("z/b", "y/a", "TCP", 80)}},

	{Name: "matchExpressions Exists", Policies: np("z", "exists", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector:\n        matchExpressions:\n        - {key: app, operator: Exists}\n"),
		Expect: []Cell{allow("x/a", "z/c", "TCP", 80), allow("y/b", "z/a", "UDP", 81), deny("x/c", "z/a", "TCP", 80)}},

	{Name: "matchExpressions DoesNotExist on namespaces", Policies: np("z", "noexist", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchExpressions:\n        - {key: tier, operator: DoesNotExist}\n"),
		Expect: []Cell{allow("z/a", "z/b", "TCP", 80), deny("x/a", "z/b", "TCP", 80), deny("y/a", "z/b", "TCP", 80)}},

	{Name: "namespace by kubernetes.io/metadata.name", Policies: np("x", "by-name", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {kubernetes.io/metadata.name: z}\n"),
		Expect: []Cell{allow("z/b", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80)}},

	{Name: "one TCP port", Policies: np("x", "tcp-80", "  podSelector: {}\n  ingress:\n  - ports:\n    - {protocol: TCP, port: 80}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("y/a", "x/a", "TCP", 81), deny("y/a", "x/a", "UDP", 80)}},

	{Name: "protocol defaults to TCP", Policies: np("x", "default-proto", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: 81\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 81), deny("y/a", "x/a", "UDP", 81), deny("y/a", "x/a", "TCP", 80)}},

	{Name: "one UDP port", Policies: np("y", "udp-81", "  podSelector: {}\n  ingress:\n  - ports:\n    - {protocol: UDP, port: 81}\n"),
		Expect: []Cell{allow("x/a", "y/a", "UDP", 81), deny("x/a", "y/a", "UDP", 80), deny("x/a", "y/a", "TCP", 81)}},

	{Name: "named TCP port", Policies: np("x", "named", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: serve-80-tcp\n"),
		Expect: []Cell{allow("z/a", "x/b", "TCP", 80), deny("z/a", "x/b", "TCP", 81), deny("z/a", "x/b", "UDP", 80)}},

	{Name: "named UDP port", Policies: np("x", "named-udp", "  podSelector: {}\n  ingress:\n  - ports:\n    - {protocol: UDP, port: serve-81-udp}\n"),
		Expect: []Cell{allow("z/a", "x/b", "UDP", 81), deny("z/a", "x/b", "UDP", 80), deny("z/a", "x/b", "TCP", 81)}},

	{Name: "named port with the wrong protocol matches nothing", Policies: np("x", "named-wrong", "  podSelector: {}\n  ingress:\n  - ports:\n    - {protocol: TCP, port: serve-81-udp}\n"),
		Expect: []Cell{deny("z/a", "x/b", "TCP", 81), deny("z/a", "x/b", "UDP", 81)}},

	{Name: "port range with endPort", Policies: np("y", "range", "  podSelector: {}\n  ingress:\n  - ports:\n    - {protocol: TCP, port: 80, endPort: 81}\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), allow("x/a", "y/a", "TCP", 81), deny("x/a", "y/a", "UDP", 81)}},

	{Name: "protocol without a port", Policies: np("y", "all-udp", "  podSelector: {}\n  ingress:\n  - ports:\n    - protocol: UDP\n"),
		Expect: []Cell{allow("x/a", "y/a", "UDP", 80), allow("x/a", "y/a", "UDP", 81), deny("x/a", "y/a", "TCP", 80)}},

	{Name: "ipBlock of the other host", Policies: np("x", "cidr", "  podSelector: {}\n  ingress:\n  - from:\n    - ipBlock: {cidr: 10.0.191.0/24}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("x/b", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), deny("x/c", "x/a", "TCP", 80)}},

	{Name: "ipBlock with except", Policies: np("x", "cidr-except", "  podSelector: {}\n  ingress:\n  - from:\n    - ipBlock:\n        cidr: 10.0.0.0/16\n        except: [10.0.191.16/28, 10.0.192.32/32]\n"),
		Expect: []Cell{allow("x/b", "x/a", "TCP", 80), deny("y/a", "x/a", "TCP", 80), deny("y/c", "x/a", "TCP", 80), deny("z/c", "x/a", "TCP", 80), allow("z/a", "x/a", "UDP", 81)}},

	{Name: "egress to an ipBlock", Policies: np("y", "egress-cidr", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: 10.0.192.0/24}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("y/c", "z/a", "TCP", 80), deny("y/a", "x/b", "TCP", 80), deny("y/b", "y/a", "UDP", 81)}},

	// IPv6 ipBlocks (dual-stack labs: LabFor). A CIDR matches the
	// addresses of its own family only, while selectors match every
	// address of a pod: on an IPv4-only lab an IPv6 ipBlock matches
	// nothing, and an IPv4 ipBlock allows nothing over IPv6.
	{Name: "ipBlock IPv4 only leaves IPv6 denied", Policies: np("x", "cidr-v4-only", "  podSelector: {}\n  ingress:\n  - from:\n    - ipBlock: {cidr: 10.0.0.0/8}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("x/b", "x/a", "UDP", 81), deny6("y/a", "x/a", "TCP", 80), deny6("x/b", "x/a", "UDP", 81), allow6("x/a", "y/a", "TCP", 80)}},

	{Name: "IPv6 ipBlock with except", Policies: np("x", "cidr6-except", "  podSelector: {}\n  ingress:\n  - from:\n    - ipBlock:\n        cidr: fd00:0:191::/64\n        except: [fd00:0:191::20/127]\n"),
		Expect: []Cell{deny("x/b", "x/a", "TCP", 80), deny("y/c", "x/a", "TCP", 80), allow6("x/b", "x/a", "TCP", 80), allow6("y/c", "x/a", "UDP", 81), deny6("y/a", "x/a", "TCP", 80), deny6("z/a", "x/a", "TCP", 80), deny6("x/c", "x/a", "TCP", 80)}},

	{Name: "ipBlocks of both families", Policies: np("x", "cidr-both", "  podSelector: {}\n  ingress:\n  - from:\n    - ipBlock: {cidr: 10.0.191.0/24}\n    - ipBlock: {cidr: 'fd00:0:191::/64'}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow6("y/a", "x/a", "TCP", 80), deny("x/c", "x/a", "TCP", 80), deny6("x/c", "x/a", "TCP", 80), allow6("x/b", "x/c", "UDP", 81)}},

	{Name: "egress to an IPv6 ipBlock", Policies: np("y", "egress-cidr6", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: 'fd00:0:192::/64'}\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), allow6("y/a", "x/a", "TCP", 80), allow6("y/c", "z/a", "UDP", 81), deny6("y/a", "x/b", "TCP", 80), allow("x/a", "y/a", "TCP", 80)}},

	{Name: "egress to a namespace", Policies: np("x", "egress-y", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{allow("x/a", "y/c", "TCP", 80), deny("x/a", "x/b", "TCP", 80), deny("x/a", "z/a", "UDP", 81), allow("z/a", "x/a", "TCP", 80)}},

	{Name: "egress to a named port", Policies: np("z", "egress-named", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - ports:\n    - {protocol: UDP, port: serve-81-udp}\n"),
		Expect: []Cell{allow("z/a", "x/a", "UDP", 81), deny("z/a", "x/a", "UDP", 80), deny("z/a", "x/a", "TCP", 81)}},

	{Name: "egress section without policyTypes isolates both ways", Policies: np("z", "defaulting", "  podSelector:\n    matchLabels: {pod: a}\n  egress:\n  - to:\n    - podSelector: {}\n"),
		Expect: []Cell{allow("z/a", "z/b", "TCP", 80), deny("z/a", "x/a", "TCP", 80), deny("z/b", "z/a", "TCP", 80), allow("z/b", "x/a", "TCP", 80)}},

	{Name: "policyTypes Egress leaves ingress open", Policies: np("z", "egress-only", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - podSelector: {}\n"),
		Expect: []Cell{allow("x/a", "z/a", "TCP", 80), allow("z/a", "z/c", "TCP", 80), deny("z/a", "y/a", "TCP", 80)}},

	{Name: "policies add up", Policies: np("x", "from-y", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n") +
		np("x", "from-z-web", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: z}\n      podSelector:\n        matchLabels: {app: web}\n"),
		Expect: []Cell{allow("y/b", "x/a", "TCP", 80), allow("z/a", "x/a", "TCP", 80), deny("z/b", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80)}},

	{Name: "a policy selecting one pod leaves the others open", Policies: np("x", "only-db", "  podSelector:\n    matchLabels: {app: db}\n  policyTypes: [Ingress]\n"),
		Expect: []Cell{deny("x/a", "x/b", "TCP", 80), allow("x/b", "x/a", "TCP", 80), allow("y/a", "x/c", "TCP", 80)}},

	{Name: "egress of the source and ingress of the destination both needed", Policies: np("x", "x-out-to-z", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector:\n        matchLabels: {ns: z}\n") +
		np("z", "z-in-from-y", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: y}\n"),
		Expect: []Cell{deny("x/a", "z/a", "TCP", 80), deny("x/a", "y/a", "TCP", 80), allow("y/a", "z/a", "TCP", 80), deny("z/a", "z/b", "TCP", 80)}},

	{Name: "cilium: fromEndpoints stays in the policy's namespace", Policies: cnp("x", "same-ns", "  endpointSelector: {}\n  ingress:\n  - fromEndpoints:\n    - {}\n"),
		Expect: []Cell{allow("x/b", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80)}},

	{Name: "cilium: fromEndpoints in another namespace", Policies: cnp("x", "from-y-web", "  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: y\n        k8s:app: web\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), deny("x/b", "x/a", "TCP", 80), allow("z/b", "x/c", "TCP", 80)}},

	{Name: "cilium: namespace labels in a selector reach other namespaces", Policies: cnp("z", "from-back", "  endpointSelector: {}\n  ingress:\n  - fromEndpoints:\n    - matchLabels:\n        io.cilium.k8s.namespace.labels.tier: back\n"),
		Expect: []Cell{allow("y/a", "z/a", "TCP", 80), deny("x/a", "z/a", "TCP", 80), deny("z/b", "z/a", "TCP", 80)}},

	{Name: "cilium: explicit empty fromEndpoints selects nobody", Policies: cnp("y", "empty-eps", "  endpointSelector: {}\n  ingress:\n  - fromEndpoints: []\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n"),
		Expect: []Cell{deny("x/a", "y/a", "TCP", 80), deny("y/b", "y/a", "TCP", 80), allow("y/a", "x/a", "TCP", 80)}},

	{Name: "cilium: enableDefaultDeny ignores directions without rules", Policies: cnp("x", "egress-only", "  endpointSelector: {}\n  enableDefaultDeny: {ingress: true}\n  egress:\n  - toEndpoints:\n    - {}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("x/a", "x/b", "TCP", 80), deny("x/a", "y/a", "TCP", 80)}},

	{Name: "cilium: namespace labels with the namespace key", Policies: cnp("z", "from-back2", "  endpointSelector: {}\n  ingress:\n  - fromEndpoints:\n    - matchExpressions:\n      - {key: io.kubernetes.pod.namespace, operator: Exists}\n      matchLabels:\n        io.cilium.k8s.namespace.labels.tier: back\n"),
		Expect: []Cell{allow("y/a", "z/a", "TCP", 80), deny("x/a", "z/a", "TCP", 80), deny("z/b", "z/a", "TCP", 80)}},

	{Name: "cilium: L4-only rule allows any peer on that port", Policies: cnp("y", "l4", "  endpointSelector: {}\n  ingress:\n  - toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), allow("z/c", "y/b", "TCP", 80), deny("x/a", "y/a", "TCP", 81), deny("x/a", "y/a", "UDP", 80)}},

	{Name: "cilium: protocol ANY covers TCP and UDP", Policies: cnp("y", "any-81", "  endpointSelector: {}\n  ingress:\n  - toPorts:\n    - ports:\n      - port: \"81\"\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 81), allow("x/a", "y/a", "UDP", 81), deny("x/a", "y/a", "TCP", 80)}},

	{Name: "cilium: empty rule denies all ingress", Policies: cnp("z", "deny", "  endpointSelector: {}\n  ingress:\n  - {}\n"),
		Expect: []Cell{deny("x/a", "z/a", "TCP", 80), deny("z/b", "z/a", "UDP", 81), allow("z/a", "x/a", "TCP", 80)}},

	{Name: "cilium: ingressDeny wins over a NetworkPolicy allow", Policies: np("x", "allow-all", "  podSelector: {}\n  ingress:\n  - {}\n") +
		cnp("x", "deny-y", "  endpointSelector: {}\n  ingressDeny:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: y\n"),
		Expect: []Cell{deny("y/a", "x/a", "TCP", 80), allow("z/a", "x/a", "TCP", 80), allow("x/b", "x/a", "UDP", 81)}},

	{Name: "cilium: egressDeny on one port", Policies: cnp("y", "no-81-out", "  endpointSelector: {}\n  egress:\n  - toEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: x\n  egressDeny:\n  - toPorts:\n    - ports:\n      - {port: \"81\", protocol: TCP}\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), deny("y/a", "x/a", "TCP", 81), allow("y/a", "x/a", "UDP", 81), deny("y/a", "z/a", "TCP", 80)}},

	{Name: "cilium: deny without default deny", Policies: cnp("z", "deny-only", "  endpointSelector: {}\n  enableDefaultDeny: {ingress: false}\n  ingressDeny:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: x\n"),
		Expect: []Cell{deny("x/a", "z/a", "TCP", 80), allow("y/a", "z/a", "TCP", 80), allow("z/b", "z/a", "UDP", 81)}},

	// A CiliumNetworkPolicy's CIDR selectors never select the lab's own
	// pods and hosts (as Cilium's never select the cluster's): a CIDR
	// covering every endpoint allows none of them.
	{Name: "cilium: fromCIDR", Policies: cnp("y", "cidr", "  endpointSelector: {}\n  ingress:\n  - fromCIDR: [10.0.192.0/24]\n"),
		Expect: []Cell{deny("x/a", "y/a", "TCP", 80), deny("x/b", "y/a", "TCP", 80), deny("z/c", "y/c", "UDP", 81)}},

	{Name: "cilium: toCIDRSet with except", Policies: cnp("x", "cidrset", "  endpointSelector:\n    matchLabels: {pod: a}\n  egress:\n  - toCIDRSet:\n    - cidr: 10.0.191.0/24\n      except: [10.0.191.20/30]\n"),
		Expect: []Cell{deny("x/a", "x/b", "TCP", 80), deny("x/a", "y/a", "TCP", 80), deny("x/a", "y/c", "TCP", 80), deny("x/a", "z/b", "TCP", 80), deny("x/a", "x/c", "TCP", 80)}},

	{Name: "cilium: toCIDRSet IPv6 never selects the lab's pods", Policies: cnp("x", "cidrset6", "  endpointSelector:\n    matchLabels: {pod: a}\n  egress:\n  - toCIDRSet:\n    - cidr: 'fd00::/8'\n      except: ['fd00:0:191::20/128']\n  - toCIDR: ['::/0']\n"),
		Expect: []Cell{deny("x/a", "x/b", "TCP", 80), deny6("x/a", "x/b", "TCP", 80), deny6("x/a", "y/c", "UDP", 81), allow6("x/b", "x/a", "TCP", 80)}},

	{Name: "cilium: specs list and toPorts with a port range", Policies: "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: specs\n  namespace: z\nspecs:\n- endpointSelector:\n    matchLabels: {pod: a}\n  ingress:\n  - toPorts:\n    - ports:\n      - {port: \"80\", endPort: 81, protocol: UDP}\n- endpointSelector:\n    matchLabels: {pod: b}\n  ingress:\n  - fromEndpoints:\n    - matchLabels: {pod: c}\n",
		Expect: []Cell{allow("x/a", "z/a", "UDP", 80), allow("x/a", "z/a", "UDP", 81), deny("x/a", "z/a", "TCP", 80), allow("z/c", "z/b", "TCP", 80), deny("x/c", "z/b", "TCP", 80), allow("x/a", "z/c", "TCP", 80)}},

	{Name: "cilium and kubernetes policies add up", Policies: np("y", "np-from-x", "  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        matchLabels: {ns: x}\n") +
		cnp("y", "cnp-from-z", "  endpointSelector: {}\n  ingress:\n  - fromEndpoints:\n    - matchLabels:\n        k8s:io.kubernetes.pod.namespace: z\n"),
		Expect: []Cell{allow("x/a", "y/a", "TCP", 80), allow("z/a", "y/a", "TCP", 80), deny("y/b", "y/a", "TCP", 80)}},

	// Seed 003's policy shape (the experiments' policyMode terms): with
	// iptables peers: ipsets each term is a set and a rule, empty ones
	// included; elsewhere the empty terms compile to nothing.
	{Name: TermsName, Policies: cnp("x", "terms", "  endpointSelector:\n    matchLabels: {pod: a}\n  ingress:\n  - fromEndpoints:\n    - matchLabels: {pod: b}\n    - matchLabels: {key0: value0, key1: value1}\n    - matchLabels: {key2: value2, key3: value3}\n"),
		Expect: []Cell{allow("x/b", "x/a", "TCP", 80), allow("x/b", "x/a", "UDP", 81), deny("x/c", "x/a", "TCP", 80), deny("y/b", "x/a", "TCP", 80), allow("x/a", "x/b", "TCP", 80)}},

	// Every address by CIDR but the lab's own (which an ipset of prefixes
	// cannot hold as one member), and a deny inside it, which selects no
	// endpoint either: the endpoints are allowed by fromEndpoints alone.
	{Name: "cilium: fromCIDR 0.0.0.0/0 with a deny inside it", Policies: cnp("x", "any", "  endpointSelector: {}\n  ingress:\n  - fromCIDR: [0.0.0.0/0]\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n  - fromEndpoints:\n    - matchExpressions: [{key: k8s:io.kubernetes.pod.namespace, operator: Exists}]\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n  ingressDeny:\n  - fromCIDRSet:\n    - cidr: 10.0.0.0/8\n      except: [10.0.191.0/24]\n"),
		Expect: []Cell{allow("y/a", "x/a", "TCP", 80), allow("z/a", "x/a", "TCP", 80), deny("y/a", "x/a", "UDP", 81), allow("x/a", "x/b", "TCP", 80), allow("y/c", "x/b", "TCP", 80)}},
}

// TermsName names the scenario of seed 003's policy shape.
const TermsName = "cilium: fromEndpoints terms that select nobody"

// Named returns the scenario of that name; it panics on a name not in All.
func Named(name string) Scenario {
	for _, sc := range All {
		if sc.Name == name {
			return sc
		}
	}
	panic("no scenario " + name)
}
