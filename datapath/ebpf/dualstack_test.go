package ebpf

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

const dualStackLab = `
name: ds
hosts:
  - {name: flip, podCIDRs: [10.0.192.0/24, fd00:0:192::/64]}
  - {name: flap, podCIDRs: [10.0.191.0/24, fd00:0:191::/64]}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {labels: {ns: x}}
endpoints:
  - {name: a, namespace: x, host: flip, ip: [10.0.192.10, fd00:0:192::10], labels: {pod: a}}
  - {name: b, namespace: x, host: flap, ip: [10.0.191.11, fd00:0:191::11], labels: {pod: b}}
`

// TestPlanDualStack: every address of an endpoint is in the ipcache (/32,
// /128), and a CIDR rule of one family names the addresses it covers
// only: the IPv6 address of an endpoint gets a peer key of its own when
// an IPv6 prefix covers it and its IPv4 address does not.
func TestPlanDualStack(t *testing.T) {
	lab, err := topology.Parse([]byte(dualStackLab), "ds.yaml", topology.Overrides{Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	c := policytest.CompileOn(t, lab, `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: out, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: "10.0.191.0/24"}}]
`)
	// The same rule for an IPv6 prefix instead (written into the
	// compiled policy: the policy package may not take one yet).
	p6 := netip.MustParsePrefix("fd00:0:191::/64")
	c.CIDRIdentities = map[netip.Prefix]uint32{p6: c.CIDRIdentities[netip.MustParsePrefix("10.0.191.0/24")]}
	for i := range c.Rules {
		if c.Rules[i].PeerCIDR.IsValid() {
			c.Rules[i].PeerCIDR = p6
		}
	}
	plans, err := plan(lab, c)
	if err != nil {
		t.Fatal(err)
	}
	hp := plans["flip"]
	keys := map[netip.Prefix]uint32{}
	for _, e := range hp.IPCache {
		keys[e.Prefix] = e.Key
	}
	b4, b6 := netip.MustParsePrefix("10.0.191.11/32"), netip.MustParsePrefix("fd00:0:191::11/128")
	for _, p := range []string{"10.0.192.10/32", "fd00:0:192::10/128", "10.0.191.11/32", "fd00:0:191::11/128", "fd00:0:191::/64"} {
		if _, ok := keys[netip.MustParsePrefix(p)]; !ok {
			t.Errorf("ipcache has no %s: %v", p, hp.IPCache)
		}
	}
	if keys[b4] == keys[b6] {
		t.Fatalf("x/b's IPv4 and IPv6 addresses share peer key %d, but only one is in the rule's prefix", keys[b4])
	}
	var a *epPlan
	for i := range hp.Endpoints {
		if hp.Endpoints[i].ID == "x/a" {
			a = &hp.Endpoints[i]
		}
	}
	if a == nil {
		t.Fatal("no x/a on flip")
	}
	peers := map[uint32]bool{}
	for _, e := range a.Entries {
		peers[e.Peer] = true
	}
	if !peers[keys[b6]] || peers[keys[b4]] {
		t.Errorf("x/a's egress names peers %v; want x/b's IPv6 key %d and not its IPv4 key %d", peers, keys[b6], keys[b4])
	}
	// The record keeps both families.
	g := &genContent{outerIDs: outerIDs{PolicyID: 1, ExactID: 2, IPCacheID: 3, IPCache6ID: 4}, IPCache: hp.IPCache}
	got, err := unmarshalContent(g.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.IPCache, g.IPCache) || got.outerIDs != g.outerIDs {
		t.Errorf("record round trip: got %v %v, want %v %v", got.outerIDs, got.IPCache, g.outerIDs, g.IPCache)
	}
	v4, v6 := byFamily(hp.IPCache)
	if len(v4) != 2 || len(v6) != 3 {
		t.Errorf("by family: %v / %v", v4, v6)
	}
}
