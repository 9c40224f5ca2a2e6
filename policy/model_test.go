package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/topology"
)

func scenarioLab(t testing.TB) *topology.Spec {
	t.Helper()
	lab, err := topology.Parse([]byte(scenarios.Lab), "scenario lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

func modelFor(t testing.TB, lab *topology.Spec, yaml string) *Model {
	t.Helper()
	var pols []*Policy
	if yaml != "" {
		var err error
		if pols, err = Parse([]byte(yaml), "scenario.yaml"); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestScenarioExpectations checks the model against verdicts worked out by
// hand from the Kubernetes and Cilium documentation.
func TestScenarioExpectations(t *testing.T) {
	lab := scenarioLab(t)
	if len(scenarios.All) < 40 {
		t.Fatalf("only %d scenarios", len(scenarios.All))
	}
	for _, sc := range scenarios.All {
		t.Run(sc.Name, func(t *testing.T) {
			m := modelFor(t, lab, sc.Policies)
			if len(sc.Expect) == 0 {
				t.Fatal("a scenario needs hand-checked cells")
			}
			for _, c := range sc.Expect {
				if c.FamilyOf() != 4 { // the IPv6 cells: TestScenarioExpectationsFamilies
					continue
				}
				src, _ := lab.Endpoint(c.From)
				dst, _ := lab.Endpoint(c.To)
				v := m.Verdict(src, dst, c.Protocol, c.Port)
				if v.Allowed != c.Allowed {
					t.Errorf("%s -> %s %s/%d: allowed=%v, want %v (egress: %s; ingress: %s)",
						c.From, c.To, c.Protocol, c.Port, v.Allowed, c.Allowed, v.Egress.Reason, v.Ingress.Reason)
				}
			}
		})
	}
}

// TestCompiledAgreesWithModel evaluates the IR the way a datapath does and
// compares every cell of every scenario with the model's own verdict: a
// compile bug cannot hide behind the datapaths agreeing with the IR.
func TestCompiledAgreesWithModel(t *testing.T) {
	lab := scenarioLab(t)
	for _, sc := range scenarios.All {
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
					got := c.Allows(src.IP, dst.IP, ProtoNumber(tg.Protocol), uint16(tg.Port))
					if got != want && bad < 5 {
						bad++
						t.Errorf("%s: %s -> %s %s/%d: IR says %v, model %v", sc.Name, src.ID(), dst.ID(), tg.Protocol, tg.Port, got, want)
					}
				}
			}
		}
	}
}

func TestIdentities(t *testing.T) {
	lab := scenarioLab(t)
	m := modelFor(t, lab, "")
	if len(m.Identities) != 9 {
		t.Fatalf("%d identities, want 9 (3 label sets x 3 namespaces)", len(m.Identities))
	}
	a := m.IdentityOf("x/a")
	if a.ID < FirstIdentity || a.Cilium[PodNamespaceLabel] != "x" || a.Cilium[NamespaceLabelPrefix+"tier"] != "front" {
		t.Errorf("identity of x/a: %+v", a)
	}
	// The same endpoints listed in the opposite order give the same
	// numbers: identities depend on the label sets only.
	rev := *lab
	rev.Endpoints = nil
	for i := len(lab.Endpoints) - 1; i >= 0; i-- {
		rev.Endpoints = append(rev.Endpoints, lab.Endpoints[i])
	}
	m2 := modelFor(t, &rev, "")
	for i := range m.Identities {
		if m.Identities[i].ID != m2.Identities[i].ID || m.Identities[i].Namespace != m2.Identities[i].Namespace {
			t.Fatal("identities are not deterministic")
		}
	}
}

func TestVerdictReasons(t *testing.T) {
	lab := scenarioLab(t)
	m := modelFor(t, lab, byName(t, "cilium: ingressDeny wins over a NetworkPolicy allow"))
	src, _ := lab.Endpoint("y/a")
	dst, _ := lab.Endpoint("x/a")
	v := m.Verdict(src, dst, "TCP", 80)
	if v.Allowed || !strings.Contains(v.Ingress.Reason, "denied by CiliumNetworkPolicy x/deny-y spec.ingressDeny[0]") {
		t.Errorf("deny reason: %+v", v.Ingress)
	}
	if !v.Egress.Allowed || !strings.Contains(v.Egress.Reason, "no policy isolates y/a for egress") {
		t.Errorf("egress reason: %+v", v.Egress)
	}
	m = modelFor(t, lab, byName(t, "deny all ingress in x"))
	v = m.Verdict(src, dst, "TCP", 80)
	if !strings.Contains(v.Ingress.Reason, "no rule allows it: x/a is isolated for ingress by NetworkPolicy x/deny-in") {
		t.Errorf("isolation reason: %+v", v.Ingress)
	}
}

func TestNamedPortDisagreementIsAnError(t *testing.T) {
	lab := scenarioLab(t)
	// Give x/c the labels of x/a (same identity) but another number for
	// serve-80-tcp.
	for i := range lab.Endpoints {
		if lab.Endpoints[i].ID() == "x/c" {
			lab.Endpoints[i].Labels = map[string]string{"pod": "a", "app": "web"}
			lab.Endpoints[i].Ports = []topology.Port{{Name: "serve-80-tcp", Port: 8080, Protocol: "TCP"}}
		}
	}
	m := modelFor(t, lab, byName(t, "named TCP port"))
	_, err := m.Compile()
	if err == nil || !strings.Contains(err.Error(), "declare it differently") {
		t.Errorf("got %v", err)
	}
}

func TestSubtract(t *testing.T) {
	got := fmt.Sprint(Subtract(mustPrefix("10.0.0.0/24"), []netipPrefix{mustPrefix("10.0.0.0/26"), mustPrefix("10.0.0.200/32")}))
	want := "[10.0.0.64/26 10.0.0.128/26 10.0.0.192/29 10.0.0.201/32 10.0.0.202/31 10.0.0.204/30 10.0.0.208/28 10.0.0.224/27]"
	if got != want {
		t.Errorf("Subtract = %s\nwant       %s", got, want)
	}
	if got := Subtract(mustPrefix("10.0.0.0/24"), nil); len(got) != 1 {
		t.Errorf("no except: %v", got)
	}
	if got := Subtract(mustPrefix("10.0.0.0/24"), []netipPrefix{mustPrefix("10.0.0.0/16")}); len(got) != 0 {
		t.Errorf("all excepted: %v", got)
	}
}

func byName(t testing.TB, name string) string {
	for _, sc := range scenarios.All {
		if sc.Name == name {
			return sc.Policies
		}
	}
	t.Fatalf("no scenario %q", name)
	return ""
}
