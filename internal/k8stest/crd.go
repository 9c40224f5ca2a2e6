package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// crds is where CustomResourceDefinitions live.
var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CustomResourceDefinitions in manifests
// (multi-document YAML, apiextensions.k8s.io/v1) and waits until the API
// server serves every version of each: Established, and listed by
// discovery. It returns their names.
func (c *Cluster) InstallCRDs(ctx context.Context, manifests []byte) ([]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var created []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("CRD manifests: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() != "CustomResourceDefinition" {
			return nil, fmt.Errorf("CRD manifests: kind %q, want CustomResourceDefinition", u.GetKind())
		}
		got, err := d.Resource(crds).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create CRD %s: %w", u.GetName(), err)
		}
		created = append(created, got)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var names []string
	for _, u := range created {
		name := u.GetName()
		names = append(names, name)
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		err := c.poll(ctx, "CRD "+name, func() (bool, string, error) {
			got, err := d.Resource(crds).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			if !slices.ContainsFunc(conds, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}) {
				return false, "not Established", nil
			}
			for _, v := range versions {
				vm, _ := v.(map[string]any)
				gv := group + "/" + fmt.Sprint(vm["name"])
				l, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
				if err != nil && !apierrors.IsNotFound(err) {
					return false, "", err
				}
				if l == nil || !slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
					return false, gv + " " + plural + " not discovered", nil
				}
			}
			return true, "", nil
		})
		if err != nil {
			return names, err
		}
	}
	return names, nil
}
