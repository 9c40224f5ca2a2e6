package kube

import (
	"bytes"
	"context"
	stdhtml "html"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnlab/cnlab/cluster"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/internal/testutil"
)

// localCluster brings a real cluster up on this machine (cnlab cluster
// up: real pods, kube-proxy, kube-router's firewall) for one test and
// takes it down at its end; skipped (failed under CI=true) without root
// or the binaries.
func localCluster(t *testing.T, o cluster.Options) *cluster.Info {
	t.Helper()
	testutil.RequireRoot(t)
	dir := k8stest.RequireBin(t)
	if o.CNI == "cilium" {
		o.Cilium = k8stest.RequireCilium(t)
	}
	if err := cluster.Prerequisites(cluster.Options{Tools: dir, Policy: o.Policy, CNI: o.CNI, Cilium: o.Cilium}); err != nil {
		if testutil.InCI() {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	o.Tools = dir
	start := time.Now()
	in, err := cluster.Up(context.Background(), o)
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	t.Logf("cluster %s up in %v", in.Name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := cluster.Down(in.Name, nil); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	return in
}

// TestSmokeRunOnLocalCluster runs experiments/k8s-smoke.yaml's quick block
// end to end on a real two-node cluster on this machine: agent pods in
// containerd, Services through the real kube-proxy, the generated
// NetworkPolicies enforced by kube-router's firewall and checked by the
// backend's enforcement probe (no --unenforced: a policy not enforced
// fails the point), the results directory and the report. Then a run
// killed with SIGKILL mid-measurement, and cnlab down --backend
// kubernetes, leave nothing of it on the cluster.
func TestSmokeRunOnLocalCluster(t *testing.T) {
	in := localCluster(t, cluster.Options{Name: "t-smoke", Nodes: 2, Policy: "kube-router"})
	bin := buildCnlab(t)
	smokeRun(t, bin, in, "bridge+kube-router", "iptables")
	killedRun(t, bin, in)
}

// TestSmokeRunOnLocalCilium runs the same quick block on two nodes with
// the real Cilium as CNI, policy engine and kube-proxy replacement: the
// generated NetworkPolicies enforced by Cilium's eBPF, Services through
// its load balancer.
func TestSmokeRunOnLocalCilium(t *testing.T) {
	in := localCluster(t, cluster.Options{Name: "t-smokecil", Nodes: 2, CNI: "cilium", Proxy: "cilium"})
	smokeRun(t, buildCnlab(t), in, "cilium", "replaced by cilium")
}

// smokeRun runs experiments/k8s-smoke.yaml's quick block on cluster in and
// checks its results: the cluster recorded (CNI and kube-proxy as
// wanted), every point measured, every policy apply seen enforced, the
// report naming the CNI.
func smokeRun(t *testing.T, bin string, in *cluster.Info, wantCNI, wantProxy string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(bin, "run", "../experiments/k8s-smoke.yaml", "--quick", "--backend", "kubernetes",
		"--kubeconfig", in.Kubeconfig, "--out", out, "--lab", "xp-real", "--report")
	cmd.Env = append(os.Environ(), "CNLAB_TEST_MAIN=")
	o, err := cmd.CombinedOutput()
	t.Logf("cnlab run:\n%s", o)
	if err != nil {
		t.Fatalf("cnlab run --backend kubernetes on the local cluster: %v", err)
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Check(); len(bad) > 0 {
		t.Errorf("results.json does not validate:\n%s", strings.Join(bad, "\n"))
	}
	if r.Cluster == nil || r.Cluster.CNI != wantCNI || r.Cluster.KubeProxy != wantProxy || len(r.Cluster.Nodes) != 2 ||
		!strings.HasPrefix(r.Cluster.Nodes[0].ContainerRuntime, "containerd://") {
		t.Fatalf("cluster recorded: %+v; want CNI %s, kube-proxy %s, 2 containerd nodes", r.Cluster, wantCNI, wantProxy)
	}
	checkSmokePoints(t, r)
	// Every apply, without policies and with 2, was seen enforced by the
	// probe's real connections: the policy engine isolates the server.
	applies := 0
	for _, b := range r.Builds {
		for _, a := range b.PolicyApply {
			applies++
			if a.Error != "" || a.Enforced == nil || !*a.Enforced {
				t.Errorf("build %s: apply of %d policies not enforced: %+v", b.Key, a.Policies, a)
			}
		}
	}
	if applies == 0 {
		t.Error("no policy apply recorded")
	}
	page, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdhtml.UnescapeString(string(page)), wantCNI) {
		t.Error("report.html does not name the cluster's CNI")
	}
}

// killedRun kills a run with SIGKILL in the middle and checks cnlab down
// --backend kubernetes removes what it left.
func killedRun(t *testing.T, bin string, in *cluster.Info) {
	t.Helper()

	// kill -9 in the middle of a run: its namespace stays until cnlab down
	// --backend kubernetes removes it; the cluster down of the cleanup then
	// leaves the machine as it was (TestMain compares).
	cs := clientFor(t, in.Kubeconfig)
	exp := filepath.Join(t.TempDir(), "long.yaml")
	if err := os.WriteFile(exp, []byte("name: long\nwarmup: 0s\nduration: 1s\nrepetitions: 50\nworkloads: [{kind: tcp-stream}]\nmatrix: {placement: [cross-node], network: [pod], policies: [2], policyMode: [no-match]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := exec.Command(bin, "run", exp, "--backend", "kubernetes", "--kubeconfig", in.Kubeconfig, "--out", filepath.Join(t.TempDir(), "long"), "--lab", "xp-k9")
	var b bytes.Buffer
	long.Stdout, long.Stderr = &b, &b
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(b.String(), "rep 3"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = long.Process.Kill()
			_ = long.Wait()
			t.Fatalf("the long run measured nothing in 90 s:\n%s", b.String())
		}
	}
	_ = long.Process.Kill()
	_ = long.Wait()
	ctx := context.Background()
	l, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: RunLabel + "=xp-k9"})
	if err != nil || len(l.Items) == 0 {
		t.Fatalf("after kill -9: namespaces of the run %v, %v; want them left behind", l, err)
	}
	o, err := exec.Command(bin, "down", "--backend", "kubernetes", "xp-k9", "--kubeconfig", in.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(o), "namespace cnlab-xp-k9-default deleted") {
		t.Errorf("cnlab down --backend kubernetes xp-k9: %v\n%s", err, o)
	}
	l, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: RunLabel})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("namespaces of runs left: %d, %v", len(l.Items), err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left on the cluster: %d, %v", len(pods.Items), err)
	}
}

func clientFor(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
