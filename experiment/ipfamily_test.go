package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// ipFamily expands to a point per family; both build the same lab, made
// dual-stack from a preset; the workloads connect to the server's address
// of the point's family; the line names the family; a value other than 4
// or 6, a topology file without the family and the kubernetes backend are
// refused.
func TestIPFamilyAxis(t *testing.T) {
	pts := parsePoints(t, "workloads: [{kind: tcp-rr}]\nmatrix: {topology: [multi-host], datapath: [ebpf], ipFamily: [4, 6]}\n", "x.yaml")
	if len(pts) != 2 || pts[0].Params.IPFamily != 4 || pts[1].Params.IPFamily != 6 {
		t.Fatalf("points: %+v", pts)
	}
	if labKey(pts[0].Params) != labKey(pts[1].Params) {
		t.Errorf("the families have labs of their own: %q, %q", labKey(pts[0].Params), labKey(pts[1].Params))
	}
	if pts[1].Params.Text() != "policies=0 ipFamily=6" {
		t.Errorf("text %q", pts[1].Params.Text())
	}
	s, err := Parse([]byte("workloads: [{kind: tcp-rr}]\nmatrix: {topology: [multi-host], ipFamily: [4, 6]}\n"), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pts {
		spec, err := s.labSpec(p.Params, "check")
		if err != nil {
			t.Fatal(err)
		}
		if fams := spec.Families(); len(fams) != 2 {
			t.Fatalf("lab families %v, want dual-stack", fams)
		}
		sv, err := spec.Endpoint("default/server")
		if err != nil {
			t.Fatal(err)
		}
		if a := serverAddr(sv, p.Params); topology.Family(a) != p.Params.IPFamily {
			t.Errorf("IPv%d point connects to %s", p.Params.IPFamily, a)
		}
	}
	// A point without the axis keeps its single-stack lab and its key.
	plain := parsePoints(t, "workloads: [{kind: tcp-rr}]\nmatrix: {topology: [multi-host], datapath: [ebpf]}\n", "x.yaml")
	if strings.Contains(labKey(plain[0].Params), "IPFamily") || labKey(plain[0].Params) == labKey(pts[0].Params) {
		t.Errorf("key without the axis: %q", labKey(plain[0].Params))
	}
	if spec, err := s.labSpec(plain[0].Params, "check"); err != nil || len(spec.Families()) != 1 {
		t.Errorf("lab without the axis: %v, %v", spec.Families(), err)
	}

	for _, c := range []struct{ text, want string }{
		{"matrix: {ipFamily: [5]}\n", "ipFamily[0]: 5: 4 or 6"},
		{"matrix: {topology: [v4.yaml], ipFamily: [6]}\n", "ipFamily: 6: topology v4.yaml has no IPv6 pod prefix"},
	} {
		dir := t.TempDir()
		v4 := "name: v4\nhosts: [{name: h, podCIDR: 10.0.192.0/24}]\nendpoints:\n  - {name: client, host: h, labels: {app: client}}\n  - {name: server, host: h, labels: {app: server}}\n"
		if err := os.WriteFile(filepath.Join(dir, "v4.yaml"), []byte(v4), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Parse([]byte("workloads: [{kind: tcp-rr}]\n"+c.text), filepath.Join(dir, "x.yaml"), false)
		if err == nil {
			_, err = s.Points()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", strings.TrimSpace(c.text), err, c.want)
		}
	}
	if _, err := ParseFor([]byte("workloads: [{kind: tcp-rr}]\nmatrix: {ipFamily: [6]}\n"), "x.yaml", false, results.BackendKubernetes); err == nil || !strings.Contains(err.Error(), "ipFamily") {
		t.Errorf("kubernetes backend: %v", err)
	}
}

// An IPv6 point's Services are IPv6 ones, fillers included, so that it
// measures the proxies' IPv6 tables; an IPv4 point's are as before.
func TestServiceTextFamily(t *testing.T) {
	p := results.Params{Services: 3, ServiceBackends: 2, IPFamily: 6}
	text := serviceText(p)
	svcs, sls, err := service.Parse([]byte(text), "generated")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if len(svcs) != 3 || len(sls) != 2 {
		t.Fatalf("%d Services, %d slices", len(svcs), len(sls))
	}
	if strings.Count(text, "ipFamilies: [IPv6]") != 3 || strings.Count(text, "addressType: IPv6") != 2 || strings.Contains(text, "198.18.") {
		t.Errorf("IPv6 point's Services:\n%s", text)
	}
	p.IPFamily = 4
	if v4 := serviceText(p); strings.Contains(v4, "IPv6") || v4 != serviceText(results.Params{Services: 3, ServiceBackends: 2}) {
		t.Errorf("IPv4 point's Services changed:\n%s", v4)
	}
}
