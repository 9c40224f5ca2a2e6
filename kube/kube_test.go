package kube

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/cnlab/cnlab/topology"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeClient is a Client on client-go's fake clientsets (server-side
// apply and field managers included; no validation, no pods running).
func fakeClient(objs ...runtime.Object) (*Client, *fake.Clientset) {
	k := fake.NewClientset(objs...)
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CiliumPolicies: "CiliumNetworkPolicyList",
			AdminPolicies: "AdminNetworkPolicyList", BaselinePolicies: "BaselineAdminNetworkPolicyList", ClusterPolicies: "ClusterNetworkPolicyList"})
	return &Client{Config: Config{Image: DefaultImage}, K: k, Dynamic: d, Server: "https://fake"}, k
}

func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./kube -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from what the code makes now (go test ./kube -update rewrites it after a deliberate change):\n%s", path, got)
	}
}

func preset(t *testing.T) *topology.Spec {
	t.Helper()
	s, err := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestManifestsGolden(t *testing.T) {
	s := preset(t)
	ep, err := s.Endpoint("default/server")
	if err != nil {
		t.Fatal(err)
	}
	ep.Ports = []topology.Port{{Name: "rr", Port: 12865, Protocol: "TCP"}}
	golden(t, "pod-server.json", agentPod("xp-1a2b", "cnlab-xp-1a2b-default", *ep, "worker-2", "example.org/netshoot:1", false))
	golden(t, "pod-server-hostnet.json", agentPod("xp-1a2b", "cnlab-xp-1a2b-default", *ep, "worker-2", "example.org/netshoot:1", true))
	golden(t, "namespace.json", namespaceManifest("xp-1a2b", "cnlab-xp-1a2b-x", topology.Namespace{Labels: map[string]string{"ns": "x"}}))
}

func TestRewritePolicies(t *testing.T) {
	nsMap := map[string]string{"default": "cnlab-r-default", "x": "cnlab-r-x", "y": "cnlab-r-y"}
	text := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: y}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: x}}
    - namespaceSelector:
        matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [x, default]}]
    - namespaceSelector: {matchLabels: {ns: x}}
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: l3}
spec:
  endpointSelector: {matchLabels: {app: server}}
  ingress:
  - fromEndpoints: [{matchLabels: {k8s:io.kubernetes.pod.namespace: y, app: client}}]
`
	objs, err := RewritePolicies([]byte(text), "p.yaml", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "policies.json", objs)
	if objs[0].Namespace != "cnlab-r-y" || objs[1].Namespace != "cnlab-r-default" {
		t.Errorf("namespaces %s, %s: want cnlab-r-y (namespace: y, a string, not YAML 1.1's boolean) and cnlab-r-default", objs[0].Namespace, objs[1].Namespace)
	}
	bad := []struct{ text, want string }{
		{"kind: NetworkPolicy\nmetadata: {name: a, namespace: z}\nspec: {}\n", `metadata.namespace "z" is not a namespace of the topology`},
		{"kind: NetworkPolicy\nmetadata: {name: a}\nspec: {ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}}]}]}\n", `names namespace "kube-system"`},
		{"kind: CiliumClusterwideNetworkPolicy\nmetadata: {name: a}\n", "pods cnlab does not own"},
		{"kind: Service\nmetadata: {name: a}\n", `kind "Service"`},
		{"kind: NetworkPolicy\n", "no metadata"},
	}
	for _, b := range bad {
		_, err := RewritePolicies([]byte(b.text), "p.yaml", nsMap, "r")
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.HasPrefix(err.Error(), "p.yaml: document 1") {
			t.Errorf("%q: error %v, want one naming p.yaml, document 1 and %q", b.text, err, b.want)
		}
	}
}

func TestApplyPoliciesReplacesOnlyCnlabs(t *testing.T) {
	ctx := context.Background()
	theirs := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "cnlab-r-default"}}
	c, k := fakeClient(theirs)
	nsMap := map[string]string{"default": "cnlab-r-default"}
	two := "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: a}\nspec: {podSelector: {}}\n---\nkind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: b}\nspec: {podSelector: {}}\n"
	one := "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: b}\nspec: {podSelector: {matchLabels: {app: server}}}\n"
	for _, text := range []string{two, one} {
		objs, err := RewritePolicies([]byte(text), "p", nsMap, "r")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ApplyPolicies(ctx, "r", []string{"cnlab-r-default"}, objs); err != nil {
			t.Fatal(err)
		}
	}
	l, err := k.NetworkingV1().NetworkPolicies("cnlab-r-default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
		if p.Name == "b" {
			if p.Spec.PodSelector.MatchLabels["app"] != "server" {
				t.Errorf("b was not updated: %+v", p.Spec)
			}
			if p.Labels[RunLabel] != "r" || p.Labels[ManagedLabel] != "cnlab" {
				t.Errorf("b's labels %v: want cnlab's", p.Labels)
			}
			if len(p.ManagedFields) == 0 || p.ManagedFields[0].Manager != FieldManager {
				t.Errorf("b's managed fields %+v: want field manager %s", p.ManagedFields, FieldManager)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"b", "theirs"}) {
		t.Errorf("policies %v: want b (replaced a and b) and theirs (not cnlab's: untouched)", names)
	}
	// An API error names the object.
	k.PrependReactor("patch", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"}, "b", errors.New("RBAC"))
	})
	objs, _ := RewritePolicies([]byte(one), "p", nsMap, "r")
	if err := c.ApplyPolicies(ctx, "r", []string{"cnlab-r-default"}, objs); err == nil || !strings.Contains(err.Error(), "apply NetworkPolicy cnlab-r-default/b") || !apierrors.IsForbidden(errors.Unwrap(err)) {
		t.Errorf("error %v: want the forbidden apply of cnlab-r-default/b", err)
	}
}

func TestDeployRefusesANamespaceNotCnlabs(t *testing.T) {
	theirs := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cnlab-r-default"}}
	c, k := fakeClient(theirs)
	s := preset(t)
	nodes := map[string]string{}
	for _, ep := range s.Endpoints {
		nodes[ep.ID()] = "n1"
	}
	_, err := c.Deploy(context.Background(), "r", s, Placement{Nodes: nodes}, "", nil)
	if !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "cnlab-r-default") {
		t.Fatalf("error %v: want namespace cnlab-r-default not owned", err)
	}
	got, _ := k.CoreV1().Namespaces().Get(context.Background(), "cnlab-r-default", metav1.GetOptions{})
	if len(got.Labels) != 0 {
		t.Errorf("the user's namespace was changed: labels %v", got.Labels)
	}
	pods, _ := k.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created after the refusal", len(pods.Items))
	}
}

// TestDeployAndDown runs Deploy on the fake clientset, with a reactor
// that plays the scheduler and kubelet (a pod runs on its nodeSelector's
// node with an address), then Down: only cnlab's namespaces go.
func TestDeployAndDown(t *testing.T) {
	ctx := context.Background()
	theirs := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}
	c, k := fakeClient(theirs)
	// The serviceaccount controller.
	k.PrependReactor("get", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: a.GetNamespace()}}, nil
	})
	// The scheduler and kubelet: every pod runs on the node its affinity
	// names.
	ip := 10
	k.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := k.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.Spec.NodeName = p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
		p.Status.Phase = corev1.PodRunning
		ip++
		p.Status.PodIP = fmt.Sprintf("10.244.0.%d", ip)
		return true, p, nil
	})
	s := preset(t)
	nodes := map[string]string{"default/client": "n1", "default/server": "n2"}
	for _, ep := range s.Endpoints {
		if nodes[ep.ID()] == "" {
			nodes[ep.ID()] = "n1"
		}
	}
	d, err := c.Deploy(ctx, "r", s, Placement{Nodes: nodes}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Pods["default/server"].Node != "n2" || !d.Pods["default/server"].IP.IsValid() || d.Namespaces["default"] != "cnlab-r-default" {
		t.Errorf("deployment %+v: want the server on n2 with an address, in cnlab-r-default", d)
	}
	pod, err := k.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "cnlab-r-default", "server")
	if err != nil {
		t.Fatal(err)
	}
	if l := pod.(*corev1.Pod).Labels; l["app"] != "server" || l[RunLabel] != "r" {
		t.Errorf("server pod labels %v: want the topology's and the run's", l)
	}
	gone, err := c.Down(ctx, "r", false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{"cnlab-r-default"}) {
		t.Errorf("Down deleted %v: want cnlab-r-default only", gone)
	}
	if _, err := k.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Errorf("kube-system: %v", err)
	}
	// Another run's namespace is not this run's.
	if gone, _ := c.Down(ctx, "other", false); len(gone) != 0 {
		t.Errorf("Down(other) deleted %v", gone)
	}
}

func node(name string, labels map[string]string, ready bool, taints ...corev1.Taint) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

func TestHostNodes(t *testing.T) {
	ctx := context.Background()
	nodes := []runtime.Object{
		node("cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}, true),
		node("w1", nil, true),
		node("w2", map[string]string{HostLabel: "flap"}, true),
		node("w3", nil, false),
		node("w4", nil, true, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}),
	}
	c, _ := fakeClient(nodes...)
	got, err := c.HostNodes(ctx, []string{"flip", "flap"})
	if err != nil || got["flip"] != "w1" || got["flap"] != "w2" {
		t.Errorf("auto and label: %v %v; want flip on w1 (first worker), flap on w2 (labeled)", got, err)
	}
	c.Config.Nodes = map[string]string{"flip": "cp"}
	got, err = c.HostNodes(ctx, []string{"flip", "flap"})
	if err != nil || got["flip"] != "cp" || got["flap"] != "w2" {
		t.Errorf("--nodes: %v %v; want flip on cp, flap on w2", got, err)
	}
	for _, bad := range []struct {
		nodes map[string]string
		want  string
	}{
		{map[string]string{"flip": "w3"}, "node w3 is not Ready"},
		{map[string]string{"flip": "w4"}, "tainted gpu:NoSchedule"},
		{map[string]string{"flip": "nope"}, "the cluster has no node nope"},
	} {
		c.Config.Nodes = bad.nodes
		if _, err := c.HostNodes(ctx, []string{"flip", "flap"}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--nodes %v: error %v, want %q", bad.nodes, err, bad.want)
		}
	}
	c.Config.Nodes = map[string]string{"flop": "w1"}
	if err := c.Preflight(ctx, "r", []string{"flip", "flap"}, nil, false); err == nil || !strings.Contains(err.Error(), "--nodes: flop=w1: the experiment's topologies have no host flop") {
		t.Errorf("preflight of --nodes flop=w1: %v", err)
	}
	c.Config.Nodes = map[string]string{"flip": "w3"}
	if err := c.Preflight(ctx, "r", []string{"flip", "flap"}, nil, false); err == nil || !strings.Contains(err.Error(), "--nodes: flip=w3: node w3 is not Ready") {
		t.Errorf("preflight of --nodes flip=w3: %v", err)
	}
	c.Config.Nodes = nil
	one, _ := fakeClient(node("only", nil, true))
	s := preset(t)
	if _, err := one.EndpointNodes(ctx, s, CrossNode); err == nil || !strings.Contains(err.Error(), "no usable node left") {
		t.Errorf("cross-node on one node: %v, want no usable node left", err)
	}
	for _, s := range []*topology.Spec{singleHost(t), preset(t)} {
		m, err := one.EndpointNodes(ctx, s, SameNode)
		if err != nil || m["default/server"] != "only" || m["default/client"] != "only" {
			t.Errorf("same-node on one node (%d hosts): %v %v", len(s.Hosts), m, err)
		}
	}
	two, _ := fakeClient(node("a", nil, true), node("b", nil, true))
	m, err := two.EndpointNodes(ctx, singleHost(t), CrossNode)
	if err != nil || m["default/server"] != "b" || m["default/client"] != "a" {
		t.Errorf("cross-node from a one-host topology: %v %v; want the server on b", m, err)
	}
}

func singleHost(t *testing.T) *topology.Spec {
	s, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ds(name, image string) appsv1.DaemonSet {
	return appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: image}}}}}}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		dss  []appsv1.DaemonSet
		want string
	}{
		{[]appsv1.DaemonSet{ds("kube-proxy", "registry.k8s.io/kube-proxy:v1.37.2"), ds("cilium", "quay.io/cilium/cilium:v1.18.0"), ds("cilium-envoy", "quay.io/cilium/cilium-envoy:v1")}, "cilium"},
		{[]appsv1.DaemonSet{ds("calico-node", "docker.io/calico/node:v3.30"), ds("kube-proxy", "registry.k8s.io/kube-proxy:v1.37.2")}, "calico"},
		{[]appsv1.DaemonSet{ds("kube-flannel-ds", "ghcr.io/flannel-io/flannel:v0.27")}, "flannel"},
		{[]appsv1.DaemonSet{ds("node-agent", "example.org/kindnetd:v2")}, "kindnet"},
		{[]appsv1.DaemonSet{ds("kube-proxy", "registry.k8s.io/kube-proxy:v1.37.2")}, "unknown"},
	} {
		if got, _ := DetectCNI(c.dss); got != c.want {
			t.Errorf("%v: CNI %s, want %s", c.dss[0].Name, got, c.want)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}, Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nmode: \"nftables\"\n"}}
	kp := ds("kube-proxy", "registry.k8s.io/kube-proxy:v1.37.2")
	cal := ds("calico-node", "docker.io/calico/node:v3.30")
	n := node("w1", map[string]string{"topology.kubernetes.io/zone": "z1"}, true)
	n.Status.NodeInfo = corev1.NodeSystemInfo{KernelVersion: "6.18.0", Architecture: "amd64"}
	c, _ := fakeClient(cm, &kp, &cal, n)
	info, err := c.Detect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.CNI != "calico" || info.KubeProxy != "nftables" || len(info.Nodes) != 1 || info.Nodes[0].Kernel != "6.18.0" || info.Nodes[0].Labels["topology.kubernetes.io/zone"] != "z1" {
		t.Errorf("info %+v: want calico, nftables, w1 with its kernel and zone", info)
	}
	bare, _ := fakeClient()
	info, err = bare.Detect(context.Background())
	if err != nil || info.CNI != "unknown" || info.KubeProxy != "none" {
		t.Errorf("a cluster with nothing in kube-system: %+v %v; want CNI unknown, kube-proxy none", info, err)
	}
}

func TestExitError(t *testing.T) {
	kubelet := utilexec.CodeExitError{Err: errors.New("command terminated with non-zero exit code"), Code: 3}
	kwok := errors.New(`Internal error occurred: error executing command in container: exit status 3`)
	for _, err := range []error{kubelet, &kubelet, kwok} {
		var xe *ExitError
		if got := exitError(err, "first\nlast words\n"); !errors.As(got, &xe) || xe.Code != 3 || xe.Msg != "last words" {
			t.Errorf("%v: %#v, want exit 3 with the last line of stderr", err, got)
		}
	}
	other := errors.New("dial tcp: connection refused")
	if got := exitError(other, ""); got != other {
		t.Errorf("a transport error became %v", got)
	}
}

func TestParseNodesAndNames(t *testing.T) {
	m, err := ParseNodes("flip=worker-1, flap=worker-2.example")
	if err != nil || m["flip"] != "worker-1" || m["flap"] != "worker-2.example" {
		t.Errorf("%v %v", m, err)
	}
	for _, bad := range []string{"flip", "flip=", "=n", "flip=a,flip=b", "flip=Worker_1"} {
		if _, err := ParseNodes(bad); err == nil {
			t.Errorf("--nodes %q accepted", bad)
		}
	}
	if n, err := NamespaceName("xp-1a2b", "default"); err != nil || n != "cnlab-xp-1a2b-default" {
		t.Errorf("%s %v", n, err)
	}
	if _, err := NamespaceName("XP", "default"); err == nil {
		t.Error("an upper-case run name accepted")
	}
	if _, err := NamespaceName(strings.Repeat("a", 60), "default"); err == nil {
		t.Error("a 75-character namespace accepted")
	}
}

func TestReapArgs(t *testing.T) {
	got := ReapArgs(Config{Kubeconfig: "/k", Context: "c"})
	want := []string{"agent", "reap", "--kubeconfig", "/k", "--context", "c"}
	if !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
	w := WrapCommand("/tmp/x.pid", []string{"iperf3", "-s"})
	if w[0] != "sh" || w[3] != "/tmp/x.pid" || !slices.Equal(w[4:], []string{"iperf3", "-s"}) {
		t.Errorf("wrapped %v", w)
	}
}

// TestApplyConflictsAndOwnership: a field another manager changed on
// cnlab's policy is taken back (forced apply); a policy or Service of the
// same name that cnlab did not create is refused before anything changes.
func TestApplyConflictsAndOwnership(t *testing.T) {
	ctx := context.Background()
	c, k := fakeClient()
	nsMap := map[string]string{"default": "cnlab-r-default"}
	text := "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: a}\nspec: {podSelector: {matchLabels: {app: server}}}\n"
	objs, err := RewritePolicies([]byte(text), "p", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPolicies(ctx, "r", []string{"cnlab-r-default"}, objs); err != nil {
		t.Fatal(err)
	}
	// Someone edits cnlab's policy with a manager of their own.
	other := []byte(`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"a","namespace":"cnlab-r-default"},"spec":{"podSelector":{"matchLabels":{"app":"other"}}}}`)
	if _, err := k.NetworkingV1().NetworkPolicies("cnlab-r-default").Patch(ctx, "a", "application/apply-patch+yaml", other, metav1.PatchOptions{FieldManager: "kubectl", Force: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPolicies(ctx, "r", []string{"cnlab-r-default"}, objs); err != nil {
		t.Fatalf("cnlab's apply after someone else's: %v", err)
	}
	got, _ := k.NetworkingV1().NetworkPolicies("cnlab-r-default").Get(ctx, "a", metav1.GetOptions{})
	if got.Spec.PodSelector.MatchLabels["app"] != "server" {
		t.Errorf("podSelector %v after cnlab's forced apply: want app=server back", got.Spec.PodSelector.MatchLabels)
	}
	// Not cnlab's: refused, unchanged.
	theirs := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cnlab-r-default"}}
	if _, err := k.NetworkingV1().NetworkPolicies("cnlab-r-default").Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, _ := RewritePolicies([]byte(strings.ReplaceAll(text, "name: a", "name: b")), "p", nsMap, "r")
	if err := c.ApplyPolicies(ctx, "r", []string{"cnlab-r-default"}, b); !errors.Is(err, ErrNotOwned) {
		t.Errorf("apply over a policy cnlab did not create: %v, want ErrNotOwned", err)
	}
	if got, _ := k.NetworkingV1().NetworkPolicies("cnlab-r-default").Get(ctx, "b", metav1.GetOptions{}); len(got.Labels) != 0 {
		t.Errorf("their policy was changed: %v", got.Labels)
	}
	if _, err := k.NetworkingV1().NetworkPolicies("cnlab-r-default").Get(ctx, "a", metav1.GetOptions{}); err != nil {
		t.Errorf("the refused apply deleted cnlab's policy a first: %v", err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-00000", Namespace: "cnlab-r-default"}}
	if _, err := k.CoreV1().Services("cnlab-r-default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	so, err := RewriteServices([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: svc-00000}\nspec: {ports: [{port: 80}]}\n"), "s", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyServices(ctx, "r", []string{"cnlab-r-default"}, so); !errors.Is(err, ErrNotOwned) {
		t.Errorf("apply over a Service cnlab did not create: %v, want ErrNotOwned", err)
	}
}

// TestControllerSlicesUntouched: the EndpointSlice controller's slices
// carry the Service's labels, cnlab's included; cnlab never deletes them.
func TestControllerSlicesUntouched(t *testing.T) {
	ctx := context.Background()
	c, k := fakeClient()
	nsMap := map[string]string{"default": "cnlab-r-default"}
	so, err := RewriteServices([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: server}, ports: [{port: 80}]}\n"), "s", nsMap, "r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyServices(ctx, "r", []string{"cnlab-r-default"}, so); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-x7k2p", Namespace: "cnlab-r-default",
		Labels: map[string]string{RunLabel: "r", ManagedLabel: "cnlab", sliceManagedBy: "endpointslice-controller.k8s.io", "kubernetes.io/service-name": "web"}}, AddressType: discoveryv1.AddressTypeIPv4}
	if _, err := k.DiscoveryV1().EndpointSlices("cnlab-r-default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyServices(ctx, "r", []string{"cnlab-r-default"}, so); err != nil {
		t.Fatal(err)
	}
	if _, err := k.DiscoveryV1().EndpointSlices("cnlab-r-default").Get(ctx, "web-x7k2p", metav1.GetOptions{}); err != nil {
		t.Errorf("the controller's slice was deleted by a second apply: %v", err)
	}
}
