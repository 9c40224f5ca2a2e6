package iptables

import (
	"os"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func labFile(t *testing.T, file string, ov topology.Overrides) *topology.Spec {
	t.Helper()
	data, err := os.ReadFile("../../examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	lab, err := topology.Parse(data, file, ov)
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

const pol6 = `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: c, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  ingress:
  - fromEndpoints: [{matchLabels: {pod: b}}]
    toPorts: [{ports: [{port: "80", protocol: TCP}]}]
  - toPorts: [{ports: [{port: "81", protocol: UDP}]}]
  ingressDeny:
  - fromCIDR: [192.0.2.0/24]
`

// chainWith returns the rules of the chain whose name starts with prefix.
func chainWith(chains map[string][]string, prefix string) []string {
	for name, rules := range chains {
		if strings.HasPrefix(name, prefix) {
			return rules
		}
	}
	return nil
}

func TestRenderDualStack(t *testing.T) {
	lab := labFile(t, "dual-stack.yaml", topology.Overrides{})
	c := policytest.CompileOn(t, lab, pol6)
	st := Render(lab, "flip", c)
	if st.Chains6 == nil {
		t.Fatal("no IPv6 chains in a dual-stack lab")
	}
	fwd6 := strings.Join(st.Chains6[fwdChain], "\n")
	for _, want := range []string{"--ctstate RELATED,ESTABLISHED -j ACCEPT", "--icmpv6-type 135 -j ACCEPT", "--icmpv6-type 136 -j ACCEPT", "-d fd00:0:192::10/128 -j CNLAB-I-"} {
		if !strings.Contains(fwd6, want) {
			t.Errorf("IPv6 CNLAB-FWD lacks %q:\n%s", want, fwd6)
		}
	}
	fwd4 := strings.Join(st.Chains[fwdChain], "\n")
	if strings.Contains(fwd4, "icmpv6") || !strings.Contains(fwd4, "-d 10.0.192.10/32 -j CNLAB-I-") {
		t.Errorf("IPv4 CNLAB-FWD:\n%s", fwd4)
	}
	in4 := chainWith(st.Chains, "CNLAB-I-")
	want4 := []string{
		`-s 192.0.2.0/24 -m comment --comment "CiliumNetworkPolicy x/c spec.ingressDeny[0]" -j DROP`,
		`-s 10.0.191.11/32 -p tcp -m tcp --dport 80 -m comment --comment "CiliumNetworkPolicy x/c spec.ingress[0]" -j ACCEPT`,
		`-p udp -m udp --dport 81 -m comment --comment "CiliumNetworkPolicy x/c spec.ingress[1]" -j ACCEPT`,
		`-j DROP`,
	}
	// The IPv4 CIDR's deny is IPv4's alone; the identity's addresses
	// are /128s; the rule for any peer is in both.
	want6 := []string{
		`-s fd00:0:191::11/128 -p tcp -m tcp --dport 80 -m comment --comment "CiliumNetworkPolicy x/c spec.ingress[0]" -j ACCEPT`,
		`-p udp -m udp --dport 81 -m comment --comment "CiliumNetworkPolicy x/c spec.ingress[1]" -j ACCEPT`,
		`-j DROP`,
	}
	in6 := chainWith(st.Chains6, "CNLAB-I-")
	if !sameLines(in4, want4) {
		t.Errorf("IPv4 ingress chain:\n%s\nwant:\n%s", strings.Join(in4, "\n"), strings.Join(want4, "\n"))
	}
	if !sameLines(in6, want6) {
		t.Errorf("IPv6 ingress chain:\n%s\nwant:\n%s", strings.Join(in6, "\n"), strings.Join(want6, "\n"))
	}
	// Same chain names in both tables.
	for name := range st.Chains {
		if _, ok := st.Chains6[name]; !ok {
			t.Errorf("chain %s not in the IPv6 table", name)
		}
	}

	// peers: ipsets: an IPv6 set of the selector's addresses beside IPv4's.
	labS := labFile(t, "dual-stack.yaml", topology.Overrides{Options: kind.Overrides{Peers: kind.PeersIPSets}})
	cS := policytest.CompileOn(t, labS, pol6)
	stS := Render(labS, "flip", cS)
	var v4, v6 *ipset
	var n6 string
	for name, s := range stS.Sets {
		s := s
		if strings.HasSuffix(name, "-6") {
			v6, n6 = &s, name
		} else if s.Type == hashIP {
			v4 = &s
		}
	}
	if v4 == nil || v6 == nil || v6.Family != 6 || strings.Join(v6.Members, ",") != "fd00:0:191::11" || v4.Family != 0 {
		t.Fatalf("sets: %+v", stS.Sets)
	}
	if in := strings.Join(chainWith(stS.Chains6, "CNLAB-I-"), "\n"); !strings.Contains(in, "--match-set "+n6+" src") || strings.Contains(in, "192.0.2.0") {
		t.Errorf("IPv6 ingress chain with ipsets:\n%s", in)
	}
	script := setsScript(nil, stS.Sets, func(string) bool { return false })
	if !strings.Contains(script, "create "+n6+" hash:ip family inet6 ") || !strings.Contains(script, "hash:ip family inet maxelem") {
		t.Errorf("sets script:\n%s", script)
	}
}

func sameLines(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func TestRenderIPv6Only(t *testing.T) {
	lab := labFile(t, "ipv6-only.yaml", topology.Overrides{})
	c := policytest.CompileOn(t, lab, pol6)
	st := Render(lab, "flip", c)
	if in := chainWith(st.Chains, "CNLAB-"); len(st.Chains) != 1 || in == nil {
		t.Errorf("IPv4 table of an IPv6-only lab: %v", st.Chains)
	}
	in6 := strings.Join(chainWith(st.Chains6, "CNLAB-I-"), "\n")
	if !strings.Contains(in6, "-s fd00:0:191::11/128 -p tcp") || strings.Contains(in6, "/32 ") || strings.Contains(in6, "192.0.2.0") || !strings.HasSuffix(in6, "-j DROP") {
		t.Errorf("IPv6 ingress chain:\n%s", in6)
	}
}

func TestRenderIPv4OnlyHasNoIPv6(t *testing.T) {
	lab, c := compiled(t, pol, topology.Overrides{})
	if st := Render(lab, "flip", c); st.Chains6 != nil {
		t.Errorf("IPv6 chains in an IPv4 lab: %v", st.Chains6)
	}
}

// The L7 redirect of an IPv6-only lab is in the IPv6 nat table alone:
// CNLAB-L7 of ip6tables redirects to the proxy over the endpoints' IPv6
// addresses, iptables' has no rule.
func TestRenderIPv6OnlyL7(t *testing.T) {
	lab := labFile(t, "ipv6-only.yaml", topology.Overrides{})
	c := policytest.CompileOn(t, lab, scenarios.L7[0].Policies)
	redirects := 0
	for _, h := range lab.Hosts {
		st := Render(lab, h.Name, c)
		if len(st.NAT) != 0 {
			t.Errorf("%s: IPv4 CNLAB-L7 in an IPv6-only lab: %q", h.Name, st.NAT)
		}
		for _, r := range st.NAT6 {
			if !strings.Contains(r, "/128 -p tcp") || strings.Contains(r, ".") && !strings.Contains(r, "--comment") {
				t.Errorf("%s: not IPv6 in the IPv6 CNLAB-L7: %s", h.Name, r)
			}
			if strings.Contains(r, "REDIRECT --to-ports 15001") {
				redirects++
			}
		}
	}
	if redirects == 0 {
		t.Errorf("no IPv6 redirect")
	}
}
