package experiment

import (
	"fmt"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// Ports the workloads use on the server.
const (
	IperfPort = 5201  // iperf3, flow i on IperfPort+i (its TCP control connection and its data, TCP or UDP)
	RRPort    = 12865 // cnlab rr (netperf's port)
	// fillerPort is the first port of generated policies that the
	// workloads never use; policy i gets fillerPort+2i (never adjacent, so
	// no datapath can merge two into one range).
	fillerPort = 20000
	// maxPortPolicies keeps fillerPort+2i a port number.
	maxPortPolicies = (65535 - fillerPort) / 2
)

// workloadPorts are the server's ports every generated policy set allows
// from the client, so the measured traffic passes whatever else is there.
const workloadPorts = "[{port: 5201, endPort: 5264, protocol: TCP}, {port: 5201, endPort: 5264, protocol: UDP}, {port: 12865, protocol: TCP}, {port: 12865, protocol: UDP}]"

// usesFiller reports whether the point's policies are iptables filler
// rules (part of the lab) rather than policies applied to it.
func usesFiller(p results.Params) bool {
	return p.Datapath == kind.IPTables && (p.PolicyMode == results.ModeNoMatch || p.PolicyMode == results.ModeTopOfChain)
}

// policyText generates the point's policies as Kubernetes NetworkPolicy
// YAML, all on the server (app=server in namespace default) and about
// the client (app=client):
//
//	no-match   N policies, each allowing the client on one port no
//	           workload uses, plus one allowing the workload ports
//	l4-rules   one policy allowing the client on the workload ports and
//	           N other ports: N more L4 rules in one policy (seed 000's
//	           experiment 3)
//	selectors  N policies, each selecting the client with a label
//	           selector of its own (app In [client, peer-i]) on a port of
//	           its own, plus one allowing the workload ports
//	terms      one CiliumNetworkPolicy on the server whose fromEndpoints
//	           holds the client's term and N terms of two labels each
//	           that no endpoint has (seed 003's generator: key2i:
//	           value2i, key2i+1: value2i+1), allowing every port (L3)
//
// iptables' no-match and top-of-chain are filler rules instead (see
// usesFiller). Zero policies is an empty text: no policy at all. An L7
// point's policy is l7PolicyText's. The point's cluster policies
// (clusterPolicyText) follow the NetworkPolicies, in the same update.
func policyText(p results.Params) string {
	np, cl := networkPolicyText(p), clusterPolicyText(p)
	if np != "" && cl != "" {
		return np + "---\n" + cl
	}
	return np + cl
}

// networkPolicyText is policyText's NetworkPolicies (or
// CiliumNetworkPolicy).
func networkPolicyText(p results.Params) string {
	if p.L7Mode != "" {
		return l7PolicyText(p)
	}
	if usesFiller(p) || p.Policies == 0 && p.PolicyMode != results.ModeL4Rules {
		return ""
	}
	var b strings.Builder
	head := func(name string) {
		fmt.Fprintf(&b, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: %s, namespace: %s}\nspec:\n  podSelector: {matchLabels: {app: server}}\n  ingress:\n", name, topology.DefaultNamespace)
	}
	switch p.PolicyMode {
	case results.ModeTerms:
		fmt.Fprintf(&b, "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: terms, namespace: %s}\nspec:\n  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromEndpoints:\n    - matchLabels: {app: client}\n", topology.DefaultNamespace)
		for i := 0; i < p.Policies; i++ {
			fmt.Fprintf(&b, "    - matchLabels: {key%d: value%d, key%d: value%d}\n", 2*i, 2*i, 2*i+1, 2*i+1)
		}
		return b.String()
	case results.ModeL4Rules:
		head("l4-rules")
		b.WriteString("  - from: [{podSelector: {matchLabels: {app: client}}}]\n    ports:\n")
		for _, port := range []string{"{port: 5201, endPort: 5264, protocol: TCP}", "{port: 5201, endPort: 5264, protocol: UDP}", "{port: 12865, protocol: TCP}", "{port: 12865, protocol: UDP}"} {
			fmt.Fprintf(&b, "    - %s\n", port)
		}
		for i := 0; i < p.Policies; i++ {
			fmt.Fprintf(&b, "    - {port: %d, protocol: TCP}\n", fillerPort+2*i)
		}
		return b.String()
	case results.ModeSelectors:
		for i := 0; i < p.Policies; i++ {
			head(fmt.Sprintf("sel-%d", i))
			fmt.Fprintf(&b, "  - from: [{podSelector: {matchExpressions: [{key: app, operator: In, values: [client, peer-%d]}]}}]\n    ports: [{port: %d, protocol: TCP}]\n---\n", i, fillerPort+2*i)
		}
	default:
		for i := 0; i < p.Policies; i++ {
			head(fmt.Sprintf("filler-%d", i))
			fmt.Fprintf(&b, "  - from: [{podSelector: {matchLabels: {app: client}}}]\n    ports: [{port: %d, protocol: TCP}]\n---\n", fillerPort+2*i)
		}
	}
	head("allow-workloads")
	fmt.Fprintf(&b, "  - from: [{podSelector: {matchLabels: {app: client}}}]\n    ports: %s\n", workloadPorts)
	return b.String()
}

// labKey identifies what a point needs built: points with the same key
// share a lab. Policies applied with lab.Apply are not part of it; the
// iptables filler is (it is a lab option).
func labKey(p results.Params) string {
	k := p
	k.Flows, k.Size, k.Zerocopy = 0, 0, false
	k.Services, k.ServiceBackends, k.ServicePosition = 0, 0, "" // applied with lab.ReplaceServices
	k.L7Mode, k.L7Rules, k.L7Match = "", 0, ""                  // a policy applied with lab.Replace
	// HAProxy's points have a lab of their own: its HAProxy stays in the
	// proxy's place for all of them (the key of the others keeps its
	// bytes: results.json's builds).
	k.L7Proxy = ""
	if k.ServiceProxy == kind.DefaultProxy(k.Datapath) {
		k.ServiceProxy = "" // a lab's default: the same lab as a point without Services
	}
	if !usesFiller(p) {
		k.Policies, k.PolicyMode = 0, ""
	}
	k.ClusterPolicies, k.ClusterPolicyMatch = 0, "" // applied with lab.Replace, with the policies
	if k.Observe != "" {
		// Set on the running lab (lab.SetObserve); a point that gives
		// none keeps the topology's own level, in a lab of its own.
		k.Observe = "set"
	}
	// Points of either family share the lab (dual-stack with a preset):
	// the key of a point without the axis keeps its bytes.
	k.IPFamily = 0
	key := strings.Replace(fmt.Sprintf("%+v", k), " L7Proxy:", "", 1)
	key = strings.Replace(key, " IPFamily:0", "", 1)
	if p.L7Proxy != "" {
		key += " l7Proxy:" + p.L7Proxy
	}
	if p.IPFamily != 0 {
		key += " dual-stack"
	}
	return key
}
