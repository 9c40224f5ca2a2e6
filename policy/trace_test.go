package policy

import (
	"net/netip"
	"slices"
	"testing"
)

// The trace of a connection that an ipBlock's except keeps out names the
// policy, the rule's peer, its cidr and the except entry, not only "no
// rule allows it"; a rule whose ports do not match says nothing.
func TestVerdictNotesIPBlockExcept(t *testing.T) {
	lab := scenarioLab(t)
	m := modelFor(t, lab, np("x", "from-net", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n"+
		"  - from: [{podSelector: {matchLabels: {pod: c}}}, {ipBlock: {cidr: 10.0.0.0/8, except: [10.0.190.0/24, 10.0.191.0/24]}}]\n"+
		"    ports: [{port: 80}]\n"))
	src, _ := lab.Endpoint("y/a") // 10.0.191.20
	dst, _ := lab.Endpoint("x/a")
	v := m.Verdict(src, dst, "TCP", 80)
	want := "NetworkPolicy x/from-net spec.ingress[0].from[1].ipBlock: cidr 10.0.0.0/8 matches 10.0.191.20, but its except entry 10.0.191.0/24 leaves it out"
	if v.Allowed || !slices.Equal(v.Ingress.Notes, []string{want}) {
		t.Errorf("ingress %+v, want the note %q", v.Ingress, want)
	}
	if v = m.Verdict(src, dst, "TCP", 81); v.Allowed || len(v.Ingress.Notes) != 0 {
		t.Errorf("another port: the except does not decide it: %+v", v.Ingress)
	}
	if src, _ = lab.Endpoint("y/b"); !m.Verdict(src, dst, "TCP", 80).Allowed { // 10.0.192.21: not excepted
		t.Error("y/b is in the cidr and not in an except")
	}

	// Egress: the peer is under to:.
	m = modelFor(t, lab, np("x", "to-net", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n"+
		"  - to: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.0.191.16/28]}}]\n"))
	src, _ = lab.Endpoint("x/a")
	dst, _ = lab.Endpoint("y/a")
	v = m.Verdict(src, dst, "UDP", 53)
	want = "NetworkPolicy x/to-net spec.egress[0].to[0].ipBlock: cidr 10.0.0.0/16 matches 10.0.191.20, but its except entry 10.0.191.16/28 leaves it out"
	if v.Allowed || !slices.Equal(v.Egress.Notes, []string{want}) {
		t.Errorf("egress %+v, want the note %q", v.Egress, want)
	}
}

// A CiliumNetworkPolicy's CIDR never selects the lab's own addresses: the
// trace says so, and names a fromCIDRSet's except the same way.
func TestVerdictNotesCiliumCIDR(t *testing.T) {
	lab := scenarioLab(t)
	m := modelFor(t, lab, "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: c, namespace: x}\n"+
		"spec:\n  endpointSelector: {matchLabels: {pod: a}}\n  ingress:\n  - fromCIDR: [10.0.0.0/8]\n"+
		"  - fromCIDRSet: [{cidr: 192.168.0.0/16, except: [192.168.7.0/24]}]\n")
	src, _ := lab.Endpoint("y/a")
	dst, _ := lab.Endpoint("x/a")
	v := m.Verdict(src, dst, "TCP", 80)
	if v.Allowed || len(v.Ingress.Notes) != 1 || !slices.Contains(v.Ingress.Notes,
		"CiliumNetworkPolicy x/c spec.ingress[0]: CIDR 10.0.0.0/8 matches 10.0.191.20, but a CiliumNetworkPolicy's CIDR never selects the lab's own addresses (10.0.191.0/24): select endpoints by labels") {
		t.Errorf("ingress %+v", v.Ingress)
	}
	v = m.VerdictOf(m.AddrParty(netip.MustParseAddr("192.168.7.9")), EndpointParty(dst), "TCP", 80)
	want := "CiliumNetworkPolicy x/c spec.ingress[1]: CIDR 192.168.0.0/16 matches 192.168.7.9, but its except entry 192.168.7.0/24 leaves it out"
	if v.Allowed || !slices.Equal(v.Ingress.Notes, []string{want}) {
		t.Errorf("ingress %+v, want the note %q", v.Ingress, want)
	}
}
