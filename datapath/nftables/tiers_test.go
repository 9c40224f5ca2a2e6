package nftables

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func endpoint(t *testing.T, lab *topology.Spec, id string) *topology.Endpoint {
	t.Helper()
	ep, err := lab.Endpoint(id)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// TestRenderTiers checks the maps of the cluster tiers on the fixed set
// (policytest.Tiered) and the chains' layout with them: the Admin maps
// before the NetworkPolicy lookups, the Baseline maps after the isolation
// drop; and that a host or a set without cluster policy keeps the layout
// of before.
func TestRenderTiers(t *testing.T) {
	pols := append(policytest.Tiered(), policytest.Parse(t, policytest.TieredNP)...)
	lab, _, c := policytest.CompilePolicies(t, pols, topology.Overrides{})
	st := Render(lab, "flip", c)
	// Flip's endpoints have Admin entries both ways, Baseline ones on
	// ingress, none of them on a port of their own but x/a's and y/b's.
	if want := []string{"eg_adm", "in_adm", "in_adm_p", "in_base_p"}; !slices.Equal(st.Tiers, want) {
		t.Fatalf("flip looks up %v, want %v", st.Tiers, want)
	}
	// x/a (10.0.192.10): deny z (each address, every protocol), y's TCP
	// 80 passed (no element), y's other flows accepted.
	for _, want := range []string{
		"10.0.192.10 . 10.0.192.30/32 . 0-255 : drop",
		"10.0.192.10 . 10.0.191.20/32 . 0-5 : accept",
		"10.0.192.10 . 10.0.191.20/32 . 7-255 : accept",
	} {
		if !slices.Contains(st.Sets["in_adm_p"], want) {
			t.Errorf("in_adm_p lacks %q: %v", want, st.Sets["in_adm_p"])
		}
	}
	for _, want := range []string{"10.0.192.10 . 10.0.191.20/32 . 6 . 0-79 : accept", "10.0.192.10 . 10.0.191.20/32 . 6 . 81-65535 : accept"} {
		if !slices.Contains(st.Sets["in_adm"], want) {
			t.Errorf("in_adm lacks %q: %v", want, st.Sets["in_adm"])
		}
	}
	for _, e := range st.Sets["in_adm"] {
		if strings.Contains(e, " . 6 . 80 ") || strings.Contains(e, " . 6 . 80-") {
			t.Errorf("the Pass on TCP 80 must leave no element: %s", e)
		}
	}
	// y/b (10.0.192.21): egress denies UDP 81 to x; ingress accepts x/c.
	if !slices.Contains(st.Sets["eg_adm"], "10.0.192.21 . 10.0.192.10 . 17 . 81 : drop") {
		t.Errorf("eg_adm: %v", st.Sets["eg_adm"])
	}
	if !slices.Contains(st.Sets["in_adm_p"], "10.0.192.21 . 10.0.192.12/32 . 0-255 : accept") {
		t.Errorf("in_adm_p: %v", st.Sets["in_adm_p"])
	}
	// z/c (10.0.192.32, not isolated): Baseline drops x and y.
	if got := st.Sets["in_base_p"]; !slices.Contains(got, "10.0.192.32 . 10.0.191.11/32 . 0-255 : drop") || slices.ContainsFunc(got, func(e string) bool { return strings.HasPrefix(e, "10.0.192.30 ") }) {
		t.Errorf("in_base_p (z/c only, z/a is isolated): %v", got)
	}
	cs := chains(generationDecls(0, layout{tiers: tierMaps}))
	in, innp := cs["ingress"], cs["ingress_np"]
	if len(in) != 5 || !strings.Contains(in[0], "vmap @in_adm_g0") || !strings.Contains(in[1], "vmap @in_adm_p_g0") ||
		in[2] != "ip daddr @in_np_g0 goto ingress_np_g0" || !strings.Contains(in[3], "vmap @in_base_g0") || !strings.Contains(in[4], "vmap @in_base_p_g0") {
		t.Errorf("ingress chain with every tier map:\n%s", strings.Join(in, "\n"))
	}
	if len(innp) != 9 || !strings.Contains(innp[6], "@in_enf_g0 counter drop") || innp[7] != in[3] || innp[8] != in[4] {
		t.Errorf("ingress_np chain: the NetworkPolicy tier's lookups, then the Baseline tier's:\n%s", strings.Join(innp, "\n"))
	}
	cs = chains(generationDecls(0, st.layout()))
	if eg := cs["egress"]; len(eg) != 2 || !strings.Contains(eg[0], "vmap @eg_adm_g0") || eg[1] != "ip saddr @eg_np_g0 goto egress_np_g0" {
		t.Errorf("flip's egress chain looks up eg_adm alone:\n%s", strings.Join(eg, "\n"))
	}
	if eg := cs["egress_np"]; len(eg) != 7 {
		t.Errorf("flip's egress_np chain: %q", eg)
	}
	// Those with NetworkPolicy-tier entries or isolation: x/a, y/b, z/a
	// (isolated); z/c has Baseline entries only.
	if got := st.Sets["in_np"]; !slices.Equal(got, []string{"10.0.192.10", "10.0.192.21", "10.0.192.30"}) || !slices.Contains(st.Sets["in_subj"], "10.0.192.32") {
		t.Errorf("in_np = %v, in_subj = %v", got, st.Sets["in_subj"])
	}
	if generationDecls(0, layout{}) != setDecls(0, layout{})+chainDecls(0) || strings.Contains(skeleton(), "vmap") {
		t.Error("without tiers, the layout of before")
	}
	// Flap's endpoints have no cluster policy... but y/a (flap) is
	// passed by x/a's: its own chains have none.
	flap := Render(lab, "flap", c)
	if len(flap.Tiers) > 0 {
		t.Errorf("flap's endpoints have no cluster-tier entry: %v", flap.Sets)
	}
	// The tiers coming and going switch generations.
	rb := rebuildTiers(2, layout{}, 3, st.layout(), st.Sets)
	for _, want := range []string{"add map inet cnlab in_adm_g3 { type ipv4_addr . ipv4_addr . inet_proto . inet_service : verdict; flags interval; }",
		"add map inet cnlab eg_base_g3 {", "add element inet cnlab in_adm_p_g3 {", "vmap @in_base_p_g3", "delete set inet cnlab in_allow_g2"} {
		if !strings.Contains(rb, want) {
			t.Errorf("rebuild lacks %q", want)
		}
	}
	if back := rebuildTiers(3, st.layout(), 4, layout{}, nil); !strings.Contains(back, "delete map inet cnlab in_adm_g3") || !strings.Contains(back, "delete chain inet cnlab egress_np_g3") ||
		!strings.Contains(back, "delete set inet cnlab in_np_g3") || strings.Contains(back, "vmap") || strings.Contains(back, "_np_g4") {
		t.Errorf("rebuild without tiers:\n%s", back)
	}
	// In place, a map's element is deleted by its key.
	s, ok := diffScript(0, map[string][]string{"in_adm_p": {"1.1.1.1 . 2.2.2.2/32 . 0-255 : drop"}}, map[string][]string{"in_adm_p": {"1.1.1.1 . 2.2.2.2/32 . 0-255 : accept"}})
	if !ok || !strings.Contains(s, "delete element inet cnlab in_adm_p_g0 { 1.1.1.1 . 2.2.2.2/32 . 0-255 }\nadd element inet cnlab in_adm_p_g0 { 1.1.1.1 . 2.2.2.2/32 . 0-255 : accept }") {
		t.Errorf("diff of a map:\n%s", s)
	}
}

// TestTiersAgainstIR runs random policy sets with cluster tiers through
// the interpreter of the rendered table, both hosts: every new connection
// between endpoints (TCP, UDP, SCTP on ports around the rules' and ICMP)
// must be dropped exactly when the IR (policy.Compiled.Allows) denies it,
// and a TCP connection to an L7 port redirected to the proxy exactly when
// the model (policy.HTTPVerdict) says it is allowed and proxied.
func TestTiersAgainstIR(t *testing.T) {
	rng := rand.New(rand.NewSource(33))
	n := 300
	if testing.Short() {
		n = 40
	}
	for i := 0; i < n; i++ {
		lab, m, c := policytest.CompilePolicies(t, policytest.RandomTiered(t, rng), topology.Overrides{})
		checkAgainstIR(t, lab, m, c, i)
	}
}

func checkAgainstIR(t *testing.T, lab *topology.Spec, m *policy.Model, c *policy.Compiled, round int) {
	t.Helper()
	states := map[string]hostState{}
	for _, h := range lab.Hosts {
		states[h.Name] = Render(lab, h.Name, c)
	}
	policytest.CheckAgainstIR(t, lab, m, c, fmt.Sprintf("round %d", round), policytest.Targets([]uint16{0, 78, 79, 80, 81, 82, 1000, 65535}, 1, 47),
		func(src, dst *topology.Endpoint, tg policytest.Target) policytest.Crossing {
			hosts := []hostState{states[src.Host]}
			if dst.Host != src.Host {
				hosts = append(hosts, states[dst.Host])
			}
			s, d := policytest.Addrs(src, dst, tg)
			got, trace := crossing(t, hosts, packet{s, d, tg.Proto, tg.Port})
			return policytest.Crossing{Dropped: got == dropped, Redirected: got == redirected, Trace: trace}
		})
	if round%30 == 0 {
		checkLogs(t, lab, c, fmt.Sprintf("round %d", round))
	}
}

// TestTiersL7 is the iptables datapath's test of the same name: on x/a's
// L7 port, an Admin Pass hands x/c to the proxy, Admin Accepts let x/b
// and y/b through without it (l7fwd lets them on to the forward chain),
// y/a is dropped.
func TestTiersL7(t *testing.T) {
	pols := append(policytest.Parse(t, scenarios.L7[0].Policies),
		policytest.Cluster(policy.TierAdmin, "pass-c", 1, policytest.L("ns", "x"), policytest.L("pod", "a"), []policy.Rule{
			policytest.Rule(policy.ActionPass, []policy.Peer{policytest.Pods(policytest.L("ns", "x"), policytest.L("pod", "c"))}, policy.Port{Protocol: policy.TCP, Port: 80}),
			policytest.Rule(policy.ActionAccept, []policy.Peer{policytest.Pods(policytest.L("ns", "x"), policytest.L())}),
		}, nil),
		policytest.Cluster(policy.TierAdmin, "accept-yb", 2, policytest.L("ns", "x"), policytest.L(), []policy.Rule{
			policytest.Rule(policy.ActionAccept, []policy.Peer{policytest.Pods(policytest.L("ns", "y"), policytest.L("pod", "b"))}),
		}, nil))
	lab, m, c := policytest.CompilePolicies(t, pols, topology.Overrides{})
	states := map[string]hostState{"flip": Render(lab, "flip", c), "flap": Render(lab, "flap", c)}
	for _, tc := range []struct {
		from string
		want outcome
	}{{"x/c", redirected}, {"x/b", passed}, {"y/b", passed}, {"y/a", dropped}} {
		src, dst := endpoint(t, lab, tc.from), endpoint(t, lab, "x/a")
		hosts := []hostState{states[src.Host]}
		if src.Host != dst.Host {
			hosts = append(hosts, states[dst.Host])
		}
		got, trace := crossing(t, hosts, packet{src.IP, dst.IP, policy.ProtoTCP, 80})
		if got != tc.want {
			t.Errorf("%s -> x/a tcp/80: %v, want %v\n%s", tc.from, got, tc.want, trace)
		}
	}
	checkAgainstIR(t, lab, m, c, -1)
}

// TestTierScenarios runs the cluster tiers' scenario table
// (scenarios.Tiers) through the interpreter of the rendered table against
// the IR and the model.
func TestTierScenarios(t *testing.T) {
	for i, sc := range scenarios.Tiers {
		lab, m, c := policytest.CompilePolicies(t, policytest.Parse(t, sc.Policies), topology.Overrides{})
		checkAgainstIR(t, lab, m, c, i)
	}
}
