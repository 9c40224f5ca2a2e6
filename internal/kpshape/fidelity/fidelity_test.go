package fidelity_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// fidelityLab is the cnlab side: one host whose pod CIDR is the cluster
// node's, one endpoint (no Service selects it).
const fidelityLab = `name: %s
hosts:
  - {name: t-fid-node1, podCIDR: 10.244.0.0/24}
services: {cidr: 10.96.0.0/16}
endpoints:
  - {name: c1, host: t-fid-node1, labels: {app: client}}
`

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
// kpshape.FixtureServices, waits until kube-proxy programmed every one of them,
// and returns the node's rules.
func realRules(t *testing.T, tools, name, mode string) kpshape.Listings {
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
	kubectl.Stdin = strings.NewReader(kpshape.FixtureServices)
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	ns := in.Nodes[0].Netns
	var d kpshape.Listings
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if mode == "iptables" {
			if d.NAT, err = run(ns, "iptables-save", "-t", "nat"); err == nil {
				d.Filter, err = run(ns, "iptables-save", "-t", "filter")
			}
		} else {
			d.NFT, err = run(ns, "nft", "list", "table", "ip", "kube-proxy")
		}
		if err == nil && programmed(mode, d) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy (%s) did not program every Service in 30 s (%v):\n%s%s%s", mode, err, d.NAT, d.Filter, d.NFT)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// One more sync period, so that a partial sync is not what we read.
	time.Sleep(1500 * time.Millisecond)
	if mode == "iptables" {
		d.NAT, _ = run(ns, "iptables-save", "-t", "nat")
		d.Filter, _ = run(ns, "iptables-save", "-t", "filter")
	} else {
		d.NFT, _ = run(ns, "nft", "list", "table", "ip", "kube-proxy")
	}
	return d
}

// programmed reports whether kube-proxy's rules serve every Service as
// its slices say: a dispatch rule for each Service port with endpoints
// (kube-proxy writes it once their slice is in), the no-endpoints reject
// for the one without, both node ports.
func programmed(mode string, d kpshape.Listings) bool {
	var s kpshape.Shape
	var err error
	if mode == "iptables" {
		s, err = kpshape.ParseIPTables(d.NAT, d.Filter)
	} else {
		s, err = kpshape.ParseNFT(d.NFT)
	}
	if err != nil {
		return false
	}
	for _, f := range kpshape.FixtureFrontends {
		want := f + " dispatch"
		if strings.HasPrefix(f, noEndpoints) {
			want = f + " no endpoints"
		}
		if _, ok := s[want]; !ok {
			return false
		}
	}
	return strings.Contains(d.NAT+d.NFT, "30080") && strings.Contains(d.NAT+d.NFT, "30081")
}

// noEndpoints is the cluster IP of the Service without endpoints.
const noEndpoints = "10.96.0.14:"

// labRules brings a cnlab lab up with proxy mode, applies
// kpshape.FixtureServices and returns its host's rules.
func labRules(t *testing.T, name, mode string) kpshape.Listings {
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
	svcs, sls, err := service.Parse([]byte(kpshape.FixtureServices), "fidelity")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
		t.Fatal(err)
	}
	h := spec.Hosts[0]
	var d kpshape.Listings
	if mode == "iptables" {
		_, save, _ := spec.IPTables.Tools()
		if d.NAT, err = run(h.Netns, save, "-t", "nat"); err == nil {
			d.Filter, err = run(h.Netns, save, "-t", "filter")
		}
	} else {
		d.NFT, err = run(h.Netns, "nft", "list", "table", "ip", "cnlab-svc")
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// keep writes d to $KPSHAPE_DUMPS/side-mode.* when set (to read the rules
// of a run).
func keep(t *testing.T, side, mode string, d kpshape.Listings) {
	dir := os.Getenv("KPSHAPE_DUMPS")
	if dir == "" {
		return
	}
	for ext, s := range map[string]string{"nat": d.NAT, "filter": d.Filter, "nft": d.NFT} {
		if s != "" {
			if err := os.WriteFile(filepath.Join(dir, side+"-"+mode+"."+ext), []byte(s), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestFidelity brings a one-node cluster up with the real kube-proxy in
// iptables mode, then in nftables mode, creates kpshape.FixtureServices, and
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
			res, err := kpshape.Compare(mode, real, mine, kpshape.FixtureFrontends)
			if err != nil {
				t.Fatal(err)
			}
			report(t, mode, res)
		})
	}
}

// report fails t on a difference that no known one accounts for, on a
// known one that found nothing (the difference is gone: take it off the
// list and docs/services.md), and on a Service missing from either side.
func report(t *testing.T, mode string, res *kpshape.Result) {
	t.Helper()
	for _, m := range res.Missing {
		t.Errorf("%s: %s", mode, m)
	}
	for _, name := range res.Stale {
		t.Errorf("%s: the known difference %q is gone: take it off the list (internal/kpshape/known.go) and docs/services.md", mode, name)
	}
	for _, d := range res.Left {
		t.Errorf("%s: a difference no known one accounts for:\n%s", mode, d)
	}
	if !res.OK() {
		t.Logf("%s: every difference before the known ones are taken out:\n%s", mode, strings.Join(res.Before, "\n"))
	}
}
