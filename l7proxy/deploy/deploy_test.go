package deploy

import (
	"net/netip"
	"strings"

	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func TestBuild(t *testing.T) {
	lab, c := policytest.Compile(t, scenarios.L7[2].Policies, topology.Overrides{}) // GET /public, and L3/L4 from y
	if cfg := Build(lab, "flap", c); cfg != nil {
		t.Errorf("flap has no L7 port, but gets %+v", cfg)
	}
	cfg := Build(lab, "flip", c)
	if cfg == nil || len(cfg.Ports) != 1 || cfg.Ports[0].Endpoint != "x/a" || cfg.Ports[0].Port != 80 || cfg.Set != c.Set {
		t.Fatalf("flip: %+v", cfg)
	}
	byNS := map[string]int{}
	for _, p := range cfg.Ports[0].Peers {
		if p.CIDR.IsValid() {
			t.Errorf("a CIDR peer with no CIDR rule: %+v", p)
			continue
		}
		id := c.Identity(p.Identity)
		byNS[id.Namespace]++
		switch id.Namespace {
		case "x": // GET /public only
			if len(p.Rules) != 1 || p.Rules[0].Method != "GET" || p.Rules[0].Path != "/public" {
				t.Errorf("x identity %d: %+v", p.Identity, p.Rules)
			}
		case "y": // allowed at L3/L4: every request
			if len(p.Rules) != 1 || p.Rules[0].Method != "" || p.Rules[0].Path != "" {
				t.Errorf("y identity %d: %+v", p.Identity, p.Rules)
			}
		default:
			t.Errorf("identity %d of namespace %s gets rules: %+v", p.Identity, id.Namespace, p.Rules)
		}
	}
	if byNS["x"] != 3 || byNS["y"] != 3 {
		t.Errorf("peers per namespace %v, want 3 of x and 3 of y", byNS)
	}
	if len(cfg.Identities) != len(lab.Endpoints) {
		t.Errorf("%d addresses in the identity table, want %d", len(cfg.Identities), len(lab.Endpoints))
	}
}

// TestBuildSplitsIdentitiesByCIDR: two endpoints of one identity on two
// hosts, and a CIDR rule covering one of them only: each gets its rules.
func TestBuildSplitsIdentitiesByCIDR(t *testing.T) {
	lab, err := topology.Parse([]byte(`name: cidr
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {}
endpoints:
  - {name: srv, namespace: x, host: flip, ip: 10.0.192.10, labels: {app: srv}}
  - {name: c1, namespace: x, host: flip, ip: 10.0.192.11, labels: {app: cli}}
  - {name: c2, namespace: x, host: flap, ip: 10.0.191.11, labels: {app: cli}}
`), "cidr lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	yaml := `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: p, namespace: x}
spec:
  endpointSelector: {matchLabels: {app: srv}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: cli}}]
    toPorts: [{ports: [{port: "80", protocol: TCP}], rules: {http: [{path: /b}]}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: q, namespace: x}
spec:
  podSelector: {matchLabels: {app: srv}}
  ingress:
  - from: [{ipBlock: {cidr: 10.0.192.0/24}}]
    ports: [{port: 80}]
`
	c := policytest.CompileOn(t, lab, yaml)
	cfg := Build(lab, "flip", c)
	if cfg == nil || len(cfg.Ports) != 1 {
		t.Fatalf("%+v", cfg)
	}
	paths := map[string][]string{} // by address ("" for the identity)
	for _, p := range cfg.Ports[0].Peers {
		if p.CIDR.IsValid() || p.Identity != c.IdentityOfIP(netip.MustParseAddr("10.0.192.11")) {
			continue // the CIDR peers, and srv itself (in the CIDR too)
		}
		k := ""
		if p.Addr.IsValid() {
			k = p.Addr.String()
		}
		for _, r := range p.Rules {
			paths[k] = append(paths[k], r.Path)
		}
	}
	// The identity's rules are c1's (the first address: /b, and every
	// request by the ipBlock's L3/L4 allow, path ""); c2, outside the
	// CIDR, gets /b only. (A CiliumNetworkPolicy's fromCIDR selects no
	// endpoint of the lab, so only an ipBlock splits an identity.)
	if strings.Join(paths[""], ",") != "/b," || strings.Join(paths["10.0.191.11"], ",") != "/b" {
		t.Errorf("peers %v", paths)
	}
}

// TestL4AgreesWithIR: the L3/L4 policy each host's proxy gets judges a
// TCP connection to one of the host's endpoints (from an endpoint, or
// from an address that is no endpoint's) as the IR does, in every
// scenario: what the proxy decides for a connection it holds to a port
// that stopped being an L7 port.
func TestL4AgreesWithIR(t *testing.T) {
	var docs []string
	for _, sc := range scenarios.All {
		docs = append(docs, sc.Policies)
	}
	for _, sc := range scenarios.L7 {
		docs = append(docs, sc.Policies)
	}
	others := []netip.Addr{netip.MustParseAddr("192.168.7.7"), netip.MustParseAddr("10.0.192.99"), netip.MustParseAddr("172.16.0.1")}
	checked := 0
	for i, doc := range docs {
		lab, c := policytest.Compile(t, doc, topology.Overrides{})
		for _, h := range lab.Hosts {
			cfg := empty(lab, h.Name, c)
			srcs := append([]netip.Addr{}, others...)
			for _, ep := range lab.Endpoints {
				srcs = append(srcs, ep.IP)
			}
			for _, dst := range lab.Endpoints {
				if dst.Host != h.Name {
					continue
				}
				for _, src := range srcs {
					for _, port := range []uint16{80, 81, 443, 8080} {
						want := c.Allows(src, dst.IP, policy.ProtoTCP, port)
						if got := cfg.L4.Allows(cfg.Identities, netip.AddrPortFrom(src, 40000), netip.AddrPortFrom(dst.IP, port)); got != want {
							t.Errorf("policies %d, host %s: %s -> %s:%d: proxy's L3/L4 %v, IR %v", i, h.Name, src, dst.ID(), port, got, want)
						}
						checked++
					}
				}
			}
		}
	}
	t.Logf("%d connections checked in %d policy sets", checked, len(docs))
}
