package kube

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Info is what a run records about the cluster it measured.
type Info = results.ClusterInfo

// NodeInfo is a node's system info as the kubelet reports it.
type NodeInfo = results.NodeInfo

// cnis maps a DaemonSet's name or image to the CNI it runs, most
// specific first.
var cnis = []struct {
	re   *regexp.Regexp
	name string
}{
	{regexp.MustCompile(`(^|/)cilium(-agent)?[:@]|^cilium$`), "cilium"},
	{regexp.MustCompile(`^canal$|/canal`), "canal"},
	{regexp.MustCompile(`calico-node|calico/node`), "calico"},
	{regexp.MustCompile(`flannel`), "flannel"},
	{regexp.MustCompile(`weave-net|weaveworks/weave`), "weave"},
	{regexp.MustCompile(`antrea`), "antrea"},
	{regexp.MustCompile(`kube-router`), "kube-router"},
	{regexp.MustCompile(`ovnkube|ovn-kubernetes`), "ovn-kubernetes"},
	{regexp.MustCompile(`aws-node|amazon-k8s-cni`), "aws-vpc-cni"},
	{regexp.MustCompile(`azure-cns|azure-cni`), "azure-cni"},
	{regexp.MustCompile(`kindnet`), "kindnet"},
}

// DetectCNI names the CNI from kube-system's DaemonSets: their names,
// then their images.
func DetectCNI(dss []appsv1.DaemonSet) (name, image string) {
	sort.Slice(dss, func(i, j int) bool { return dss[i].Name < dss[j].Name })
	for _, c := range cnis {
		for _, ds := range dss {
			var images []string
			for _, ct := range ds.Spec.Template.Spec.Containers {
				images = append(images, ct.Image)
			}
			if c.re.MatchString(ds.Name) {
				return c.name, strings.Join(images, " ")
			}
			for _, im := range images {
				if c.re.MatchString(im) {
					return c.name, im
				}
			}
		}
	}
	return "unknown", ""
}

var proxyMode = regexp.MustCompile(`(?m)^mode:\s*"?([a-z]*)"?\s*$`)

// Detect describes the cluster: its version, CNI, kube-proxy mode and
// nodes. What it cannot read (RBAC) is recorded as "unknown", not an
// error: a run may go on without it.
func (c *Client) Detect(ctx context.Context) (*Info, error) {
	info := &Info{Server: c.Server, CNI: "unknown", KubeProxy: "unknown"}
	if v, err := c.K.Discovery().ServerVersion(); err == nil {
		info.Version = v.GitVersion
	} else {
		return nil, fmt.Errorf("reach the API server %s: %w", c.Server, err)
	}
	dss, err := c.K.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{})
	if err == nil {
		info.CNI, info.CNIImage = DetectCNI(dss.Items)
		hasProxy := slices.ContainsFunc(dss.Items, func(d appsv1.DaemonSet) bool { return d.Name == "kube-proxy" })
		if !hasProxy {
			info.KubeProxy = "none"
		}
	}
	if cm, err := c.K.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err == nil {
		mode := "iptables" // kube-proxy's default on Linux
		if m := proxyMode.FindStringSubmatch(cm.Data["config.conf"]); m != nil && m[1] != "" {
			mode = m[1]
		}
		info.KubeProxy = mode
	} else if !apierrors.IsNotFound(err) && info.KubeProxy != "none" {
		info.KubeProxy = "unknown"
	}
	if cm, err := c.K.CoreV1().ConfigMaps("kube-system").Get(ctx, "cilium-config", metav1.GetOptions{}); err == nil {
		info.CiliumConfig = map[string]string{}
		for _, k := range []string{"kube-proxy-replacement", "routing-mode", "tunnel-protocol", "enable-bpf-masquerade", "bpf-lb-sock", "enable-host-legacy-routing", "datapath-mode", "enable-l7-proxy", "policy-enforcement-mode"} {
			if v, ok := cm.Data[k]; ok {
				info.CiliumConfig[k] = v
			}
		}
		if v := cm.Data["kube-proxy-replacement"]; v == "true" || v == "strict" {
			info.KubeProxy = "replaced by cilium"
		}
	}
	// A cluster of cnlab cluster up runs its CNI and policy engine as
	// processes of the nodes, not DaemonSets: it says which.
	if cm, err := c.K.CoreV1().ConfigMaps("kube-system").Get(ctx, LocalClusterConfigMap, metav1.GetOptions{}); err == nil &&
		cm.Labels["app.kubernetes.io/managed-by"] == "cnlab" && info.CNI == "unknown" && cm.Data["cni"] != "" {
		info.CNI = cm.Data["cni"]
		if p := cm.Data["policy"]; p != "" && p != "none" && p != cm.Data["cni"] {
			info.CNI += "+" + p
		}
	}
	nodes, err := c.K.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		ni := NodeInfo{Name: n.Name, Kernel: n.Status.NodeInfo.KernelVersion, OSImage: n.Status.NodeInfo.OSImage, Arch: n.Status.NodeInfo.Architecture,
			ContainerRuntime: n.Status.NodeInfo.ContainerRuntimeVersion, Kubelet: n.Status.NodeInfo.KubeletVersion,
			CPU: n.Status.Capacity.Cpu().String(), Memory: n.Status.Capacity.Memory().String()}
		for _, a := range n.Status.Addresses {
			if a.Type == "InternalIP" && ni.InternalIP == "" {
				ni.InternalIP = a.Address
			}
		}
		for _, k := range []string{"node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", HostLabel, "type"} {
			if v, ok := n.Labels[k]; ok {
				if ni.Labels == nil {
					ni.Labels = map[string]string{}
				}
				ni.Labels[k] = v
			}
		}
		info.Nodes = append(info.Nodes, ni)
	}
	return info, nil
}
