// Package testutil holds helpers shared by cnlab's tests: privilege checks
// that skip outside CI and fail under CI, and a check that a test binary
// leaves the kernel (namespaces, links, nftables, bpffs) and the process
// table (OvS daemons, traffic tools) as it found them.
// It is imported by tests only.
package testutil

import (
	"github.com/cnlab/cnlab/internal/daemon"
	"github.com/cnlab/cnlab/internal/nsforward"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/l7proxy"
	"time"

	"github.com/cnlab/cnlab/internal/bpffs"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true), where a missing
// privilege or tool is a failure, never a silent skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot skips the test when not root, or fails it under CI.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatal("this test needs root (network namespaces), and CI=true: run the suite as root")
	}
	t.Skip("skipping: needs root (network namespaces); run the tests with sudo")
}

// RequireTool skips the test when a program is missing, or fails it under
// CI, naming the package that provides it.
func RequireTool(t testing.TB, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	}
	msg := fmt.Sprintf("needs %s (Debian package %s; scripts/install.sh installs it)", name, pkg)
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip("skipping: " + msg)
}

// Snapshot records what the tests must leave as they found it: the named
// network namespaces, the root namespace's links, the nftables ruleset,
// the root namespace's ipsets, the bpffs tree and the processes of
// labCommands. Outside root it records nothing.
func Snapshot() string {
	if os.Geteuid() != 0 {
		return ""
	}
	// The eBPF datapath mounts bpffs on first use (with the kernel's own
	// maps.debug and progs.debug in it): mount it before looking, so
	// that the mount is not mistaken for a leak.
	_ = bpffs.Ensure()
	var b strings.Builder
	b.WriteString("# ip netns list\n")
	b.WriteString(run("ip", "netns", "list"))
	b.WriteString("# ip -o link (root namespace)\n")
	b.WriteString(normalizeLinks(run("ip", "-o", "link", "show")))
	b.WriteString("# nft list ruleset\n")
	b.WriteString(run("nft", "list", "ruleset"))
	b.WriteString("# ipset list -n (root namespace)\n")
	b.WriteString(run("ipset", "list", "-n"))
	b.WriteString("# cnlab BPF programs loaded\n")
	for _, line := range strings.Split(run("bpftool", "prog", "show"), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[2] == "name" && strings.HasPrefix(f[3], "cnlab_") {
			b.WriteString(f[0] + " " + f[3] + "\n")
		}
	}
	b.WriteString("# /sys/fs/bpf\n")
	var files []string
	_ = filepath.WalkDir("/sys/fs/bpf", func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	b.WriteString(strings.Join(files, "\n"))
	b.WriteString("\n# processes a lab or a test starts\n")
	b.WriteString(strings.Join(labProcesses(), "\n"))
	b.WriteString("\n# what a local cluster (cnlab cluster up) may leave\n")
	b.WriteString(clusterLeftovers())
	return b.String()
}

// labCommands are the programs cnlab starts that outlive a command of
// its own (daemons, traffic tools), as /proc/PID/comm names them.
// A local cluster's (cnlab cluster up) are there too; comm is cut at 15
// bytes.
var labCommands = []string{"ovsdb-server", "ovs-vswitchd", "iperf3", "sockperf",
	"etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kubelet", "kube-proxy", "kube-router",
	"containerd", "containerd-shim", "runc", "cilium-agent", "cilium-cni"}

// labProcesses lists "PID COMM" of every live process running one of
// labCommands. Zombies are left out: the process is gone, only its exit
// status waits for a parent (PID 1 here, once a daemon's parent exited)
// to collect it.
func labProcesses() []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var procs []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// PID (COMM) STATE ...: COMM may hold spaces and parentheses.
		s := string(b)
		open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || shut < open || shut+2 >= len(s) || s[shut+2] == 'Z' {
			continue
		}
		if comm := s[open+1 : shut]; slices.Contains(labCommands, comm) {
			procs = append(procs, strings.TrimSpace(s[:open])+" "+comm)
		}
	}
	sort.Strings(procs)
	return procs
}

// clusterPaths are where a local cluster keeps its state and where
// Kubernetes writes whatever its configuration.
var clusterPaths = []string{"/var/lib/cnlab", "/run/cnlab-clusters", "/var/lib/kubelet", "/var/log/containers",
	"/var/lib/cni", "/run/containerd", "/opt/containerd", "/etc/cni/net.d", "/run/cilium", "/var/run/cilium"}

// clusterSysctls are the host's sysctls kubelet sets unless kept from
// them (cnlab's kubelets write files mounted over them).
var clusterSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables",
	// and what the real Cilium's agent sets (unprivileged_bpf_disabled=1
	// cannot be set back)
	"kernel/unprivileged_bpf_disabled", "kernel/timer_migration", "net/core/bpf_jit_enable"}

// clusterLeftovers lists the files under clusterPaths, the cgroups and
// mounts of local clusters, and clusterSysctls' values.
func clusterLeftovers() string {
	var out []string
	for _, root := range clusterPaths {
		_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				out = append(out, p)
			}
			return nil
		})
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/cnlabk8s.*")
	out = append(out, cg...)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && (strings.Contains(f[4], "cnlab") || strings.Contains(f[4], "kubelet") || strings.Contains(f[4], "containerd") || strings.Contains(f[4], "cilium")) {
				out = append(out, "mount "+f[4])
			}
		}
	}
	for _, k := range clusterSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err == nil {
			out = append(out, k+"="+strings.TrimSpace(string(v)))
		}
	}
	return strings.Join(out, "\n") + "\n"
}

func run(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		if _, lerr := exec.LookPath(name); lerr != nil {
			return "(" + name + " not installed)\n"
		}
	}
	return string(out)
}

// normalizeLinks keeps the name and flags of each link, dropping counters
// and state details that change by themselves (qdisc backlog, link mode).
func normalizeLinks(s string) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 {
			out = append(out, f[1]+" "+f[2])
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n") + "\n"
}

// Main runs a package's tests and then fails the binary if the kernel state
// differs from before: a test that leaks a namespace, a link, an nftables
// table, a pin or a daemon is caught even if it passed. Use it from TestMain.
// cleanup runs after the tests, before the check.
func Main(m *testing.M, cleanup ...func()) {
	// A lab that enforces L7 rules starts its proxies by running this
	// test binary again as one.
	l7proxy.MaybeRun()
	// A local cluster's API forwarder is this binary again too.
	nsforward.MaybeRun()
	// A lab that records its flows runs its recorder likewise.
	daemon.MaybeRun()
	before := Snapshot()
	// A run's reference speed is kept for the next runs of this boot: one
	// the tests measured goes with them, with cnlab's run directory if
	// they made it.
	_, err := os.Stat(rundir.Dir)
	hadDir := err == nil
	_, err = os.Stat(rundir.ReferenceSpeed())
	hadRef := err == nil
	code := m.Run()
	for _, f := range cleanup {
		f()
	}
	if !hadRef {
		_ = os.Remove(rundir.ReferenceSpeed())
	}
	if !hadDir {
		_ = os.Remove(rundir.Dir) // only if empty
	}
	after := Snapshot()
	// The kernel frees some objects (BPF programs, namespaces) a moment
	// after their last reference goes: give it a second before calling it
	// a leak.
	for try := 0; try < 10 && after != before; try++ {
		time.Sleep(100 * time.Millisecond)
		after = Snapshot()
	}
	if after != before {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left the kernel changed\n--- before\n%s\n--- after\n%s\n", before, after)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
