package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/k8stest"
)

// TestClusterTiersRunOnControlPlane runs the clusterPolicies axis through
// the kubernetes backend: refused before anything on a cluster without
// the ClusterNetworkPolicy CRD; with it, the points' cluster policies are
// applied (and validated by the API server), the enforcement probe
// reports that kwok (no CNI) does not enforce them, and the run leaves
// none behind.
func TestClusterTiersRunOnControlPlane(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 1})
	bin := buildCnlab(t)
	ctx := context.Background()
	exp := filepath.Join(t.TempDir(), "tiers.yaml")
	if err := os.WriteFile(exp, []byte("name: tiers\nwarmup: 0s\nduration: 1s\nrepetitions: 1\nworkloads: [{kind: tcp-rr}]\nmatrix: {topology: [single-host], clusterPolicies: [0, 3], clusterPolicyMatch: [none, last]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, append([]string{"run", exp, "--backend", "kubernetes", "--kubeconfig", c.Kubeconfig, "--lab", "xp-tiers", "--image", "example.org/unused:1"}, args...)...)
		cmd.Env = append(os.Environ(), "CNLAB_TEST_MAIN=")
		return cmd.CombinedOutput()
	}
	o, err := run("--out", filepath.Join(t.TempDir(), "no-crds"))
	want := "matrix.clusterPolicies: the cluster has no ClusterNetworkPolicy resource: install the network-policy-api CRDs (v0.2.0) and a CNI that implements them"
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(o), want) {
		t.Errorf("without the CRDs: %v, want exit 2 and %q\n%s", err, want, o)
	}
	crds, err := os.ReadFile("testdata/network-policy-api-crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstallCRDs(ctx, crds); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	o, err = run("--out", out, "--unenforced", "--enforce-timeout", "2s")
	t.Logf("cnlab run:\n%s", o)
	if err != nil {
		t.Fatalf("cnlab run: %v", err)
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	// The probe sees what kwok does not enforce: a Deny of the last
	// Admin-tier policy (port 61006) or of the Baseline one (61000) that
	// the apply brings (which, depends on the order the points ran in).
	// Where the apply only lifts a Deny, kwok agrees.
	var unenforced int
	for _, b := range r.Builds {
		for _, a := range b.PolicyApply {
			switch {
			case a.Error != "" || a.Enforced == nil:
				t.Errorf("apply %+v", a)
			case !*a.Enforced && a.ClusterPolicies == 3:
				if !strings.Contains(a.Mismatch, "port 61006/tcp connects, the policies deny it") && !strings.Contains(a.Mismatch, "port 61000/tcp connects, the policies deny it") {
					t.Errorf("apply %+v: want a cluster policy's Deny not enforced", a)
				}
				unenforced++
			case !*a.Enforced:
				t.Errorf("apply %+v: want enforced", a)
			}
		}
	}
	if unenforced == 0 {
		t.Error("no apply of 3 cluster policies was seen not enforced (kwok enforces nothing)")
	}
	dyn, err := Connect(Config{Kubeconfig: c.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	l, err := dyn.Dynamic.Resource(ClusterPolicies).List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("cluster policies left after the run: %v, %v", l, err)
	}
}
