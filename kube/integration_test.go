package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/internal/k8stest"
)

// buildCnlab builds the cnlab binary the run streams into the agent pods
// (a test binary would run tests there).
func buildCnlab(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cnlab")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/cnlab").CombinedOutput()
	if err != nil {
		t.Fatalf("build cnlab: %v\n%s", err, out)
	}
	return bin
}

// TestSmokeRunOnControlPlane runs experiments/k8s-smoke.yaml's quick
// block through the kubernetes backend against a real control plane on
// this machine (etcd, kube-apiserver, controller-manager, scheduler) with
// two kwok nodes, whose pods' commands run as local processes on their
// 127.10.0.x addresses. kwok has no CNI: the policies are applied (and
// validated by the API server) but never enforced, which the enforcement
// probe must report — the run measures anyway with --unenforced.
func TestSmokeRunOnControlPlane(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 2})
	bin := buildCnlab(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(bin, "run", "../experiments/k8s-smoke.yaml", "--quick", "--backend", "kubernetes",
		"--kubeconfig", c.Kubeconfig, "--out", out, "--lab", "xp-smoke", "--unenforced", "--enforce-timeout", "3s", "--image", "example.org/unused:1")
	cmd.Env = append(os.Environ(), "CNLAB_TEST_MAIN=") // the real binary, whatever the environment
	o, err := cmd.CombinedOutput()
	t.Logf("cnlab run:\n%s", o)
	if err != nil {
		t.Fatalf("cnlab run --backend kubernetes: %v", err)
	}
	r, err := experiment.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Check(); len(bad) > 0 {
		t.Errorf("results.json does not validate:\n%s", strings.Join(bad, "\n"))
	}
	if r.Backend != experiment.BackendKubernetes || r.Status != experiment.StatusComplete || r.Cluster == nil || len(r.Cluster.Nodes) != 2 || r.Cluster.CNI != "unknown" {
		t.Fatalf("run: backend %q, status %q, cluster %+v; want kubernetes, complete, 2 nodes, CNI unknown (kwok has none)", r.Backend, r.Status, r.Cluster)
	}
	if len(r.Points) != 12 {
		t.Errorf("%d points, want 12", len(r.Points))
	}
	for _, p := range r.Points {
		if p.Status != experiment.PointDone || len(p.Samples) != 1 {
			t.Errorf("%s %s %s: %s, %d samples (%s)", p.ID, p.Params.Text(), p.Workload.Kind, p.Status, len(p.Samples), p.Error)
			continue
		}
		same := p.Nodes["client"] == p.Nodes["server"]
		if p.Nodes["client"] == "" || same != (p.Params.Placement == experiment.PlacementSameNode) {
			t.Errorf("%s %s: nodes %v", p.ID, p.Params.Placement, p.Nodes)
		}
		m := p.Samples[0].Metrics
		switch p.Workload.Kind {
		case experiment.TCPRR:
			if m["transactions_per_s"] <= 0 || m["latency_p50_us"] <= 0 {
				t.Errorf("%s tcp-rr: %v", p.ID, m)
			}
		case experiment.TCPStream:
			if m["throughput_gbps"] <= 0 {
				t.Errorf("%s tcp-stream: %v", p.ID, m)
			}
		case experiment.Ping:
			if m["first_rtt_us"] <= 0 || m["loss_pct"] != 0 {
				t.Errorf("%s ping: %v", p.ID, m)
			}
		}
		if _, ok := m["system_cpu_pct"]; !ok {
			t.Errorf("%s: no system_cpu_pct", p.ID)
		}
	}
	// Every deployment applied its policies: with none, the probe saw the
	// client connect (enforced: the model allows everything); with 2,
	// the server's isolation was not enforced (no CNI), and said so.
	var none, two int
	for _, b := range r.Builds {
		if len(b.Nodes) != 2 {
			t.Errorf("build %s: nodes %v", b.Key, b.Nodes)
		}
		for _, a := range b.PolicyApply {
			switch {
			case a.Error != "":
				t.Errorf("build %s: apply %+v", b.Key, a)
			case a.Policies == 0 && a.Enforced != nil && *a.Enforced:
				none++
			case a.Policies == 2 && a.Enforced != nil && !*a.Enforced && strings.Contains(a.Mismatch, "port 20001/tcp connects, the policies deny it"):
				two++
			default:
				t.Errorf("build %s: apply %+v", b.Key, a)
			}
		}
	}
	if none == 0 || two == 0 {
		t.Errorf("policy applies: %d enforced without policies, %d unenforced with 2; want some of each", none, two)
	}
	if !strings.Contains(string(o), "does not enforce the policies") {
		t.Error("the run did not warn that the cluster does not enforce the policies")
	}
	// Nothing of the run is left on the cluster, nor as a process here.
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	nss, err := cl.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: RunLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(nss.Items) != 0 {
		t.Errorf("%d namespaces of the run left", len(nss.Items))
	}
	time.Sleep(200 * time.Millisecond)
	if out, err := exec.Command("pgrep", "-af", "iperf3 -s|cnlab-[0-9a-f]+/cnlab").Output(); err == nil {
		t.Errorf("processes started in the pods are left:\n%s", out)
	}
	// cnlab down finds nothing left.
	down := exec.Command(bin, "down", "--backend", "kubernetes", "--all", "--kubeconfig", c.Kubeconfig)
	if o, err := down.CombinedOutput(); err != nil || !strings.Contains(string(o), "nothing to do") {
		t.Errorf("cnlab down --backend kubernetes --all: %v\n%s", err, o)
	}
}
