package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// np is a NetworkPolicy document in namespace ns with the given spec.
func np(ns, name, spec string) string {
	return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + spec
}

// TestNamedPortWarnings: a named port that none of the endpoints it is
// looked up on declares compiles to no rule, with a warning; one that
// they declare does not warn.
func TestNamedPortWarnings(t *testing.T) {
	lab := scenarioLab(t)
	xAll := []string{"x/a", "x/b", "x/c"}
	cases := []struct {
		name, yaml string
		want       []Warning
		text       string
	}{
		{"ingress, declared by nobody", np("x", "web", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: http\n"),
			[]Warning{{Policy: "NetworkPolicy x/web", Path: "spec.ingress[0]", Dir: Ingress, Port: "http", Protocol: "TCP", Selected: xAll, LookedUp: xAll}},
			`NetworkPolicy x/web spec.ingress[0]: named port "http" (TCP): none of the endpoints the policy selects (x/a, x/b, x/c) declares it in its ports:, so the rule allows nothing`},
		{"ingress, declared with another protocol", np("x", "named-wrong", "  podSelector:\n    matchLabels: {pod: a}\n  ingress:\n  - ports:\n    - {protocol: TCP, port: serve-81-udp}\n"),
			[]Warning{{Policy: "NetworkPolicy x/named-wrong", Path: "spec.ingress[0]", Dir: Ingress, Port: "serve-81-udp", Protocol: "TCP", Selected: []string{"x/a"}, LookedUp: []string{"x/a"}}},
			`named port "serve-81-udp" (TCP): none of the endpoints the policy selects (x/a) declares it`},
		{"egress, declared by no destination", np("z", "out", "  podSelector:\n    matchLabels: {pod: a}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - podSelector: {}\n    ports:\n    - port: metrics\n"),
			[]Warning{{Policy: "NetworkPolicy z/out", Path: "spec.egress[0]", Dir: Egress, Port: "metrics", Protocol: "TCP", Selected: []string{"z/a"}, LookedUp: []string{"z/a", "z/b", "z/c"}}},
			`NetworkPolicy z/out spec.egress[0]: named port "metrics" (TCP): none of the rule's destinations (z/a, z/b, z/c) declares it in its ports:, so the rule allows nothing to the endpoints the policy selects (z/a)`},
		{"declared", np("x", "named", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: serve-80-tcp\n"), nil, ""},
	}
	for _, tc := range cases {
		m := modelFor(t, lab, tc.yaml)
		c, err := m.Compile()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.EqualFunc(c.Warnings, tc.want, func(a, b Warning) bool {
			return a.Policy == b.Policy && a.Path == b.Path && a.Dir == b.Dir && a.Port == b.Port && a.Protocol == b.Protocol &&
				slices.Equal(a.Selected, b.Selected) && slices.Equal(a.LookedUp, b.LookedUp)
		}) {
			t.Errorf("%s: warnings %+v, want %+v", tc.name, c.Warnings, tc.want)
			continue
		}
		if tc.text != "" && !strings.Contains(c.Warnings[0].String(), tc.text) {
			t.Errorf("%s: warning %q, want it to contain %q", tc.name, c.Warnings[0], tc.text)
		}
		if tc.want != nil && len(c.Rules) != 0 {
			t.Errorf("%s: %d rules from a port that resolves to nothing", tc.name, len(c.Rules))
		}
	}
}

// A named port that some of the selected endpoints declare is not warned
// about: it resolves where it is declared, as in a cluster.
func TestNamedPortDeclaredBySomeDoesNotWarn(t *testing.T) {
	lab := scenarioLab(t)
	for i := range lab.Endpoints {
		if lab.Endpoints[i].ID() != "x/a" {
			lab.Endpoints[i].Ports = nil
		}
	}
	c, err := modelFor(t, lab, np("x", "web", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: serve-80-tcp\n")).Compile()
	if err != nil || len(c.Warnings) != 0 {
		t.Errorf("%v, warnings %v", err, c.Warnings)
	}
}

// The trace of a connection denied because a named port resolves to
// nothing on the destination says so.
func TestVerdictNotesUnresolvedNamedPort(t *testing.T) {
	lab := scenarioLab(t)
	m := modelFor(t, lab, np("x", "web", "  podSelector: {}\n  ingress:\n  - ports:\n    - port: http\n    - port: serve-80-tcp\n"))
	src, _ := lab.Endpoint("z/a")
	dst, _ := lab.Endpoint("x/a")
	v := m.Verdict(src, dst, "TCP", 81)
	want := `NetworkPolicy x/web spec.ingress[0]: named port "http" resolves to nothing for x/a (not in its ports:)`
	if v.Allowed || !slices.Equal(v.Ingress.Notes, []string{want}) {
		t.Errorf("ingress %+v, want the note %q", v.Ingress, want)
	}
	if v = m.Verdict(src, dst, "TCP", 80); !v.Allowed || len(v.Ingress.Notes) != 0 {
		t.Errorf("allowed by the declared port: %+v", v.Ingress)
	}
}

// anp is an AdminNetworkPolicy document; cnpAdmin a ClusterNetworkPolicy
// of a tier; their spec is flow YAML without the braces.
func anp(name, spec string) string {
	return "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: " + name + "}\nspec: {" + spec + "}\n---\n"
}

func cnpTier(tier, name, spec string) string {
	return "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: " + name + "}\nspec: {tier: " + tier + ", " + spec + "}\n---\n"
}

// TestOverlapWarnings: cluster policies of one tier and priority whose
// subjects share an endpoint of the lab and which have rules in one
// direction are warned about, grouped; others are not.
func TestOverlapWarnings(t *testing.T) {
	lab := scenarioLab(t)
	const (
		inX    = "subject: {namespaces: {matchLabels: {ns: x}}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]"
		inY    = "subject: {namespaces: {matchLabels: {ns: y}}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]"
		outX   = "subject: {namespaces: {matchLabels: {ns: x}}}, egress: [{action: Deny, to: [{namespaces: {}}]}]"
		inWebs = "subject: {pods: {podSelector: {matchLabels: {app: web}}}}, ingress: [{action: Pass, from: [{namespaces: {}}]}]"
	)
	cases := []struct {
		name, yaml string
		want       []Overlap
	}{
		{"ANP and Admin CNP, one priority, shared endpoint",
			anp("a", "priority: 10, "+inX) + cnpTier("Admin", "b", "priority: 10, "+inWebs),
			[]Overlap{{Tier: "Admin", Priority: 10, Policies: []string{"AdminNetworkPolicy a", "ClusterNetworkPolicy b"}, Dirs: []Dir{Ingress}, Shared: []string{"x/a"}}}},
		{"two priorities", anp("a", "priority: 10, "+inX) + anp("b", "priority: 11, "+inX), nil},
		{"disjoint subjects", anp("a", "priority: 10, "+inX) + anp("b", "priority: 10, "+inY), nil},
		{"rules in different directions", anp("a", "priority: 10, "+inX) + anp("b", "priority: 10, "+outX), nil},
		{"a chain of three is one group",
			anp("a", "priority: 0, "+inX) + anp("b", "priority: 0, "+inWebs) + anp("c", "priority: 0, "+inY) + anp("d", "priority: 0, subject: {namespaces: {matchLabels: {ns: z}}}"),
			[]Overlap{{Tier: "Admin", Priority: 0, Policies: []string{"AdminNetworkPolicy a", "AdminNetworkPolicy b", "AdminNetworkPolicy c"}, Dirs: []Dir{Ingress}, Shared: []string{"x/a", "y/a"}}}},
		{"Baseline tier", cnpTier("Baseline", "b1", "priority: 3, "+outX) + cnpTier("Baseline", "b2", "priority: 3, "+outX+", "+strings.TrimPrefix(inX, "subject: {namespaces: {matchLabels: {ns: x}}}, ")) +
			"apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata: {name: default}\nspec: {" + outX + "}\n",
			[]Overlap{{Tier: "Baseline", Priority: 3, Policies: []string{"ClusterNetworkPolicy b1", "ClusterNetworkPolicy b2"}, Dirs: []Dir{Egress}, Shared: []string{"x/a", "x/b", "x/c"}}}},
	}
	for _, tc := range cases {
		c, err := modelFor(t, lab, tc.yaml).Compile()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []Overlap
		for _, w := range c.Warnings {
			if w.Overlap != nil {
				got = append(got, *w.Overlap)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: overlaps\n%+v\nwant\n%+v", tc.name, got, tc.want)
		}
	}
	c, _ := modelFor(t, lab, cases[0].yaml).Compile()
	want := "Admin tier, priority 10: AdminNetworkPolicy a, ClusterNetworkPolicy b can select the same endpoints (x/a) with ingress rules: " +
		"their order is undefined upstream; cnlab evaluates them by kind, then name (in this order)"
	if len(c.Warnings) != 1 || c.Warnings[0].String() != want {
		t.Errorf("warnings %v, want %q", c.Warnings, want)
	}
}

// BenchmarkOverlapWarnings: the cost of the overlap check in the worst
// case, 1,000 Admin-tier policies of one priority that all overlap
// (one comparison per pair), and with a priority each (no pair).
func BenchmarkOverlapWarnings(b *testing.B) {
	lab := scenarioLab(b)
	for _, shape := range []struct {
		name string
		prio func(i int) int
	}{{"one-priority", func(int) int { return 7 }}, {"own-priority", func(i int) int { return i }}} {
		var src strings.Builder
		for i := 0; i < 1000; i++ {
			src.WriteString(anp(fmt.Sprintf("p%d", i), fmt.Sprintf("priority: %d, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}], ports: [{portNumber: {port: %d}}]}]", shape.prio(i), 1000+i)))
		}
		m := modelFor(b, lab, src.String())
		b.Run(shape.name, func(b *testing.B) {
			for b.Loop() {
				if ws := m.overlapWarnings(); (len(ws) == 1) != (shape.name == "one-priority") {
					b.Fatalf("%d warnings", len(ws))
				}
			}
		})
	}
}
