package policy

import (
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
