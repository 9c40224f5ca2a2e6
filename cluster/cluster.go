// Package cluster brings a real Kubernetes cluster up on this machine and
// takes it down without a trace: etcd, kube-apiserver, controller-manager
// and scheduler, and per node containerd (Debian's), kubelet, kube-proxy
// and optionally kube-router's firewall, with real pods on a bridge CNI. It
// is what the kubernetes backend is tested against end to end, and what
// cnlab's re-implementations are measured beside (docs/cluster.md).
//
// Everything lives in places cnlab owns:
//   - one network namespace per node (cnlabk8s.NAME.nodeN), whose "NIC" is
//     a veth pair (one node: both ends inside; two nodes: one end in each,
//     a wire); every daemon runs inside, so kube-proxy's and kube-router's
//     rules, the CNI bridge and the pods' veths are there, never on the
//     host;
//   - /var/lib/cnlab/clusters/NAME (keys, configs, etcd, containerd's and
//     kubelet's roots, logs) and /run/cnlab-clusters/NAME (sockets,
//     containerd's state, the pods' network namespaces, runc's state);
//   - a cgroup per node at the top of every hierarchy (kubelet's
//     cgroupRoot), so two nodes on one machine do not share /kubepods;
//   - kubelet runs in a mount namespace of its own where the six kernel
//     sysctls it insists on (vm.overcommit_memory, kernel.panic, ...) are
//     files, so the host's stay as they are.
//
// kubelet's fixed /var/lib/kubelet/device-plugins is the node's own,
// mounted over it in kubelet's mount namespace (the host keeps an empty
// mount point). What Kubernetes still writes outside (paths fixed in
// kubelet, containerd and libcni: /var/log/containers,
// /var/lib/cni/results, /run/containerd/s) is removed by Down, which finds
// what to delete from the kernel's and the file system's state, so a
// cluster left half-built by kill -9 at any step goes too.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cnlab/cnlab/internal/nsforward"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Where clusters live.
var (
	StateRoot = "/var/lib/cnlab/clusters"
	RunRoot   = "/run/cnlab-clusters"
	ImageDir  = "/var/cache/cnlab/cluster-images"
)

const (
	// DefaultName is the cluster's name when none is given.
	DefaultName = "local"
	// NetnsPrefix starts every node namespace's name. It is not the labs'
	// "cnlab.": lab commands never see a cluster's namespaces.
	NetnsPrefix = "cnlabk8s."
	// ServiceCIDR is the apiserver's --service-cluster-ip-range.
	ServiceCIDR = "10.96.0.0/16"
	// ClusterCIDR holds every node's pod CIDR (10.244.N-1.0/24).
	ClusterCIDR = "10.244.0.0/16"
	// apiPort is the apiserver's port on the first node.
	apiPort = 6443
	// MaxNodes is how many nodes a cluster may have.
	MaxNodes = 2
	// infoFile is the cluster's record in its state directory.
	infoFile = "cluster.json"
	// ImageConfigMap (in kube-system) tells the kubernetes backend which
	// agent image this cluster has (key agentImage): no registry here.
	ImageConfigMap = "cnlab-cluster" // kube.LocalClusterConfigMap: the backend reads it
)

// Choices of cluster up.
var (
	CNIs     = []string{"bridge", "cilium"}
	Proxies  = []string{"iptables", "nftables", "cilium"}
	Policies = []string{"none", "kube-router", "cilium"}
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?$`)

// CheckName refuses what cannot name a cluster: it goes into namespace,
// cgroup and Kubernetes node names.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("cluster name %q: 1 to 16 lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// Options of Up.
type Options struct {
	Name     string
	Nodes    int    // 1 or 2
	CNI      string // bridge or cilium
	Proxy    string // iptables, nftables or cilium (Cilium's kube-proxy replacement)
	Policy   string // none, kube-router or cilium
	Tools    string // directory of the Kubernetes binaries (scripts/k8s-tools.sh)
	Cilium   string // directory of the real Cilium's build (scripts/k8s-tools.sh); for --cni cilium
	Progress func(string)
}

// Info is a cluster's record (cluster.json) and what status shows.
type Info struct {
	Name       string    `json:"name"`
	Kubeconfig string    `json:"kubeconfig"`
	Server     string    `json:"server"`
	Nodes      []Node    `json:"nodes"`
	CNI        string    `json:"cni"`
	Proxy      string    `json:"proxy"`
	Policy     string    `json:"policy"`
	AgentImage string    `json:"agentImage,omitempty"`
	Dir        string    `json:"dir"`
	Created    time.Time `json:"created"`
	UpSeconds  float64   `json:"upSeconds,omitempty"` // how long up took
}

// Node is one node of a cluster.
type Node struct {
	Name       string `json:"name"`
	Ready      bool   `json:"ready"`
	InternalIP string `json:"internalIP"`
	PodCIDR    string `json:"podCIDR"`
	Netns      string `json:"netns"`
}

// layout names everything of one cluster.
type layout struct{ name string }

func (l layout) dir() string           { return filepath.Join(StateRoot, l.name) }
func (l layout) run() string           { return filepath.Join(RunRoot, l.name) }
func (l layout) logs() string          { return filepath.Join(l.dir(), "logs") }
func (l layout) pki() string           { return filepath.Join(l.dir(), "pki") }
func (l layout) kubeconfig() string    { return filepath.Join(l.dir(), "kubeconfig") }
func (l layout) inner() string         { return filepath.Join(l.pki(), "admin.kubeconfig") }
func (l layout) netns(i int) string    { return fmt.Sprintf("%s%s.node%d", NetnsPrefix, l.name, i) }
func (l layout) node(i int) string     { return fmt.Sprintf("%s-node%d", l.name, i) }
func (l layout) nodeDir(i int) string  { return filepath.Join(l.dir(), fmt.Sprintf("node%d", i)) }
func (l layout) nodeRun(i int) string  { return filepath.Join(l.run(), fmt.Sprintf("node%d", i)) }
func (l layout) cgroup(i int) string   { return l.netns(i) }
func (l layout) sock(i int) string     { return filepath.Join(l.nodeRun(i), "containerd.sock") }
func (l layout) cniNetwork() string    { return "cnlab-" + l.name }
func (l layout) forwardMarker() string { return nsforward.Env + "=" + l.name }
func (l layout) nodeLog(i int, n string) string {
	return filepath.Join(l.logs(), fmt.Sprintf("node%d-%s.log", i, n))
}

// nodeIP is node i's address on the wire (10.243.0.i).
func nodeIP(i int) string { return fmt.Sprintf("10.243.0.%d", i) }

// podCIDR is node i's pod range.
func podCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", i-1) }

// apiAddr is where the apiserver listens, inside the first node.
func apiAddr() string { return fmt.Sprintf("%s:%d", nodeIP(1), apiPort) }

// Exists reports whether anything of cluster name is on the machine.
func Exists(name string) bool {
	l := layout{name}
	if _, err := os.Stat(l.dir()); err == nil {
		return true
	}
	if _, err := os.Stat(l.run()); err == nil {
		return true
	}
	ns, _ := nodeNetns(name)
	return len(ns) > 0
}

// nodeNetns lists the node namespaces of cluster name in /run/netns.
func nodeNetns(name string) ([]string, error) {
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	prefix := NetnsPrefix + name + "."
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// List returns the names of the clusters on this machine (from their
// directories and their namespaces), sorted.
func List() ([]string, error) {
	set := map[string]bool{}
	for _, root := range []string{StateRoot, RunRoot} {
		ents, err := os.ReadDir(root)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() && CheckName(e.Name()) == nil {
				set[e.Name()] = true
			}
		}
	}
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), NetnsPrefix); ok {
			if n, _, ok := strings.Cut(rest, "."); ok && CheckName(n) == nil {
				set[n] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// ReadInfo returns cluster name's record as up wrote it (nodes' Ready
// unknown: Status asks the cluster).
func ReadInfo(name string) (*Info, error) {
	b, err := os.ReadFile(filepath.Join(layout{name}.dir(), infoFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if Exists(name) {
				return nil, fmt.Errorf("cluster %s is half built or half torn down (no %s): cnlab cluster down %s", name, infoFile, name)
			}
			return nil, &NotFoundError{Name: name}
		}
		return nil, err
	}
	var in Info
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("cluster %s: %s: %w", name, infoFile, err)
	}
	return &in, nil
}

func writeInfo(in *Info) error {
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(in.Dir, infoFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// NotFoundError says a cluster is not on this machine.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("cluster %s not found", e.Name) }

// checkOptions fills defaults and refuses what cannot be built, naming the
// flag.
func checkOptions(o *Options) error {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := CheckName(o.Name); err != nil {
		return err
	}
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("--nodes %d: 1 or 2", o.Nodes)
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.CNI, "bridge")
	def(&o.Proxy, "iptables")
	if o.CNI == "cilium" {
		def(&o.Policy, "cilium") // Cilium enforces NetworkPolicy as the CNI
	}
	def(&o.Policy, "none")
	for _, c := range []struct {
		flag, v string
		in      []string
	}{{"cni", o.CNI, CNIs}, {"proxy", o.Proxy, Proxies}, {"policy", o.Policy, Policies}} {
		if !slices.Contains(c.in, c.v) {
			return fmt.Errorf("--%s %q: one of %s", c.flag, c.v, strings.Join(c.in, ", "))
		}
	}
	if o.CNI != "cilium" {
		for _, c := range []struct{ flag, v string }{{"proxy", o.Proxy}, {"policy", o.Policy}} {
			if c.v == "cilium" {
				return fmt.Errorf("--%s cilium needs --cni cilium: the real Cilium runs here as the CNI, not chained after the bridge", c.flag)
			}
		}
	} else if o.Policy == "kube-router" {
		return errors.New("--policy kube-router with --cni cilium: two policy engines on one node; Cilium enforces NetworkPolicy itself (--policy cilium, the default with --cni cilium)")
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return nil
}
