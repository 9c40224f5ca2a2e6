package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
)

// daemon starts bin detached (a session of its own, no parent to die with:
// the cluster outlives the cnlab that brought it up), in the network
// namespace netnsPath ("" : the host's), its output appended to log.
// wrap goes before bin on the command line (nsenter's, unshare's).
func daemon(log, netnsPath string, env []string, wrap []string, bin string, args ...string) (int, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var argv []string
	if netnsPath != "" {
		argv = append(argv, "nsenter", "--net="+netnsPath, "--")
	}
	argv = append(argv, wrap...)
	argv = append(argv, bin)
	argv = append(argv, args...)
	fmt.Fprintf(f, "# %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	// Descriptors this process inherited without close-on-exec (a lock
	// flock(1) holds for its command) must not live on in the daemons.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while this process lives; nobody waits otherwise.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// pidsIn returns the processes to stop for a cluster: those that hold
// one of the nodes' namespaces (netns.Pids: the daemons, shims, hostNetwork
// containers, the forwarder's open handle), those in a cgroup under one of
// cgroupDirs (every container), and those whose environment carries
// marker (the forwarder, should it hold no handle yet).
func pidsIn(inodes map[uint64]bool, cgroupDirs []string, marker string) []int {
	set := map[int]bool{}
	self := os.Getpid()
	if len(inodes) > 0 {
		pids, _ := netns.Pids(inodes)
		for _, p := range pids {
			set[p] = true
		}
	}
	if marker != "" {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && slices.Contains(strings.Split(string(env), "\x00"), marker) {
				set[pid] = true
			}
		}
	}
	for _, d := range cgroupDirs {
		_ = filepath.WalkDir(d, func(path string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					set[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(set))
	for p := range set {
		if alive(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// cgroupMounts returns the mount points of the cgroup hierarchies (v1
// controllers and the v2 unified one), each once.
func cgroupMounts() ([]string, error) { return mountsOfType("cgroup", "cgroup2") }

// cgroup2Mount is where the v2 (unified) hierarchy is mounted.
func cgroup2Mount() (string, error) {
	m, err := mountsOfType("cgroup2")
	if err != nil {
		return "", err
	}
	if len(m) == 0 {
		return "", errors.New("no cgroup2 hierarchy is mounted (Cilium attaches to a cgroup of it)")
	}
	return m[0], nil
}

// mountFS mounts a file system of type fstype at dir.
func mountFS(fstype, source, dir string) error {
	if err := unix.Mount(source, dir, fstype, 0, ""); err != nil {
		return fmt.Errorf("mount %s at %s: %w", fstype, dir, err)
	}
	return nil
}

// bindMount bind-mounts src at dir.
func bindMount(src, dir string) error {
	if err := unix.Mount(src, dir, "none", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dir, err)
	}
	return nil
}

// mountsOfType returns the mount points of file systems of the types
// given, each once.
func mountsOfType(types ...string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		parts := strings.SplitN(line, " - ", 2)
		if len(parts) != 2 {
			continue
		}
		pre, post := strings.Fields(parts[0]), strings.Fields(parts[1])
		if len(pre) < 5 || len(post) < 1 || !slices.Contains(types, post[0]) {
			continue
		}
		if !slices.Contains(out, pre[4]) {
			out = append(out, pre[4])
		}
	}
	return out, nil
}

// makeCgroup creates name at the top of every cgroup hierarchy (kubelet
// wants its cgroupRoot to exist), with the cpuset hierarchy's cpus and mems
// copied from the root so that tasks can join it.
func makeCgroup(name string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		d := filepath.Join(m, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(m, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", filepath.Join(d, f), err)
			}
		}
	}
	return nil
}

// cgroupDirs returns name's directory in every hierarchy that has it.
func cgroupDirs(name string) []string {
	mounts, _ := cgroupMounts()
	var out []string
	for _, m := range mounts {
		d := filepath.Join(m, name)
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// removeCgroups removes the cgroup trees dirs bottom-up. A cgroup whose
// last task has just been killed may refuse for a moment (EBUSY).
func removeCgroups(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(path string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				all = append(all, path)
			}
			return nil
		})
		slices.SortFunc(all, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, p := range all {
			var err error
			for try := 0; try < 50; try++ {
				if err = unix.Rmdir(p); err == nil || errors.Is(err, unix.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below one of dirs, deepest
// first.
func unmountUnder(dirs ...string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var targets []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				targets = append(targets, mp)
				break
			}
		}
	}
	slices.SortFunc(targets, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, t := range slices.Compact(targets) {
		if err := unix.Unmount(t, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
