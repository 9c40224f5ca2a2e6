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
	theirs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
		"metadata": map[string]any{"name": "theirs"}, "spec": map[string]any{"priority": int64(1), "subject": map[string]any{"namespaces": map[string]any{}}}}}
	if _, err := kc.Dynamic.Resource(AdminPolicies).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		var out []string
		for _, k := range clusterKinds {
			l, err := kc.Dynamic.Resource(k.gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range l.Items {
				out = append(out, k.kind+" "+o.GetName())
			}
		}
		slices.Sort(out)
		return out
	}
	if err := kc.ApplyPolicies(ctx, run, namespaces, rewrite(run, nsMap, np+clusterPoliciesYAML)); err != nil {
		t.Fatal(err)
	}
	want := []string{"AdminNetworkPolicy cnlab-cp-web", "AdminNetworkPolicy theirs", "BaselineAdminNetworkPolicy default", "ClusterNetworkPolicy cnlab-cp-tenant-isolation"}
	if got := names(); !slices.Equal(got, want) {
		t.Errorf("after the apply: %v, want %v", got, want)
	}
	cnp, err := kc.Dynamic.Resource(ClusterPolicies).Get(ctx, "cnlab-cp-tenant-isolation", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := cnp.GetLabels(); l[RunLabel] != run || l[ManagedLabel] != FieldManager {
		t.Errorf("labels %v: want the run's", l)
	}
	if mf := cnp.GetManagedFields(); len(mf) == 0 || mf[0].Manager != FieldManager || mf[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("managed fields %+v: want server-side apply by %s", mf, FieldManager)
	}
	exprs, _, _ := unstructured.NestedSlice(cnp.Object, "spec", "subject", "namespaces", "matchExpressions")
	if yamlText(exprs) != yamlText([]any{map[string]any{"key": RunLabel, "operator": "In", "values": []any{run}}}) {
		t.Errorf("subject's matchExpressions %v: want the run's namespaces only", exprs)
	}
	from, _, _ := unstructured.NestedSlice(cnp.Object, "spec", "ingress")
	if !strings.Contains(yamlText(from), "kubernetes.io/metadata.name: cnlab-cp-x") {
		t.Errorf("ingress %s: the peer's namespace is not the run's", yamlText(from))
	}

	// One changed (priority 3 to 4), one gone (the ClusterNetworkPolicy).
	docs := strings.Split(clusterPoliciesYAML, "---\n")
	if err := kc.ApplyPolicies(ctx, run, namespaces, rewrite(run, nsMap, np+strings.Replace(docs[1], "priority: 3", "priority: 4", 1)+"---\n"+docs[2])); err != nil {
		t.Fatal(err)
	}
	want = []string{"AdminNetworkPolicy cnlab-cp-web", "AdminNetworkPolicy theirs", "BaselineAdminNetworkPolicy default"}
	if got := names(); !slices.Equal(got, want) {
		t.Errorf("after the second apply: %v, want %v", got, want)
	}
	web, err := kc.Dynamic.Resource(AdminPolicies).Get(ctx, "cnlab-cp-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedInt64(web.Object, "spec", "priority"); p != 4 || web.GetGeneration() != 2 {
		t.Errorf("cnlab-cp-web: priority %d, generation %d; want 4, 2 (changed in place)", p, web.GetGeneration())
	}
	// The API server validates what cnlab applies, and the error names it.
	err = kc.ApplyPolicies(ctx, run, namespaces, rewrite(run, nsMap, strings.Replace(docs[1], "priority: 3", "priority: 1001", 1)))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "apply AdminNetworkPolicy cnlab-cp-web:") {
		t.Errorf("priority 1001: %v, want the API server's refusal naming AdminNetworkPolicy cnlab-cp-web", err)
	}
	// Another run cannot have the baseline too.
	other := map[string]string{"default": "cnlab-cp2-default", "x": "cnlab-cp2-x", "y": "cnlab-cp2-y"}
	err = kc.ApplyPolicies(ctx, "cp2", nil, rewrite("cp2", other, docs[2]))
	if err == nil || !strings.Contains(err.Error(), "BaselineAdminNetworkPolicy default belongs to cnlab run cp") {
		t.Errorf("a second run's baseline: %v", err)
	}
	if got := names(); !slices.Equal(got, want) {
		t.Errorf("after the refused applies: %v, want %v", got, want)
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
	if got := names(); !slices.Equal(got, []string{"AdminNetworkPolicy theirs"}) {
		t.Errorf("after cnlab down: %v, want theirs only", got)
	}
}
