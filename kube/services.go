package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
)

// ApplyServices makes objs (Services and EndpointSlices, rewritten by
// RewriteServices) the run's Services: each is applied with server-side
// apply, and the run's Services and EndpointSlices that objs no longer
// hold are deleted. It returns every applied Service's cluster IP, by
// cluster namespace/name.
func (c *Client) ApplyServices(ctx context.Context, run string, namespaces []string, objs []Object) (map[string]netip.Addr, error) {
	keep := map[string]bool{}
	vips := map[string]netip.Addr{}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	for _, o := range objs {
		keep[o.Kind+" "+o.Namespace+"/"+o.Name] = true
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
	sel := metav1.ListOptions{LabelSelector: RunLabel + "=" + run}
	for _, ns := range namespaces {
		sl, err := c.K.DiscoveryV1().EndpointSlices(ns).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("list EndpointSlices in %s: %w", ns, err)
		}
		for _, s := range sl.Items {
			if !keep["EndpointSlice "+ns+"/"+s.Name] && owned(&s, run) {
				if err := c.K.DiscoveryV1().EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("delete EndpointSlice %s/%s: %w", ns, s.Name, err)
				}
			}
		}
		l, err := c.K.CoreV1().Services(ns).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("list Services in %s: %w", ns, err)
		}
		for _, s := range l.Items {
			if !keep["Service "+ns+"/"+s.Name] && owned(&s, run) {
				if err := c.K.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("delete Service %s/%s: %w", ns, s.Name, err)
				}
			}
		}
	}
	return vips, nil
}
