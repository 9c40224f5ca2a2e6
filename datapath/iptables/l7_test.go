package iptables

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func TestRenderL7(t *testing.T) {
	lab, c := policytest.Compile(t, scenarios.L7[4].Policies, topology.Overrides{}) // GET /public, x/c denied at L3/L4
	st := Render(lab, "flip", c)
	nat := strings.Join(st.NAT, "\n")
	// x/c's deny first (RETURN), then the allows (REDIRECT), all about
	// x/a's port 80.
	deny := strings.Index(nat, "-s 10.0.192.12/32 -d 10.0.192.10/32 -p tcp -m tcp --dport 80")
	redirect := strings.Index(nat, "-j REDIRECT --to-ports 15001")
	if deny < 0 || redirect < 0 || deny > redirect || !strings.Contains(nat[deny:], "-j RETURN") {
		t.Errorf("CNLAB-L7:\n%s", nat)
	}
	in := st.Chains[chainName(0, mustEndpoint(t, lab, "x/a"))]
	if len(in) == 0 || !strings.HasPrefix(in[0], "-p tcp -m tcp --dport 80 ") || !strings.HasSuffix(in[0], "-j DROP") {
		t.Errorf("x/a's ingress chain does not start by dropping new connections to its L7 port: %q", in)
	}
	if got := Render(lab, "flap", c); len(got.NAT) != 0 {
		t.Errorf("flap has no L7 port but gets %q", got.NAT)
	}
}

func mustEndpoint(t *testing.T, lab *topology.Spec, id string) *topology.Endpoint {
	t.Helper()
	ep, err := lab.Endpoint(id)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestNatSteps(t *testing.T) {
	a := "-s 10.0.0.1/32 -d 10.0.0.9/32 -p tcp -m tcp --dport 80 -m comment --comment \"a\" -j REDIRECT --to-ports 15001"
	a2 := "-d 10.0.0.9/32 -p tcp -m tcp --dport 80 -m comment --comment \"a2\" -j REDIRECT --to-ports 15001"
	b := "-d 10.0.0.8/32 -p tcp -m tcp --dport 8080 -m comment --comment \"b\" -j REDIRECT --to-ports 15001"
	// 10.0.0.9:80 changes, 10.0.0.8:8080 stops being an L7 port.
	steps := natSteps([]string{a, b}, []string{a2}, "*filter\nCOMMIT\n", false)
	if len(steps) != 3 || steps[1] != "*filter\nCOMMIT\n" {
		t.Fatalf("steps %q", steps)
	}
	if !strings.Contains(steps[0], `"a2"`) || strings.Contains(steps[0], `"a"`) || !strings.Contains(steps[0], `"b"`) {
		t.Errorf("step 1 must redirect 10.0.0.9:80 by the new rules and keep 10.0.0.8:8080's old ones:\n%s", steps[0])
	}
	if !strings.Contains(steps[2], `"a2"`) || strings.Contains(steps[2], `"b"`) {
		t.Errorf("step 3 must hold the new rules alone:\n%s", steps[2])
	}
	if s := natSteps([]string{a}, []string{a}, "", false); s[0] != "" || s[2] != "" {
		t.Errorf("no change, but %q", s)
	}
	if got := natKey(a); got != "10.0.0.9/32:80" {
		t.Errorf("natKey = %q", got)
	}
}
