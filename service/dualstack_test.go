package service

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

func loadLab(t *testing.T, file string) *topology.Spec {
	t.Helper()
	spec, err := topology.Load("../examples/"+file, topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// frontendsOf lists a Service's frontends as "VIP:port -> backends".
func frontendsOf(r *Resolved, key string) []string {
	var out []string
	for _, f := range r.Table.Frontends {
		if f.Service == key {
			var bs []string
			for _, b := range f.Backends {
				bs = append(bs, b.AddrPort().String())
			}
			out = append(out, fmt.Sprintf("%s:%d %s", f.VIP, f.Port, strings.Join(bs, ",")))
		}
	}
	return out
}

// TestFamilies checks ipFamilies and ipFamilyPolicy on dual-stack,
// IPv4-only and IPv6-only labs: the families each Service gets, its
// cluster IPs (each from its family's range), and its backends per
// family (the endpoints' addresses of that family).
func TestFamilies(t *testing.T) {
	dual, v4, v6 := loadLab(t, "dual-stack.yaml"), policyLab(t), loadLab(t, "ipv6-only.yaml")
	web := "  selector: {app: web}\n  ports: [{port: 80}]\n"
	cases := []struct {
		name string
		lab  *topology.Spec
		body string
		want string // the frontends, "|"-separated
	}{
		{"dual default single stack", dual, web, "10.96.0.2:80 10.0.192.10:80"},
		{"dual prefer", dual, "  ipFamilyPolicy: PreferDualStack\n" + web, "10.96.0.2:80 10.0.192.10:80|fd00:96::2:80 [fd00:0:192::10]:80"},
		{"dual require v6 first", dual, "  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv6, IPv4]\n" + web, "fd00:96::2:80 [fd00:0:192::10]:80|10.96.0.2:80 10.0.192.10:80"},
		{"dual single v6", dual, "  ipFamilies: [IPv6]\n" + web, "fd00:96::2:80 [fd00:0:192::10]:80"},
		{"dual given both", dual, "  ipFamilyPolicy: PreferDualStack\n  clusterIPs: [10.96.0.7, 'fd00:96::7']\n" + web, "10.96.0.7:80 10.0.192.10:80|fd00:96::7:80 [fd00:0:192::10]:80"},
		{"dual given v6 single", dual, "  clusterIP: 'fd00:96::9'\n" + web, "fd00:96::9:80 [fd00:0:192::10]:80"},
		{"v4 prefer", v4, "  ipFamilyPolicy: PreferDualStack\n" + web, "10.96.0.2:80 10.0.192.10:80"},
		{"v4 prefer both listed", v4, "  ipFamilyPolicy: PreferDualStack\n  ipFamilies: [IPv4, IPv6]\n" + web, "10.96.0.2:80 10.0.192.10:80"},
		{"v6 default", v6, web, "fd00:96::2:80 [fd00:0:192::10]:80"},
		{"v6 prefer", v6, "  ipFamilyPolicy: PreferDualStack\n" + web, "fd00:96::2:80 [fd00:0:192::10]:80"},
	}
	for _, c := range cases {
		svcs, _ := parse(t, svc("web", c.body))
		r, err := Resolve(c.lab, svcs, nil, nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := strings.Join(frontendsOf(r, "x/web"), "|"); got != c.want {
			t.Errorf("%s: frontends\n  %s\nwant\n  %s", c.name, got, c.want)
		}
	}
}

func TestFamilyErrors(t *testing.T) {
	dual, v4, v6 := loadLab(t, "dual-stack.yaml"), policyLab(t), loadLab(t, "ipv6-only.yaml")
	web := "  selector: {app: web}\n  ports: [{port: 80}]\n"
	cases := []struct {
		name string
		lab  *topology.Spec
		body string
		want string
	}{
		{"require on v4", v4, "  ipFamilyPolicy: RequireDualStack\n" + web, "test.yaml: document 1 (Service x/web): spec.ipFamilyPolicy: RequireDualStack, but lab policy-lab has IPv4 only"},
		{"require on v6", v6, "  ipFamilyPolicy: RequireDualStack\n" + web, "spec.ipFamilyPolicy: RequireDualStack, but lab ipv6-only has IPv6 only"},
		{"v6 on v4", v4, "  ipFamilies: [IPv6]\n" + web, "spec.ipFamilies[0]: IPv6, but lab policy-lab has IPv4 only"},
		{"v4 on v6", v6, "  ipFamilies: [IPv4]\n" + web, "spec.ipFamilies[0]: IPv4, but lab ipv6-only has IPv6 only"},
		{"v6 address on v4", v4, "  clusterIP: 'fd00:96::5'\n" + web, "spec.clusterIP: IPv6, but lab policy-lab has IPv4 only"},
		{"second address on v4", v4, "  ipFamilyPolicy: PreferDualStack\n  clusterIPs: [10.96.0.5, 'fd00:96::5']\n" + web, "spec.clusterIPs[1]: fd00:96::5 is an IPv6 address, but the Service has no IPv6 cluster IP on this lab"},
		{"v6 outside", dual, "  ipFamilies: [IPv6]\n  clusterIP: 'fd00:97::5'\n" + web, "spec.clusterIP: fd00:97::5 is outside the lab's service CIDR fd00:96::/108"},
		{"v6 second outside", dual, "  ipFamilyPolicy: PreferDualStack\n  clusterIPs: [10.96.0.5, 'fd00:97::5']\n" + web, "spec.clusterIPs[1]: fd00:97::5 is outside the lab's service CIDR fd00:96::/108"},
		{"v6 first of range", dual, "  ipFamilies: [IPv6]\n  clusterIP: 'fd00:96::'\n" + web, "is the first or last address of the service CIDR fd00:96::/108"},
	}
	for _, c := range cases {
		svcs, _ := parse(t, svc("web", c.body))
		_, err := Resolve(c.lab, svcs, nil, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v\nwant it to contain %q", c.name, err, c.want)
		}
	}
}

// TestDualStackAllocationIsStable: each family's address is kept from one
// apply to the next, and a second Service asking for a held IPv6 address
// is refused naming the holder.
func TestDualStackAllocationIsStable(t *testing.T) {
	lab := loadLab(t, "dual-stack.yaml")
	p := "  ipFamilyPolicy: PreferDualStack\n  ports: [{port: 80}]\n"
	first, _ := parse(t, svc("a", p)+svc("b", p))
	r1, err := Resolve(lab, first, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r1.VIPs["x/b"]); got != "[10.96.0.3 fd00:96::3]" {
		t.Fatalf("x/b: %s", got)
	}
	second, _ := parse(t, svc("b", p))
	r2, err := Resolve(lab, second, nil, &r1.Allocations)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r2.VIPs["x/b"]); got != "[10.96.0.3 fd00:96::3]" {
		t.Errorf("x/b moved to %s", got)
	}
	// b's IPv6 family first now: each family keeps its address.
	third, _ := parse(t, svc("b", "  ipFamilies: [IPv6, IPv4]\n"+p))
	r3, err := Resolve(lab, third, nil, &r2.Allocations)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r3.VIPs["x/b"]); got != "[fd00:96::3 10.96.0.3]" {
		t.Errorf("x/b with IPv6 first: %s", got)
	}
	clash, _ := parse(t, svc("b", p)+svc("c", "  ipFamilies: [IPv6]\n  clusterIP: 'fd00:96::3'\n  ports: [{port: 80}]\n"))
	if _, err := Resolve(lab, clash, nil, &r1.Allocations); err == nil || !strings.Contains(err.Error(), "fd00:96::3 is already the cluster IP of Service x/b") {
		t.Errorf("clash: %v", err)
	}
}

// TestSlicesPerFamily: user-written slices serve their family's cluster
// IP only; an IPv6 slice's address in the IPv6 service range is refused.
func TestSlicesPerFamily(t *testing.T) {
	lab := loadLab(t, "dual-stack.yaml")
	text := svc("m", "  ipFamilyPolicy: PreferDualStack\n  ports: [{name: http, port: 80}]\n") +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: m-4, namespace: x, labels: {kubernetes.io/service-name: m}}\naddressType: IPv4\nendpoints: [{addresses: [10.0.192.10]}]\nports: [{name: http, port: 8080}]\n---\n" +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: m-6, namespace: x, labels: {kubernetes.io/service-name: m}}\naddressType: IPv6\nendpoints: [{addresses: ['fd00:0:191::11']}]\nports: [{name: http, port: 8081}]\n"
	svcs, sls := parse(t, text)
	r, err := Resolve(lab, svcs, sls, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "10.96.0.2:80 10.0.192.10:8080|fd00:96::2:80 [fd00:0:191::11]:8081"
	if got := strings.Join(frontendsOf(r, "x/m"), "|"); got != want {
		t.Errorf("frontends %s, want %s", got, want)
	}
	for _, f := range r.Table.Frontends {
		for _, b := range f.Backends {
			if b.Endpoint == "" {
				t.Errorf("%s: backend %s not known as a lab endpoint", f.VIP, b.IP)
			}
		}
	}
	bad := strings.Replace(text, "fd00:0:191::11", "fd00:96::9", 1)
	svcs, sls = parse(t, bad)
	if _, err := Resolve(lab, svcs, sls, nil); err == nil || !strings.Contains(err.Error(), "endpoints[0].addresses[0]: fd00:96::9 is in the lab's service CIDR fd00:96::/108") {
		t.Errorf("slice in the service range: %v", err)
	}
}

// TestDualStackModel: the model's frontends per family, a client's
// expectation on each (same backends, addressed per family), node ports
// on each family's host address, and FrontendOf.
func TestDualStackModel(t *testing.T) {
	lab := loadLab(t, "dual-stack.yaml")
	svcs, _ := parse(t, svc("web", "  type: NodePort\n  ipFamilyPolicy: PreferDualStack\n  selector: {app: web}\n  ports: [{port: 80}]\n"))
	r, err := Resolve(lab, svcs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := policy.NewModel(lab, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{Lab: lab, Resolved: r, Policy: pm}
	f4, err := r.Frontend("x/web")
	if err != nil || f4.Family() != 4 {
		t.Fatalf("Frontend: %v %v", f4, err)
	}
	f6, err := r.FrontendOf("x/web", 6)
	if err != nil || f6.VIP.String() != "fd00:96::2" || f6.NodePort != f4.NodePort {
		t.Fatalf("FrontendOf 6: %+v %v", f6, err)
	}
	client, _ := lab.Endpoint("x/b")
	e := m.Expect(client, f6)
	if got := fmt.Sprint(e.Expected); got != "[x/a]" || e.Target.String() != "[fd00:96::2]:80" {
		t.Errorf("IPv6 expectation %v target %s", e.Expected, e.Target)
	}
	np, err := m.ExpectNodePort(client, f6, "flip")
	if err != nil {
		t.Fatal(err)
	}
	if np.Target.Addr().String() != "fd00:0:192::1" {
		t.Errorf("IPv6 node port target %s, want flip's bridge fd00:0:192::1", np.Target)
	}
	for _, c := range np.Choices {
		if c.Source.IsValid() && !c.Source.Is6() {
			t.Errorf("IPv6 node port: backend sees %s", c.Source)
		}
	}
	if tr := m.Trace(client, f6); !strings.Contains(tr, "(fd00:96::2]:80/tcp") && !strings.Contains(tr, "([fd00:96::2]:80/tcp") {
		t.Errorf("trace: %s", tr)
	}
	v4only, _ := parse(t, svc("one", "  selector: {app: web}\n  ports: [{port: 80}]\n"))
	r1, err := Resolve(lab, v4only, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r1.FrontendOf("x/one", 6); err == nil || !strings.Contains(err.Error(), "Service x/one has no IPv6 cluster IP") {
		t.Errorf("FrontendOf a single-stack Service: %v", err)
	}
}

// TestMasqAddressOf: the masquerade address is the last free address of
// the host's pod prefix of a family (IPv4: below the broadcast address),
// skipping endpoints' addresses. (The very last /64 of the IPv6 space,
// where the search would start past the end, is multicast: topology
// refuses it as a pod prefix.)
func TestMasqAddressOf(t *testing.T) {
	for _, c := range []struct {
		cidrs, ips string
		fam        int
		want       string
	}{
		{"10.0.1.0/24, 'fd00:0:1::/64'", "10.0.1.2, 'fd00:0:1::2'", 4, "10.0.1.254"},
		{"10.0.1.0/24, 'fd00:0:1::/64'", "10.0.1.254, 'fd00:0:1::ffff:ffff:ffff:ffff'", 4, "10.0.1.253"},
		{"10.0.1.0/24, 'fd00:0:1::/64'", "10.0.1.2, 'fd00:0:1::2'", 6, "fd00:0:1:0:ffff:ffff:ffff:ffff"},
		{"10.0.1.0/24, 'fd00:0:1::/64'", "10.0.1.2, 'fd00:0:1::ffff:ffff:ffff:ffff'", 6, "fd00:0:1:0:ffff:ffff:ffff:fffe"},
	} {
		spec, err := topology.Parse([]byte(fmt.Sprintf("name: m\nhosts: [{name: h, podCIDRs: [%s]}]\nendpoints: [{name: a, host: h, ip: [%s]}]\n", c.cidrs, c.ips)), "m.yaml", topology.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := MasqAddressOf(spec, spec.Host("h"), c.fam)
		if err != nil || got.String() != c.want {
			t.Errorf("%s, endpoint %s, IPv%d: %v %v, want %s", c.cidrs, c.ips, c.fam, got, err, c.want)
		}
	}
}

// TestDualStackPolicyPerFamily: a connection through a frontend is
// judged over the client's and the backend's addresses of the
// frontend's family, so an ipBlock of one family allows the Service over
// that family only (it judged both by the primary addresses).
func TestDualStackPolicyPerFamily(t *testing.T) {
	lab := loadLab(t, "dual-stack.yaml")
	svcs, _ := parse(t, svc("web", "  ipFamilyPolicy: PreferDualStack\n  selector: {app: web}\n  ports: [{port: 80}]\n"))
	r, err := Resolve(lab, svcs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := lab.Endpoint("x/b") // on flap: 10.0.191.11, fd00:0:191::11
	for _, c := range []struct {
		block string
		want4 string
		want6 string
	}{
		{"10.0.191.0/24", "[x/a]", "[]"},
		{"fd00:0:191::/64", "[]", "[x/a]"},
	} {
		pols, err := policy.Parse([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: from-block, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{ipBlock: {cidr: '"+c.block+"'}}]}]\n"), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		pm, err := policy.NewModel(lab, pols)
		if err != nil {
			t.Fatal(err)
		}
		m := &Model{Lab: lab, Resolved: r, Policy: pm}
		for fam, want := range map[int]string{4: c.want4, 6: c.want6} {
			f, err := r.FrontendOf("x/web", fam)
			if err != nil {
				t.Fatal(err)
			}
			e := m.Expect(client, f)
			if got := fmt.Sprint(e.Expected); got != want || e.MayFail != (want == "[]") {
				t.Errorf("ipBlock %s, IPv%d frontend: expected %s (may fail %v), want %s", c.block, fam, got, e.MayFail, want)
			}
			backend, _ := lab.Endpoint("x/a")
			if v := HTTPVerdict(pm, client, backend, f, 80, policy.Request{Method: "GET", Path: "/"}); v.Allowed != (want == "[x/a]") || v.Family != fam {
				t.Errorf("ipBlock %s, IPv%d frontend: HTTP verdict allowed %v (family %d)", c.block, fam, v.Allowed, v.Family)
			}
		}
	}
}
