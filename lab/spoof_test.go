package lab

import (
	"context"
	"testing"

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
			spec := scenarioLab(t, "t-spoof-"+shortName(dp), dp, "wire")
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
					want := r.Check == probe.GenuineARP && to.Host == xc.Host && bridged
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
				if r.Check == probe.Genuine && !r.Arrived {
					t.Errorf("control: %s -> %s %s did not arrive: the probe cannot see an allowed packet", r.From, r.To, r.Check)
				}
			}
		})
	}
}
