package lab

import (
	"context"
	"regexp"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// spoofPolicies isolate x/c's egress completely and let x/a receive only
// from z/a.
const spoofPolicies = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: c-silent, namespace: x}
spec:
  podSelector: {matchLabels: {pod: c}}
  policyTypes: [Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-za, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {ns: z}}
      podSelector: {matchLabels: {pod: a}}
`

// TestSpoofing sends, from x/c (egress isolated), hand-built frames with
// forged IPv4 sources (an unused address of its subnet; z/a's address,
// which x/a's ingress allows, with x/c's MAC and with z/a's), a foreign
// source MAC, ARP with a forged sender IP or MAC, IPv6 and ethertype
// 0x88b5, to y/b (same host, no policy), x/a (same host, ingress from z/a
// only) and y/a (the other host), and checks that none arrives: the
// policy denies everything x/c sends, and the datapath must not let a
// forged source or another protocol get around that. Controls: x/c's
// genuine ARP reaches y/b, and z/a's genuine UDP reaches x/a, through the
// same raw sockets and sniffer. (With eBPF host routing endpoints are
// routed, not bridged: no ARP crosses between them, genuine or not.)
func TestSpoofing(t *testing.T) {
	for _, dp := range datapaths() {
		t.Run(dp, func(t *testing.T) {
			checkSpoofing(t, scenarioLab(t, "t-spoof-"+shortName(dp), dp, "wire"), dp)
		})
	}
}

// TestSpoofing6 is TestSpoofing on the scenario lab made dual-stack and
// IPv6-only: the IPv4 and ARP checks where the lab has IPv4, and the IPv6
// ones (a forged IPv6 source, another endpoint's or one outside the lab, a
// foreign MAC, a neighbour advertisement claiming another endpoint's
// address) with genuine neighbour solicitations and advertisements as the
// controls that must arrive (neighbour discovery is not
// policy-controlled), and the link-local "ipv6" check, which must still be
// dropped (the endpoints have no link-local address).
func TestSpoofing6(t *testing.T) {
	for _, v := range []struct{ name, short, yaml string }{
		{"dual-stack", "d", dualStackLab(scenarios.Lab)},
		{"ipv6-only", "6", ipv6OnlyLab(scenarios.Lab)},
	} {
		t.Run(v.name, func(t *testing.T) {
			for _, dp := range datapaths() {
				t.Run(dp, func(t *testing.T) {
					checkSpoofing(t, scenarioLabYAML(t, "t-spf"+v.short+"-"+shortName(dp), dp, v.yaml), dp)
				})
			}
		})
	}
}

var (
	labCIDR4 = regexp.MustCompile(`podCIDR: 10\.0\.(\d+)\.0/24`)
	labIP4   = regexp.MustCompile(`ip: 10\.0\.(\d+)\.(\d+)`)
)

// dualStackLab gives every host of a lab file with 10.0.N.0/24 pod
// prefixes the IPv6 prefix fd00:0:N::/64 too, and every endpoint with an
// address 10.0.N.M the address fd00:0:N::M.
func dualStackLab(yaml string) string {
	yaml = labCIDR4.ReplaceAllString(yaml, "podCIDRs: [10.0.$1.0/24, fd00:0:$1::/64]")
	return labIP4.ReplaceAllString(yaml, "ip: [10.0.$1.$2, fd00:0:$1::$2]")
}

// ipv6OnlyLab is dualStackLab without the IPv4 addresses.
func ipv6OnlyLab(yaml string) string {
	yaml = labCIDR4.ReplaceAllString(yaml, "podCIDRs: [fd00:0:$1::/64]")
	return labIP4.ReplaceAllString(yaml, "ip: fd00:0:$1::$2")
}

// checkSpoofing runs the spoof checks of TestSpoofing on a scenario lab.
func checkSpoofing(t *testing.T, spec *topology.Spec, dp string) {
	ctx := context.Background()
	if _, err := Apply(ctx, spec.Name, mustParse(t, spoofPolicies)); err != nil {
		t.Fatal(err)
	}
	ep := func(id string) *topology.Endpoint {
		e, err := spec.Endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	xc, za := ep("x/c"), ep("z/a")
	bridged := dp != "ebpf" // eBPF's default host routing routes endpoints (the comment above)
	for _, to := range []*topology.Endpoint{ep("y/b"), ep("x/a"), ep("y/a")} {
		res, err := probe.Spoof(ctx, spec, xc, to, za, probe.SpoofOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			// Genuine neighbour discovery (ARP, NS, NA) crosses a
			// bridge whatever the policy. A genuine NS or NA to an
			// address the sender reaches through a router (another
			// host, or eBPF's routed endpoints) is an ICMPv6 packet
			// like any other, which a datapath may forward (NDP is not
			// policy-controlled) and the target discards (its hop
			// limit is no longer 255): either is right.
			local := to.Host == xc.Host && bridged
			genuineNDP := r.Check.NDP() && !r.Check.Forged()
			if genuineNDP && !local && r.Check.Family() == 6 {
				continue
			}
			want := genuineNDP && local
			if r.Arrived != want {
				t.Errorf("%s -> %s %s: arrived=%v, want %v", r.From, r.To, r.Check, r.Arrived, want)
			}
		}
	}
	res, err := probe.Spoof(ctx, spec, za, ep("x/a"), xc, probe.SpoofOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if (r.Check == probe.Genuine || r.Check == probe.Genuine6) && !r.Arrived {
			t.Errorf("control: %s -> %s %s did not arrive: the probe cannot see an allowed packet", r.From, r.To, r.Check)
		}
	}
}
