package results

// ClusterInfo is what a kubernetes run records about the cluster it
// measured (package kube detects it), in results.json and
// environment.json.
type ClusterInfo struct {
	Server    string `json:"server"`  // the API server's address
	Version   string `json:"version"` // its git version
	CNI       string `json:"cni"`     // detected from kube-system's DaemonSets ("unknown" when none matched)
	CNIImage  string `json:"cniImage,omitempty"`
	KubeProxy string `json:"kubeProxy"` // iptables, ipvs, nftables, "replaced by cilium", "none" or "unknown"
	// CiliumConfig are cilium-config's entries that change the datapath.
	CiliumConfig map[string]string `json:"ciliumConfig,omitempty"`
	Nodes        []NodeInfo        `json:"nodes"`
}

// NodeInfo is a node's system info as the kubelet reports it.
type NodeInfo struct {
	Name             string            `json:"name"`
	Kernel           string            `json:"kernel"`
	OSImage          string            `json:"osImage"`
	Arch             string            `json:"arch"`
	ContainerRuntime string            `json:"containerRuntime"`
	Kubelet          string            `json:"kubelet"`
	CPU              string            `json:"cpu"`
	Memory           string            `json:"memory"`
	InternalIP       string            `json:"internalIP,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"` // instance type, zone, cnlab.io/host
}
