package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/internal/testutil"
)

// serviceProbe is what the tests read of `cnlab probe --service -o json`.
type serviceProbe struct {
	Lab, Service, VIP, Protocol string
	Port                        int
	Results                     []struct {
		From       string
		Backends   map[string]int
		Failed     int
		Expected   []string
		Mismatches []string
	}
}

// TestServiceCLI is the user's path through Services on both proxies: up
// the example lab (two hosts; wire, then VXLAN), apply the example
// Services, prove with `probe --service --expect` that every client
// reaches every backend evenly (affinity pinning UDP), then a policy that
// allows the backends' target port to the clients only, which the probe
// must find enforced after translation, then bad input that changes
// nothing, delete, and down leaving nothing.
func TestServiceCLI(t *testing.T) {
	testutil.RequireRoot(t)
	examples := filepath.Join("..", "..", "examples")
	labFile := filepath.Join(examples, "services", "lab.yaml")
	web := filepath.Join(examples, "services", "web.yaml")
	dir := t.TempDir()
	write := tempWriter(t, dir)
	pol := write("pol.yaml", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web-from-clients, namespace: default}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: client}}}]\n    ports: [{port: 8080}]\n")
	vxlan, err := os.ReadFile(labFile)
	if err != nil {
		t.Fatal(err)
	}
	vxlanFile := write("vxlan.yaml", strings.Replace(string(vxlan), "kind: wire", "kind: vxlan", 1))
	for _, tc := range []struct{ name, file, datapath, proxy string }{
		{"t-svc-ipt", labFile, "iptables", "iptables"},
		{"t-svc-nft", vxlanFile, "nftables", "nftables"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.name
			if _, stderr, code := runCLI(t, "up", "-f", tc.file, "--name", name, "--datapath", tc.datapath, "--service-proxy", tc.proxy); code != 0 {
				t.Fatalf("up: %s", stderr)
			}
			t.Cleanup(func() { runCLI(t, "down", name) })
			stdout, stderr, code := runCLI(t, "service", "apply", name, "-f", web)
			if code != 0 || !strings.Contains(stdout, "Service default/web created") || !strings.Contains(stdout, "3 service ports with 12 backends now served") {
				t.Fatalf("apply: %d %s %s", code, stdout, stderr)
			}
			stdout, _, _ = runCLI(t, "service", "apply", name, "-f", web)
			if !strings.Contains(stdout, "Service default/web unchanged") {
				t.Errorf("re-apply: %s", stdout)
			}
			probeAll := func(what string, wantReach bool) {
				t.Helper()
				for _, svc := range []string{"default/web:http", "default/web:metrics", "default/web-udp"} {
					stdout, stderr, code := runCLI(t, "probe", name, "--service", svc, "--expect", "--timeout", "300ms", "--alpha", "1e-6", "-o", "json")
					var pv serviceProbe
					if err := json.Unmarshal([]byte(stdout), &pv); err != nil {
						t.Fatalf("%s %s: %v: %s %s", what, svc, err, stdout, stderr)
					}
					if code != 0 {
						t.Errorf("%s: probe --service %s --expect: exit %d: %s", what, svc, code, stderr)
					}
					if pv.Lab != name || pv.Service != strings.Split(svc, ":")[0] || len(pv.Results) != 6 {
						t.Fatalf("%s %s: %+v", what, svc, pv)
					}
					for _, r := range pv.Results {
						client := strings.HasPrefix(r.From, "default/client")
						reached := len(r.Backends)
						switch {
						case wantReach && svc == "default/web-udp" && reached != 1:
							t.Errorf("%s %s from %s: affinity broken, %d backends answered", what, svc, r.From, reached)
						case wantReach && svc != "default/web-udp" && reached != 4:
							t.Errorf("%s %s from %s: %d of 4 backends answered: %v", what, svc, r.From, reached, r.Backends)
						case !wantReach && client && svc == "default/web:http" && (reached != 4 || r.Failed != 0):
							t.Errorf("%s %s from client %s: %v, %d failed", what, svc, r.From, r.Backends, r.Failed)
						case !wantReach && (!client || svc != "default/web:http") && (reached != 0 || len(r.Expected) != 0):
							t.Errorf("%s %s from %s: reached %v, expected %v; the policy denies it", what, svc, r.From, r.Backends, r.Expected)
						}
					}
				}
			}
			probeAll("no policy", true)
			// The policy allows TCP 8080 (web:http's target) to the
			// clients only: web:metrics (9100) and web-udp (UDP 5353) are
			// denied to everyone, and the backends calling web:http are
			// denied.
			if _, stderr, code := runCLI(t, "policy", "apply", name, "-f", pol); code != 0 {
				t.Fatal(stderr)
			}
			probeAll("with the policy", false)
			stdout, _, code = runCLI(t, "service", "trace", name, "--from", "client-2", "web:metrics")
			if code != 0 || !strings.Contains(stdout, "every connection fails") || !strings.Contains(stdout, "TCP/9100 (after translation)") {
				t.Errorf("trace: %d %s", code, stdout)
			}
			// show: the documented JSON and the kernel.
			stdout, _, code = runCLI(t, "service", "show", name, "-o", "json")
			var sv struct {
				Proxy     string
				Frontends []struct {
					Service, VIP string
					Backends     []json.RawMessage
				}
			}
			if code != 0 || json.Unmarshal([]byte(stdout), &sv) != nil || sv.Proxy != tc.proxy || len(sv.Frontends) != 3 || len(sv.Frontends[0].Backends) != 4 {
				t.Errorf("show -o json: %d %s", code, stdout)
			}
			stdout, _, code = runCLI(t, "service", "show", name, "--kernel")
			if code != 0 || !strings.Contains(stdout, "# host flip") || !strings.Contains(stdout, "10.96.0.2") {
				t.Errorf("show --kernel: %d %s", code, stdout)
			}
			// Bad input: one error naming the file and path; nothing changes.
			store := filepath.Join(rundir.Lab(name), "services.yaml")
			before, _ := os.ReadFile(store)
			bad := write("bad.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: LoadBalancer, ports: [{port: 80}]}\n")
			_, stderr, code = runCLI(t, "service", "apply", name, "-f", bad)
			if code != 2 || !strings.Contains(stderr, "bad.yaml: document 1 (Service default/web): spec.type: LoadBalancer is not supported") {
				t.Errorf("bad apply: exit %d: %s", code, stderr)
			}
			taken := write("taken.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: other}\nspec: {clusterIP: 10.96.0.2, ports: [{port: 80}]}\n")
			_, stderr, code = runCLI(t, "service", "apply", name, "-f", taken)
			if code != 2 || !strings.Contains(stderr, "spec.clusterIP: 10.96.0.2 is already the cluster IP of Service default/web") {
				t.Errorf("taken address: exit %d: %s", code, stderr)
			}
			if after, _ := os.ReadFile(store); string(after) != string(before) {
				t.Error("a refused apply changed the stored Services")
			}
			_, stderr, code = runCLI(t, "probe", name, "--service", "default/nope")
			if code == 0 || !strings.Contains(stderr, "no Service default/nope (Services: default/web, default/web-udp)") {
				t.Errorf("probe of a missing Service: %d %s", code, stderr)
			}
			// Delete one: its address goes, the other keeps its own.
			stdout, _, code = runCLI(t, "service", "delete", name, "default/web")
			if code != 0 || !strings.Contains(stdout, "Service default/web deleted") {
				t.Errorf("delete: %d %s", code, stdout)
			}
			stdout, _, _ = runCLI(t, "service", "show", name)
			if strings.Contains(stdout, "default/web:") || !strings.Contains(stdout, "default/web-udp  10.96.0.3:53/udp") {
				t.Errorf("show after delete:\n%s", stdout)
			}
			if _, stderr, code := runCLI(t, "down", name); code != 0 {
				t.Fatal(stderr)
			}
		})
	}
}

// TestServiceRefusals: a lab without a service proxy refuses Services
// with the reason, and the pairs cnlab cannot serve are refused at up.
func TestServiceRefusals(t *testing.T) {
	testutil.RequireRoot(t)
	web := filepath.Join("..", "..", "examples", "services", "web.yaml")
	labFile := filepath.Join("..", "..", "examples", "services", "lab.yaml")
	name := "t-svc-none"
	if _, stderr, code := runCLI(t, "up", "-f", labFile, "--name", name, "--service-proxy", "none"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", name) })
	_, stderr, code := runCLI(t, "service", "apply", name, "-f", web)
	if code == 0 || !strings.Contains(stderr, "lab t-svc-none has no service proxy (bring it up with --service-proxy iptables, nftables or ebpf") {
		t.Errorf("apply on a lab without a proxy: %d %s", code, stderr)
	}
	for _, tc := range []struct{ args, want string }{
		{"--service-proxy ipvs", "--service-proxy: service proxy \"ipvs\" is not available: this kernel has no IPVS"},
		{"--datapath ebpf --service-proxy iptables", "services.proxy: the iptables service proxy translates in netfilter's PREROUTING"},
		{"--datapath iptables --socket-lb", "--socket-lb: an option of the ebpf datapath, but the lab's datapath is iptables"},
		{"--datapath nftables --service-proxy ebpf", "services.proxy: the ebpf service proxy is the eBPF datapath's own programs: it needs the ebpf datapath"},
	} {
		args := append([]string{"up", "-f", labFile, "--name", "t-svc-bad"}, strings.Fields(tc.args)...)
		_, stderr, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("up %s: exit %d: %s", tc.args, code, stderr)
		}
	}
}
