package service

import (
	"os"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
)

// TestL7PortThroughService: a Service in front of an L7 port (the thesis's
// GET /public on x/a, on host flip) is reachable as real connections find
// (TestServiceProbeHTTP, docs/l7.md): from the other host on every
// datapath; from the backend's host on eBPF with bpf host routing only;
// never by the backend itself (hairpin). A choice the limit removes says
// why and points at the docs.
func TestL7PortThroughService(t *testing.T) {
	lab := policyLab(t)
	svcs, _ := parse(t, svc("web", "  clusterIP: 10.96.0.80\n  selector: {app: web}\n  ports: [{port: 80}]\n"))
	r, err := Resolve(lab, svcs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("../examples/policies/l7-get-public.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policy.Parse(text, "l7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pm, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{Lab: lab, Resolved: r, Policy: pm}
	f, err := r.Frontend("x/web")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		datapath kind.Kind
		routing  string
		reach    map[string]bool // client -> x/a reachable
	}{
		{kind.IPTables, "", map[string]bool{"x/b": true, "x/c": false, "x/a": false}},
		{kind.NFTables, "", map[string]bool{"x/b": true, "x/c": false, "x/a": false}},
		{kind.EBPF, kind.HostRoutingBPF, map[string]bool{"x/b": true, "x/c": true, "x/a": false}},
		{kind.EBPF, kind.HostRoutingLegacy, map[string]bool{"x/b": true, "x/c": false, "x/a": false}},
	} {
		lab.Datapath, lab.EBPF.HostRouting = c.datapath, c.routing
		for from, want := range c.reach {
			client, _ := lab.Endpoint(from)
			e := m.Expect(client, f)
			var ch *Choice
			for i := range e.Choices {
				if e.Choices[i].Backend.Endpoint == "x/a" {
					ch = &e.Choices[i]
				}
			}
			if ch == nil {
				t.Fatalf("%s %s: no choice x/a in %+v", c.datapath, from, e)
			}
			if !ch.Proxied && want {
				t.Errorf("%s %s %s: x/a not proxied: %s", c.datapath, c.routing, from, ch.Why)
			}
			if ch.Reachable != want || (len(e.Expected) == 1) != want || e.MayFail == want {
				t.Errorf("%s %s %s: reachable %v (expected %v, mayFail %v), want %v: %s", c.datapath, c.routing, from, ch.Reachable, e.Expected, e.MayFail, want, ch.Why)
			}
			if !want && !strings.Contains(ch.Why, "docs/limits.md") {
				t.Errorf("%s %s %s: the reason does not point at the docs: %s", c.datapath, c.routing, from, ch.Why)
			}
		}
	}
}
