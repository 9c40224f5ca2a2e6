package kube

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// TestE2EOnRealCluster runs experiments/k8s-smoke.yaml's quick block on the
// cluster CNLAB_E2E_KUBECONFIG names (CNLAB_E2E_CONTEXT, CNLAB_E2E_IMAGE and
// CNLAB_E2E_NODES optional, as --context, --image and --nodes), and checks
// that every point was measured on a cluster that enforces the policies.
// It runs only when the kubeconfig is given, in CI too: no cluster is part
// of CI (docs/kubernetes.md, "A run on a real cluster").
func TestE2EOnRealCluster(t *testing.T) {
	kc := os.Getenv("CNLAB_E2E_KUBECONFIG")
	if kc == "" {
		t.Skip("CNLAB_E2E_KUBECONFIG is not set: no real cluster to run on (docs/kubernetes.md)")
	}
	bin := buildCnlab(t)
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"run", "../experiments/k8s-smoke.yaml", "--quick", "--backend", "kubernetes", "--kubeconfig", kc, "--out", out, "--report"}
	for env, flag := range map[string]string{"CNLAB_E2E_CONTEXT": "--context", "CNLAB_E2E_IMAGE": "--image", "CNLAB_E2E_NODES": "--nodes"} {
		if v := os.Getenv(env); v != "" {
			args = append(args, flag, v)
		}
	}
	o, err := exec.Command(bin, args...).CombinedOutput()
	t.Logf("cnlab %s:\n%s", strings.Join(args, " "), o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Check(); len(bad) > 0 {
		t.Errorf("results.json does not validate:\n%s", strings.Join(bad, "\n"))
	}
	for _, p := range r.Points {
		if p.Status != results.PointDone {
			t.Errorf("%s %s: %s %s", p.ID, p.Params.Text(), p.Status, p.Error)
		}
	}
	for _, b := range r.Builds {
		for _, a := range b.PolicyApply {
			if a.Enforced == nil || !*a.Enforced {
				t.Errorf("policies %d not enforced: %s", a.Policies, a.Mismatch)
			}
		}
	}
}
