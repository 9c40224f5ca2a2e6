package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/topology"
)

// serviceSetText is n Services as experiment/services.go writes the
// filler ones (each with an EndpointSlice of backends addresses), the
// last one selecting app=server with no slice of its own.
func serviceSetText(n int, backends string) string {
	var b strings.Builder
	for i := range n {
		if i == n-1 {
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: svc-%05d}\nspec:\n  selector: {app: server}\n  ports: [{name: rr-tcp, port: 12865, protocol: TCP}]\n---\n", i)
			break
		}
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: svc-%05d}\nspec:\n  ports: [{port: 80, targetPort: 8080}]\n---\n", i)
		fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: svc-%05d-1, labels: {kubernetes.io/service-name: svc-%05d}}\naddressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: [%s]}]\n---\n", i, i, backends)
	}
	return b.String()
}

func rewriteServiceSet(t *testing.T, text string) []Object {
	t.Helper()
	objs, err := RewriteServices([]byte(text), "s", map[string]string{"default": "cnlab-r-default"}, "r")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// writes lists the writes (verb resource/name) among a fake clientset's
// actions.
func writes(actions []k8stesting.Action) []string {
	var w []string
	for _, a := range actions {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			w = append(w, "patch "+a.GetResource().Resource+"/"+a.GetName())
		case k8stesting.DeleteAction:
			w = append(w, "delete "+a.GetResource().Resource+"/"+a.GetName())
		case k8stesting.CreateAction, k8stesting.UpdateAction:
			w = append(w, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	slices.Sort(w)
	return w
}

// TestApplyServicesSkipsUnchanged: applying the same Services again
// writes nothing and returns the same cluster IPs; a changed set writes
// only what changed (and deletes what is gone); an object another field
// manager changed is applied again.
func TestApplyServicesSkipsUnchanged(t *testing.T) {
	ctx := context.Background()
	c, k := fakeClient()
	ns := []string{"cnlab-r-default"}
	objs := rewriteServiceSet(t, serviceSetText(20, "198.18.0.1"))
	vips, err := c.ApplyServices(ctx, "r", ns, objs)
	if err != nil {
		t.Fatal(err)
	}
	if w := writes(k.Actions()); len(w) != len(objs) {
		t.Fatalf("first apply: %d writes, want %d (one per object):\n%s", len(w), len(objs), strings.Join(w, "\n"))
	}
	k.ClearActions()
	again, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, serviceSetText(20, "198.18.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	if w := writes(k.Actions()); len(w) != 0 {
		t.Errorf("second apply of the same Services wrote:\n%s", strings.Join(w, "\n"))
	}
	if fmt.Sprint(again) != fmt.Sprint(vips) { // the fake allocates none: the control plane test counts them
		t.Errorf("cluster IPs: %v after the second apply, %v after the first; want the same", again, vips)
	}

	// One slice's backend changes, svc-00019's slice is new (svc-00019 is
	// no longer the selecting one; svc-00020 is), nothing else.
	k.ClearActions()
	text := strings.Replace(serviceSetText(21, "198.18.0.1"), "svc-00003-1, labels: {kubernetes.io/service-name: svc-00003}}\naddressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: [198.18.0.1]}]",
		"svc-00003-1, labels: {kubernetes.io/service-name: svc-00003}}\naddressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: [198.18.0.9]}]", 1)
	if _, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, text)); err != nil {
		t.Fatal(err)
	}
	want := []string{"patch endpointslices/svc-00003-1", "patch endpointslices/svc-00019-1", "patch services/svc-00019", "patch services/svc-00020"}
	if w := writes(k.Actions()); !slices.Equal(w, want) {
		t.Errorf("changed set wrote\n%s\nwant\n%s", strings.Join(w, "\n"), strings.Join(want, "\n"))
	}

	// Fewer Services: the rest are deleted, nothing applied.
	k.ClearActions()
	if _, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, text)[:6]); err != nil { // svc-00000..2 and their slices
		t.Fatal(err)
	}
	var deleted int
	for _, w := range writes(k.Actions()) {
		if !strings.HasPrefix(w, "delete ") {
			t.Errorf("shrinking the set wrote %s", w)
		}
		deleted++
	}
	if deleted != 2*21-1-6 {
		t.Errorf("shrinking 21 Services (41 objects) to 3 (6 objects): %d deletes, want 35", deleted)
	}

	// Someone else changes svc-00001 with a field manager of their own:
	// cnlab's next apply takes it back.
	other := []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-00001","namespace":"cnlab-r-default"},"spec":{"ports":[{"port":80,"targetPort":9090}]}}`)
	if _, err := k.CoreV1().Services("cnlab-r-default").Patch(ctx, "svc-00001", "application/apply-patch+yaml", other, metav1.PatchOptions{FieldManager: "kubectl", Force: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	k.ClearActions()
	if _, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, text)[:6]); err != nil {
		t.Fatal(err)
	}
	if w := writes(k.Actions()); !slices.Equal(w, []string{"patch services/svc-00001"}) {
		t.Errorf("after someone else's change to svc-00001, cnlab wrote %v; want it applied again, alone", w)
	}
	got, _ := k.CoreV1().Services("cnlab-r-default").Get(ctx, "svc-00001", metav1.GetOptions{})
	if len(got.Spec.Ports) != 1 || got.Spec.Ports[0].TargetPort.IntValue() != 8080 {
		t.Errorf("svc-00001's ports %v after cnlab's apply: want target port 8080 back", got.Spec.Ports)
	}
}

// TestApplyServicesFailureNamesObject: a failed apply among many stops
// the rest and says which object failed; nothing is deleted after it.
func TestApplyServicesFailureNamesObject(t *testing.T) {
	ctx := context.Background()
	c, k := fakeClient()
	ns := []string{"cnlab-r-default"}
	if _, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, serviceSetText(3, "198.18.0.1"))); err != nil {
		t.Fatal(err)
	}
	var patches atomic.Int32
	k.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		if a.(k8stesting.PatchAction).GetName() == "svc-00042-1" {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	k.ClearActions()
	// svc-00001-1's backend changes so that all 399 new objects but the
	// 3 unchanged are applied, svc-00002 (a slice now) too.
	objs := rewriteServiceSet(t, serviceSetText(200, "198.18.0.2"))
	_, err := c.ApplyServices(ctx, "r", ns, objs)
	if err == nil || !strings.Contains(err.Error(), "apply EndpointSlice cnlab-r-default/svc-00042-1: etcdserver: request timed out") {
		t.Fatalf("apply with a failing slice: %v; want the slice named with its error", err)
	}
	if n := int(patches.Load()); n >= len(objs)/2 {
		t.Errorf("%d of %d objects were still applied after the failure: want the rest stopped", n, len(objs))
	}
	for _, w := range writes(k.Actions()) {
		if strings.HasPrefix(w, "delete ") {
			t.Errorf("a failed apply went on to %s", w)
		}
	}
}

// TestInParallel: at most workers jobs at once; a job's error is
// returned, not the cancellation it caused in the others; the caller's
// cancellation is returned as such.
func TestInParallel(t *testing.T) {
	var running, most atomic.Int32
	var jobs []func(context.Context) error
	for range 100 {
		jobs = append(jobs, func(ctx context.Context) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return nil
		})
	}
	if err := inParallel(context.Background(), 4, jobs); err != nil || most.Load() > 4 || most.Load() < 1 {
		t.Errorf("100 jobs, 4 workers: %v, at most %d at once", err, most.Load())
	}
	boom := errors.New("boom")
	failing := []func(context.Context) error{
		func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("slow: %w", ctx.Err()) },
		func(context.Context) error { return boom },
	}
	if err := inParallel(context.Background(), 2, failing); !errors.Is(err, boom) {
		t.Errorf("a failing job beside one waiting for the end: %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inParallel(ctx, 2, jobs); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestServicesReapplyOnControlPlane: on a real API server, applying the
// same Services again leaves every object's resourceVersion as it was; a
// change rewrites only the changed objects.
func TestServicesReapplyOnControlPlane(t *testing.T) {
	cp := k8stest.Start(t, k8stest.Options{Nodes: 1})
	c, err := Connect(Config{Kubeconfig: cp.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.K.CoreV1().Namespaces().Apply(ctx, namespaceManifest("r", "cnlab-r-default", topology.Namespace{}), metav1.ApplyOptions{FieldManager: FieldManager}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down(context.Background(), "r", false) })
	ns := []string{"cnlab-r-default"}
	versions := func() map[string]string {
		v := map[string]string{}
		l, err := c.K.CoreV1().Services(ns[0]).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Items {
			v["Service "+s.Name] = s.ResourceVersion
		}
		sl, err := c.K.DiscoveryV1().EndpointSlices(ns[0]).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sl.Items {
			if s.Labels[sliceManagedBy] == "" {
				v["EndpointSlice "+s.Name] = s.ResourceVersion
			}
		}
		return v
	}
	changed := func(a, b map[string]string) []string {
		var d []string
		for k := range a {
			if a[k] != b[k] {
				d = append(d, k)
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				d = append(d, k)
			}
		}
		slices.Sort(d)
		return d
	}
	vips, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, serviceSetText(100, "198.18.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	v1 := versions()
	if len(v1) != 199 || len(vips) != 100 {
		t.Fatalf("100 Services applied: %d objects, %d cluster IPs; want 199 objects, 100 IPs", len(v1), len(vips))
	}
	again, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, serviceSetText(100, "198.18.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	if d := changed(v1, versions()); len(d) != 0 || fmt.Sprint(again) != fmt.Sprint(vips) {
		t.Errorf("the same 100 Services applied again: changed %v, cluster IPs the same: %v", d, fmt.Sprint(again) == fmt.Sprint(vips))
	}
	text := strings.Replace(serviceSetText(100, "198.18.0.1"), "svc-00007}\nspec:\n  ports: [{port: 80,", "svc-00007}\nspec:\n  ports: [{port: 81,", 1)
	if _, err := c.ApplyServices(ctx, "r", ns, rewriteServiceSet(t, text)); err != nil {
		t.Fatal(err)
	}
	if d := changed(v1, versions()); !slices.Equal(d, []string{"Service svc-00007"}) {
		t.Errorf("one Service's port changed: objects rewritten %v, want that Service only", d)
	}
}
