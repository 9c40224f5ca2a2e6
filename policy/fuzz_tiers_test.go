package policy

import (
	"testing"

	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/topology"
)

// FuzzParseClusterPolicy feeds the parser mutations of the cluster tiers'
// documents, good and bad: it must never panic, refuse with an input.Error, and what it
// accepts must be a well-formed cluster policy (a tier, no namespace, one
// spec whose rules are ordered, with an action the kind has), store as
// text that re-parses to the same policies, and compile on the scenario
// lab.
func FuzzParseClusterPolicy(f *testing.F) {
	for _, g := range tierGood {
		f.Add([]byte(g.yaml))
	}
	for _, b := range tierBad() {
		f.Add([]byte(b.yaml))
	}
	f.Add([]byte(cnpTierHead + "spec: {tier: Baseline, priority: 3, subject: {pods: {podSelector: {}}}, egress: [{action: Deny, to: [{networks: [10.0.0.0/8, '::/0']}], protocols: [{udp: {destinationPort: {range: {start: 1, end: 9}}}}]}]}\n---\n" +
		anpHead + "spec: {priority: 3, subject: {namespaces: {}}, ingress: [{action: Pass, from: [{pods: {namespaceSelector: {}, podSelector: {}}}], ports: [{namedPort: serve-80-tcp}]}]}\n"))
	f.Add([]byte(anpHead + "spec: {priority: 7, subject: {namespaces: {}}, egress: [{action: Deny, to: [{networks: ['fd00:0:191::/64', 'fd00:0:192::30/127']}]}, {action: Allow, to: [{networks: ['::/0', 0.0.0.0/0]}]}]}\n"))
	lab := scenarioLab(f)
	dual := labOf(f, 4, 6)
	actions := map[string][]string{KindClusterNP: clusterNPAPI.actions, KindAdminNP: adminNPAPI.actions, KindBaselineNP: baselineNPAPI.actions}
	f.Fuzz(func(t *testing.T, data []byte) {
		pols, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if !input.Is(err) {
				t.Fatalf("error %T is not an input.Error: %v", err, err)
			}
			return
		}
		for _, p := range pols {
			if p.Kind == KindNetworkPolicy || p.Kind == KindCNP {
				continue
			}
			if !p.Cluster() || p.Namespace != "" || len(p.Specs) != 1 || p.Priority < 0 || p.Priority > maxPriority {
				t.Fatalf("%s: tier %v, namespace %q, %d specs, priority %d", p.Ref(), p.Tier, p.Namespace, len(p.Specs), p.Priority)
			}
			s := p.Specs[0]
			if s.SubjectNamespaces == nil {
				t.Fatalf("%s: no subject namespaces", p.Ref())
			}
			for _, d := range []Direction{s.Ingress, s.Egress} {
				if d.Enforce || len(d.Allow)+len(d.Deny) > 0 {
					t.Fatalf("%s: NetworkPolicy rules in a cluster policy: %+v", p.Ref(), d)
				}
				for _, r := range d.Ordered {
					ok := false
					for _, a := range actions[p.Kind] {
						ok = ok || r.Action == a
					}
					if !ok || r.AnyPeer {
						t.Fatalf("%s %s: action %q, any peer %v", p.Ref(), r.Path, r.Action, r.AnyPeer)
					}
					for _, pr := range r.Ports {
						if pr.EndPort != 0 && pr.EndPort <= pr.Port {
							t.Fatalf("%s %s: port range %v", p.Ref(), r.Path, pr)
						}
					}
				}
			}
		}
		checkRoundTrip(t, data)
		for _, l := range []*topology.Spec{lab, dual} {
			m, err := NewModel(l, pols)
			if err != nil {
				return // e.g. a NetworkPolicy's namespace the lab does not have
			}
			if _, err := m.Compile(); err != nil && !input.Is(err) {
				t.Fatalf("compile on %v: %v", l.Families(), err)
			}
		}
	})
}
