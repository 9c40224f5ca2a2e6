package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
)

// lock takes cluster name's lock (up and down of one cluster never run at
// once) and returns its release.
func lock(name string) (func(), error) {
	if err := os.MkdirAll(RunRoot, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath(name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// A cnlab killed a moment ago may still hold it through a child
	// between fork and exec: wait a little before calling it busy.
	for deadline := time.Now().Add(lockWait); ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("cluster %s is busy: another cnlab is bringing it up or down", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() { f.Close() }, nil
}

// lockWait is how long lock waits for a cluster's lock before calling it
// busy.
const lockWait = 3 * time.Second

// lockPath is cluster name's lock file.
func lockPath(name string) string { return filepath.Join(RunRoot, "."+name+".lock") }

// removeLock removes cluster name's lock file, still held (a racing up or
// down waits on a file no longer linked and then finds nothing in its
// way), and cnlab's cluster directories when they are left empty.
func removeLock(name string) {
	_ = os.Remove(lockPath(name))
	for _, d := range []string{RunRoot, StateRoot, filepath.Dir(StateRoot)} {
		_ = os.Remove(d) // only if empty
	}
}

// Down takes cluster name down, under its lock. A cluster of which nothing
// is left is a NotFoundError.
func Down(name string, progress func(string)) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if progress == nil {
		progress = func(string) {}
	}
	unlock, err := lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	if !Exists(name) {
		removeLock(name)
		return &NotFoundError{Name: name}
	}
	return teardown(name, progress)
}

// DownAll takes every cluster on this machine down and returns their
// names.
func DownAll(progress func(string)) ([]string, error) {
	names, err := List()
	if err != nil {
		return nil, err
	}
	var errs []error
	var done []string
	for _, n := range names {
		err := Down(n, progress)
		var nf *NotFoundError
		switch {
		case err == nil:
			done = append(done, n)
		case !errors.As(err, &nf):
			errs = append(errs, fmt.Errorf("down %s: %w", n, err))
		}
	}
	return done, errors.Join(errs...)
}

// teardown removes everything of cluster name, whatever state it is in:
// every process (found by namespace, cgroup and marker, not from a list
// that kill -9 may have cut short), the mounts under its directories, the
// pods' and the nodes' namespaces (with every rule, bridge and veth
// inside), its cgroups, what Kubernetes left in fixed places, and its
// directories.
func teardown(name string, progress func(string)) error {
	l := layout{name}
	start := time.Now()
	nodes, err := nodeNetns(name)
	if err != nil {
		return err
	}
	inodes := netns.Inodes(nodes)
	var cgroups []string
	for i := 1; i <= MaxNodes; i++ {
		cgroups = append(cgroups, cgroupDirs(l.cgroup(i))...)
	}
	progress(fmt.Sprintf("stopping cluster %s's processes", name))
	var errs []error
	find := func() ([]int, error) { return pidsIn(inodes, cgroups, l.forwardMarker()), nil }
	if err := netns.KillUntilGone(find, "in cluster "+name, 20*time.Second); err != nil {
		errs = append(errs, err)
	}
	shims := shimSockets(l)
	if err := unmountUnder(l.dir(), l.run()); err != nil {
		errs = append(errs, err)
	}
	for _, n := range nodes {
		if err := netns.Delete(n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroups(cgroups); err != nil {
		errs = append(errs, err)
	}
	for _, s := range shims {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeFixedPaths(l); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{l.dir(), l.run()} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	removeLock(name)
	progress(fmt.Sprintf("cluster %s down in %.1fs", name, time.Since(start).Seconds()))
	return nil
}

// shimSockets returns the sockets the containerd shims of cluster l made
// in /run/containerd/s (a path fixed in containerd 1.6): each task's
// bundle names its shim's in a file "address" (unix://PATH).
func shimSockets(l layout) []string {
	var out []string
	for i := 1; i <= MaxNodes; i++ {
		base := filepath.Join(l.nodeRun(i), "containerd", "io.containerd.runtime.v2.task")
		matches, _ := filepath.Glob(filepath.Join(base, "*", "*", "address"))
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil {
				continue
			}
			addr := strings.TrimSpace(string(b))
			if p, ok := strings.CutPrefix(addr, "unix://"); ok && strings.HasPrefix(p, "/run/containerd/s/") {
				out = append(out, p)
			}
		}
	}
	return out
}

// Fixed paths where Kubernetes leaves files whatever its configuration.
var (
	containerLogLinks = "/var/log/containers"
	cniResults        = "/var/lib/cni/results"
	devicePlugins     = "/var/lib/kubelet/device-plugins"
)

// removeFixedPaths removes what cluster l left in the fixed paths, and the
// directories themselves when nothing else is in them and no other
// cluster is up.
func removeFixedPaths(l layout) error {
	var errs []error
	// kubelet's symlinks to the container logs under the cluster's dir.
	if ents, err := os.ReadDir(containerLogLinks); err == nil {
		for _, e := range ents {
			p := filepath.Join(containerLogLinks, e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, l.dir()+"/") {
				if err := os.Remove(p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	// libcni's cache of ADD results, named NETWORK-SANDBOX-IFNAME: the
	// cluster's network's, and containerd's loopback ones of the same
	// sandboxes.
	if m, err := filepath.Glob(filepath.Join(cniResults, l.cniNetwork()+"-*-eth0")); err == nil {
		for _, p := range m {
			id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), l.cniNetwork()+"-"), "-eth0")
			for _, q := range []string{p, filepath.Join(cniResults, "cni-loopback-"+id+"-lo")} {
				if err := os.Remove(q); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	others, _ := List()
	alone := len(others) == 0 || (len(others) == 1 && others[0] == l.name)
	if alone {
		// kubelet's device-plugin directory (its socket and checkpoint),
		// and the parents when cnlab's clusters were all that used them.
		if ents, err := os.ReadDir(devicePlugins); err == nil {
			ours := true
			for _, e := range ents {
				switch e.Name() {
				case "kubelet.sock", "kubelet_internal_checkpoint", "DEPRECATION":
				default:
					ours = false
				}
			}
			if ours {
				_ = os.RemoveAll(devicePlugins)
			}
		}
		if err := removeCiliumRun(); err != nil {
			errs = append(errs, err)
		}
		for _, d := range []string{"/var/lib/kubelet", containerLogLinks, cniResults, "/var/lib/cni", "/run/containerd/s", "/run/containerd"} {
			_ = os.Remove(d) // only if empty
		}
	}
	return errors.Join(errs...)
}
