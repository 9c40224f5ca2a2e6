package nftables

import (
	"fmt"
	"math/rand"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func compiled(t *testing.T, yaml string) (*topology.Spec, *policy.Compiled) {
	t.Helper()
	return policytest.Compile(t, yaml, topology.Overrides{})
}

func (b Box) contains(ip netip.Addr, proto uint8, port uint16) bool {
	return b.Peer.Contains(ip) && proto >= b.ProtoLo && proto <= b.ProtoHi && port >= b.PortLo && port <= b.PortHi
}

// TestDisjointMatchesRules checks, for every scenario, subject and
// direction, that the set elements are pairwise disjoint (the kernel
// refuses overlaps) and cover exactly the flows the IR rules match, on
// endpoint addresses, random addresses, and ports around every bound.
func TestDisjointMatchesRules(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	extra := `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: overlap, namespace: x}
spec:
  endpointSelector: {}
  ingress:
  - fromCIDRSet: [{cidr: 10.0.0.0/8, except: [10.0.191.0/24]}]
    toPorts: [{ports: [{port: "80", endPort: 90, protocol: TCP}]}]
  - fromCIDR: [10.0.191.0/25, 10.0.191.11/32]
    toPorts: [{ports: [{port: "85", endPort: 100, protocol: TCP}, {port: "81", protocol: UDP}]}]
  - fromCIDR: [10.0.191.0/28]
  - fromEndpoints: [{matchLabels: {pod: b}}]
    toPorts: [{ports: [{port: "0", protocol: ANY}]}]
`
	all := append([]scenarios.Scenario{{Name: "overlapping cidrs", Policies: extra}}, scenarios.All...)
	for _, sc := range all {
		lab, c := compiled(t, sc.Policies)
		var ips []netip.Addr
		for _, ep := range lab.Endpoints {
			ips = append(ips, ep.IP)
		}
		for i := 0; i < 50; i++ {
			ips = append(ips, netip.AddrFrom4([4]byte{10, byte(rng.Intn(2)), byte(190 + rng.Intn(4)), byte(rng.Intn(256))}))
		}
		for _, id := range c.Identities {
			for _, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
				for _, deny := range []bool{false, true} {
					var rules []policy.Entry
					for _, r := range c.RulesFor(id.ID, dir) {
						if r.Deny == deny {
							rules = append(rules, r)
						}
					}
					boxes := Disjoint(c, rules)
					ports := []uint16{0, 1, 79, 80, 81, 82, 84, 85, 89, 90, 91, 100, 101, 10000, 65535}
					for _, ip := range ips {
						for _, proto := range []uint8{1, 6, 17, 132} {
							for _, port := range ports {
								want := false
								for _, r := range rules {
									if ruleHas(c, r, ip, proto, port) {
										want = true
									}
								}
								n := 0
								for _, b := range boxes {
									if b.contains(ip, proto, port) {
										n++
									}
								}
								if n > 1 {
									t.Fatalf("%s: identity %d %s: %d elements overlap at %s %d/%d", sc.Name, id.ID, dir, n, ip, proto, port)
								}
								if (n == 1) != want {
									t.Fatalf("%s: identity %d %s deny=%v: %s proto %d port %d: elements say %v, rules %v",
										sc.Name, id.ID, dir, deny, ip, proto, port, n == 1, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

// ruleHas mirrors the IR's own matching on an address.
func ruleHas(c *policy.Compiled, r policy.Entry, ip netip.Addr, proto uint8, port uint16) bool {
	return ruleHasWith(c.PeerPrefixes, r, ip, proto, port)
}

// ruleHasWith is ruleHas with the peers' prefixes given by peerPrefixes.
func ruleHasWith(peerPrefixes func(policy.Entry) []netip.Prefix, r policy.Entry, ip netip.Addr, proto uint8, port uint16) bool {
	in := false
	for _, p := range peerPrefixes(r) {
		if p.Contains(ip) {
			in = true
		}
	}
	if !in {
		return false
	}
	if r.Proto == policy.ProtoAny {
		return true
	}
	return r.Proto == proto && (r.PortLo == 0 || (port >= r.PortLo && port <= r.PortHi))
}

func TestRenderAndDiff(t *testing.T) {
	lab, c := compiled(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{port: 80}]
  - from: [{ipBlock: {cidr: 10.0.191.0/24}}]
    ports: [{port: 81, endPort: 82}]
`)
	st := Render(lab, "flip", c)
	if got := st.Sets["in_enf"]; len(got) != 1 || got[0] != "10.0.192.10" {
		t.Errorf("in_enf = %v", got)
	}
	// x/b (10.0.191.11) is in both rules: its atom gets the merged ports
	// 80-82 (narrow, so three exact flows), and the rest of the /24 is
	// split around it into 8 prefixes, of which the /32 10.0.191.10 also
	// becomes exact flows (81, 82).
	if got := st.Sets["in_allow_x"]; len(got) != 5 || !contains(got, "10.0.192.10 . 10.0.191.11 . 6 . 80") || !contains(got, "10.0.192.10 . 10.0.191.10 . 6 . 82") {
		t.Errorf("in_allow_x = %v", got)
	}
	got := st.Sets["in_allow"]
	if len(got) != 7 || !contains(got, "10.0.192.10 . 10.0.191.128/25 . 6 . 81-82") {
		t.Errorf("in_allow = %v", got)
	}
	// A single exact flow goes to the hash set.
	lab1, c1 := compiled(t, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {pod: b}}}]\n    ports: [{port: 80}]\n")
	st = Render(lab1, "flip", c1)
	if got := st.Sets["in_allow_x"]; len(got) != 1 || got[0] != "10.0.192.10 . 10.0.191.11 . 6 . 80" {
		t.Errorf("in_allow_x = %v", got)
	}
	if other := Render(lab, "flap", c); len(other.Sets) != 0 {
		t.Errorf("flap enforces nothing, got %v", other.Sets)
	}
	script, ok := diffScript(3, nil, st.Sets)
	if !ok {
		t.Fatal("an edit that only adds must be done in place")
	}
	for _, want := range []string{
		"add element inet cnlab in_allow_x_g3 { 10.0.192.10 . 10.0.191.11 . 6 . 80 }",
		"add element inet cnlab in_enf_g3 { 10.0.192.10 }",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	if s, ok := diffScript(0, st.Sets, st.Sets); s != "" || !ok {
		t.Error("no change must send nothing")
	}
	next := map[string][]string{"in_enf": st.Sets["in_enf"]}
	if s, _ := diffScript(0, st.Sets, next); !strings.Contains(s, "delete element inet cnlab in_allow_x_g0 { 10.0.192.10 . 10.0.191.11 . 6 . 80 }") || strings.Contains(s, "in_enf") {
		t.Errorf("diff:\n%s", s)
	}
	// Many deletions from an interval set: not in place.
	big := map[string][]string{"in_allow": nil}
	for i := 0; i < maxDeletes+1; i++ {
		big["in_allow"] = append(big["in_allow"], fmt.Sprintf("10.0.192.10 . 10.9.0.%d/32 . 6 . 1-2", i))
	}
	if _, ok := diffScript(0, big, nil); ok {
		t.Error("deleting many interval elements must ask for a new generation")
	}
	rb := rebuildScript(4, 5, next)
	for _, want := range []string{"add set inet cnlab in_allow_g5 { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags interval; }",
		"add element inet cnlab in_enf_g5 { 10.0.192.10 }", "add rule inet cnlab forward ip daddr @in_subj_g5 jump ingress_g5",
		"delete chain inet cnlab ingress_g4", "delete set inet cnlab in_allow_g4"} {
		if !strings.Contains(rb, want) {
			t.Errorf("rebuild lacks %q:\n%s", want, rb)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestAnyPortWithoutTransportHeader checks that flows covering every port
// go to the sets keyed without a port, looked up without "th dport": a
// packet with no (or too short a) transport header must still meet a deny
// of any protocol.
func TestAnyPortWithoutTransportHeader(t *testing.T) {
	lab, c := compiled(t, `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny-y, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  enableDefaultDeny: {ingress: false}
  ingressDeny:
  - fromEndpoints:
    - matchLabels:
        k8s:io.kubernetes.pod.namespace: y
  ingress:
  - fromEndpoints: [{matchLabels: {pod: b}}]
    toPorts: [{ports: [{port: "0", protocol: TCP}]}]
`)
	st := Render(lab, "flip", c)
	if got := st.Sets["in_deny_p"]; !contains(got, "10.0.192.10 . 10.0.192.21/32 . 0-255") {
		t.Errorf("in_deny_p = %v, want y/b's address with every protocol", got)
	}
	if got := st.Sets["in_allow_p"]; !contains(got, "10.0.192.10 . 10.0.191.11/32 . 6") {
		t.Errorf("in_allow_p = %v, want x/b's address with TCP", got)
	}
	for _, set := range []string{"in_deny", "in_deny_x", "in_allow", "in_allow_x"} {
		if got := st.Sets[set]; len(got) != 0 {
			t.Errorf("%s = %v, want empty (every flow covers all ports)", set, got)
		}
	}
	decl := chainDecls(0)
	for _, want := range []string{"add rule inet cnlab ingress_g0 ip daddr . ip saddr . meta l4proto @in_deny_p_g0 counter drop",
		"add rule inet cnlab egress_g0 ip saddr . ip daddr . meta l4proto @eg_deny_p_g0 counter drop"} {
		if !strings.Contains(decl, want) {
			t.Errorf("chains lack %q:\n%s", want, decl)
		}
	}
	if !strings.Contains(setDecls(0, layout{}), "add set inet cnlab in_deny_p_g0 { type ipv4_addr . ipv4_addr . inet_proto; flags interval; }") {
		t.Errorf("sets:\n%s", setDecls(0, layout{}))
	}
}
