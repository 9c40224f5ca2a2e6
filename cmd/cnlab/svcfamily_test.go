package main

import (
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestServiceProbeFamilies probes a dual-stack Service of the dual-stack
// example lab (eBPF datapath and proxy) by family: --family 6 probes the
// IPv6 cluster IP and says so in its JSON, --family both gives one view
// per family, --node-port probes the host's address of the family, the
// text output without --family has a table per family, and a
// single-stack Service has no IPv6 frontend to probe. `service trace`
// picks its families the same way. Under an IPv4 ipBlock the IPv6
// frontend is denied, as the model says. status shows every family's
// addresses.
func TestServiceProbeFamilies(t *testing.T) {
	testutil.RequireRoot(t)
	const lab = "t-svcfam"
	svc := tempWriter(t, t.TempDir())("web.yaml", `apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  type: NodePort
  ipFamilyPolicy: PreferDualStack
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: web4, namespace: x}
spec:
  selector: {app: web}
  ports: [{port: 80}]
`)
	if _, stderr, code := runCLI(t, "up", "-f", filepath.Join("..", "..", "examples", "dual-stack.yaml"), "--name", lab, "--datapath", "ebpf", "--service-proxy", "ebpf"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", lab) })
	if _, stderr, code := runCLI(t, "service", "apply", lab, "-f", svc); code != 0 {
		t.Fatalf("service apply: %s", stderr)
	}
	// status gives every family's addresses (JSON: ips, podCIDRs and
	// gateways beside the primary family's ip, podCIDR and gateway).
	stdout, _, _ := runCLI(t, "status", lab, "-o", "json")
	var st struct {
		Hosts []struct {
			Name, PodCIDR string
			PodCIDRs      []string
			Gateways      []string
		}
		Endpoints []struct {
			ID, IP string
			IPs    []string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || len(st.Hosts) != 2 || len(st.Endpoints) != 9 {
		t.Fatalf("status -o json: %v: %s", err, stdout)
	}
	if h := st.Hosts[0]; h.Name != "flip" || h.PodCIDR != "10.0.192.0/24" || strings.Join(h.PodCIDRs, " ") != "10.0.192.0/24 fd00:0:192::/64" || strings.Join(h.Gateways, " ") != "10.0.192.1 fd00:0:192::1" {
		t.Errorf("status -o json host: %+v", h)
	}
	if ep := st.Endpoints[0]; ep.ID != "x/a" || ep.IP != "10.0.192.10" || strings.Join(ep.IPs, " ") != "10.0.192.10 fd00:0:192::10" {
		t.Errorf("status -o json endpoint: %+v", ep)
	}
	if stdout, _, _ = runCLI(t, "status", lab); !strings.Contains(stdout, "10.0.192.10,fd00:0:192::10") || !strings.Contains(stdout, "10.0.192.0/24,fd00:0:192::/64") {
		t.Errorf("status: no IPv6 addresses:\n%s", stdout)
	}
	type view struct {
		Service, VIP, Target string
		Family, NodePort     int
		Results              []struct {
			From       string
			Backends   map[string]int
			Failed     int
			Mismatches []string
		}
	}
	// check reads one view: its family, its address's family, and every
	// client reaching x/a only.
	check := func(what string, v view, fam int) {
		t.Helper()
		vip, err := netip.ParseAddr(v.VIP)
		if v.Family != fam || err != nil || vip.Is4() != (fam == 4) || v.Service != "x/web" {
			t.Errorf("%s: family %d, vip %q, service %q; want family %d", what, v.Family, v.VIP, v.Service, fam)
		}
		if len(v.Results) != 9 {
			t.Fatalf("%s: %d results, want 9 clients", what, len(v.Results))
		}
		for _, r := range v.Results {
			if len(r.Mismatches) > 0 || r.Failed != 0 || len(r.Backends) != 1 || r.Backends["x/a"] == 0 {
				t.Errorf("%s: %s: backends %v, %d failed, mismatches %q", what, r.From, r.Backends, r.Failed, r.Mismatches)
			}
		}
	}
	stdout, stderr, code := runCLI(t, "probe", lab, "--service", "x/web", "--family", "6", "--expect", "-o", "json")
	var v view
	if err := json.Unmarshal([]byte(stdout), &v); code != 0 || err != nil {
		t.Fatalf("probe --family 6: exit %d, %v: %s %s", code, err, stdout, stderr)
	}
	check("--family 6", v, 6)

	stdout, stderr, code = runCLI(t, "probe", lab, "--service", "x/web", "--family", "both", "--expect", "-o", "json")
	var vs []view
	if err := json.Unmarshal([]byte(stdout), &vs); code != 0 || err != nil || len(vs) != 2 {
		t.Fatalf("probe --family both: exit %d, %v, %d views: %s %s", code, err, len(vs), stdout, stderr)
	}
	check("--family both, first", vs[0], 4)
	check("--family both, second", vs[1], 6)

	stdout, stderr, code = runCLI(t, "probe", lab, "--service", "x/web", "--family", "6", "--node-port", "flap", "--from", "x/b", "--expect", "-o", "json")
	v = view{}
	if err := json.Unmarshal([]byte(stdout), &v); code != 0 || err != nil {
		t.Fatalf("probe --family 6 --node-port: exit %d, %v: %s %s", code, err, stdout, stderr)
	}
	if target, err := netip.ParseAddrPort(v.Target); err != nil || v.Family != 6 || !target.Addr().Is6() || int(target.Port()) != v.NodePort || v.NodePort == 0 {
		t.Errorf("--family 6 --node-port flap: target %q, node port %d, family %d", v.Target, v.NodePort, v.Family)
	}

	// Text, no --family: a table per family, each titled with its address.
	stdout, stderr, code = runCLI(t, "probe", lab, "--service", "x/web", "--from", "y/c", "--expect")
	if code != 0 || strings.Count(stdout, "FROM") != 2 || !strings.Contains(stdout, "x/web (10.96.") || !strings.Contains(stdout, "x/web ([fd00:96::") ||
		!strings.Contains(stderr, "cnlab: IPv4: all 1 client match the service model") || !strings.Contains(stderr, "cnlab: IPv6: all 1 client match the service model") {
		t.Errorf("probe --service, text: exit %d\n%s%s", code, stdout, stderr)
	}
	// JSON, no --family: the primary family's one view, as before dual-stack.
	stdout, stderr, _ = runCLI(t, "probe", lab, "--service", "x/web", "--from", "y/c", "-o", "json")
	v = view{}
	if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.Family != 4 || !strings.Contains(stderr, "--family both probes both") {
		t.Errorf("probe --service -o json: family %d, %v: %s %s", v.Family, err, stdout, stderr)
	}
	// service trace goes by the same choice of families.
	stdout, stderr, code = runCLI(t, "service", "trace", lab, "x/web", "--from", "y/c", "--family", "both", "-o", "json")
	var xs []json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &xs); code != 0 || err != nil || len(xs) != 2 {
		t.Errorf("service trace --family both: exit %d, %v, %d: %s %s", code, err, len(xs), stdout, stderr)
	}

	// An ipBlock of one family: the Service reaches x/a from flap over
	// IPv4 only, and the model judges each family by its addresses.
	pol := tempWriter(t, t.TempDir())("pol.yaml", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: from-flap-v4, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.191.0/24}}]}]\n")
	if _, stderr, code := runCLI(t, "policy", "apply", lab, "-f", pol); code != 0 {
		t.Fatalf("policy apply: %s", stderr)
	}
	stdout, stderr, code = runCLI(t, "probe", lab, "--service", "x/web", "--family", "both", "--from", "x/b", "--connections", "5", "--timeout", "300ms", "--expect", "-o", "json")
	vs = nil
	if err := json.Unmarshal([]byte(stdout), &vs); code != 0 || err != nil || len(vs) != 2 {
		t.Fatalf("probe --family both under an IPv4 ipBlock: exit %d, %v: %s %s", code, err, stdout, stderr)
	}
	for _, v := range vs {
		r := v.Results[0]
		if reach := r.Backends["x/a"] > 0; reach != (v.Family == 4) || len(r.Mismatches) > 0 {
			t.Errorf("IPv%d under an IPv4 ipBlock: x/b reached %v, %d failed, mismatches %q", v.Family, r.Backends, r.Failed, r.Mismatches)
		}
	}

	// policy trace, over the primary family, points at the other.
	stdout, stderr, code = runCLI(t, "policy", "trace", lab, "--from", "x/b", "--to", "x/a", "--port", "80")
	if code != 0 || !strings.Contains(stdout, "over IPv4: ALLOWED") || !strings.Contains(stdout, "note: over IPv6 the verdict differs (cnlab policy trace ... --family 6)") {
		t.Errorf("policy trace under an IPv4 ipBlock: exit %d: %s %s", code, stdout, stderr)
	}
	// policy trace between addresses of two families names them.
	_, stderr, code = runCLI(t, "policy", "trace", lab, "--from", "fd00:0:191::11", "--to", "10.0.192.10", "--port", "80")
	if code != 2 || !strings.Contains(stderr, "--from fd00:0:191::11 is IPv6, --to 10.0.192.10 is IPv4: a connection is within one family") {
		t.Errorf("policy trace across families: exit %d: %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "probe", lab, "--service", "x/web4", "--family", "6")
	if code != 2 || !strings.Contains(stderr, "Service x/web4 has no IPv6 cluster IP") {
		t.Errorf("probe a single-stack Service over IPv6: exit %d: %s", code, stderr)
	}
}
