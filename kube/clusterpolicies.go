package kube

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cnlab/cnlab/internal/input"
)

// Where the cluster-scoped policies of sigs.k8s.io/network-policy-api
// live, when the cluster has their CRDs.
var (
	AdminPolicies    = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "adminnetworkpolicies"}
	BaselinePolicies = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "baselineadminnetworkpolicies"}
	ClusterPolicies  = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha2", Resource: "clusternetworkpolicies"}
)

// BaselineName is the one name a BaselineAdminNetworkPolicy may have: a
// cluster has at most one.
const BaselineName = "default"

// clusterKind is a cluster-scoped policy kind: where it lives and the
// network-policy-api release whose CRDs serve it.
type clusterKind struct {
	kind    string
	gvr     schema.GroupVersionResource
	release string
}

// clusterKinds are the cluster-scoped policy kinds cnlab applies, in the
// order it lists them.
var clusterKinds = []clusterKind{
	{"AdminNetworkPolicy", AdminPolicies, "v0.1.8"},
	{"BaselineAdminNetworkPolicy", BaselinePolicies, "v0.1.8"},
	{"ClusterNetworkPolicy", ClusterPolicies, "v0.2.0"},
}

func clusterKindOf(kind string) (clusterKind, bool) {
	i := slices.IndexFunc(clusterKinds, func(k clusterKind) bool { return k.kind == kind })
	if i < 0 {
		return clusterKind{}, false
	}
	return clusterKinds[i], true
}

// missing is the refusal of a kind the cluster does not serve.
func (k clusterKind) missing() error {
	return fmt.Errorf("the cluster has no %s resource: install the network-policy-api CRDs (%s) and a CNI that implements them", k.kind, k.release)
}

// dnsSubdomain is what the name of a cluster-scoped object may be.
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// ClusterPolicyName is the name on the cluster of a run's cluster-scoped
// policy: cnlab-RUN-NAME, since the whole cluster shares one name space
// (a BaselineAdminNetworkPolicy keeps its only possible name, default).
func ClusterPolicyName(run, kind, name string) (string, error) {
	if kind == "BaselineAdminNetworkPolicy" {
		if name != BaselineName {
			return "", fmt.Errorf("metadata.name %q: a BaselineAdminNetworkPolicy is named %s (a cluster has one)", name, BaselineName)
		}
		return BaselineName, nil
	}
	n := NamespacePrefix + run + "-" + name
	if len(n) > 253 || !dnsSubdomain.MatchString(n) {
		return "", fmt.Errorf("metadata.name %q: on the cluster it is %q, which is not an object name (lowercase letters, digits, '-' and '.', at most 253): give it a shorter name", name, n)
	}
	return n, nil
}

// rewriteCluster makes a cluster-scoped policy document one of the run's:
// named for the run (ClusterPolicyName), labeled with it, its namespace
// names rewritten as a NetworkPolicy's are, and its subject restricted to
// the run's namespaces (restrictSubject). Its peers stay as written. It
// returns the name on the cluster.
func rewriteCluster(body, md map[string]any, kind, name string, nsMap map[string]string, run string) (string, error) {
	if ns, _ := md["namespace"].(string); ns != "" {
		return "", fmt.Errorf("metadata.namespace %q: a %s is cluster-scoped: give it no namespace", ns, kind)
	}
	delete(md, "namespace")
	cname, err := ClusterPolicyName(run, kind, name)
	if err != nil {
		return "", err
	}
	md["name"] = cname
	spec, _ := body["spec"].(map[string]any)
	if spec == nil {
		return "", fmt.Errorf("no spec")
	}
	if err := rewriteNamespaces(spec, nsMap); err != nil {
		return "", err
	}
	subject, _ := spec["subject"].(map[string]any)
	if err := restrictSubject(subject, run); err != nil {
		return "", err
	}
	return cname, nil
}

// restrictSubject narrows a cluster policy's subject to the run's
// namespaces, which carry the label cnlab.io/run=RUN (namespaceManifest):
// a requirement on it is added to spec.subject.namespaces, or to
// spec.subject.pods.namespaceSelector. A cluster-scoped policy would
// otherwise select pods cnlab does not own.
func restrictSubject(subject map[string]any, run string) error {
	req := map[string]any{"key": RunLabel, "operator": "In", "values": []any{run}}
	restrict := func(parent map[string]any, key string) {
		sel, _ := parent[key].(map[string]any)
		if sel == nil {
			sel = map[string]any{}
		}
		exprs, _ := sel["matchExpressions"].([]any)
		sel["matchExpressions"] = append(exprs, req)
		parent[key] = sel
	}
	_, byNamespace := subject["namespaces"]
	pods, _ := subject["pods"].(map[string]any)
	switch {
	case byNamespace:
		restrict(subject, "namespaces")
	case pods != nil:
		restrict(pods, "namespaceSelector")
	default:
		return fmt.Errorf("spec.subject: give namespaces or pods (cnlab restricts the subject to the run's namespaces)")
	}
	if byNamespace && pods != nil {
		restrict(pods, "namespaceSelector") // refused by the API server, but never wider than the run
	}
	return nil
}

// listClusterPolicies adds every cluster-scoped policy the cluster has to
// existing (by objectKey). A kind whose CRD is not installed holds none of
// cnlab's, and is refused if need has it; one cnlab may not list (RBAC) is
// skipped unless need has it.
func (c *Client) listClusterPolicies(ctx context.Context, existing map[string]metav1.Object, need map[string]bool) error {
	for _, k := range clusterKinds {
		l, err := c.Dynamic.Resource(k.gvr).List(ctx, metav1.ListOptions{})
		switch {
		case err == nil:
			for i := range l.Items {
				existing[objectKey(k.kind, "", l.Items[i].GetName())] = &l.Items[i]
			}
		case apierrors.IsNotFound(err):
			if need[k.kind] {
				return k.missing()
			}
		case apierrors.IsForbidden(err) && !need[k.kind]:
		default:
			return fmt.Errorf("list %s: %w", k.gvr.Resource, err)
		}
	}
	return nil
}

// CheckClusterPolicyKinds refuses, as bad input naming flag, kinds (of
// cluster-scoped policies) that the cluster does not serve, before
// anything is created.
func (c *Client) CheckClusterPolicyKinds(flag string, kinds ...string) error {
	for _, kind := range kinds {
		k, ok := clusterKindOf(kind)
		if !ok {
			return fmt.Errorf("%s is not a cluster-scoped policy kind", kind)
		}
		l, err := c.K.Discovery().ServerResourcesForGroupVersion(k.gvr.GroupVersion().String())
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("discover %s: %w", k.gvr.GroupVersion(), err)
		}
		if l == nil || !slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == k.gvr.Resource }) {
			return &input.Error{File: flag, Msg: k.missing().Error()}
		}
	}
	return nil
}

// DeleteClusterPolicies deletes the run's cluster-scoped policies (every
// run's when run is "") and returns them as "Kind name". Those without
// cnlab's labels are never touched; a kind the cluster does not serve, or
// that cnlab may not list (RBAC), is passed over.
func (c *Client) DeleteClusterPolicies(ctx context.Context, run string) ([]string, error) {
	sel := ManagedLabel + "=" + FieldManager
	if run != "" {
		sel += "," + RunLabel + "=" + run
	}
	var gone []string
	for _, k := range clusterKinds {
		l, err := c.Dynamic.Resource(k.gvr).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			continue // no CRD; or no right to them (nor, then, to create them)
		}
		if err != nil {
			return gone, fmt.Errorf("list cnlab's %s: %w", k.gvr.Resource, err)
		}
		for _, o := range l.Items {
			if !owned(&o, run) {
				continue
			}
			if err := c.Dynamic.Resource(k.gvr).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return gone, fmt.Errorf("delete %s %s: %w", k.kind, o.GetName(), err)
			}
			gone = append(gone, k.kind+" "+o.GetName())
		}
	}
	return gone, nil
}

// notOwnedCluster is the refusal of a cluster-scoped policy whose name is
// taken: by another run of cnlab's, or by an object cnlab did not create.
func notOwnedCluster(o Object, e metav1.Object) error {
	if r := e.GetLabels()[RunLabel]; owned(e, "") && r != "" {
		if o.Kind == "BaselineAdminNetworkPolicy" {
			return fmt.Errorf("%s belongs to cnlab run %s: a cluster has one BaselineAdminNetworkPolicy, so two runs at once cannot both have one (cnlab down --backend kubernetes %s, once it is over)", o.Ref(), r, r)
		}
		return fmt.Errorf("%s belongs to cnlab run %s: give another run name", o.Ref(), r)
	}
	if o.Kind == "BaselineAdminNetworkPolicy" {
		return fmt.Errorf("%s %w (a cluster has one BaselineAdminNetworkPolicy)", o.Ref(), ErrNotOwned)
	}
	return fmt.Errorf("%s %w", o.Ref(), ErrNotOwned)
}

// clusterKindsOf lists the cluster-scoped kinds among objs.
func clusterKindsOf(objs []Object) map[string]bool {
	need := map[string]bool{}
	for _, o := range objs {
		if _, ok := clusterKindOf(o.Kind); ok {
			need[o.Kind] = true
		}
	}
	return need
}

// objectKey names an object in messages and maps: "Kind ns/name", or
// "Kind name" for a cluster-scoped one.
func objectKey(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// Ref names the object: "Kind ns/name", or "Kind name" when it is
// cluster-scoped.
func (o Object) Ref() string { return objectKey(o.Kind, o.Namespace, o.Name) }

// kindOf is the kind in an objectKey.
func kindOf(key string) string {
	k, _, _ := strings.Cut(key, " ")
	return k
}
