package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
)

// sliceManagedBy marks an EndpointSlice made by a controller (the
// EndpointSlice controller for a Service with a selector).
const sliceManagedBy = "endpointslice.kubernetes.io/managed-by"

// AppliedAnnotation holds, on every Service and EndpointSlice cnlab
// applies, a hash of the body it applied: an object whose hash is that of
// the body to apply (and that no other field manager has changed since)
// is not applied again.
const AppliedAnnotation = "cnlab.io/applied"

// ApplyWorkers is how many Services and EndpointSlices ApplyServices
// applies (or deletes) at once. On the local cluster (2 vCPUs) the API
// server is the limit: 16 or 32 were no faster than 8 (BENCHMARKS.md,
// "A real cluster on this machine").
var ApplyWorkers = 8

// ApplyServices makes objs (Services and EndpointSlices, rewritten by
// RewriteServices) the run's Services: each is applied with server-side
// apply, unless the cluster already holds it as cnlab last applied it
// (AppliedAnnotation), and the run's Services and EndpointSlices that objs
// no longer hold are deleted. Applies, then deletes, run ApplyWorkers at
// a time; the first failure stops the rest and is returned, naming its
// object. A Service or EndpointSlice of the same name that cnlab did not
// create is refused (ErrNotOwned) before anything changes. It returns
// every Service's cluster IP, by cluster namespace/name.
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
	var mu sync.Mutex
	vips := map[string]netip.Addr{}
	addVIP := func(svc *corev1.Service) {
		if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
			mu.Lock()
			vips[svc.Namespace+"/"+svc.Name] = ip
			mu.Unlock()
		}
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	var applies []func(context.Context) error
	for _, o := range objs {
		data, err := json.Marshal(o.Body)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
		}
		sum := sha256.Sum256(data)
		hash := hex.EncodeToString(sum[:16])
		if e := existing[o.Kind+" "+o.Namespace+"/"+o.Name]; e != nil && asApplied(e, hash) {
			if svc, ok := e.(*corev1.Service); ok {
				addVIP(svc)
			}
			continue
		}
		switch o.Kind {
		case "Service":
			var ac corev1ac.ServiceApplyConfiguration
			if err := json.Unmarshal(data, &ac); err != nil {
				return nil, fmt.Errorf("Service %s/%s: %w", o.Namespace, o.Name, err)
			}
			ac.WithAnnotations(map[string]string{AppliedAnnotation: hash})
			applies = append(applies, func(ctx context.Context) error {
				svc, err := c.K.CoreV1().Services(o.Namespace).Apply(ctx, &ac, opts)
				if err != nil {
					return fmt.Errorf("apply Service %s/%s: %w", o.Namespace, o.Name, err)
				}
				addVIP(svc)
				return nil
			})
		case "EndpointSlice":
			var ac discoveryv1ac.EndpointSliceApplyConfiguration
			if err := json.Unmarshal(data, &ac); err != nil {
				return nil, fmt.Errorf("EndpointSlice %s/%s: %w", o.Namespace, o.Name, err)
			}
			ac.WithAnnotations(map[string]string{AppliedAnnotation: hash})
			applies = append(applies, func(ctx context.Context) error {
				if _, err := c.K.DiscoveryV1().EndpointSlices(o.Namespace).Apply(ctx, &ac, opts); err != nil {
					return fmt.Errorf("apply EndpointSlice %s/%s: %w", o.Namespace, o.Name, err)
				}
				return nil
			})
		default:
			return nil, fmt.Errorf("%s %s/%s: not a Service or EndpointSlice", o.Kind, o.Namespace, o.Name)
		}
	}
	if err := inParallel(ctx, ApplyWorkers, applies); err != nil {
		return nil, err
	}
	// Slices first. A Service's own slices are the EndpointSlice
	// controller's (it copies the Service's labels, cnlab's included, but
	// marks them managed by itself): they go with their Service, never by
	// cnlab's hand.
	for _, kind := range []string{"EndpointSlice", "Service"} {
		var deletes []func(context.Context) error
		for _, key := range slices.Sorted(maps.Keys(existing)) {
			e := existing[key]
			if !strings.HasPrefix(key, kind+" ") || keep[key] || !owned(e, run) || e.GetLabels()[sliceManagedBy] != "" {
				continue
			}
			deletes = append(deletes, func(ctx context.Context) error {
				var err error
				if kind == "Service" {
					err = c.K.CoreV1().Services(e.GetNamespace()).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
				} else {
					err = c.K.DiscoveryV1().EndpointSlices(e.GetNamespace()).Delete(ctx, e.GetName(), metav1.DeleteOptions{})
				}
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("delete %s: %w", key, err)
				}
				return nil
			})
		}
		if err := inParallel(ctx, ApplyWorkers, deletes); err != nil {
			return nil, err
		}
	}
	return vips, nil
}

// asApplied reports whether e is as cnlab last applied the body whose
// hash is hash: its AppliedAnnotation says so, and no other field manager
// has changed it since (the status, a subresource, aside). An object
// someone else edited is applied again, and the forced apply takes
// cnlab's fields back.
func asApplied(e metav1.Object, hash string) bool {
	if e.GetAnnotations()[AppliedAnnotation] != hash {
		return false
	}
	for _, m := range e.GetManagedFields() {
		if m.Subresource == "" && m.Manager != FieldManager {
			return false
		}
	}
	return true
}

// inParallel runs jobs, at most workers at once, until one fails: the
// rest are not started, those running are cancelled (their context
// ends), and the first failure is returned.
func inParallel(ctx context.Context, workers int, jobs []func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, workers))
	for _, job := range jobs {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return job(gctx) })
	}
	// Stopped from outside: ctx's own error, not a job's report of it.
	if err := g.Wait(); err != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
		return err
	}
	return ctx.Err()
}
