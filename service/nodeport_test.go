package service

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
)

// TestNodePortUnderPolicy: with backends that allow the clients'
// namespace only, a node-port connection reaches exactly the backends
// whose host judges it on the client (not on a masquerade address): on
// eBPF those on the client's host; on netfilter those on the node port's
// host. Each choice names the source its backend sees.
func TestNodePortUnderPolicy(t *testing.T) {
	lab := policyLab(t)
	svcs, _ := parse(t, svc("np", "  type: NodePort\n  selector: {}\n  ports: [{port: 80}]\n"))
	r, err := Resolve(lab, svcs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policy.Parse([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: from-y, namespace: x}\nspec:\n  podSelector: {}\n  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}]}]\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pm, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{Lab: lab, Resolved: r, Policy: pm}
	f, _ := r.Frontend("x/np")
	client, _ := lab.Endpoint("y/a")
	for _, px := range []kind.Proxy{kind.ProxyEBPF, kind.ProxyIPTables} {
		lab.Services.Proxy = px
		for _, h := range lab.Hosts {
			e, err := m.ExpectNodePort(client, f, h.Name)
			if err != nil {
				t.Fatal(err)
			}
			judgedHere := client.Host // where a backend is judged on the client
			if px != kind.ProxyEBPF {
				judgedHere = h.Name
			}
			for _, c := range e.Choices {
				ep, _ := lab.Endpoint(c.Backend.Endpoint)
				if ep.Namespace != "x" {
					continue // not isolated
				}
				if want := ep.Host == judgedHere; c.Reachable != want {
					t.Errorf("%s, node port on %s: %s reachable=%v, want %v: %s", px, h.Name, ep.ID(), c.Reachable, want, c.Why)
				}
				want, _ := MasqAddress(lab, lab.Host(client.Host))
				if px != kind.ProxyEBPF {
					want, _ = SourceTowards(lab, h.Name, ep.Host)
				}
				if c.Source != want || !strings.Contains(c.Why, "judged on") {
					t.Errorf("%s, node port on %s: %s sees %s, want %s (%s)", px, h.Name, ep.ID(), c.Source, want, c.Why)
				}
			}
		}
	}
	if a, err := SourceTowards(lab, "flip", "flap"); err != nil || !lab.TransitCIDR.Contains(a) {
		t.Errorf("flip towards flap: %s %v, want an address of the transit range %s", a, err, lab.TransitCIDR)
	}
}
