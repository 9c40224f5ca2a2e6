package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
)

// sliceManagedBy marks an EndpointSlice made by a controller (the
// EndpointSlice controller for a Service with a selector).
const sliceManagedBy = "endpointslice.kubernetes.io/managed-by"

// ApplyServices makes objs (Services and EndpointSlices, rewritten by
// RewriteServices) the run's Services: each is applied with server-side
// apply, and the run's Services and EndpointSlices that objs no longer
// hold are deleted. A Service or EndpointSlice of the same name that cnlab
// did not create is refused (ErrNotOwned) before anything changes. It
// returns every applied Service's cluster IP, by cluster namespace/name.
func (c *Client) ApplyServices(ctx context.Context, run string, namespaces []string, objs []Object) (map[string]netip.Addr, error) {
	existing := map[string]metav1.Object{} // "Kind ns/name"
	for _, ns := range namespaces {
		l, err := c.K.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list Services in %s: %w", ns, err)
		}
		for i := range l.Items {
			existing["Service "+ns+"/"+l.Items[i].Name] = &l.Items[i]
		}
		sl, err := c.K.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list EndpointSlices in %s: %w", ns, err)
		}
		for i := range sl.Items {
			existing["EndpointSlice "+ns+"/"+sl.Items[i].Name] = &sl.Items[i]
		}
	}
	keep := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + " " + o.Namespace + "/" + o.Name
		if e, ok := existing[key]; ok && (!owned(e, run) || e.GetLabels()[sliceManagedBy] != "") {
			return nil, fmt.Errorf("%s %s/%s %w", o.Kind, o.Namespace, o.Name, ErrNotOwned)
		}
		keep[key] = true
	}
	vips := map[string]netip.Addr{}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	for _, o := range objs {
		data, err := json.Marshal(o.Body)
		if err != nil {
			return nil, err
		}
		switch o.Kind {
		case "Service":
			var ac corev1ac.ServiceApplyConfiguration
			if err := json.Unmarshal(data, &ac); err != nil {
				return nil, fmt.Errorf("Service %s/%s: %w", o.Namespace, o.Name, err)
			}
			svc, err := c.K.CoreV1().Services(o.Namespace).Apply(ctx, &ac, opts)
			if err != nil {
				return nil, fmt.Errorf("apply Service %s/%s: %w", o.Namespace, o.Name, err)
			}
			if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
				vips[o.Namespace+"/"+o.Name] = ip
			}
		case "EndpointSlice":
			var ac discoveryv1ac.EndpointSliceApplyConfiguration
			if err := json.Unmarshal(data, &ac); err != nil {
				return nil, fmt.Errorf("EndpointSlice %s/%s: %w", o.Namespace, o.Name, err)
			}
			if _, err := c.K.DiscoveryV1().EndpointSlices(o.Namespace).Apply(ctx, &ac, opts); err != nil {
				return nil, fmt.Errorf("apply EndpointSlice %s/%s: %w", o.Namespace, o.Name, err)
			}
		}
	}
	// Slices first. A Service's own slices are the EndpointSlice
	// controller's (it copies the Service's labels, cnlab's included, but
	// marks them managed by itself): they go with their Service, never by
	// cnlab's hand.
	for _, kind := range []string{"EndpointSlice", "Service"} {
		for _, key := range slices.Sorted(maps.Keys(existing)) {
			e := existing[key]
			if !strings.HasPrefix(key, kind+" ") || keep[key] || !owned(e, run) || e.GetLabels()[sliceManagedBy] != "" {
				continue
			}
			var err error
			if kind == "Service" {
				err = c.K.CoreV1().Services(e.GetNamespace()).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
			} else {
				err = c.K.DiscoveryV1().EndpointSlices(e.GetNamespace()).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("delete %s: %w", key, err)
			}
		}
	}
	return vips, nil
}
