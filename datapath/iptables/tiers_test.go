package iptables

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

var ipsetsOpt = topology.Overrides{Options: kind.Overrides{Peers: kind.PeersIPSets}}

// TestRenderTiers checks the chains of the cluster tiers on the fixed set
// (policytest.Tiered): x/a's ingress goes through its Admin chain, whose
// rules are in priority order (deny z, pass y on TCP 80 into the
// NetworkPolicy chain, accept y) and whose end goes to the NetworkPolicy
// chain; z/c (flip, not isolated) gets a Baseline chain its
// NetworkPolicy chain goes to; an endpoint without cluster policy keeps
// its chain as before.
func TestRenderTiers(t *testing.T) {
	for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
		pols := append(policytest.Tiered(), policytest.Parse(t, policytest.TieredNP)...)
		lab, _, c := policytest.CompilePolicies(t, pols, ov)
		st := Render(lab, "flip", c)
		xa := mustEndpoint(t, lab, "x/a")
		admin, np := tierChainName("A", policy.Ingress, xa), chainName(policy.Ingress, xa)
		fwd := strings.Join(st.Chains[fwdChain], "\n")
		if !strings.Contains(fwd, "-d 10.0.192.10/32 -j "+admin) || strings.Contains(fwd, "-j "+np) {
			t.Errorf("CNLAB-FWD must jump to x/a's Admin chain only:\n%s", fwd)
		}
		a := st.Chains[admin]
		want := []struct{ origin, verdict string }{
			{"ClusterNetworkPolicy deny-z spec.ingress[0]", "-j DROP"},
			{"ClusterNetworkPolicy pass-y spec.ingress[0]", "-g " + np},
			{"ClusterNetworkPolicy pass-y spec.ingress[1]", "-j ACCEPT"},
		}
		if a[len(a)-1] != "-g "+np {
			t.Fatalf("x/a's Admin chain must end in its NetworkPolicy chain:\n%s", strings.Join(a, "\n"))
		}
		// One rule per peer address, or one per term with ipsets: the
		// rules of one Admin rule are together, in priority order.
		var got []string
		for _, r := range a[:len(a)-1] {
			for _, w := range want {
				if strings.Contains(r, `"`+w.origin+`"`) && strings.HasSuffix(r, " "+w.verdict) {
					if len(got) == 0 || got[len(got)-1] != w.origin {
						got = append(got, w.origin)
					}
				}
			}
			if strings.Contains(r, "pass-y spec.ingress[0]") && !strings.Contains(r, "-p tcp -m tcp --dport 80 ") {
				t.Errorf("the Pass is on TCP 80: %s", r)
			}
		}
		if len(got) != len(want) || len(a) != map[bool]int{false: 10, true: 4}[lab.IPTables.IPSets()] {
			t.Fatalf("x/a's Admin chain (want the rules of %v):\n%s", want, strings.Join(a, "\n"))
		}
		for i, w := range want {
			if got[i] != w.origin {
				t.Errorf("Admin rules in the order %v", got)
			}
		}
		if n := st.Chains[np]; len(n) != 2 || !strings.HasSuffix(n[0], "-j ACCEPT") || n[1] != "-j DROP" {
			t.Errorf("x/a's NetworkPolicy chain:\n%s", strings.Join(n, "\n"))
		}
		zc := mustEndpoint(t, lab, "z/c")
		base := tierChainName("B", policy.Ingress, zc)
		if n := st.Chains[chainName(policy.Ingress, zc)]; len(n) != 1 || n[0] != "-g "+base {
			t.Errorf("z/c's NetworkPolicy chain must go to its Baseline chain: %q", n)
		}
		if b := st.Chains[base]; !allDrop(b) {
			t.Errorf("z/c's Baseline chain:\n%s", strings.Join(b, "\n"))
		}
		za := mustEndpoint(t, lab, "z/a") // isolated by from-xa: no Baseline chain
		if _, ok := st.Chains[tierChainName("B", policy.Ingress, za)]; ok {
			t.Error("z/a is isolated: no Baseline chain")
		}
		// y/b's egress (flip): an Admin chain alone, its end returns.
		yb := mustEndpoint(t, lab, "y/b")
		if e := st.Chains[tierChainName("A", policy.Egress, yb)]; !allDrop(e) || !strings.Contains(e[0], "-p udp -m udp --dport 81 ") {
			t.Errorf("y/b's egress Admin chain:\n%s", strings.Join(e, "\n"))
		}
	}
}

// allDrop reports whether a chain is drops ending in a return.
func allDrop(chain []string) bool {
	if len(chain) < 2 || chain[len(chain)-1] != "-j RETURN" {
		return false
	}
	for _, r := range chain[:len(chain)-1] {
		if !strings.HasSuffix(r, "-j DROP") {
			return false
		}
	}
	return true
}

// TestTiersAgainstIR runs random policy sets with cluster tiers through
// the interpreter of the rendered rules, both hosts, with and without
// ipsets: every new connection between endpoints (TCP, UDP, SCTP on ports
// around the rules' and ICMP) must be dropped exactly when the IR
// (policy.Compiled.Allows) denies it, and a TCP connection to an L7 port
// redirected to the proxy exactly when the model (policy.HTTPVerdict)
// says it is allowed and proxied.
func TestTiersAgainstIR(t *testing.T) {
	rng := rand.New(rand.NewSource(33))
	n := 300
	if testing.Short() {
		n = 40
	}
	for i := 0; i < n; i++ {
		pols := policytest.RandomTiered(t, rng)
		for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
			lab, m, c := policytest.CompilePolicies(t, pols, ov)
			checkAgainstIR(t, lab, m, c, i)
		}
	}
}

func checkAgainstIR(t *testing.T, lab *topology.Spec, m *policy.Model, c *policy.Compiled, round int) {
	t.Helper()
	states := map[string]hostState{}
	for _, h := range lab.Hosts {
		states[h.Name] = Render(lab, h.Name, c)
	}
	policytest.CheckAgainstIR(t, lab, m, c, fmt.Sprintf("round %d (ipsets %v)", round, lab.IPTables.IPSets()), policytest.Targets([]uint16{78, 79, 80, 81, 82, 1000}, 1),
		func(src, dst *topology.Endpoint, tg policytest.Target) policytest.Crossing {
			hosts := []hostState{states[src.Host]}
			if dst.Host != src.Host {
				hosts = append(hosts, states[dst.Host])
			}
			sa, da := policytest.Addrs(src, dst, tg)
			got, trace := crossing(t, hosts, packet{sa, da, tg.Proto, tg.Port})
			return policytest.Crossing{Dropped: got == dropped, Redirected: got == redirected, Trace: trace}
		})
	if round%30 == 0 {
		checkLogs(t, lab, c, fmt.Sprintf("round %d (ipsets %v)", round, lab.IPTables.IPSets()))
	}
}

// TestTiersAgainstIRFamilies is TestTiersAgainstIR on the scenario lab
// dual-stack and IPv6-only, with and without ipsets: the interpreter runs
// each family's packets through that family's chains (ip6tables'
// CNLAB-FWD and CNLAB-L7 for IPv6), each family's cells against the IR,
// L7 ports included: over IPv6 as over IPv4, CNLAB-L7 redirects exactly
// what the model proxies.
func TestTiersAgainstIRFamilies(t *testing.T) {
	rng := rand.New(rand.NewSource(39))
	n := 60
	if testing.Short() {
		n = 15
	}
	for _, fams := range [][]int{{4, 6}, {6}} {
		l7 := 0
		for i := 0; i < n; i++ {
			pols := policytest.RandomTiered(t, rng)
			for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
				lab, m, c := policytest.CompilePoliciesFor(t, pols, ov, fams...)
				checkAgainstIR(t, lab, m, c, i)
				if len(c.HTTP) > 0 && ov == (topology.Overrides{}) {
					l7++
				}
			}
		}
		if l7 < n/10 {
			t.Errorf("%v: only %d rounds of %d with L7 ports", fams, l7, n)
		}
		t.Logf("%v: %d rounds, %d with L7 ports", fams, n, l7)
	}
	// The L7 scenario beneath the Admin tier (TestTiersL7) over IPv6.
	pols := append(policytest.Parse(t, scenarios.L7[0].Policies), l7PassGo()...)
	for _, fams := range [][]int{{4, 6}, {6}} {
		for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
			lab, m, c := policytest.CompilePoliciesFor(t, pols, ov, fams...)
			checkAgainstIR(t, lab, m, c, -1)
		}
	}
}

// l7PassGo is policytest.L7PassYAML built in Go.
func l7PassGo() []*policy.Policy {
	return []*policy.Policy{
		policytest.Cluster(policy.TierAdmin, "pass-c", 1, policytest.L("ns", "x"), policytest.L("pod", "a"), []policy.Rule{
			policytest.Rule(policy.ActionPass, []policy.Peer{policytest.Pods(policytest.L("ns", "x"), policytest.L("pod", "c"))}, policy.Port{Protocol: policy.TCP, Port: 80}),
			policytest.Rule(policy.ActionAccept, []policy.Peer{policytest.Pods(policytest.L("ns", "x"), policytest.L())}),
		}, nil),
		policytest.Cluster(policy.TierAdmin, "accept-yb", 2, policytest.L("ns", "x"), policytest.L(), []policy.Rule{
			policytest.Rule(policy.ActionAccept, []policy.Peer{policytest.Pods(policytest.L("ns", "y"), policytest.L("pod", "b"))}),
		}, nil),
	}
}

// TestTiersL7 checks the L7 redirect beneath the Admin tier: on x/a's L7
// port 80 (GET /public from namespace x), an Admin Pass of x/c ahead of
// an Admin Accept of namespace x leaves x/c to the proxy, x/b is accepted
// by the Admin tier without the proxy, y/b too (another Admin policy),
// y/a is dropped (no Admin rule; the CiliumNetworkPolicy isolates x/a).
func TestTiersL7(t *testing.T) {
	pols := append(policytest.Parse(t, scenarios.L7[0].Policies), l7PassGo()...)
	for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
		lab, m, c := policytest.CompilePolicies(t, pols, ov)
		states := []hostState{Render(lab, "flip", c), Render(lab, "flap", c)}
		for _, tc := range []struct {
			from string
			want outcome
		}{{"x/c", redirected}, {"x/b", passed}, {"y/b", passed}, {"y/a", dropped}} {
			src, dst := mustEndpoint(t, lab, tc.from), mustEndpoint(t, lab, "x/a")
			hosts := []hostState{states[0]}
			if src.Host == "flap" {
				hosts = []hostState{states[1], states[0]}
			}
			got, trace := crossing(t, hosts, packet{src.IP, dst.IP, policy.ProtoTCP, 80})
			if got != tc.want {
				t.Errorf("%s -> x/a tcp/80: %v, want %v\n%s", tc.from, got, tc.want, trace)
			}
			v := m.HTTPVerdict(src, dst, 80, policy.Request{Method: "GET", Path: "/private"})
			if (tc.want == redirected) != v.Proxied || (tc.want == dropped) == v.Allowed {
				t.Errorf("%s -> x/a: the model says %+v", tc.from, v)
			}
		}
		checkAgainstIR(t, lab, m, c, -1)
	}
}

// TestTieredYAML: the policy files the kernel tests apply compile to the
// IR of the sets built in Go that the render tests use.
func TestTieredYAML(t *testing.T) {
	l7 := append(policytest.Parse(t, scenarios.L7[0].Policies), policytest.Parse(t, policytest.L7PassYAML)...)
	goL7 := policytest.Parse(t, scenarios.L7[0].Policies)
	for _, tc := range []struct {
		name        string
		yaml, built []*policy.Policy
	}{
		{"tiered", policytest.Parse(t, policytest.TieredYAML), policytest.Tiered()},
		{"l7", l7, append(goL7, l7PassGo()...)},
	} {
		_, _, a := policytest.CompilePolicies(t, tc.yaml, topology.Overrides{})
		_, _, b := policytest.CompilePolicies(t, tc.built, topology.Overrides{})
		if fmt.Sprint(a.Rules) != fmt.Sprint(b.Rules) || fmt.Sprint(a.Enforced) != fmt.Sprint(b.Enforced) {
			t.Errorf("%s: the YAML compiles to\n%v\nthe Go policies to\n%v", tc.name, a.Rules, b.Rules)
		}
	}
}

// TestTierScenarios runs the cluster tiers' scenario table
// (scenarios.Tiers) through the interpreter of the rendered rules, with
// and without ipsets, against the IR and the model.
func TestTierScenarios(t *testing.T) {
	for i, sc := range scenarios.Tiers {
		for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
			lab, m, c := policytest.CompilePolicies(t, policytest.Parse(t, sc.Policies), ov)
			checkAgainstIR(t, lab, m, c, i)
		}
	}
}
