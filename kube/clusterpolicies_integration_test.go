package kube

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/topology"
)

// TestClusterPoliciesOnControlPlane applies the cluster-scoped policy
// kinds to a real API server: refused by name while the cluster has no
// CRDs for them (nothing applied), then, with the CRDs of
// testdata/network-policy-api-crds.yaml installed, applied with
// server-side apply (validated by the API server), re-applied with one
// changed and one gone, a second run's baseline refused, and `cnlab down
// --backend kubernetes` deleting the run's, and only the run's.
func TestClusterPoliciesOnControlPlane(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 1})
	ctx := context.Background()
	kc, err := Connect(Config{Kubeconfig: c.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	const run = "cp"
	nsMap := map[string]string{"default": "cnlab-cp-default", "x": "cnlab-cp-x", "y": "cnlab-cp-y"}
	namespaces := sortedNamespaces(nsMap)
	for _, name := range namespaces {
		if _, err := kc.K.CoreV1().Namespaces().Apply(ctx, namespaceManifest(run, name, topology.Namespace{}), metav1.ApplyOptions{FieldManager: FieldManager}); err != nil {
			t.Fatal(err)
		}
	}
	rewrite := func(run string, nsMap map[string]string, text string) []Object {
		t.Helper()
		objs, err := RewritePolicies([]byte(text), "p.yaml", nsMap, run)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	np := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a}\nspec: {podSelector: {}}\n---\n"
	nps := func() []string {
		l, err := kc.K.NetworkingV1().NetworkPolicies("cnlab-cp-default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l.Items {
			out = append(out, p.Name)
		}
		return out
	}

	// Without the CRDs.
	err = kc.ApplyPolicies(ctx, run, namespaces, rewrite(run, nsMap, np+clusterPoliciesYAML))
	if want := "the cluster has no AdminNetworkPolicy resource: install the network-policy-api CRDs (v0.1.8) and a CNI that implements them"; err == nil || err.Error() != want {
		t.Errorf("apply without the CRDs: %v, want %q", err, want)
	}
	if got := nps(); len(got) != 0 {
		t.Errorf("NetworkPolicies %v applied by a refused apply", got)
	}
	err = kc.CheckClusterPolicyKinds("clusterPolicies", "ClusterNetworkPolicy")
	if want := "clusterPolicies: the cluster has no ClusterNetworkPolicy resource: install the network-policy-api CRDs (v0.2.0) and a CNI that implements them"; !input.Is(err) || err.Error() != want {
		t.Errorf("preflight without the CRDs: %v, want the input error %q", err, want)
	}
	if err := kc.ApplyPolicies(ctx, run, namespaces, rewrite(run, nsMap, np)); err != nil {
		t.Fatalf("a NetworkPolicy alone, without the CRDs: %v", err)
	}
	if _, err := kc.DeleteClusterPolicies(ctx, run); err != nil {
		t.Errorf("delete the run's cluster policies without the CRDs: %v", err)
	}

	// With them.
	crds, err := os.ReadFile("testdata/network-policy-api-crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstallCRDs(ctx, crds); err != nil {
		t.Fatal(err)
	}
	if err := kc.CheckClusterPolicyKinds("clusterPolicies", "AdminNetworkPolicy", "BaselineAdminNetworkPolicy", "ClusterNetworkPolicy"); err != nil {
		t.Errorf("preflight with the CRDs: %v", err)
	}
	clusterPolicyLifecycle(t, kc, run, nsMap)
	// What the API server holds: cnlab's labels, applied by its field
	// manager, changed in place, its subject the run's namespaces.
	web, err := kc.Dynamic.Resource(AdminPolicies).Get(ctx, "cnlab-cp-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := web.GetLabels(); l[RunLabel] != run || l[ManagedLabel] != FieldManager || l["team"] != "net" {
		t.Errorf("labels %v: want the document's and the run's", l)
	}
	if mf := web.GetManagedFields(); len(mf) == 0 || mf[0].Manager != FieldManager || mf[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("managed fields %+v: want server-side apply by %s", mf, FieldManager)
	}
	if g := web.GetGeneration(); g != 2 {
		t.Errorf("generation %d, want 2 (created, then changed in place)", g)
	}
	sel, _, _ := unstructured.NestedMap(web.Object, "spec", "subject", "pods", "namespaceSelector")
	if want := "matchExpressions:\n    - key: cnlab.io/run\n      operator: In\n      values:\n        - cp\nmatchLabels:\n    kubernetes.io/metadata.name: cnlab-cp-y\n"; yamlText(sel) != want {
		t.Errorf("subject's namespaceSelector:\n%s\nwant the run's namespace y only:\n%s", yamlText(sel), want)
	}
	// The API server validates what cnlab applies, and the error names it.
	docs := strings.Split(clusterPoliciesYAML, "---\n")
	err = kc.ApplyPolicies(ctx, run, namespaces, rewrite(run, nsMap, strings.Replace(docs[1], "priority: 3", "priority: 1001", 1)))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "apply AdminNetworkPolicy cnlab-cp-web:") {
		t.Errorf("priority 1001: %v, want the API server's refusal naming AdminNetworkPolicy cnlab-cp-web", err)
	}

	// cnlab down deletes the run's, and only those.
	bin := buildCnlab(t)
	down := exec.Command(bin, "down", "--backend", "kubernetes", run, "--kubeconfig", c.Kubeconfig)
	down.Env = append(os.Environ(), "CNLAB_TEST_MAIN=")
	o, err := down.CombinedOutput()
	for _, line := range []string{"AdminNetworkPolicy cnlab-cp-web deleted\n", "BaselineAdminNetworkPolicy default deleted\n", "namespace cnlab-cp-default deleted\n"} {
		if !strings.Contains(string(o), line) {
			t.Errorf("cnlab down does not say %q", line)
		}
	}
	if err != nil {
		t.Errorf("cnlab down --backend kubernetes %s: %v\n%s", run, err, o)
	}
	if got := clusterPolicyNames(t, kc); !slices.Equal(got, []string{"AdminNetworkPolicy theirs"}) {
		t.Errorf("after cnlab down: %v, want theirs only", got)
	}
}
