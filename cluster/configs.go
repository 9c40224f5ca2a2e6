package cluster

import (
	"fmt"
	"path/filepath"
)

// containerdConfig is node i's containerd configuration: root, state,
// sockets, runc's state, the CNI configuration and the pods' network
// namespaces all in the cluster's directories; cgroupfs (no systemd here);
// the local pause image; oom_score_adj never below the daemon's (this root
// lacks CAP_SYS_RESOURCE).
func containerdConfig(l layout, i int, pause, cniBin string) string {
	nd, nr := l.nodeDir(i), l.nodeRun(i)
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(nd, "containerd"), filepath.Join(nr, "containerd"),
		l.sock(i), l.sock(i)+".ttrpc", filepath.Join(nd, "opt"), pause,
		filepath.Join(nr, "runc"), cniBin, filepath.Join(nd, "net.d"))
}

// cniConfig is node i's CNI network: a bridge with host-local addresses
// from the node's pod CIDR (its state in the cluster's directory).
func cniConfig(l layout, i int) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, l.cniNetwork(), podCIDR(i), filepath.Join(l.nodeDir(i), "cni-ipam"))
}

// kubeletConfig is node i's KubeletConfiguration. cgroup v1 needs
// failCgroupV1: false (kubelet v1.37 refuses v1 by default), no systemd
// means cgroupfs, and the node's cgroupRoot keeps two nodes' pods apart.
func kubeletConfig(l layout, i int, pki func(string) string) string {
	nd := l.nodeDir(i)
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
tlsCertFile: %s
tlsPrivateKeyFile: %s
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podCIDR: %s
maxPods: 110
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi"}
registerNode: true
podLogsDir: %s
volumePluginDir: %s
serializeImagePulls: false
`, l.sock(i), l.cgroup(i), nodeIP(i), pki("ca.crt"), pki(fmt.Sprintf("node%d.crt", i)), pki(fmt.Sprintf("node%d.key", i)),
		podCIDR(i), filepath.Join(nd, "pod-logs"), filepath.Join(nd, "volume-plugins"))
}

// kubeProxyConfig is node i's KubeProxyConfiguration. The conntrack zeros
// leave the machine-wide conntrack sysctls as they are.
func kubeProxyConfig(l layout, i int, mode string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: %s
clusterCIDR: %s
hostnameOverride: %s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, l.inner(), mode, ClusterCIDR, l.node(i))
}
