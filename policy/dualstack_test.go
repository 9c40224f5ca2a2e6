package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/topology"
)

// labOf is the scenario lab with the pod network of the given families.
func labOf(t testing.TB, families ...int) *topology.Spec {
	t.Helper()
	lab, err := topology.Parse([]byte(scenarios.LabFor(families...)), "scenario lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lab.Families(), families) {
		t.Fatalf("lab families %v, want %v", lab.Families(), families)
	}
	return lab
}

// familyLabs are the scenario lab over IPv4, dual-stack and IPv6 only.
func familyLabs(t testing.TB) map[string]*topology.Spec {
	return map[string]*topology.Spec{"ipv4": labOf(t, 4), "dual-stack": labOf(t, 4, 6), "ipv6": labOf(t, 6)}
}

// addrFree reports whether no rule of the model's policies names
// addresses (a CIDR or nodes): its verdicts are then the same over every
// family, as selectors match every address of a pod.
func addrFree(m *Model) bool {
	for _, p := range m.Policies {
		for _, sp := range p.Specs {
			for _, d := range []Direction{sp.Ingress, sp.Egress} {
				for _, rs := range [][]Rule{d.Allow, d.Deny, d.Ordered} {
					for _, r := range rs {
						for _, pe := range r.Peers {
							if pe.Endpoints == nil {
								return false
							}
						}
					}
				}
			}
		}
	}
	return true
}

// TestScenarioExpectationsFamilies checks the hand-written cells on every
// lab that has their family (the IPv6 cells on the dual-stack and
// IPv6-only labs, the IPv4 ones on the IPv4 and dual-stack labs); the
// cells of a scenario whose rules name no address hold over IPv6 too.
func TestScenarioExpectationsFamilies(t *testing.T) {
	v6cells := 0
	for name, lab := range familyLabs(t) {
		for _, sc := range scenarios.All {
			m := modelFor(t, lab, sc.Policies)
			checked := 0
			for _, c := range sc.Expect {
				fams := []int{c.FamilyOf()}
				if c.Family == 0 && addrFree(m) {
					fams = []int{4, 6}
				}
				for _, fam := range fams {
					if !lab.HasFamily(fam) {
						continue
					}
					src, _ := lab.Endpoint(c.From)
					dst, _ := lab.Endpoint(c.To)
					v, ok := m.VerdictFamily(src, dst, fam, c.Protocol, c.Port)
					if !ok {
						t.Fatalf("%s: %s -> %s: no IPv%d addresses", name, c.From, c.To, fam)
					}
					checked++
					if c.Family == 6 {
						v6cells++
					}
					if v.Allowed != c.Allowed {
						t.Errorf("%s lab, %s: %s -> %s %s/%d over IPv%d: allowed=%v, want %v (egress: %s; ingress: %s)",
							name, sc.Name, c.From, c.To, c.Protocol, c.Port, fam, v.Allowed, c.Allowed, v.Egress.Reason, v.Ingress.Reason)
					}
				}
			}
			if checked == 0 && name != "ipv6" {
				t.Errorf("%s lab, %s: no cell to check", name, sc.Name)
			}
		}
	}
	if v6cells < 20 {
		t.Errorf("only %d IPv6 cells checked", v6cells)
	}
}

// TestCompiledAgreesWithModelFamilies is TestCompiledAgreesWithModel over
// each family of the dual-stack and IPv6-only labs, for the IR's rules
// and its terms: a connection is within one family.
func TestCompiledAgreesWithModelFamilies(t *testing.T) {
	for name, lab := range familyLabs(t) {
		var all []scenarios.Scenario
		all = append(all, scenarios.All...)
		for _, sc := range scenarios.L7 {
			all = append(all, scenarios.Scenario{Name: sc.Name, Policies: sc.Policies})
		}
		for _, sc := range all {
			m := modelFor(t, lab, sc.Policies)
			c, err := m.Compile()
			if err != nil {
				t.Fatalf("%s: compile: %v", sc.Name, err)
			}
			bad := 0
			for _, fam := range lab.Families() {
				for i := range lab.Endpoints {
					for j := range lab.Endpoints {
						if i == j {
							continue
						}
						src, dst := &lab.Endpoints[i], &lab.Endpoints[j]
						sa, _ := src.Addr(fam)
						da, _ := dst.Addr(fam)
						for _, tg := range scenarios.Targets {
							v, _ := m.VerdictFamily(src, dst, fam, tg.Protocol, tg.Port)
							got := c.Allows(sa, da, ProtoNumber(tg.Protocol), uint16(tg.Port))
							terms := termsAllow(c, sa, da, ProtoNumber(tg.Protocol), uint16(tg.Port))
							if (got != v.Allowed || terms != v.Allowed) && bad < 5 {
								bad++
								t.Errorf("%s lab, %s: %s -> %s %s/%d over IPv%d: IR says %v, terms %v, model %v",
									name, sc.Name, src.ID(), dst.ID(), tg.Protocol, tg.Port, fam, got, terms, v.Allowed)
							}
						}
					}
				}
			}
		}
	}
}

// TestSelectorsBothFamilies: a scenario whose rules name no address gives
// every connection the same verdict over IPv4 and IPv6 on the dual-stack
// lab, and the same as on the IPv4 lab.
func TestSelectorsBothFamilies(t *testing.T) {
	v4, dual := labOf(t, 4), labOf(t, 4, 6)
	n := 0
	for _, sc := range scenarios.All {
		m4, md := modelFor(t, v4, sc.Policies), modelFor(t, dual, sc.Policies)
		if !addrFree(md) {
			continue
		}
		n++
		for i := range dual.Endpoints {
			for j := range dual.Endpoints {
				if i == j {
					continue
				}
				for _, tg := range scenarios.Targets {
					want := m4.Verdict(&v4.Endpoints[i], &v4.Endpoints[j], tg.Protocol, tg.Port).Allowed
					for _, fam := range []int{4, 6} {
						v, _ := md.VerdictFamily(&dual.Endpoints[i], &dual.Endpoints[j], fam, tg.Protocol, tg.Port)
						if v.Allowed != want {
							t.Errorf("%s: %s -> %s %s/%d over IPv%d: %v, over the IPv4 lab %v", sc.Name, dual.Endpoints[i].ID(), dual.Endpoints[j].ID(), tg.Protocol, tg.Port, fam, v.Allowed, want)
						}
					}
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d scenarios without addresses", n)
	}
}

// The classic hole, on the shipped examples: an ipBlock allow of the IPv4
// pod CIDR allows nothing over IPv6.
func TestExamplesClassicHole(t *testing.T) {
	hole := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-flap, namespace: x}
spec:
  podSelector: {}
  ingress:
  - from: [{ipBlock: {cidr: 10.0.191.0/24}}]
`
	both := hole + "  - from: [{ipBlock: {cidr: 'fd00:0:191::/64', except: ['fd00:0:191::20/128']}}]\n"
	for _, file := range []string{"../examples/dual-stack.yaml", "../examples/ipv6-only.yaml"} {
		lab, err := topology.Load(file, topology.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		ya, _ := lab.Endpoint("y/a") // on flap
		yc, _ := lab.Endpoint("y/c") // on flap
		xa, _ := lab.Endpoint("x/a")
		m := modelFor(t, lab, hole)
		if v, ok := m.VerdictFamily(ya, xa, 4, TCP, 80); lab.HasFamily(4) && (!ok || !v.Allowed) {
			t.Errorf("%s: y/a -> x/a over IPv4: %v %s", file, ok, v.Ingress.Reason)
		}
		v, ok := m.VerdictFamily(ya, xa, 6, TCP, 80)
		if !ok || v.Allowed || !strings.Contains(v.Ingress.Reason, "no rule allows it") {
			t.Errorf("%s: y/a -> x/a over IPv6 with an IPv4 ipBlock: %v %+v", file, ok, v.Ingress)
		}
		if v := m.Verdict(ya, xa, TCP, 80); v.Allowed != lab.HasFamily(4) {
			t.Errorf("%s: y/a -> x/a over the primary family %s: %v", file, ya.IP, v.Allowed)
		}
		c, err := m.Compile()
		if err != nil {
			t.Fatal(err)
		}
		ya6, _ := ya.Addr(6)
		xa6, _ := xa.Addr(6)
		if c.Allows(ya6, xa6, ProtoTCP, 80) {
			t.Errorf("%s: the IR allows y/a -> x/a over IPv6", file)
		}
		m = modelFor(t, lab, both)
		if v, _ := m.VerdictFamily(yc, xa, 6, TCP, 80); !v.Allowed {
			t.Errorf("%s: y/c -> x/a over IPv6 with an IPv6 ipBlock: %s", file, v.Ingress.Reason)
		}
		v, _ = m.VerdictFamily(ya, xa, 6, TCP, 80)
		if v.Allowed || len(v.Ingress.Notes) != 1 || !strings.Contains(v.Ingress.Notes[0], "its except entry fd00:0:191::20/128 leaves it out") {
			t.Errorf("%s: y/a -> x/a over IPv6, excepted: %+v", file, v.Ingress)
		}
		c, _ = m.Compile()
		if yc6, _ := yc.Addr(6); !c.Allows(yc6, xa6, ProtoTCP, 80) || c.Allows(ya6, xa6, ProtoTCP, 80) {
			t.Errorf("%s: the IR with an IPv6 ipBlock: y/c %v, y/a %v", file, c.Allows(yc6, xa6, ProtoTCP, 80), c.Allows(ya6, xa6, ProtoTCP, 80))
		}
	}
}

// PeerPrefixes covers every family of a peer: /32 and /128 per endpoint,
// both any-peer prefixes; PeerPrefixesOf one family.
func TestPeerPrefixesFamilies(t *testing.T) {
	lab := labOf(t, 4, 6)
	m := modelFor(t, lab, byName(t, "allow from one pod by label")+byName(t, "IPv6 ipBlock with except")+
		np6("y", "any", "  podSelector: {}\n  ingress:\n  - {}\n"))
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	xa := c.IdentityOfIP(netip.MustParseAddr("10.0.192.10"))
	if xa == 0 || c.IdentityOfIP(netip.MustParseAddr("fd00:0:192::10")) != xa {
		t.Fatalf("identity of x/a's addresses: %d and %d", xa, c.IdentityOfIP(netip.MustParseAddr("fd00:0:192::10")))
	}
	ya := c.IdentityOfIP(netip.MustParseAddr("fd00:0:191::20"))
	got := map[string]string{}
	for _, r := range append(c.RulesFor(xa, Ingress), c.RulesFor(ya, Ingress)...) {
		got[fmt.Sprintf("%d %d %s", r.Subject, r.PeerID, r.PeerCIDR)] = fmt.Sprint(c.PeerPrefixes(r), c.PeerPrefixesOf(r, 4), c.PeerPrefixesOf(r, 6))
	}
	xb := c.IdentityOfIP(netip.MustParseAddr("10.0.191.11"))
	for k, want := range map[string]string{
		fmt.Sprintf("%d %d invalid Prefix", xa, xb):    "[10.0.191.11/32 fd00:0:191::11/128] [10.0.191.11/32] [fd00:0:191::11/128]",
		fmt.Sprintf("%d 0 fd00:0:191::/123", xa):       "[fd00:0:191::/123] [] [fd00:0:191::/123]",
		fmt.Sprintf("%d 0 fd00:0:191::22/127", xa):     "[fd00:0:191::22/127] [] [fd00:0:191::22/127]",
		fmt.Sprintf("%d 0 invalid Prefix", ya):         "[0.0.0.0/0 ::/0] [0.0.0.0/0] [::/0]",
		fmt.Sprintf("%d 0 fd00:0:191:0:8000::/65", xa): "[fd00:0:191:0:8000::/65] [] [fd00:0:191:0:8000::/65]",
		fmt.Sprintf("%d 0 fd00:0:191::24/126", xa):     "[fd00:0:191::24/126] [] [fd00:0:191::24/126]",
		fmt.Sprintf("%d 0 fd00:0:191:0:1::/80", xa):    "[fd00:0:191:0:1::/80] [] [fd00:0:191:0:1::/80]",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	// An endpoint peer's set has both families' addresses.
	for k, s := range c.PeerSets {
		if strings.HasPrefix(k, "endpoints ") && len(s.Members) > 0 && len(s.Members)%2 != 0 {
			t.Errorf("%s: %v", k, s.Members)
		}
	}
}

func np6(ns, name, spec string) string {
	return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: " + name +
		"\n  namespace: " + ns + "\nspec:\n" + spec + "---\n"
}

// TestCNPCIDRSelectsNoLabAddress6: a CiliumNetworkPolicy's ::/0 selects no
// IPv6 address of the lab (pods, bridges, wires), an ipBlock ::/0 all.
func TestCNPCIDRSelectsNoLabAddress6(t *testing.T) {
	lab := labOf(t, 4, 6)
	yaml := `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: any, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  ingress:
  - fromCIDR: ['::/0', 0.0.0.0/0]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: any, namespace: y}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{ipBlock: {cidr: '::/0'}}]
`
	m := modelFor(t, lab, yaml)
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	xa, _ := lab.Endpoint("x/a")
	ya, _ := lab.Endpoint("y/a")
	zb, _ := lab.Endpoint("z/b")
	xa6, _ := xa.Addr(6)
	ya6, _ := ya.Addr(6)
	zb6, _ := zb.Addr(6)
	gw6, _ := lab.Hosts[0].GatewayOf(6)
	lab6 := []netip.Addr{zb6, gw6, lab.Links[0].Ends[0].WireAddr6}
	for _, a := range lab6 {
		if !a.Is6() {
			t.Fatalf("lab address %s", a)
		}
		p := m.AddrParty(a)
		if v := m.VerdictOf(p, Party{Endpoint: xa, Addr: xa6}, TCP, 80); v.Allowed {
			t.Errorf("%s -> x/a: a CNP fromCIDR ::/0 allows a lab address: %s", a, v.Ingress.Reason)
		}
		if v := m.VerdictOf(p, Party{Endpoint: ya, Addr: ya6}, TCP, 80); !v.Allowed {
			t.Errorf("%s -> y/a: an ipBlock ::/0 does not allow a lab address: %s", a, v.Ingress.Reason)
		}
		if c.sideAllows(c.IdentityOfIP(xa6), Ingress, a, ProtoTCP, 80) || termsAllow(c, a, xa6, ProtoTCP, 80) {
			t.Errorf("%s -> x/a: the IR or the terms allow a lab address", a)
		}
	}
	outside := netip.MustParseAddr("2001:db8::7")
	if v := m.VerdictOf(m.AddrParty(outside), Party{Endpoint: xa, Addr: xa6}, TCP, 80); !v.Allowed {
		t.Errorf("%s -> x/a: %s", outside, v.Ingress.Reason)
	}
	if !c.sideAllows(c.IdentityOfIP(xa6), Ingress, outside, ProtoTCP, 80) || !termsAllow(c, outside, xa6, ProtoTCP, 80) {
		t.Errorf("%s -> x/a: the IR denies an address outside the lab", outside)
	}
	if !slices.Contains(LabPrefixes(lab), topology.TransitCIDR6) || !slices.Contains(LabPrefixes(lab), netip.MustParsePrefix("fd00:0:191::/64")) {
		t.Errorf("lab prefixes: %v", LabPrefixes(lab))
	}
	if got, want := LabPrefixes(labOf(t, 4)), LabPrefixes(scenarioLab(t)); !slices.Equal(got, want) {
		t.Errorf("IPv4 lab prefixes changed: %v, were %v", got, want)
	}
}

func TestNodeAddrsFamilies(t *testing.T) {
	lab := labOf(t, 4, 6)
	m := modelFor(t, lab, "")
	got := fmt.Sprint(m.NodeAddrs(Selector{MatchLabels: map[string]string{topology.HostnameLabel: "flip"}}))
	if want := "[10.0.192.1 100.64.0.1 fd00:0:192::1 fd00:ffff::6440:1]"; got != want {
		t.Errorf("NodeAddrs(flip) = %s, want %s", got, want)
	}
	m4 := modelFor(t, labOf(t, 4), "")
	if got := fmt.Sprint(m4.NodeAddrs(Selector{MatchLabels: map[string]string{topology.HostnameLabel: "flip"}})); got != "[10.0.192.1 100.64.0.1]" {
		t.Errorf("IPv4 NodeAddrs(flip) = %s", got)
	}
}

// HTTPVerdictFamily judges the request over the family's addresses as
// over IPv4: the L7 proxy serves both families.
func TestHTTPVerdictFamily(t *testing.T) {
	lab := labOf(t, 4, 6)
	statuses := map[int]int{}
	for _, sc := range scenarios.L7 {
		m := modelFor(t, lab, sc.Policies)
		if !addrFree(m) {
			continue
		}
		for _, hc := range sc.Expect {
			src, _ := lab.Endpoint(hc.From)
			dst, _ := lab.Endpoint(hc.To)
			req := request(hc.Method, hc.Path, hc.Header, "svc")
			want := m.HTTPVerdict(src, dst, scenarios.L7Port, req)
			got, ok := m.HTTPVerdictFamily(src, dst, 6, scenarios.L7Port, req)
			statuses[got.Status]++
			if !ok || got.Status != want.Status || got.Proxied != want.Proxied {
				t.Errorf("%s: %s -> %s %s %s over IPv6: %d, over IPv4 %d", sc.Name, hc.From, hc.To, hc.Method, hc.Path, got.Status, want.Status)
			}
		}
	}
	if statuses[0] == 0 || statuses[200] == 0 || statuses[403] == 0 {
		t.Errorf("statuses over IPv6: %v", statuses)
	}
	if _, ok := modelFor(t, labOf(t, 4), "").HTTPVerdictFamily(&lab.Endpoints[0], &labOf(t, 4).Endpoints[1], 6, 80, Request{}); ok {
		t.Errorf("an IPv6 verdict between endpoints without IPv6 addresses")
	}
}

func TestSubtract6(t *testing.T) {
	got := fmt.Sprint(Subtract(mustPrefix("fd00::/120"), []netipPrefix{mustPrefix("fd00::/122"), mustPrefix("fd00::c8/128")}))
	want := "[fd00::40/122 fd00::80/122 fd00::c0/125 fd00::c9/128 fd00::ca/127 fd00::cc/126 fd00::d0/124 fd00::e0/123]"
	if got != want {
		t.Errorf("Subtract = %s\nwant       %s", got, want)
	}
	// The 128th bit, and halves of ::/0.
	if got := fmt.Sprint(Subtract(mustPrefix("fd00::/127"), []netipPrefix{mustPrefix("fd00::1/128")})); got != "[fd00::/128]" {
		t.Errorf("last bit: %s", got)
	}
	if got := fmt.Sprint(Subtract(mustPrefix("::/0"), []netipPrefix{mustPrefix("8000::/1")})); got != "[::/1]" {
		t.Errorf("::/0: %s", got)
	}
	// Excepts of the other family cover nothing.
	if got := fmt.Sprint(Subtract(mustPrefix("::/0"), []netipPrefix{mustPrefix("0.0.0.0/0"), mustPrefix("10.0.0.0/8")})); got != "[::/0]" {
		t.Errorf("IPv4 excepts of ::/0: %s", got)
	}
	if got := fmt.Sprint(Subtract(mustPrefix("10.0.0.0/8"), []netipPrefix{mustPrefix("::/0")})); got != "[10.0.0.0/8]" {
		t.Errorf("IPv6 excepts of 10.0.0.0/8: %s", got)
	}
	lo, hi := halves(mustPrefix("fd00:0:191::/64"))
	if lo.String() != "fd00:0:191::/65" || hi.String() != "fd00:0:191:0:8000::/65" {
		t.Errorf("halves: %s %s", lo, hi)
	}
	lo, hi = halves(mustPrefix("10.0.0.0/8"))
	if lo.String() != "10.0.0.0/9" || hi.String() != "10.128.0.0/9" {
		t.Errorf("halves v4: %s %s", lo, hi)
	}
}

// The parser accepts IPv6 CIDRs in every field that takes CIDRs.
func TestParseIPv6CIDRs(t *testing.T) {
	pols, err := Parse([]byte(npHead+"spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 'FD00::/16', except: ['fd00:1::/32', 'fd00:2::9']}}]}]}\n---\n"+
		cnpHead+"spec: {endpointSelector: {}, egress: [{toCIDR: ['2001:db8::1', '::/0']}, {toCIDRSet: [{cidr: '2001:db8::/32', except: ['2001:db8::/64']}]}]}\n---\n"+
		anpHead+"spec: {priority: 3, subject: {namespaces: {}}, egress: [{action: Deny, to: [{networks: ['::/0', 0.0.0.0/0]}]}]}\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pols {
		for _, d := range []Direction{p.Specs[0].Ingress, p.Specs[0].Egress} {
			for _, rs := range [][]Rule{d.Allow, d.Ordered} {
				for _, r := range rs {
					for _, pe := range r.Peers {
						got = append(got, fmt.Sprint(pe.CIDR, pe.Except))
					}
				}
			}
		}
	}
	want := "fd00::/16 [fd00:1::/32 fd00:2::9/128]|2001:db8::1/128 []|::/0 []|2001:db8::/32 [2001:db8::/64]|::/0 []|0.0.0.0/0 []"
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	if _, err := Parse([]byte(anpHead+"spec: {priority: 3, subject: {namespaces: {}}, egress: [{action: Deny, to: [{networks: ['fd00::1']}]}]}\n"), "f.yaml"); err == nil ||
		!strings.Contains(err.Error(), `networks[0]: "fd00::1" needs a prefix length (e.g. fd00::1/128)`) {
		t.Errorf("networks without a prefix length: %v", err)
	}
}

// ICMP and ICMPv6: no rule names them; the rules of any protocol cover
// them in either family, in the model, the IR and the terms alike.
func TestICMPBothFamilies(t *testing.T) {
	lab := labOf(t, 4, 6)
	xa, _ := lab.Endpoint("x/a")
	yb, _ := lab.Endpoint("y/b")
	for _, tc := range []struct {
		scenario string
		allowed  bool // y/b -> x/a
	}{{"no policy allows everything", true}, {"allow all ingress with an empty rule", true}, {"one TCP port", false}, {"deny all ingress in x", false}} {
		m := modelFor(t, lab, byName(t, tc.scenario))
		c, err := m.Compile()
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range []int{4, 6} {
			name := map[int]string{4: "ICMP", 6: "ICMPV6"}[fam]
			v, _ := m.VerdictFamily(yb, xa, fam, name, 0)
			sa, _ := yb.Addr(fam)
			da, _ := xa.Addr(fam)
			ir := c.Allows(sa, da, ProtoICMPOf(fam), 0)
			terms := termsAllow(c, sa, da, ProtoICMPOf(fam), 0)
			if v.Allowed != tc.allowed || ir != tc.allowed || terms != tc.allowed {
				t.Errorf("%s: y/b -> x/a %s: model %v, IR %v, terms %v, want %v", tc.scenario, name, v.Allowed, ir, terms, tc.allowed)
			}
		}
	}
	if ProtoICMPOf(4) != 1 || ProtoICMPOf(6) != 58 {
		t.Error("ICMP protocol numbers")
	}
}
