package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestCNPCIDRSelectsNoLabAddress: a CiliumNetworkPolicy's CIDR selectors
// select no address of the lab's hosts and pods (endpoints, a host's
// bridge or masquerade address, a wire's), in the model, the IR and the
// terms; an ipBlock of the same CIDR selects them all.
func TestCNPCIDRSelectsNoLabAddress(t *testing.T) {
	lab := scenarioLab(t)
	yaml := `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: any, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  ingress:
  - fromCIDR: [0.0.0.0/0]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: any, namespace: y}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{ipBlock: {cidr: 0.0.0.0/0}}]
`
	m := modelFor(t, lab, yaml)
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	xa, _ := lab.Endpoint("x/a")
	ya, _ := lab.Endpoint("y/a")
	zb, _ := lab.Endpoint("z/b")
	h := lab.Hosts[0]
	lastOfPodCIDR := h.PodCIDR.Addr().As4()
	lastOfPodCIDR[3] = 254 // where a masquerade address lives
	lab1 := []netip.Addr{zb.IP, h.Gateway, netip.AddrFrom4(lastOfPodCIDR)}
	if len(lab.Links) > 0 {
		lab1 = append(lab1, lab.Links[0].Ends[0].WireAddr)
	}
	outside := netip.MustParseAddr("192.0.2.7")
	for _, a := range lab1 {
		p := m.AddrParty(a)
		if v := m.VerdictOf(p, EndpointParty(xa), TCP, 80); v.Allowed {
			t.Errorf("%s -> x/a: a CNP fromCIDR 0.0.0.0/0 allows a lab address: %s", a, v.Ingress.Reason)
		}
		if v := m.VerdictOf(p, EndpointParty(ya), TCP, 80); !v.Allowed {
			t.Errorf("%s -> y/a: an ipBlock 0.0.0.0/0 does not allow a lab address: %s", a, v.Ingress.Reason)
		}
		if c.sideAllows(c.IdentityOfIP(xa.IP), Ingress, a, ProtoTCP, 80) {
			t.Errorf("%s -> x/a: the IR allows a lab address", a)
		}
		if termsAllow(c, a, xa.IP, ProtoTCP, 80) {
			t.Errorf("%s -> x/a: the terms allow a lab address", a)
		}
	}
	if v := m.VerdictOf(m.AddrParty(outside), EndpointParty(xa), TCP, 80); !v.Allowed {
		t.Errorf("%s -> x/a: %s", outside, v.Ingress.Reason)
	}
	if !c.sideAllows(c.IdentityOfIP(xa.IP), Ingress, outside, ProtoTCP, 80) {
		t.Errorf("%s -> x/a: the IR denies an address outside the lab", outside)
	}
	// The two 0.0.0.0/0 terms are two sets: equal keys, equal members.
	n := 0
	for k := range c.PeerSets {
		if strings.HasPrefix(k, "cidr 0.0.0.0/0 ") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("an ipBlock and a CNP fromCIDR of 0.0.0.0/0 make %d peer sets, want 2: %v", n, c.PeerSets)
	}
}
