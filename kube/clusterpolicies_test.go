package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cnlab/cnlab/internal/k8sdoc"
	"github.com/cnlab/cnlab/policy"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// clusterPoliciesYAML has one document of each cluster-scoped kind, with
// subjects of both shapes and namespace names in selectors.
const clusterPoliciesYAML = `apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: tenant-isolation}
spec:
  tier: Admin
  priority: 10
  subject:
    namespaces: {matchLabels: {tenant: a}}
  ingress:
  - name: no-monitoring
    action: Deny
    from:
    - namespaces: {matchLabels: {kubernetes.io/metadata.name: x}}
    - pods:
        namespaceSelector:
          matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [x, y]}]
        podSelector: {matchLabels: {app: client}}
    protocols: [{tcp: {destinationPort: {number: 80}}}]
  egress:
  - action: Pass
    to: [{networks: [10.0.0.0/8]}, {nodes: {matchLabels: {kubernetes.io/hostname: flip}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: web, labels: {team: net}}
spec:
  priority: 3
  subject:
    pods:
      namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}
      podSelector: {matchLabels: {app: web}}
  ingress:
  - action: Allow
    from: [{namespaces: {}}]
    ports: [{portNumber: {protocol: TCP, port: 8080}}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {}}
  ingress:
  - action: Deny
    from: [{namespaces: {}}]
`

func TestRewriteClusterPolicies(t *testing.T) {
	// The documents are good ones, as cnlab's own parser reads them.
	if _, err := policy.Parse([]byte(clusterPoliciesYAML), "p.yaml"); err != nil {
		t.Fatalf("the test's policies do not parse: %v", err)
	}
	nsMap := map[string]string{"default": "cnlab-r-default", "x": "cnlab-r-x", "y": "cnlab-r-y"}
	objs, err := RewritePolicies([]byte(clusterPoliciesYAML), "p.yaml", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cluster-policies.json", objs)
	var refs []string
	for _, o := range objs {
		refs = append(refs, o.Ref())
	}
	if want := []string{"ClusterNetworkPolicy cnlab-r-tenant-isolation", "AdminNetworkPolicy cnlab-r-web", "BaselineAdminNetworkPolicy default"}; !slices.Equal(refs, want) {
		t.Errorf("objects %v, want %v (cluster-scoped, named for the run; the baseline stays default)", refs, want)
	}
	// Every subject is the run's namespaces and no wider.
	runOnly := map[string]any{"key": RunLabel, "operator": "In", "values": []any{"r"}}
	for _, sel := range []any{
		objs[0].Body["spec"].(map[string]any)["subject"].(map[string]any)["namespaces"],
		objs[1].Body["spec"].(map[string]any)["subject"].(map[string]any)["pods"].(map[string]any)["namespaceSelector"],
		objs[2].Body["spec"].(map[string]any)["subject"].(map[string]any)["namespaces"],
	} {
		exprs, _ := sel.(map[string]any)["matchExpressions"].([]any)
		if !slices.ContainsFunc(exprs, func(e any) bool { return yamlText(e) == yamlText(runOnly) }) {
			t.Errorf("subject selector %v does not require %s=r", sel, RunLabel)
		}
	}
	for _, o := range objs {
		md := o.Body["metadata"].(map[string]any)
		if _, ok := md["namespace"]; ok || o.Namespace != "" {
			t.Errorf("%s has a namespace", o.Ref())
		}
		if l := md["labels"].(map[string]any); l[RunLabel] != "r" || l[ManagedLabel] != FieldManager {
			t.Errorf("%s labels %v: want the run's", o.Ref(), l)
		}
	}
	long := strings.Repeat("a", 250)
	bad := []struct{ text, want string }{
		{"kind: AdminNetworkPolicy\nmetadata: {name: a, namespace: x}\nspec: {subject: {namespaces: {}}}\n", "a AdminNetworkPolicy is cluster-scoped"},
		{"kind: BaselineAdminNetworkPolicy\nmetadata: {name: base}\nspec: {subject: {namespaces: {}}}\n", "is named default"},
		{"kind: ClusterNetworkPolicy\nmetadata: {name: " + long + "}\nspec: {subject: {namespaces: {}}}\n", "at most 253"},
		{"kind: ClusterNetworkPolicy\nmetadata: {name: a}\nspec: {tier: Admin}\n", "spec.subject: give namespaces or pods"},
		{"kind: ClusterNetworkPolicy\nmetadata: {name: a}\n", "no spec"},
		{"kind: AdminNetworkPolicy\nmetadata: {name: a}\nspec: {subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: kube-system}}}}\n", `names namespace "kube-system"`},
	}
	for _, b := range bad {
		_, err := RewritePolicies([]byte(b.text), "p.yaml", nsMap, "r")
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.HasPrefix(err.Error(), "p.yaml: document 1") {
			t.Errorf("%q: error %v, want one naming p.yaml, document 1 and %q", b.text, err, b.want)
		}
	}
	// Services are not policies.
	if _, err := RewriteServices([]byte(clusterPoliciesYAML), "s.yaml", nsMap, "r"); err == nil || !strings.Contains(err.Error(), `kind "ClusterNetworkPolicy"`) {
		t.Errorf("a ClusterNetworkPolicy given as a Service: %v", err)
	}
}

// TestClusterKindsAreThePolicyFamilys: every cluster-scoped kind the
// backend applies is one the policy reader reads, at the same apiVersion.
func TestClusterKindsAreThePolicyFamilys(t *testing.T) {
	for _, k := range clusterKinds {
		fk, ok := k8sdoc.Policies.Lookup(k.kind)
		if !ok || fk.APIVersion != k.gvr.GroupVersion().String() {
			t.Errorf("%s at %s: the policy family has %+v", k.kind, k.gvr.GroupVersion(), fk)
		}
	}
}

// TestApplyClusterPolicies: clusterPolicyLifecycle on client-go's fake
// clientsets; then a name taken by an object cnlab did not create is
// refused, and Down deletes the run's, and only those.
func TestApplyClusterPolicies(t *testing.T) {
	ctx := context.Background()
	c, _ := fakeClient()
	applyCreates(c)
	nsMap := map[string]string{"default": "cnlab-r-default", "x": "cnlab-r-x", "y": "cnlab-r-y"}
	clusterPolicyLifecycle(t, c, "r", nsMap)
	taken := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
		"metadata": map[string]any{"name": "cnlab-r-tenant-isolation"}}}
	if _, err := c.Dynamic.Resource(ClusterPolicies).Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := RewritePolicies([]byte(clusterPoliciesYAML), "p", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPolicies(ctx, "r", sortedNamespaces(nsMap), objs); !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "ClusterNetworkPolicy cnlab-r-tenant-isolation exists") {
		t.Errorf("apply over a ClusterNetworkPolicy cnlab did not create: %v", err)
	}
	if _, err := c.Down(ctx, "r", false); err != nil {
		t.Fatal(err)
	}
	want := []string{"AdminNetworkPolicy theirs", "ClusterNetworkPolicy cnlab-r-tenant-isolation"}
	if got := clusterPolicyNames(t, c); !slices.Equal(got, want) {
		t.Errorf("after Down: %v, want %v", got, want)
	}
}

// clusterPolicyLifecycle applies clusterPoliciesYAML as run's beside an
// AdminNetworkPolicy "theirs" that is not cnlab's, then again with one
// changed (cnlab-RUN-web, priority 3 to 4) and one gone (the
// ClusterNetworkPolicy), then another run's baseline, which is refused
// while run has one; theirs is never touched. nsMap's namespaces are
// run's.
func clusterPolicyLifecycle(t *testing.T, c *Client, run string, nsMap map[string]string) {
	t.Helper()
	ctx := context.Background()
	theirs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
		"metadata": map[string]any{"name": "theirs"}, "spec": map[string]any{"priority": int64(1), "subject": map[string]any{"namespaces": map[string]any{}}}}}
	if _, err := c.Dynamic.Resource(AdminPolicies).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := func(run string, nsMap map[string]string, text string) error {
		t.Helper()
		objs, err := RewritePolicies([]byte(text), "p.yaml", nsMap, run)
		if err != nil {
			t.Fatal(err)
		}
		return c.ApplyPolicies(ctx, run, sortedNamespaces(nsMap), objs)
	}
	expect := func(when string, want ...string) {
		t.Helper()
		for i := range want {
			want[i] = strings.ReplaceAll(want[i], "RUN", run)
		}
		if got := clusterPolicyNames(t, c); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", when, got, want)
		}
	}
	if err := apply(run, nsMap, clusterPoliciesYAML); err != nil {
		t.Fatal(err)
	}
	expect("after the apply", "AdminNetworkPolicy cnlab-RUN-web", "AdminNetworkPolicy theirs", "BaselineAdminNetworkPolicy default", "ClusterNetworkPolicy cnlab-RUN-tenant-isolation")
	docs := strings.Split(clusterPoliciesYAML, "---\n")
	if err := apply(run, nsMap, strings.Replace(docs[1], "priority: 3", "priority: 4", 1)+"---\n"+docs[2]); err != nil {
		t.Fatal(err)
	}
	expect("after the second apply", "AdminNetworkPolicy cnlab-RUN-web", "AdminNetworkPolicy theirs", "BaselineAdminNetworkPolicy default")
	web, err := c.Dynamic.Resource(AdminPolicies).Get(ctx, "cnlab-"+run+"-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedInt64(web.Object, "spec", "priority"); p != 4 {
		t.Errorf("cnlab-%s-web priority %d, want 4", run, p)
	}
	other := map[string]string{}
	for k, v := range nsMap {
		other[k] = strings.Replace(v, "-"+run+"-", "-"+run+"2-", 1)
	}
	err = apply(run+"2", other, docs[2])
	if want := "BaselineAdminNetworkPolicy default belongs to cnlab run " + run + ": a cluster has one BaselineAdminNetworkPolicy, so two runs at once cannot both have one"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a second run's baseline: %v, want %q", err, want)
	}
	expect("after the refused apply", "AdminNetworkPolicy cnlab-RUN-web", "AdminNetworkPolicy theirs", "BaselineAdminNetworkPolicy default")
}

// TestApplyClusterPoliciesWithoutCRDs: a cluster without a kind's CRD
// refuses it by name before anything changes; one that only lacks the
// CRDs of kinds not applied is no obstacle.
func TestApplyClusterPoliciesWithoutCRDs(t *testing.T) {
	ctx := context.Background()
	c, k := fakeClient()
	d := c.Dynamic.(*dynamicfake.FakeDynamicClient)
	for _, r := range []string{"adminnetworkpolicies", "baselineadminnetworkpolicies", "clusternetworkpolicies"} {
		d.PrependReactor("*", r, func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "")
		})
	}
	nsMap := map[string]string{"default": "cnlab-r-default", "x": "cnlab-r-x", "y": "cnlab-r-y"}
	np := "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: a}\nspec: {podSelector: {}}\n"
	objs, err := RewritePolicies([]byte(np), "p", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPolicies(ctx, "r", sortedNamespaces(nsMap), objs); err != nil {
		t.Fatalf("NetworkPolicy only, on a cluster without the CRDs: %v", err)
	}
	if _, err := c.Down(ctx, "r", false); err != nil {
		t.Fatalf("Down on a cluster without the CRDs: %v", err)
	}
	for kind, want := range map[string]string{
		"AdminNetworkPolicy":         "the cluster has no AdminNetworkPolicy resource: install the network-policy-api CRDs (v0.1.8) and a CNI that implements them",
		"BaselineAdminNetworkPolicy": "the cluster has no BaselineAdminNetworkPolicy resource: install the network-policy-api CRDs (v0.1.8)",
		"ClusterNetworkPolicy":       "the cluster has no ClusterNetworkPolicy resource: install the network-policy-api CRDs (v0.2.0)",
	} {
		var doc string
		for _, d := range strings.Split(clusterPoliciesYAML, "---\n") {
			if strings.Contains(d, "kind: "+kind+"\n") {
				doc = d
			}
		}
		objs, err := RewritePolicies([]byte(strings.Replace(np, "name: a", "name: b", 1)+"---\n"+doc), "p", nsMap, "r")
		if err != nil {
			t.Fatal(err)
		}
		err = c.ApplyPolicies(ctx, "r", sortedNamespaces(nsMap), objs)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s without its CRD: %v, want %q", kind, err, want)
		}
	}
	// Refused before anything changed: b was not applied, a not deleted.
	l, _ := k.NetworkingV1().NetworkPolicies("cnlab-r-default").List(ctx, metav1.ListOptions{})
	if len(l.Items) != 1 || l.Items[0].Name != "a" {
		t.Errorf("NetworkPolicies %v after refused applies: want a, as it was", l.Items)
	}
}

// applyCreates makes the fake dynamic client's server-side apply of the
// cluster-scoped kinds create what is not there (its tracker only
// patches): the object becomes what was applied. The API server's own
// apply is TestClusterPoliciesOnControlPlane's.
func applyCreates(c *Client) {
	d := c.Dynamic.(*dynamicfake.FakeDynamicClient)
	for _, k := range clusterKinds {
		d.PrependReactor("patch", k.gvr.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			pa := a.(k8stesting.PatchAction)
			if pa.GetPatchType() != types.ApplyPatchType {
				return false, nil, nil
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(pa.GetPatch()); err != nil {
				return true, nil, err
			}
			u.SetName(pa.GetName())
			tr := d.Tracker()
			if _, err := tr.Get(k.gvr, "", pa.GetName()); apierrors.IsNotFound(err) {
				err = tr.Create(k.gvr, u, "")
				return true, u, err
			}
			return true, u, tr.Update(k.gvr, u, "")
		})
	}
}

// clusterPolicyNames lists the cluster's cluster-scoped policies as
// "Kind name", sorted.
func clusterPolicyNames(t *testing.T, c *Client) []string {
	t.Helper()
	var out []string
	for _, k := range clusterKinds {
		l, err := c.Dynamic.Resource(k.gvr).List(context.Background(), metav1.ListOptions{})
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

// TestClusterPoliciesForbidden: a user RBAC does not let list the cluster
// policies still runs (and takes down) NetworkPolicy points; an apply of
// one is refused with the API server's reason.
func TestClusterPoliciesForbidden(t *testing.T) {
	ctx := context.Background()
	c, _ := fakeClient()
	d := c.Dynamic.(*dynamicfake.FakeDynamicClient)
	for _, k := range clusterKinds {
		d.PrependReactor("list", k.gvr.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("RBAC"))
		})
	}
	nsMap := map[string]string{"default": "cnlab-r-default", "x": "cnlab-r-x", "y": "cnlab-r-y"}
	np := "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: a}\nspec: {podSelector: {}}\n"
	objs, err := RewritePolicies([]byte(np), "p", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPolicies(ctx, "r", sortedNamespaces(nsMap), objs); err != nil {
		t.Errorf("NetworkPolicy only: %v", err)
	}
	if _, err := c.Down(ctx, "r", false); err != nil {
		t.Errorf("Down: %v", err)
	}
	objs, err = RewritePolicies([]byte(clusterPoliciesYAML), "p", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPolicies(ctx, "r", sortedNamespaces(nsMap), objs); !apierrors.IsForbidden(errors.Unwrap(err)) || !strings.HasPrefix(err.Error(), "list adminnetworkpolicies: ") {
		t.Errorf("cluster policies without the right to list them: %v", err)
	}
}
