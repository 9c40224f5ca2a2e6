package service

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

func policyLab(t *testing.T) *topology.Spec {
	t.Helper()
	spec, err := topology.Load("../examples/policy-lab.yaml", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func parse(t *testing.T, text string) ([]*Service, []*Slice) {
	t.Helper()
	svcs, sls, err := Parse([]byte(text), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return svcs, sls
}

func svc(name, body string) string {
	return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + ", namespace: x}\nspec:\n" + body + "---\n"
}

func backendIDs(bs []Backend) []string {
	var out []string
	for _, b := range bs {
		id := b.Endpoint
		if id == "" {
			id = b.IP.String()
		}
		out = append(out, id+":"+strconv.Itoa(int(b.Port)))
	}
	return out
}

// TestAllocationIsStable applies Services, adds one, removes one, and
// checks every Service keeps its cluster IP and node port.
func TestAllocationIsStable(t *testing.T) {
	lab := policyLab(t)
	first, _ := parse(t, svc("a", "  ports: [{port: 80}]\n")+svc("b", "  type: NodePort\n  ports: [{port: 80}]\n")+svc("c", "  ports: [{port: 80}]\n"))
	r1, err := Resolve(lab, first, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"x/a": "10.96.0.2", "x/b": "10.96.0.3", "x/c": "10.96.0.4"}
	for k, v := range want {
		if r1.VIP[k].String() != v {
			t.Errorf("%s got %s, want %s (the lowest free from the second address)", k, r1.VIP[k], v)
		}
	}
	if np := r1.Allocations.NodePorts["x/b/80/TCP"]; np != MinNodePort {
		t.Errorf("node port %d, want %d", np, MinNodePort)
	}
	// Remove a, add d and e (with a given address): b and c keep theirs;
	// d takes the lowest free (a's), e its own.
	second, _ := parse(t, svc("e", "  clusterIP: 10.96.0.3\n  ports: [{port: 80}]\n")+svc("b", "  type: NodePort\n  ports: [{port: 80}]\n")+svc("c", "  ports: [{port: 80}]\n")+svc("d", "  ports: [{port: 80}]\n"))
	// e asks for b's address: refused, naming both.
	if _, err := Resolve(lab, second, nil, &r1.Allocations); err == nil {
		t.Fatal("a second Service got x/b's address")
	}
	second[0].ClusterIP = "10.96.0.9"
	r2, err := Resolve(lab, second, nil, &r1.Allocations)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"x/b": "10.96.0.3", "x/c": "10.96.0.4", "x/d": "10.96.0.2", "x/e": "10.96.0.9"} {
		if r2.VIP[k].String() != v {
			t.Errorf("after the change %s got %s, want %s", k, r2.VIP[k], v)
		}
	}
	if np := r2.Allocations.NodePorts["x/b/80/TCP"]; np != MinNodePort {
		t.Errorf("node port moved to %d", np)
	}
	// Outside the CIDR, or its network address: refused.
	for _, ip := range []string{"10.97.0.1", "10.96.0.0", "10.96.255.255"} {
		bad, _ := parse(t, svc("f", "  clusterIP: "+ip+"\n  ports: [{port: 80}]\n"))
		if _, err := Resolve(lab, bad, nil, nil); err == nil || !strings.Contains(err.Error(), "spec.clusterIP") {
			t.Errorf("cluster IP %s: %v", ip, err)
		}
	}
}

// TestBackends checks the backends a Table gives: named target ports
// resolved per endpoint, manual slices with their conditions, the
// serving fallback, headless Services left out, internalTrafficPolicy.
func TestBackends(t *testing.T) {
	lab := policyLab(t)
	svcs, sls, err := ParseFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Resolve(lab, svcs, sls, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range r.Table.Frontends {
		got[f.Key()+" "+f.Protocol] = backendIDs(f.Backends)
	}
	want := map[string][]string{
		// app: web in x is x/a only; its named port serve-80-tcp is 80.
		"x/web:http tcp": {"x/a:80"},
		"x/web:dns udp":  {"x/a:81"},
		// pod: a in y is y/a.
		"y/np tcp": {"y/a:80"},
		// z/a is ready: only it (z/b serving and terminating is the
		// fallback when none is ready).
		"z/manual:http tcp": {"z/a:80"},
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: backends %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("frontends %v, want %d (the headless Service has none)", got, len(want))
	}
	// No ready endpoint: the serving ones (terminating included).
	sls[0].Endpoints[0].Ready = false
	r, _ = Resolve(lab, svcs, sls, nil)
	f, err := r.Frontend("z/manual")
	if err != nil {
		t.Fatal(err)
	}
	if ids := backendIDs(f.Backends); !slices.Equal(ids, []string{"z/b:80", "z/a:80"}) {
		t.Errorf("fallback backends %v, want the serving ones z/b, z/a (sorted by address)", ids)
	}
	// A named port that an endpoint does not declare: not a backend.
	lab.Endpoints[0].Ports = nil // x/a
	r, _ = Resolve(lab, svcs, sls, nil)
	if f, _ := r.Frontend("x/web:http"); len(f.Backends) != 0 {
		t.Errorf("x/a without port serve-80-tcp is still a backend: %v", backendIDs(f.Backends))
	}
	if _, err := r.Frontend("x/web"); err == nil || !strings.Contains(err.Error(), "several ports") {
		t.Errorf("ambiguous frontend: %v", err)
	}
	if _, err := r.Frontend("x/headless"); err == nil || !strings.Contains(err.Error(), "headless") {
		t.Errorf("headless frontend: %v", err)
	}
}

// TestModelJudgesTheBackend checks the oracle: policy is judged on the
// backend's port after translation, internalTrafficPolicy Local keeps a
// client to its host's backends, and hairpin and no-endpoint cases.
func TestModelJudgesTheBackend(t *testing.T) {
	lab := policyLab(t)
	svcs, _ := parse(t, svc("web", "  selector: {pod: b}\n  ports: [{port: 80, targetPort: 8080}]\n")+
		svc("local", "  selector: {}\n  internalTrafficPolicy: Local\n  ports: [{port: 80}]\n")+
		svc("all", "  selector: {ns-any: none}\n  ports: [{port: 80}]\n"))
	// x/local has no selector: a manual slice with x/a (flip) and x/b (flap).
	_, sls := parse(t, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: l, namespace: x, labels: {kubernetes.io/service-name: local}}\naddressType: IPv4\n"+
		"endpoints: [{addresses: [10.0.192.10], nodeName: flip}, {addresses: [10.0.191.11], nodeName: flap}, {addresses: [10.0.192.99]}]\nports: [{port: 80}]\n")
	r, err := Resolve(lab, svcs, sls, nil)
	if err != nil {
		t.Fatal(err)
	}
	// x/b may be reached on port 80 only: the Service maps 80 to 8080.
	pols, err := policy.Parse([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: b-80, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: b}}\n  ingress: [{ports: [{port: 80}]}]\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pm, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{Lab: lab, Resolved: r, Policy: pm}
	client, _ := lab.Endpoint("y/a")
	f, _ := r.Frontend("x/web")
	e := m.Expect(client, f)
	if len(e.Expected) != 0 || !e.MayFail || e.Refused || !strings.Contains(m.Trace(client, f), "policy denies y/a -> x/b TCP/8080") {
		t.Errorf("80->8080 with only 80 allowed: %+v\n%s", e, m.Trace(client, f))
	}
	// internalTrafficPolicy Local: a client on flap reaches x/b only; the
	// address no endpoint has is on no host.
	f, _ = r.Frontend("x/local")
	e = m.Expect(client, f) // y/a is on flap
	if !slices.Equal(e.Expected, []string{"x/b"}) || e.MayFail {
		t.Errorf("Local from flap: %+v", e)
	}
	c2, _ := lab.Endpoint("z/c") // on flip: x/a and the unknown address
	e = m.Expect(c2, f)
	if !slices.Equal(e.Expected, []string{"x/a"}) || e.MayFail {
		t.Errorf("Local from flip: %+v", e)
	}
	// Hairpin: x/a calling the Service it backs.
	self, _ := lab.Endpoint("x/a")
	e = m.Expect(self, f)
	if !slices.Equal(e.Expected, []string{"x/a"}) || !slices.ContainsFunc(e.Choices, func(c Choice) bool { return c.Hairpin }) {
		t.Errorf("hairpin: %+v", e)
	}
	// No backend: refused.
	f, _ = r.Frontend("x/all")
	if e := m.Expect(client, f); !e.Refused || len(e.Expected) != 0 {
		t.Errorf("no endpoints: %+v", e)
	}
	// x/local with a selector {} counts as no selector: only the slice.
	if f, _ := r.Frontend("x/local"); len(f.Backends) != 3 {
		t.Errorf("x/local backends %v, want the slice's three", backendIDs(f.Backends))
	}
}

// TestSliceErrors checks what Resolve refuses in slices.
func TestSliceErrors(t *testing.T) {
	lab := policyLab(t)
	svcs, _ := parse(t, svc("web", "  ports: [{port: 80}]\n"))
	for _, tc := range []struct{ slice, want string }{
		{"metadata: {name: s, namespace: x, labels: {kubernetes.io/service-name: nope}}\naddressType: IPv4\n", `kubernetes.io/service-name "nope" names no Service in namespace x`},
		{"metadata: {name: s, namespace: x, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [10.96.0.7]}]\n", "endpoints[0].addresses[0]: 10.96.0.7 is in the lab's service CIDR"},
	} {
		_, sls := parse(t, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"+tc.slice)
		if _, err := Resolve(lab, svcs, sls, nil); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "test.yaml: ") {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
