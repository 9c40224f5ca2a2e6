package nftables

import (
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// dualPolicy isolates x/a in both directions, its ingress allowing TCP
// 80 from pods b (every namespace) and UDP 81 from 10.0.191.0/24 and
// fd00:0:191::/65, its egress any peer on TCP 443.
const dualPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  policyTypes: [Ingress, Egress]
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{port: 80}]
  - from: [{ipBlock: {cidr: 10.0.191.0/24}}, {ipBlock: {cidr: "fd00:0:191::/65"}}]
    ports: [{port: 81, protocol: UDP}]
  egress:
  - ports: [{port: 443}]
`

// compileDual compiles dualPolicy on lab; while the policy package
// refuses IPv6 CIDRs, without the IPv6 ipBlock (v6CIDR false).
func compileDual(t *testing.T, lab *topology.Spec) (c *policy.Compiled, v6CIDR bool) {
	t.Helper()
	compile := func(yaml string) (*policy.Compiled, error) {
		pols, err := policy.Parse([]byte(yaml), "scenario.yaml")
		if err != nil {
			return nil, err
		}
		m, err := policy.NewModel(lab, pols)
		if err != nil {
			return nil, err
		}
		return m.Compile()
	}
	if c, err := compile(dualPolicy); err == nil {
		return c, true
	}
	c, err := compile(strings.Replace(dualPolicy, `, {ipBlock: {cidr: "fd00:0:191::/65"}}`, "", 1))
	if err != nil {
		t.Fatal(err)
	}
	return c, false
}

func labFile(t *testing.T, path string) *topology.Spec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lab, err := topology.Parse(data, path, topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// TestRenderDualStack checks a dual-stack lab's sets: each family's
// addresses in its own sets, an identity peer in both, a CIDR in its
// family's, "any" in both; and the table's rules for IPv6.
func TestRenderDualStack(t *testing.T) {
	lab := labFile(t, "../../examples/dual-stack.yaml")
	c, v6CIDR := compileDual(t, lab)
	st := Render(lab, "flip", c)
	if st.layout().families()[1] != 6 || len(st.Families) != 2 {
		t.Fatalf("families %v", st.Families)
	}
	want := map[string][]string{
		"in_enf":  {"10.0.192.10"},
		"in_enf6": {"fd00:0:192::10"},
		"eg_enf":  {"10.0.192.10"},
		"eg_enf6": {"fd00:0:192::10"},
		"in_subj": {"10.0.192.10"}, "in_subj6": {"fd00:0:192::10"},
		"eg_subj": {"10.0.192.10"}, "eg_subj6": {"fd00:0:192::10"},
		"eg_allow_p": nil,
		"eg_allow":   {"10.0.192.10 . 0.0.0.0/0 . 6 . 443"},
		"eg_allow6":  {"fd00:0:192::10 . ::/0 . 6 . 443"},
	}
	// x/b in both families on TCP 80 (pod b of x only: a podSelector
	// alone is the policy's namespace); the CIDRs split around it.
	for set, elem := range map[string]string{
		"in_allow_x":  "10.0.192.10 . 10.0.191.11 . 6 . 80",
		"in_allow_x6": "fd00:0:192::10 . fd00:0:191::11 . 6 . 80",
		"in_allow":    "10.0.192.10 . 10.0.191.128/25 . 17 . 81",
	} {
		if !contains(st.Sets[set], elem) {
			t.Errorf("%s = %v, lacks %q", set, st.Sets[set], elem)
		}
	}
	if !v6CIDR {
		t.Log("the policy package refuses IPv6 CIDRs: not checked")
	} else if !contains(st.Sets["in_allow6"], "fd00:0:192::10 . fd00:0:191:0:4000::/66 . 17 . 81") {
		t.Errorf("in_allow6 = %v", st.Sets["in_allow6"])
	}
	for _, set := range []string{"in_allow_x", "in_allow", "in_allow_p", "in_allow_x6", "in_allow6", "in_allow_p6"} {
		for _, e := range st.Sets[set] {
			if v6 := strings.Contains(e, ":"); v6 != strings.HasSuffix(set, "6") {
				t.Errorf("%s has %q", set, e)
			}
		}
	}
	for set, elems := range want {
		if got := st.Sets[set]; strings.Join(got, ", ") != strings.Join(elems, ", ") {
			t.Errorf("%s = %v, want %v", set, got, elems)
		}
	}
	skel := skeletonFor(st.layout())
	for _, w := range []string{
		"add set inet cnlab in_allow6_g0 { type ipv6_addr . ipv6_addr . inet_proto . inet_service; flags interval; }",
		"add set inet cnlab in_enf6_g0 { type ipv6_addr; }",
		"add set inet cnlab in_enf_g0 { type ipv4_addr; }",
		"add rule inet cnlab ingress_g0 ip6 daddr . ip6 saddr . meta l4proto . th dport @in_allow_x6_g0 counter accept",
		"add rule inet cnlab ingress_g0 ip6 daddr @in_enf6_g0 counter drop",
		"add rule inet cnlab ingress_g0 ip daddr @in_enf_g0 counter drop",
		"add rule inet cnlab forward ip6 saddr @eg_subj6_g0 jump egress_g0",
		"add rule inet cnlab forward ip6 hoplimit 255 icmpv6 type " + ndpTypes + " accept",
	} {
		if !strings.Contains(skel, w) {
			t.Errorf("skeleton lacks %q:\n%s", w, skel)
		}
	}
	if strings.Index(skel, "icmpv6 type") > strings.Index(skel, "ct state invalid") {
		t.Error("neighbour discovery must pass before the invalid drop")
	}
	// An IPv4-only lab's table has no IPv6 in it.
	v4 := skeletonFor(layout{})
	if strings.Contains(v4, "ip6") || strings.Contains(v4, "ipv6") || strings.Contains(v4, "icmpv6") {
		t.Errorf("IPv4-only skeleton names IPv6:\n%s", v4)
	}
	script, ok := diffScript(0, nil, st.Sets)
	if !ok || !strings.Contains(script, "add element inet cnlab in_enf6_g0 { fd00:0:192::10 }") {
		t.Errorf("diff:\n%s", script)
	}
	drop := dropGenerationFor(0, st.layout())
	if !strings.Contains(drop, "delete set inet cnlab in_allow_x6_g0") {
		t.Errorf("drop:\n%s", drop)
	}
}

// TestRenderIPv6Only checks an IPv6-only lab: IPv6 sets and rules only.
func TestRenderIPv6Only(t *testing.T) {
	lab := labFile(t, "../../examples/ipv6-only.yaml")
	c, _ := compileDual(t, lab)
	for _, h := range lab.Hosts {
		st := Render(lab, h.Name, c)
		for set, elems := range st.Sets {
			if !strings.HasSuffix(set, "6") && len(elems) > 0 {
				t.Errorf("host %s: IPv4 set %s = %v", h.Name, set, elems)
			}
		}
		skel := skeletonFor(st.layout())
		if strings.Contains(skel, "ipv4_addr") || strings.Contains(skel, "ip saddr") {
			t.Errorf("IPv6-only skeleton has IPv4:\n%s", skel)
		}
	}
	st := Render(lab, lab.Endpoints[0].Host, c)
	t.Logf("%v", st.Sets)
}

// TestTiersAgainstIRFamilies is TestTiersAgainstIR on the scenario lab
// dual-stack and IPv6-only: the interpreter reads ip6 and ip expressions
// per family, each family's cells against the IR (CheckAgainstIR), L7
// ports included: over IPv6 as over IPv4, the l7 chain redirects what the
// model proxies.
func TestTiersAgainstIRFamilies(t *testing.T) {
	rng := rand.New(rand.NewSource(38))
	n := 100
	if testing.Short() {
		n = 20
	}
	for _, fams := range [][]int{{4, 6}, {6}} {
		lab, err := topology.Parse([]byte(scenarios.LabFor(fams...)), "scenario lab", topology.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		l7 := 0
		for i := 0; i < n; i++ {
			m, err := policy.NewModel(lab, policytest.RandomTiered(t, rng))
			if err != nil {
				t.Fatal(err)
			}
			c, err := m.Compile()
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstIR(t, lab, m, c, i)
			if len(c.HTTP) > 0 {
				l7++
			}
		}
		if l7 < n/10 {
			t.Errorf("%v: only %d rounds of %d with L7 ports", fams, l7, n)
		}
		t.Logf("%v: %d rounds, %d with L7 ports", fams, n, l7)
	}
}
