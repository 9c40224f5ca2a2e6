package policy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/topology"
)

// termsAllow evaluates the Terms for a new connection the way a datapath
// matching peers by set does (iptables with ipsets): per side, the first
// deny term that matches drops, any allow term that matches allows.
func termsAllow(c *Compiled, src, dst netip.Addr, proto uint8, port uint16) bool {
	side := func(subject uint32, dir Dir, remote netip.Addr) bool {
		enf := c.Enforced[subject]
		enforced := enf.Ingress
		if dir == Egress {
			enforced = enf.Egress
		}
		return DecideSide(c.TermsFor(subject, dir), Term.Entry, func(t Term) bool {
			return (t.Set == "" || setHas(c.PeerSets[t.Set], remote)) && c.ruleMatches(t.Entry(), remote, proto, port)
		}, enforced)
	}
	return side(c.IdentityOfIP(src), Egress, dst) && side(c.IdentityOfIP(dst), Ingress, src)
}

func setHas(s *PeerSet, ip netip.Addr) bool {
	for _, p := range s.Members {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// termCases add to the scenarios (which have seed 003's terms selecting
// nobody) what only Terms have: a selector written twice, CIDR terms with
// excepts, and named ports that resolve to different numbers on different
// peers (in a lab where x/b declares serve-80-tcp on port 81).
var termCases = []scenarios.Scenario{
	{Name: "one selector in two policies, excepts, deny terms", Policies: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: one, namespace: y}
spec:
  podSelector: {}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}, {ipBlock: {cidr: 10.0.192.0/24, except: [10.0.192.10/32, 10.0.192.32/31]}}]
    ports: [{port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: two, namespace: y}
spec:
  podSelector: {matchLabels: {pod: c}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{port: 81, protocol: UDP}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny, namespace: y}
spec:
  endpointSelector: {}
  ingressDeny:
  - fromEndpoints: [{matchLabels: {pod: b}}, {matchLabels: {nobody: here}}]
`},
	{Name: "egress named port resolving differently", Policies: `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: egress-named, namespace: z}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{namespaceSelector: {}}]
    ports: [{port: serve-80-tcp}]
  - to: [{ipBlock: {cidr: 10.0.191.0/24}}]
    ports: [{port: serve-80-tcp}]
  - ports: [{port: serve-80-tcp}]
`},
}

// termsLab is the scenario lab with x/b declaring serve-80-tcp on port 81.
func termsLab(t *testing.T) *topology.Spec {
	t.Helper()
	yaml := strings.Replace(scenarios.Lab, "ip: 10.0.191.11, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80,",
		"ip: 10.0.191.11, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 81,", 1)
	if yaml == scenarios.Lab {
		t.Fatal("the scenario lab changed: x/b's ports not found")
	}
	lab, err := topology.Parse([]byte(yaml), "terms lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// TestTermsAgreeWithModel evaluates the Terms the way a set-matching
// datapath does and compares every cell of every scenario with the model.
func TestTermsAgreeWithModel(t *testing.T) {
	for _, lab := range []*topology.Spec{scenarioLab(t), termsLab(t)} {
		for _, sc := range append(append([]scenarios.Scenario{}, scenarios.All...), termCases...) {
			m := modelFor(t, lab, sc.Policies)
			c, err := m.Compile()
			if err != nil {
				t.Fatalf("%s: compile: %v", sc.Name, err)
			}
			bad := 0
			for i := range lab.Endpoints {
				for j := range lab.Endpoints {
					src, dst := &lab.Endpoints[i], &lab.Endpoints[j]
					if i == j {
						continue
					}
					for _, tg := range scenarios.Targets {
						want := m.Verdict(src, dst, tg.Protocol, tg.Port).Allowed
						got := termsAllow(c, src.IP, dst.IP, ProtoNumber(tg.Protocol), uint16(tg.Port))
						if got != want && bad < 5 {
							bad++
							t.Errorf("%s (%s): %s -> %s %s/%d: terms say %v, model %v", sc.Name, lab.Name, src.ID(), dst.ID(), tg.Protocol, tg.Port, got, want)
						}
					}
				}
			}
		}
	}
}

// TestTermsKeepEmptySelectors checks the shape Calico renders: every term
// as written, with a set of its own, empty when it selects nobody; a
// selector written twice is one set.
func TestTermsKeepEmptySelectors(t *testing.T) {
	lab := scenarioLab(t)
	c, err := modelFor(t, lab, scenarios.Named(scenarios.TermsName).Policies).Compile()
	if err != nil {
		t.Fatal(err)
	}
	xa := c.IdentityOfIP(netip.MustParseAddr("10.0.192.10"))
	terms := c.TermsFor(xa, Ingress)
	if len(terms) != 3 || len(c.RulesFor(xa, Ingress)) != 1 {
		t.Fatalf("x/a ingress: %d terms (want 3), %d rules (want 1): %+v", len(terms), len(c.RulesFor(xa, Ingress)), terms)
	}
	var members []int
	for _, tm := range terms {
		members = append(members, len(c.PeerSets[tm.Set].Members))
	}
	if members[0] != 1 || members[1] != 0 || members[2] != 0 {
		t.Errorf("members per term: %v, want [1 0 0]", members)
	}
	c, err = modelFor(t, lab, termCases[0].Policies).Compile()
	if err != nil {
		t.Fatal(err)
	}
	web := 0
	for key, s := range c.PeerSets {
		if strings.Contains(key, "app=web") {
			web++
			// confined to namespace y: y/a alone
			if len(s.Members) != 1 || s.Members[0] != netip.MustParsePrefix("10.0.191.20/32") || s.Net {
				t.Errorf("%s: %v", key, s.Members)
			}
		}
		if strings.HasPrefix(key, "cidr ") && (!s.Net || len(s.Members) == 0) {
			t.Errorf("%s: %+v", key, s)
		}
	}
	if web != 1 {
		t.Errorf("app=web is written twice: want one set, got %d", web)
	}
}

// TestTermsSplitNamedPorts checks that an egress named port that peers
// resolve to different numbers gets a set per number.
func TestTermsSplitNamedPorts(t *testing.T) {
	lab := termsLab(t)
	c, err := modelFor(t, lab, termCases[1].Policies).Compile()
	if err != nil {
		t.Fatal(err)
	}
	za := c.IdentityOfIP(netip.MustParseAddr("10.0.192.30"))
	ports := map[uint16][]string{}
	for _, tm := range c.TermsFor(za, Egress) {
		ports[tm.PortLo] = append(ports[tm.PortLo], tm.Set)
	}
	if len(ports[80]) != 3 || len(ports[81]) != 3 {
		t.Fatalf("terms by port: %v", ports)
	}
	for _, key := range ports[81] {
		s := c.PeerSets[key]
		if !strings.Contains(key, "port serve-80-tcp=tcp/81") || len(s.Members) != 1 || s.Members[0] != netip.MustParsePrefix("10.0.191.11/32") {
			t.Errorf("port 81 set %q: %+v", key, s)
		}
	}
}
