package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The real Cilium as a cluster's CNI (--cni cilium): cilium-agent in every
// node's network namespace and cilium-cni as the nodes' CNI plugin, built
// from the Go module by scripts/k8s-tools.sh (docs/cilium-local.md says
// what it took and why each step is there). No operator runs: Up creates
// the CRDs and sets the nodes' pod CIDRs itself (--ipam=kubernetes).
//
// What Cilium would write on the host stays in the cluster's places: the
// agent runs in a mount namespace of its own where the three machine-wide
// sysctls it sets (kernel.unprivileged_bpf_disabled, which cannot be set
// back, kernel.timer_migration, net.core.bpf_jit_enable) are files; its
// bpffs and the node's cgroup of the v2 hierarchy are mounted under the
// node's directory; its state, socket and the bpf/ sources it compiles
// (and writes feature headers into) are the node's. Only the agent's pid
// file, its monitor and shell sockets and the CNI plugin's deletion-queue
// lock go to /run/cilium, fixed paths that Down removes.

// ciliumSysctls are the machine-wide sysctls the agent sets
// (pkg/datapath/loader/base.go): files in its mount namespace.
var ciliumSysctls = []string{"kernel/unprivileged_bpf_disabled", "kernel/timer_migration", "net/core/bpf_jit_enable"}

// ciliumRun is the fixed directory the agent writes its pid file to and
// cilium-cni its deletion queue's lock, whatever their flags say.
var ciliumRun = "/run/cilium"

// clangBin is the clang the agent compiles its datapath with (Debian 12's
// clang is 14; Cilium v1.20 needs a newer one).
var clangBin = struct{ bin, pkg string }{"clang-19", "clang-19"}

// ciliumLayout names node i's Cilium places.
func (l layout) cilium(i int, rest ...string) string {
	return filepath.Join(append([]string{l.nodeDir(i), "cilium"}, rest...)...)
}
func (l layout) ciliumSock(i int) string { return l.cilium(i, "run", "cilium.sock") }

// ciliumPrerequisites lists what --cni cilium needs and is missing.
func ciliumPrerequisites(dir string) []string {
	var missing []string
	if _, err := exec.LookPath(clangBin.bin); err != nil {
		missing = append(missing, fmt.Sprintf("%s (Debian package %s)", clangBin.bin, clangBin.pkg))
	}
	for _, p := range []string{"bin/cilium-agent", "bin/cilium-cni", "lib/bpf", "crds/v2", "crds/v2alpha1"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			missing = append(missing, fmt.Sprintf("the real Cilium's %s in %s (scripts/k8s-tools.sh builds it)", p, dir))
		}
	}
	return missing
}

// ciliumCNIBin makes node i's CNI plugin directory: Debian's plugins
// (containerd runs loopback from it) and a cilium-cni that finds its node's
// agent (the plugin reads the agent's socket from CILIUM_SOCK).
func (u *upper) ciliumCNIBin(i int) (string, error) {
	dir := u.l.cilium(i, "cni-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(CNIBinDir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if err := os.Symlink(filepath.Join(CNIBinDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", err
		}
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nCILIUM_SOCK=%s exec %s \"$@\"\n", u.l.ciliumSock(i), filepath.Join(u.o.Cilium, "bin", "cilium-cni"))
	if err := os.WriteFile(filepath.Join(dir, "cilium-cni"), []byte(wrapper), 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// ciliumCNIConfig is node i's CNI network with Cilium: named as the
// bridge one, so Down finds libcni's results by the same name.
func ciliumCNIConfig(l layout, i int) string {
	return fmt.Sprintf(`{"cniVersion": "0.3.1", "name": %q, "plugins": [{"type": "cilium-cni", "log-file": %q}]}
`, l.cniNetwork(), l.cilium(i, "cilium-cni.log"))
}

// ciliumCluster does what Cilium's operator and Helm chart would: the
// CRDs, each node's pod CIDR (the agent's IPAM takes it from the Node) and
// the cilium-config ConfigMap tools read the configuration from.
func (u *upper) ciliumCluster(ctx context.Context, cs *kubernetes.Clientset) error {
	l := u.l
	kubectl := filepath.Join(u.o.Tools, "kubectl")
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", l.kubeconfig(), "create",
		"-f", filepath.Join(u.o.Cilium, "crds", "v2"), "-f", filepath.Join(u.o.Cilium, "crds", "v2alpha1")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("Cilium's CRDs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	for i := 1; i <= u.o.Nodes; i++ {
		node := l.node(i)
		if err := u.poll(ctx, "node "+node+" registered", func() (bool, string) {
			_, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return true, ""
		}); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR(i), podCIDR(i))
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("node %s's pod CIDR: %w", node, err)
		}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium-config", Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/managed-by": "cnlab"}},
		Data:       map[string]string{},
	}
	for _, f := range u.ciliumFlags(1) {
		if k, v, ok := strings.Cut(strings.TrimPrefix(f, "--"), "="); ok && !strings.Contains(v, "/") {
			cm.Data[k] = v
		}
	}
	cm.Data["policy-enforcement-mode"] = cm.Data["enable-policy"]
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("configmap kube-system/cilium-config: %w", err)
	}
	return nil
}

// ciliumFlags are node i's agent flags.
func (u *upper) ciliumFlags(i int) []string {
	l := u.l
	kpr, policy := "false", "default"
	if u.o.Proxy == "cilium" {
		kpr = "true"
	}
	if u.o.Policy == "none" {
		policy = "never"
	}
	f := []string{
		"--k8s-kubeconfig-path=" + l.inner(),
		"--enable-ipv4=true", "--enable-ipv6=false",
		"--routing-mode=native", "--ipv4-native-routing-cidr=" + ClusterCIDR,
		"--ipam=kubernetes",
		"--devices=eth0",
		"--kube-proxy-replacement=" + kpr,
		"--enable-policy=" + policy,
		// No proxy: cnlab measures L3/L4 here (no Envoy on this machine).
		"--enable-l7-proxy=false",
		// No health endpoints: cilium-health would add a netns of its
		// own and endpoints the tests do not expect.
		"--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--enable-hubble=false",
		"--enable-ipv4-masquerade=false",
		"--state-dir=" + l.cilium(i, "run"),
		"--lib-dir=" + l.cilium(i, "lib"),
		"--bpf-root=" + l.cilium(i, "bpffs"),
		"--cgroup-root=" + l.cilium(i, "cgroup2"),
		"--socket-path=" + l.ciliumSock(i),
		"--cni-log-file=" + l.cilium(i, "cilium-cni.log"),
	}
	if kpr == "true" {
		// Socket-level load balancing hooks cgroups of the v2
		// hierarchy, where this machine's pods are not (cgroup v1):
		// Services are translated per packet, at the pods' veths.
		f = append(f, "--bpf-lb-sock=false")
	}
	return f
}

// ciliumAgent starts node i's agent: its places, mounts and sysctl files,
// then the agent in a mount namespace of its own (as kubelet is).
func (u *upper) ciliumAgent(i int) error {
	l := u.l
	for _, d := range []string{"run", "bpffs", "cgroup2", "sys", "path"} {
		if err := os.MkdirAll(l.cilium(i, d), 0o700); err != nil {
			return err
		}
	}
	// The agent writes feature headers into its bpf/ sources: a copy per
	// node.
	if out, err := exec.Command("cp", "-a", filepath.Join(u.o.Cilium, "lib"), l.cilium(i, "lib")).CombinedOutput(); err != nil {
		return fmt.Errorf("node %d: copy Cilium's bpf/ sources: %v: %s", i, err, strings.TrimSpace(string(out)))
	}
	clang, err := exec.LookPath(clangBin.bin)
	if err != nil {
		return err
	}
	if err := os.Symlink(clang, l.cilium(i, "path", "clang")); err != nil {
		return err
	}
	if err := mountFS("bpf", "bpffs", l.cilium(i, "bpffs")); err != nil {
		return err
	}
	// The node's own cgroup of the v2 hierarchy, never its root: nothing
	// the agent attaches there can reach the host's sockets.
	v2, err := cgroup2Mount()
	if err != nil {
		return err
	}
	if err := bindMount(filepath.Join(v2, l.cgroup(i)), l.cilium(i, "cgroup2")); err != nil {
		return err
	}
	var script strings.Builder
	script.WriteString("set -e; mount --make-rprivate /proc; ")
	for _, k := range ciliumSysctls {
		f := l.cilium(i, "sys", strings.ReplaceAll(k, "/", "."))
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return fmt.Errorf("sysctl %s: %w", k, err)
		}
		if err := os.WriteFile(f, v, 0o644); err != nil {
			return err
		}
		// net.core's bpf entries exist in the host's network namespace
		// only, not in the node's the agent runs in.
		fmt.Fprintf(&script, "if [ -e /proc/sys/%s ]; then mount --bind %s /proc/sys/%s; fi; ", k, f, k)
	}
	script.WriteString(`exec "$@"`)
	// The agent's node name is K8S_NODE_NAME or the host name; it waits
	// without limit for the pod CIDR of a Node of that name.
	env := append(os.Environ(), "K8S_NODE_NAME="+l.node(i), "PATH="+l.cilium(i, "path")+":"+os.Getenv("PATH"))
	return u.startEnv("cilium-agent", i, env, []string{"unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", script.String(), "cilium-agent"},
		filepath.Join(u.o.Cilium, "bin", "cilium-agent"), u.ciliumFlags(i)...)
}

// ciliumReady waits until node i's agent says it is Ok.
func (u *upper) ciliumReady(ctx context.Context, i int) error {
	sock := u.l.ciliumSock(i)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	defer hc.CloseIdleConnections()
	return u.poll(ctx, fmt.Sprintf("node %d's cilium-agent healthy", i), func() (bool, string) {
		state, err := ciliumHealth(ctx, hc)
		if err != nil {
			return false, err.Error()
		}
		return state == "Ok", "cilium-agent says " + state
	})
}

func ciliumHealth(ctx context.Context, hc *http.Client) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cilium/v1/healthz", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var h struct {
		Cilium struct {
			State string `json:"state"`
			Msg   string `json:"msg"`
		} `json:"cilium"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return "", fmt.Errorf("healthz: %v", err)
	}
	if h.Cilium.State != "Ok" && h.Cilium.Msg != "" {
		return h.Cilium.State + " (" + h.Cilium.Msg + ")", nil
	}
	return h.Cilium.State, nil
}

// ciliumRunFiles are what the agent and the CNI plugin write to
// /run/cilium whatever their flags say.
var ciliumRunFiles = []string{"cilium.pid", "monitor1_2.sock", "shell.sock", "deleteQueue/lockfile"}

// removeCiliumRun removes what Cilium left in /run/cilium, and the
// directory when empty. Only called when no other cluster is up.
func removeCiliumRun() error {
	var errs []error
	for _, p := range ciliumRunFiles {
		if err := os.Remove(filepath.Join(ciliumRun, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(filepath.Join(ciliumRun, "deleteQueue")) // only if empty
	_ = os.Remove(ciliumRun)
	return errors.Join(errs...)
}
