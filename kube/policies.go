package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/cnlab/cnlab/internal/k8sdoc"
	"github.com/cnlab/cnlab/internal/yamlx"
	"github.com/cnlab/cnlab/topology"
)

// CiliumPolicies is where CiliumNetworkPolicies live.
var CiliumPolicies = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}

// Object is one policy document, rewritten for the cluster.
type Object struct {
	Kind      string // NetworkPolicy, CiliumNetworkPolicy, or a cluster-scoped kind (clusterKinds)
	Namespace string // the cluster namespace ("" for a cluster-scoped kind)
	Name      string // the name on the cluster
	Body      map[string]any
}

// namespaceKeys are the label keys whose values name a namespace: their
// values are rewritten to the cluster's names of cnlab's namespaces.
var namespaceKeys = []string{"kubernetes.io/metadata.name", "k8s:io.kubernetes.pod.namespace", "io.kubernetes.pod.namespace"}

// RewritePolicies turns policy documents as written for a lab (namespaces
// of the topology) into the objects cnlab applies to the cluster: every
// namespace a document names, in its metadata or in a selector on
// kubernetes.io/metadata.name (or Cilium's pod namespace label), becomes
// the run's namespace for it, and the run's labels are added. file names
// the text in errors. A document naming a namespace the topology does not
// have is refused: cnlab applies only to namespaces it owns.
//
// A cluster-scoped policy (AdminNetworkPolicy, BaselineAdminNetworkPolicy,
// ClusterNetworkPolicy) is renamed cnlab-RUN-NAME (a
// BaselineAdminNetworkPolicy stays default) and its subject is restricted
// to the run's namespaces (rewriteCluster).
func RewritePolicies(text []byte, file string, nsMap map[string]string, run string) ([]Object, error) {
	return rewrite(text, file, nsMap, run, k8sdoc.Policies.Names())
}

// RewriteServices is RewritePolicies for Service and EndpointSlice
// documents (a Service's selector stays: it selects within its
// namespace).
func RewriteServices(text []byte, file string, nsMap map[string]string, run string) ([]Object, error) {
	return rewrite(text, file, nsMap, run, k8sdoc.Services.Names())
}

func rewrite(text []byte, file string, nsMap map[string]string, run string, kinds []string) ([]Object, error) {
	docs, err := yamlx.Documents(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []Object
	for i, d := range docs {
		var body map[string]any
		if err := d.Decode(&body); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if body == nil {
			continue
		}
		kind, _ := body["kind"].(string)
		switch {
		case slices.Contains(kinds, kind):
		case kind == "CiliumClusterwideNetworkPolicy":
			return nil, fmt.Errorf("%s: document %d: a CiliumClusterwideNetworkPolicy would apply to pods cnlab does not own: write a CiliumNetworkPolicy per namespace", file, i+1)
		default:
			return nil, fmt.Errorf("%s: document %d: kind %q: here the kubernetes backend applies %s", file, i+1, kind, oneOf(kinds))
		}
		md, _ := body["metadata"].(map[string]any)
		if md == nil {
			return nil, fmt.Errorf("%s: document %d: no metadata", file, i+1)
		}
		name, _ := md["name"].(string)
		if _, ok := clusterKindOf(kind); ok {
			cname, err := rewriteCluster(body, md, kind, name, nsMap, run)
			if err != nil {
				return nil, fmt.Errorf("%s: document %d (%s %s): %w", file, i+1, kind, name, err)
			}
			addLabels(md, run)
			out = append(out, Object{Kind: kind, Name: cname, Body: body})
			continue
		}
		ns, _ := md["namespace"].(string)
		if ns == "" {
			ns = topology.DefaultNamespace
		}
		cns, ok := nsMap[ns]
		if !ok {
			return nil, fmt.Errorf("%s: document %d (%s %s): metadata.namespace %q is not a namespace of the topology", file, i+1, kind, name, ns)
		}
		md["namespace"] = cns
		addLabels(md, run)
		if _, svc := k8sdoc.Services.Lookup(kind); svc { // a Service's selector stays
			out = append(out, Object{Kind: kind, Namespace: cns, Name: name, Body: body})
			continue
		}
		if spec, ok := body["spec"]; ok {
			if err := rewriteNamespaces(spec, nsMap); err != nil {
				return nil, fmt.Errorf("%s: document %d (%s %s): %w", file, i+1, kind, name, err)
			}
		}
		if specs, ok := body["specs"]; ok {
			if err := rewriteNamespaces(specs, nsMap); err != nil {
				return nil, fmt.Errorf("%s: document %d (%s %s): %w", file, i+1, kind, name, err)
			}
		}
		out = append(out, Object{Kind: kind, Namespace: cns, Name: name, Body: body})
	}
	return out, nil
}

// addLabels adds the run's labels to a document's metadata.
func addLabels(md map[string]any, run string) {
	labels, _ := md["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	for k, v := range ownLabels(run) {
		labels[k] = v
	}
	md["labels"] = labels
}

// oneOf spells kinds as "A and B", "A, B and C".
func oneOf(kinds []string) string {
	if len(kinds) < 2 {
		return strings.Join(kinds, "")
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
}

// rewriteNamespaces maps namespace names in selectors, in place.
func rewriteNamespaces(v any, nsMap map[string]string) error {
	mapName := func(x any) (any, error) {
		s, ok := x.(string)
		if !ok {
			return x, nil
		}
		c, ok := nsMap[s]
		if !ok {
			return nil, fmt.Errorf("a selector names namespace %q, which the topology does not have", s)
		}
		return c, nil
	}
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if slices.Contains(namespaceKeys, k) {
				m, err := mapName(t[k])
				if err != nil {
					return err
				}
				t[k] = m
				continue
			}
			if k == "matchExpressions" {
				if exprs, ok := t[k].([]any); ok {
					for _, e := range exprs {
						em, _ := e.(map[string]any)
						if key, _ := em["key"].(string); em != nil && slices.Contains(namespaceKeys, key) {
							vals, _ := em["values"].([]any)
							for i := range vals {
								m, err := mapName(vals[i])
								if err != nil {
									return err
								}
								vals[i] = m
							}
						}
					}
				}
			}
			if err := rewriteNamespaces(t[k], nsMap); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range t {
			if err := rewriteNamespaces(e, nsMap); err != nil {
				return err
			}
		}
	}
	return nil
}

// ApplyPolicies makes objs the run's policies: each is applied with
// server-side apply (field manager cnlab, forced: a field someone changed
// since is taken back), and the run's policies that objs no longer hold
// are deleted, its cluster-scoped ones included. namespaces are the run's.
// A policy of the same name that cnlab did not create (or, cluster-scoped,
// that another run did) is refused (ErrNotOwned), and so is a
// cluster-scoped kind the cluster has no CRD for, before anything changes.
func (c *Client) ApplyPolicies(ctx context.Context, run string, namespaces []string, objs []Object) error {
	existing := map[string]metav1.Object{} // objectKey
	cilium := true
	for _, ns := range namespaces {
		l, err := c.K.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list NetworkPolicies in %s: %w", ns, err)
		}
		for i := range l.Items {
			existing[objectKey("NetworkPolicy", ns, l.Items[i].Name)] = &l.Items[i]
		}
		cl, err := c.Dynamic.Resource(CiliumPolicies).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			cilium = false // no Cilium: nothing of cnlab's there
			continue
		}
		for i := range cl.Items {
			existing[objectKey("CiliumNetworkPolicy", ns, cl.Items[i].GetName())] = &cl.Items[i]
		}
	}
	if err := c.listClusterPolicies(ctx, existing, clusterKindsOf(objs)); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, o := range objs {
		key := o.Ref()
		if e, ok := existing[key]; ok && !owned(e, run) {
			if o.Namespace == "" {
				return notOwnedCluster(o, e)
			}
			return fmt.Errorf("%s %w", key, ErrNotOwned)
		}
		keep[key] = true
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	for _, o := range objs {
		data, err := json.Marshal(o.Body)
		if err != nil {
			return err
		}
		ck, cluster := clusterKindOf(o.Kind)
		switch {
		case o.Kind == "NetworkPolicy":
			var ac networkingv1ac.NetworkPolicyApplyConfiguration
			if err := json.Unmarshal(data, &ac); err != nil {
				return fmt.Errorf("NetworkPolicy %s/%s: %w", o.Namespace, o.Name, err)
			}
			_, err = c.K.NetworkingV1().NetworkPolicies(o.Namespace).Apply(ctx, &ac, opts)
		case cluster:
			u := &unstructured.Unstructured{Object: o.Body}
			_, err = c.Dynamic.Resource(ck.gvr).Apply(ctx, o.Name, u, opts)
			if apierrors.IsNotFound(err) {
				err = fmt.Errorf("%w (%w)", err, ck.missing())
			}
		default:
			u := &unstructured.Unstructured{Object: o.Body}
			_, err = c.Dynamic.Resource(CiliumPolicies).Namespace(o.Namespace).Apply(ctx, o.Name, u, opts)
			if err != nil && (apierrors.IsNotFound(err) || !cilium) {
				err = fmt.Errorf("%w (is Cilium installed? the cluster has no CiliumNetworkPolicy resource)", err)
			}
		}
		if err != nil {
			return fmt.Errorf("apply %s: %w", o.Ref(), err)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(existing)) {
		e := existing[key]
		if keep[key] || !owned(e, run) {
			continue
		}
		kind := kindOf(key)
		var err error
		if ck, ok := clusterKindOf(kind); ok {
			err = c.Dynamic.Resource(ck.gvr).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
		} else if kind == "NetworkPolicy" {
			err = c.K.NetworkingV1().NetworkPolicies(e.GetNamespace()).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
		} else {
			err = c.Dynamic.Resource(CiliumPolicies).Namespace(e.GetNamespace()).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", key, err)
		}
	}
	return nil
}

// sortedNamespaces is nsMap's cluster names, sorted.
func sortedNamespaces(nsMap map[string]string) []string {
	out := slices.Collect(maps.Values(nsMap))
	sort.Strings(out)
	return out
}

// yamlText encodes v as YAML (for messages and golden files).
func yamlText(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}
