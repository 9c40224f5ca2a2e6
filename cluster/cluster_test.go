package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// tools returns the Kubernetes binaries' directory, or skips the test
// (fails it under CI=true) when they are not built.
func tools(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := k8stest.RequireBin(t)
	for _, n := range needs {
		testutil.RequireTool(t, n.bin, n.pkg)
	}
	return dir
}

// up brings a cluster up for one test and takes it down at its end (the
// test checks Down itself where it matters).
func up(t *testing.T, o Options) *Info {
	t.Helper()
	o.Tools = tools(t)
	o.Progress = func(s string) { t.Log(s) }
	start := time.Now()
	in, err := Up(context.Background(), o)
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	t.Logf("cluster %s up in %v", o.Name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(layout{o.Name}.logs(), "*.log"))
			for _, l := range logs {
				t.Logf("%s:\n%s", l, tail(l, 12))
			}
		}
		if err := Down(o.Name, nil); err != nil && !errors.As(err, new(*NotFoundError)) {
			t.Errorf("cluster down %s: %v", o.Name, err)
		}
	})
	return in
}

// kubectl runs the built kubectl against cluster in.
func kubectl(t *testing.T, in *Info, stdin string, args ...string) (string, error) {
	t.Helper()
	dir, _ := k8stest.Bin()
	cmd := exec.Command(filepath.Join(dir, "kubectl"), append([]string{"--kubeconfig", in.Kubeconfig, "--cache-dir", filepath.Join(in.Dir, "kubectl-cache")}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustKubectl(t *testing.T, in *Info, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, in, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// workload is two HTTP servers a and b (busybox httpd on 8080, answering
// hello-NAME) and Service svc-b in front of b, pods pinned to nodes.
func workload(in *Info, nodeA, nodeB string) string {
	pod := func(name, node string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: %s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %s
    command: ["/bin/sh", "-c", "mkdir -p /www && echo hello-%s > /www/index.html && httpd -p 8080 -h /www && exec sleep infinity"]
---
`, name, name, node, in.AgentImage, name)
	}
	return pod("a", nodeA) + pod("b", nodeB) + `apiVersion: v1
kind: Service
metadata: {name: svc-b}
spec:
  selector: {app: b}
  ports: [{port: 80, targetPort: 8080}]
`
}

// get fetches http://addr/ from pod a: the body, or the error.
func get(t *testing.T, in *Info, addr string) (string, error) {
	t.Helper()
	out, err := kubectl(t, in, "", "exec", "a", "--", "sh", "-c", fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 %s | tail -n 1", strings.Replace(addr, ":", " ", 1)))
	out = strings.TrimSpace(out)
	if err == nil && !strings.HasPrefix(out, "hello-") {
		err = fmt.Errorf("no answer: %q", out)
	}
	return out, err
}

// svcBAnswers waits until pod a gets hello-b through Service svc-b (what
// says through which proxy) and returns svc-b's cluster IP.
func svcBAnswers(t *testing.T, in *Info, what string) string {
	t.Helper()
	ip := strings.TrimSpace(mustKubectl(t, in, "", "get", "svc", "svc-b", "-o", "jsonpath={.spec.clusterIP}"))
	eventually(t, what, func() error {
		out, err := get(t, in, ip+":80")
		if err != nil || out != "hello-b" {
			return fmt.Errorf("%q, %v", out, err)
		}
		return nil
	})
	return ip
}

// eventually retries f for up to 20 s (kube-proxy and kube-router apply
// changes within a second or two).
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func sysctls(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, k := range append(slices.Sorted(maps.Keys(kubeletSysctls)), ciliumSysctls...) {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s ", k, strings.TrimSpace(string(v)))
	}
	return b.String()
}

func TestOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Name: "Bad_Name"}, `cluster name "Bad_Name": 1 to 16 lower-case letters`},
		{Options{Name: "a-very-long-cluster-name"}, "1 to 16"},
		{Options{Nodes: 3}, "--nodes 3: 1 or 2"},
		{Options{Proxy: "ipvs"}, `--proxy "ipvs": one of iptables, nftables, cilium`},
		{Options{CNI: "flannel"}, `--cni "flannel": one of bridge, cilium`},
		{Options{Policy: "calico"}, `--policy "calico": one of none, kube-router, cilium`},
		{Options{Policy: "cilium"}, "--policy cilium needs --cni cilium"},
		{Options{Proxy: "cilium"}, "--proxy cilium needs --cni cilium"},
		{Options{CNI: "cilium", Policy: "kube-router"}, "two policy engines"},
	} {
		_, err := Up(context.Background(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	err := Prerequisites(Options{Tools: "/nonexistent", Policy: "kube-router"})
	for _, want := range []string{"kubelet in /nonexistent (scripts/k8s-tools.sh builds it)", "kube-router in /nonexistent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Prerequisites: %v, want %q", err, want)
		}
	}
	if Exists("t-never") {
		t.Fatal("t-never exists")
	}
	if err := Down("t-never", nil); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("Down of a cluster that is not there: %v, want NotFoundError", err)
	}
}

// TestUpDown brings a one-node cluster up with kube-proxy (iptables) and
// kube-router's firewall, and checks with real pods and connections that
// a Service answers through the real kube-proxy, that a NetworkPolicy is
// enforced by the real kube-router, that nothing of it reaches the
// host's rules or sysctls, and that down removes it all.
func TestUpDown(t *testing.T) {
	tools(t)
	hostSysctls := sysctls(t)
	hostRules := testutil.Snapshot()
	in := up(t, Options{Name: "t-updown", Policy: "kube-router"})
	if len(in.Nodes) != 1 || in.Nodes[0].Name != "t-updown-node1" || !in.Nodes[0].Ready || in.AgentImage == "" {
		t.Fatalf("cluster: %+v", in)
	}
	if _, err := Up(context.Background(), Options{Name: "t-updown", Tools: tools(t)}); err == nil || !strings.Contains(err.Error(), "already up") {
		t.Errorf("second up: %v, want already up", err)
	}
	st, err := Status(context.Background(), "t-updown")
	if err != nil || !st.Nodes[0].Ready {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if got := sysctls(t); got != hostSysctls {
		t.Errorf("host sysctls changed with the cluster up:\n%s\nwas\n%s", got, hostSysctls)
	}
	node := in.Nodes[0].Name
	mustKubectl(t, in, workload(in, node, node), "apply", "-f", "-")
	mustKubectl(t, in, "", "wait", "--for=condition=Ready", "pod/a", "pod/b", "--timeout=60s")
	ip := svcBAnswers(t, in, "a to svc-b through kube-proxy")
	// kube-proxy's rules are in the node, not on the host.
	out, err := exec.Command("ip", "netns", "exec", in.Nodes[0].Netns, "iptables-save").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "KUBE-SERVICES") {
		t.Errorf("no KUBE-SERVICES chain in the node: %v\n%.500s", err, out)
	}
	mustKubectl(t, in, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-b}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
`, "apply", "-f", "-")
	eventually(t, "kube-router enforcing deny-b", func() error {
		if out, err := get(t, in, ip+":80"); err == nil {
			return fmt.Errorf("still answers: %q", out)
		}
		return nil
	})
	mustKubectl(t, in, "", "delete", "networkpolicy", "deny-b")
	eventually(t, "traffic back after deny-b is deleted", func() error {
		_, err := get(t, in, ip+":80")
		return err
	})
	if s := testutil.Snapshot(); !sameHostRules(s, hostRules) {
		t.Errorf("the host's rules changed with the cluster up:\n%s\nwas\n%s", s, hostRules)
	}
	start := time.Now()
	if err := Down("t-updown", nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster down in %v", time.Since(start).Round(time.Millisecond))
	if Exists("t-updown") {
		t.Error("cluster still exists after down")
	}
}

// sameHostRules compares the host's netns list, nftables and ipsets of
// two snapshots (the cluster's own namespaces, processes and files left
// out).
func sameHostRules(a, b string) bool {
	pick := func(s string) string {
		var keep []string
		on := false
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(line, "# ") {
				on = line == "# nft list ruleset" || line == "# ipset list -n (root namespace)"
			}
			if on {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
	return pick(a) == pick(b)
}

// TestTwoNodes brings two nodes up with kube-proxy in nftables mode and
// checks a Service whose backend is on the other node.
func TestTwoNodes(t *testing.T) {
	in := up(t, Options{Name: "t-two", Nodes: 2, Proxy: "nftables"})
	if len(in.Nodes) != 2 || !in.Nodes[1].Ready {
		t.Fatalf("nodes: %+v", in.Nodes)
	}
	mustKubectl(t, in, workload(in, in.Nodes[0].Name, in.Nodes[1].Name), "apply", "-f", "-")
	mustKubectl(t, in, "", "wait", "--for=condition=Ready", "pod/a", "pod/b", "--timeout=60s")
	bIP := strings.TrimSpace(mustKubectl(t, in, "", "get", "pod", "b", "-o", "jsonpath={.status.podIP}"))
	if !strings.HasPrefix(bIP, "10.244.1.") {
		t.Errorf("pod b on node 2 has %s, want one of 10.244.1.0/24", bIP)
	}
	svcBAnswers(t, in, "a (node 1) to svc-b (node 2) through kube-proxy's nftables")
	for _, n := range in.Nodes {
		out, err := exec.Command("ip", "netns", "exec", n.Netns, "nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "service-") {
			t.Errorf("node %s: no kube-proxy table with services: %v\n%.300s", n.Name, err, out)
		}
	}
}

// TestCilium brings two nodes up with the real Cilium as the CNI and as
// kube-proxy's replacement, and checks with real pods on both nodes that a
// Service answers across nodes through Cilium's eBPF (no kube-proxy runs),
// that a NetworkPolicy and a CiliumNetworkPolicy are enforced, that the
// host's sysctls (Cilium's three machine-wide ones too) and rules stay as
// they were, and (with TestMain's snapshot) that down leaves nothing.
func TestCilium(t *testing.T) {
	dir := tools(t)
	cil := k8stest.RequireCilium(t)
	testutil.RequireTool(t, clangBin.bin, clangBin.pkg)
	hostSysctls := sysctls(t)
	hostRules := testutil.Snapshot()
	in := up(t, Options{Name: "t-cil", Nodes: 2, CNI: "cilium", Proxy: "cilium", Tools: dir, Cilium: cil})
	if in.CNI != "cilium" || in.Proxy != "cilium" || in.Policy != "cilium" || len(in.Nodes) != 2 {
		t.Fatalf("cluster: %+v", in)
	}
	mustKubectl(t, in, workload(in, in.Nodes[0].Name, in.Nodes[1].Name), "apply", "-f", "-")
	mustKubectl(t, in, "", "wait", "--for=condition=Ready", "pod/a", "pod/b", "--timeout=60s")
	bIP := strings.TrimSpace(mustKubectl(t, in, "", "get", "pod", "b", "-o", "jsonpath={.status.podIP}"))
	if !strings.HasPrefix(bIP, "10.244.1.") {
		t.Errorf("pod b on node 2 has %s, want one of node 2's pod CIDR 10.244.1.0/24 (Cilium's IPAM from the Node)", bIP)
	}
	ip := svcBAnswers(t, in, "a (node 1) to svc-b (node 2) through Cilium's kube-proxy replacement")
	for _, n := range in.Nodes {
		out, _ := exec.Command("ip", "netns", "exec", n.Netns, "iptables-save").CombinedOutput()
		if strings.Contains(string(out), "KUBE-SERVICES") {
			t.Errorf("node %s has kube-proxy's chains: no kube-proxy should run", n.Name)
		}
		out, err := exec.Command("ip", "-n", n.Netns, "link", "show", "cilium_host").CombinedOutput()
		if err != nil {
			t.Errorf("node %s: no cilium_host: %v %s", n.Name, err, out)
		}
	}
	if got := sysctls(t); got != hostSysctls {
		t.Errorf("host sysctls changed with Cilium up:\n%s\nwas\n%s", got, hostSysctls)
	}
	for _, c := range []struct{ name, kind, doc string }{
		{"deny-b", "networkpolicy", `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-b}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
`},
		{"deny-a-to-b", "ciliumnetworkpolicy", `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny-a-to-b}
spec:
  endpointSelector: {matchLabels: {app: b}}
  ingress: [{fromEntities: [all]}]
  ingressDeny: [{fromEndpoints: [{matchLabels: {app: a}}]}]
`},
	} {
		mustKubectl(t, in, c.doc, "apply", "-f", "-")
		eventually(t, "Cilium enforcing "+c.name, func() error {
			if out, err := get(t, in, ip+":80"); err == nil {
				return fmt.Errorf("still answers: %q", out)
			}
			return nil
		})
		mustKubectl(t, in, "", "delete", c.kind, c.name)
		eventually(t, "traffic back after "+c.name+" is deleted", func() error {
			_, err := get(t, in, bIP+":8080")
			return err
		})
	}
	if s := testutil.Snapshot(); !sameHostRules(s, hostRules) {
		t.Errorf("the host's rules changed with Cilium up:\n%s\nwas\n%s", s, hostRules)
	}
	if err := Down("t-cil", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ciliumRun); err == nil {
		t.Errorf("%s left after down", ciliumRun)
	}
}

var (
	cnlabOnce sync.Once
	cnlabBin  string
	cnlabErr  error
)

// cnlab builds the cnlab binary once per test binary.
func cnlab(t *testing.T) string {
	t.Helper()
	cnlabOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cnlab-cluster-test-")
		if err != nil {
			cnlabErr = err
			return
		}
		cnlabBin = filepath.Join(dir, "cnlab")
		if out, err := exec.Command("go", "build", "-o", cnlabBin, "../cmd/cnlab").CombinedOutput(); err != nil {
			cnlabErr = fmt.Errorf("build cnlab: %v\n%s", err, out)
		}
	})
	if cnlabErr != nil {
		t.Fatal(cnlabErr)
	}
	return cnlabBin
}

// TestKilledUpLeavesNothing kills `cnlab cluster up` with SIGKILL at
// several moments of its bring-up (and once after it), and checks that
// cluster down then leaves the machine as it was.
func TestKilledUpLeavesNothing(t *testing.T) {
	dir := tools(t)
	bin := cnlab(t)
	defer os.RemoveAll(filepath.Dir(bin))
	before := testutil.Snapshot()
	// A failure below must not leave the cluster to the next packages'
	// kernel checks.
	t.Cleanup(func() {
		if Exists("t-k9") {
			if err := Down("t-k9", nil); err != nil {
				t.Errorf("cleanup: down t-k9: %v", err)
			}
		}
	})
	for _, after := range []time.Duration{200 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond, 3500 * time.Millisecond, 30 * time.Second} {
		cmd := exec.Command(bin, "cluster", "up", "--name", "t-k9", "--policy", "kube-router", "--tools", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Logf("after %v: up had ended (%v)", after, err)
		case <-time.After(after):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
		if !Exists("t-k9") {
			// Killed before it made anything (a busy machine starts the
			// binary slowly): nothing to take down, and nothing may be left.
			t.Logf("after %v: nothing of the cluster exists yet", after)
		} else if err := Down("t-k9", nil); err != nil {
			locks, _ := os.ReadFile("/proc/locks")
			var st syscall.Stat_t
			_ = syscall.Stat(lockPath("t-k9"), &st)
			t.Fatalf("after %v: down: %v\n(lock file inode %d; /proc/locks:\n%s)", after, err, st.Ino, locks)
		}
		after2 := testutil.Snapshot()
		for try := 0; try < 20 && after2 != before; try++ {
			time.Sleep(100 * time.Millisecond)
			after2 = testutil.Snapshot()
		}
		if after2 != before {
			t.Fatalf("killed after %v, then down: the machine changed\n--- before\n%s\n--- after\n%s", after, before, after2)
		}
		if n, _ := nodeNetns("t-k9"); len(n) > 0 {
			t.Fatalf("namespaces left: %v", n)
		}
	}
}
