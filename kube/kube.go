// Package kube is cnlab's Kubernetes backend: it runs an experiment's
// points on a real cluster instead of a lab on this machine. A point's
// endpoints become agent pods (the topology's labels, placed on nodes with
// a nodeSelector) in namespaces cnlab creates and owns; its policies are
// applied with server-side apply under cnlab's own field manager; its
// workloads run by exec (no TTY) inside the agent pods, with cnlab's own
// binary streamed in so that `cnlab rr` is the same code as on a lab.
// Everything cnlab creates carries the label cnlab.io/run and is removed
// by it (Teardown, Down); nothing else is touched.
//
// docs/kubernetes.md has the mapping, what is refused and why.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Labels and names cnlab puts on what it creates.
const (
	// FieldManager owns every field cnlab applies.
	FieldManager = "cnlab"
	// RunLabel names the run (its lab name) on every object cnlab
	// creates; Down deletes by it.
	RunLabel = "cnlab.io/run"
	// ManagedLabel marks cnlab's objects (app.kubernetes.io/managed-by).
	ManagedLabel = "app.kubernetes.io/managed-by"
	// EndpointLabel names the topology endpoint a pod is (ns.name).
	EndpointLabel = "cnlab.io/endpoint"
	// HostLabel on a node names the topology host it plays, when
	// --nodes does not say.
	HostLabel = "cnlab.io/host"
	// NamespacePrefix starts every namespace cnlab creates.
	NamespacePrefix = "cnlab-"
	// DefaultImage holds iperf3, ping, sh and the coreutils the workloads
	// need; --image replaces it.
	DefaultImage = "docker.io/nicolaka/netshoot:v0.13"
)

// ClientQPS is the requests per second (twice that in a burst) a Client
// sends at most.
const ClientQPS = 1000

// Config is where and how to reach the cluster.
type Config struct {
	Kubeconfig string            // "" : $KUBECONFIG, then ~/.kube/config, then in-cluster
	Context    string            // "" : the kubeconfig's current context
	Nodes      map[string]string // topology host -> node name (--nodes flip=worker-1)
	Image      string            // the agent pods' image ("" : DefaultImage)
}

// Client talks to one cluster.
type Client struct {
	Config  Config
	REST    *rest.Config
	K       kubernetes.Interface
	Dynamic dynamic.Interface
	// Server is the API server's address, as the kubeconfig names it.
	Server string
}

// Connect builds clients from the kubeconfig. It does not contact the
// cluster.
func Connect(c Config) (*Client, error) {
	quietClientGo()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.Kubeconfig != "" {
		rules.ExplicitPath = c.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
	if err != nil {
		return nil, kubeconfigError(c, err)
	}
	cfg.UserAgent = "cnlab"
	// ApplyServices sends ApplyWorkers requests at once: client-go's
	// default limit (5/s) or the 50/s cnlab had made 10,000 Services (and
	// their EndpointSlices) minutes of waiting on this side alone.
	cfg.QPS, cfg.Burst = ClientQPS, 2*ClientQPS
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	if c.Image == "" {
		c.Image = clusterImage(k)
	}
	return &Client{Config: c, REST: cfg, K: k, Dynamic: d, Server: cfg.Host}, nil
}

// quietClientGo stops client-go's own log lines (klog to stderr): the
// exec streams' closing ("Websocket Ping failed", "Copying stdout
// failed") is routine for cnlab, whose errors say what went wrong.
func quietClientGo() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

// LocalClusterConfigMap (in kube-system) names, on a cluster cnlab cluster
// up made, the agent image it built (key agentImage): there is no
// registry to pull DefaultImage from.
const LocalClusterConfigMap = "cnlab-cluster"

// clusterImage is the agent image of a cluster cnlab cluster up made, or
// DefaultImage on any other.
func clusterImage(k kubernetes.Interface) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cm, err := k.CoreV1().ConfigMaps("kube-system").Get(ctx, LocalClusterConfigMap, metav1.GetOptions{})
	if err == nil && cm.Labels["app.kubernetes.io/managed-by"] == "cnlab" && CheckImage(cm.Data["agentImage"]) == nil {
		return cm.Data["agentImage"]
	}
	return DefaultImage
}

var hostName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseNodes reads --nodes: host=node pairs separated by commas.
func ParseNodes(v string) (map[string]string, error) {
	m := map[string]string{}
	if strings.TrimSpace(v) == "" {
		return m, nil
	}
	for _, kv := range strings.Split(v, ",") {
		h, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch {
		case !ok || h == "" || n == "":
			return nil, fmt.Errorf("%q: give HOST=NODE pairs separated by commas (flip=worker-1,flap=worker-2)", kv)
		case m[h] != "":
			return nil, fmt.Errorf("host %s is given twice", h)
		case len(n) > 253 || !nodeName.MatchString(n):
			return nil, fmt.Errorf("%q is not a node name", n)
		}
		m[h] = n
	}
	return m, nil
}

var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// NamespaceName is the cluster namespace of a topology namespace in a
// run: cnlab-RUN-NS.
func NamespaceName(run, ns string) (string, error) {
	n := NamespacePrefix + run + "-" + ns
	if len(n) > 63 || !hostName.MatchString(n) {
		return "", fmt.Errorf("namespace %q of run %q makes %q, not a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)", ns, run, n)
	}
	return n, nil
}

// ErrNotOwned is returned when a name cnlab would create is taken by an
// object cnlab did not create: it is never touched.
var ErrNotOwned = errors.New("exists and was not created by cnlab: it is left as it is")
