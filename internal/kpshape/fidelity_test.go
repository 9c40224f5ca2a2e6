package kpshape_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/cluster"
	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/internal/kpshape"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// fidelityServices are the Services both sides get, as one YAML file
// applied unchanged by kubectl and by cnlab: selectorless Services with
// fixed cluster IPs and node ports, and EndpointSlices written out, so
// that no pod is needed and both sides see the same addresses. Endpoints
// are addresses of the cluster's pod CIDR that no pod has: kube-proxy
// and cnlab program them all the same.
const fidelityServices = `apiVersion: v1
kind: Service
metadata: {name: one, namespace: default}
spec:
  clusterIP: 10.96.0.11
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: one-1, namespace: default, labels: {kubernetes.io/service-name: one}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.11], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: three, namespace: default}
spec:
  clusterIP: 10.96.0.12
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: three-1, namespace: default, labels: {kubernetes.io/service-name: three}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.21], nodeName: t-fid-node1}
- {addresses: [10.244.0.22], nodeName: t-fid-node1}
- {addresses: [10.244.0.23], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: twoports, namespace: default}
spec:
  clusterIP: 10.96.0.13
  ports: [{name: a, port: 80, targetPort: 8080}, {name: b, port: 81, targetPort: 8081}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: twoports-1, namespace: default, labels: {kubernetes.io/service-name: twoports}}
addressType: IPv4
ports: [{name: a, port: 8080, protocol: TCP}, {name: b, port: 8081, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.31], nodeName: t-fid-node1}
- {addresses: [10.244.0.32], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: none, namespace: default}
spec:
  clusterIP: 10.96.0.14
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  clusterIP: 10.96.0.15
  ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-1, namespace: default, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: UDP}]
endpoints:
- {addresses: [10.244.0.51], nodeName: t-fid-node1}
- {addresses: [10.244.0.52], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: aff, namespace: default}
spec:
  clusterIP: 10.96.0.16
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 30}}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: aff-1, namespace: default, labels: {kubernetes.io/service-name: aff}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.61], nodeName: t-fid-node1}
- {addresses: [10.244.0.62], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: np, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.0.17
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: np-1, namespace: default, labels: {kubernetes.io/service-name: np}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.71], nodeName: t-fid-node1}
- {addresses: [10.244.0.72], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: npl, namespace: default}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  clusterIP: 10.96.0.18
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: npl-1, namespace: default, labels: {kubernetes.io/service-name: npl}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.81], nodeName: t-fid-node1}
- {addresses: [10.244.1.82], nodeName: t-fid-node2}
---
apiVersion: v1
kind: Service
metadata: {name: itl, namespace: default}
spec:
  internalTrafficPolicy: Local
  clusterIP: 10.96.0.19
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: itl-1, namespace: default, labels: {kubernetes.io/service-name: itl}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.91], nodeName: t-fid-node1}
- {addresses: [10.244.1.92], nodeName: t-fid-node2}
`

// fidelityLab is the cnlab side: one host whose pod CIDR is the cluster
// node's, one endpoint (no Service selects it).
const fidelityLab = `name: %s
hosts:
  - {name: t-fid-node1, podCIDR: 10.244.0.0/24}
services: {cidr: 10.96.0.0/16}
endpoints:
  - {name: c1, host: t-fid-node1, labels: {app: client}}
`

// clusterIPs are the cluster IPs of fidelityServices: what the
// comparison looks at (a cluster has its kubernetes Service too).
var clusterIPs = []string{"10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14", "10.96.0.15", "10.96.0.16", "10.96.0.17", "10.96.0.18", "10.96.0.19"}

// dumps is the rules of one side: iptables-save of nat and filter, or
// nft list table.
type dumps struct{ nat, filter, nft string }

func run(ns string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func k8sTools(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := k8stest.Bin()
	if err != nil {
		if testutil.InCI() {
			t.Fatalf("Kubernetes binaries not built (%v) and CI=true: run scripts/k8s-tools.sh", err)
		}
		t.Skipf("skipping: Kubernetes binaries not built (%v); run scripts/k8s-tools.sh", err)
	}
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	testutil.RequireTool(t, "containerd", "containerd")
	return dir
}

// realRules brings a one-node cluster up with kube-proxy in mode, creates
// fidelityServices, waits until kube-proxy programmed every one of them,
// and returns the node's rules.
func realRules(t *testing.T, tools, name, mode string) dumps {
	t.Helper()
	start := time.Now()
	in, err := cluster.Up(context.Background(), cluster.Options{Name: name, Nodes: 1, Proxy: mode, Tools: tools, Progress: func(s string) { t.Log(s) }})
	defer func() {
		if err := cluster.Down(name, nil); err != nil && !errors.As(err, new(*cluster.NotFoundError)) {
			t.Errorf("cluster down %s: %v", name, err)
		}
	}()
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	t.Logf("cluster %s up in %v", name, time.Since(start).Round(time.Millisecond))
	kubectl := exec.Command(filepath.Join(tools, "kubectl"), "--kubeconfig", in.Kubeconfig, "--cache-dir", filepath.Join(in.Dir, "kubectl-cache"), "apply", "-f", "-")
	kubectl.Stdin = strings.NewReader(fidelityServices)
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	ns := in.Nodes[0].Netns
	var d dumps
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if mode == "iptables" {
			if d.nat, err = run(ns, "iptables-save", "-t", "nat"); err == nil {
				d.filter, err = run(ns, "iptables-save", "-t", "filter")
			}
		} else {
			d.nft, err = run(ns, "nft", "list", "table", "ip", "kube-proxy")
		}
		if err == nil && programmed(mode, d) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy (%s) did not program every Service in 30 s (%v):\n%s%s%s", mode, err, d.nat, d.filter, d.nft)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// One more sync period, so that a partial sync is not what we read.
	time.Sleep(1500 * time.Millisecond)
	if mode == "iptables" {
		d.nat, _ = run(ns, "iptables-save", "-t", "nat")
		d.filter, _ = run(ns, "iptables-save", "-t", "filter")
	} else {
		d.nft, _ = run(ns, "nft", "list", "table", "ip", "kube-proxy")
	}
	return d
}

// programmed reports whether kube-proxy's rules name every Service.
func programmed(mode string, d dumps) bool {
	all := d.nat + d.filter + d.nft
	for _, ip := range clusterIPs {
		if !strings.Contains(all, ip) {
			return false
		}
	}
	return strings.Contains(all, "30080") && strings.Contains(all, "30081")
}

// labRules brings a cnlab lab up with proxy mode, applies
// fidelityServices and returns its host's rules.
func labRules(t *testing.T, name, mode string) dumps {
	t.Helper()
	ctx := context.Background()
	spec, err := topology.Parse([]byte(fmt.Sprintf(fidelityLab, name)), "fidelity lab", topology.Overrides{Datapath: mode, Proxy: mode})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Up(ctx, spec, lab.UpOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := lab.Down(spec.Name, nil); err != nil && !errors.As(err, new(*topology.NotFoundError)) {
			t.Errorf("lab down: %v", err)
		}
	}()
	svcs, sls, err := service.Parse([]byte(fidelityServices), "fidelity")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
		t.Fatal(err)
	}
	h := spec.Hosts[0]
	var d dumps
	if mode == "iptables" {
		_, save, _ := spec.IPTables.Tools()
		if d.nat, err = run(h.Netns, save, "-t", "nat"); err == nil {
			d.filter, err = run(h.Netns, save, "-t", "filter")
		}
	} else {
		d.nft, err = run(h.Netns, "nft", "list", "table", "ip", "cnlab-svc")
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// keep writes d to $KPSHAPE_DUMPS/side-mode.* when set (to read the rules
// of a run).
func keep(t *testing.T, side, mode string, d dumps) {
	dir := os.Getenv("KPSHAPE_DUMPS")
	if dir == "" {
		return
	}
	for ext, s := range map[string]string{"nat": d.nat, "filter": d.filter, "nft": d.nft} {
		if s != "" {
			if err := os.WriteFile(filepath.Join(dir, side+"-"+mode+"."+ext), []byte(s), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
}

// frontends are the Service ports of fidelityServices, as shapes name
// them: both sides must show every one.
var frontends = []string{"10.96.0.11:80/tcp", "10.96.0.12:80/tcp", "10.96.0.13:80/tcp", "10.96.0.13:81/tcp", "10.96.0.14:80/tcp",
	"10.96.0.15:53/udp", "10.96.0.16:80/tcp", "10.96.0.17:80/tcp", "10.96.0.18:80/tcp", "10.96.0.19:80/tcp"}

// shapes parses both sides' rules of one mode.
func shapes(mode string, real, mine dumps) (kpshape.Shape, kpshape.Shape, []kpshape.Edit, error) {
	if mode == "iptables" {
		r, err := kpshape.ParseIPTables(real.nat, real.filter)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("kube-proxy's rules: %w", err)
		}
		m, err := kpshape.ParseIPTables(mine.nat, mine.filter)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cnlab's rules: %w", err)
		}
		return r.Only(frontends), m, kpshape.IPTablesKnown, nil
	}
	r, err := kpshape.ParseNFT(real.nft)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kube-proxy's table: %w", err)
	}
	m, err := kpshape.ParseNFT(mine.nft)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cnlab's table: %w", err)
	}
	return r.Only(frontends), m, kpshape.NFTKnown, nil
}

// compare fails t on a difference between the two sides' shapes that no
// known edit accounts for, on a known edit that found nothing (the
// difference is gone: take it off the list and docs/services.md), and on
// a frontend missing from either side.
func compare(t *testing.T, mode string, real, mine dumps) {
	t.Helper()
	r, m, known, err := shapes(mode, real, mine)
	if err != nil {
		t.Fatal(err)
	}
	for side, s := range map[string]kpshape.Shape{"kube-proxy": r, "cnlab": m} {
		if got := s.Frontends(); !slices.Equal(got, frontends) {
			t.Errorf("%s (%s): frontends %v, want %v", side, mode, got, frontends)
		}
	}
	stale, left := kpshape.Reconcile(r, m, known)
	for _, name := range stale {
		t.Errorf("%s: the known difference %q is gone: take it off the list (internal/kpshape/known.go) and docs/services.md", mode, name)
	}
	for _, d := range left {
		t.Errorf("%s: a difference no known one accounts for:\n%s", mode, d)
	}
	if t.Failed() {
		t.Logf("%s: every difference before the known ones are taken out:\n%s", mode, strings.Join(kpshape.Diff(r, m), "\n"))
	}
}

// TestFidelity brings a one-node cluster up with the real kube-proxy in
// iptables mode, then in nftables mode, creates fidelityServices, and
// compares the node's rules structurally with those cnlab's proxy of
// the same mode writes on a lab for the same Services: every difference
// must be a known one (kpshape.IPTablesKnown, kpshape.NFTKnown, listed in
// docs/services.md), and every known one must still be there.
// KPSHAPE_DUMPS=DIR keeps the four listings of each mode in DIR.
func TestFidelity(t *testing.T) {
	tools := k8sTools(t)
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			real := realRules(t, tools, "t-fid", mode)
			keep(t, "real", mode, real)
			mine := labRules(t, "t-fid", mode)
			keep(t, "cnlab", mode, mine)
			compare(t, mode, real, mine)
		})
	}
}
