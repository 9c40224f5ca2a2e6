package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Pids returns the processes (other than this one) that hold one of the
// given namespaces: with any of their threads inside it (what
// `ip netns pids` finds, extended to threads) or with an open file on it.
func Pids(inodes map[uint64]bool) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if holds(pid, inodes) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func nsInode(link string) (uint64, bool) {
	if !strings.HasPrefix(link, "net:[") {
		return 0, false
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"), 10, 64)
	return ino, err == nil
}

// nsfsDev is the device of namespace files (nsfs), 0 if unknown.
var nsfsDev = func() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/net", &st) != nil {
		return 0
	}
	return st.Dev
}()

func holds(pid int, inodes map[uint64]bool) bool {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/task/%s/ns/net", pid, t.Name()))
		if ino, ok := nsInode(link); err == nil && ok && inodes[ino] {
			return true
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		// The file itself, not its name: one opened through
		// /proc/PID/ns/net reads as net:[inode], one opened by its path
		// (/run/netns/NAME, what netns.Open does) as that path.
		var st unix.Stat_t
		if nsfsDev != 0 && unix.Stat(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()), &st) == nil && st.Dev == nsfsDev && inodes[st.Ino] {
			return true
		}
	}
	return false
}

// Inodes returns the inode numbers of the named namespaces that exist.
func Inodes(names []string) map[uint64]bool {
	inodes := map[uint64]bool{}
	for _, n := range names {
		if ino, err := Inode(n); err == nil {
			inodes[ino] = true
		}
	}
	return inodes
}

// KillAll sends SIGKILL to every process holding one of the namespaces
// (by inode, see Pids) and waits (up to timeout) until none is left.
func KillAll(inodes map[uint64]bool, timeout time.Duration) error {
	if len(inodes) == 0 {
		return nil
	}
	return KillUntilGone(func() ([]int, error) { return Pids(inodes) }, "in lab namespaces", timeout)
}

// KillUntilGone sends SIGKILL to what find returns until it returns
// nothing (a dying daemon may start one more process), or gives up after
// timeout naming what is left (where says where they run).
func KillUntilGone(find func() ([]int, error), where string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := find()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still running %s after %v: %v", where, timeout, pids)
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Start starts cmd inside the named namespace. The process inherits the
// namespace from the locked thread that forks it; nothing else moves.
func Start(name string, cmd *exec.Cmd) error {
	return Do(name, func() error { return cmd.Start() })
}

// maxStderr is how much of a failed program's stderr Run puts in its error.
const maxStderr = 2000

// Run runs a program inside the named namespace, feeding it stdin (none when
// nil), and returns what it wrote to stdout. It is killed when ctx ends. A
// failure names the command line and the namespace and carries the
// program's own message: its stderr, trimmed and cut at 2000 bytes. On a
// failed exit the output written so far is returned with the error. Like
// `ip netns exec NS NAME ARGS...`, without the private /sys Exec gives.
func Run(ctx context.Context, ns string, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	line := strings.Join(append([]string{name}, args...), " ")
	if err := Start(ns, cmd); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", line, ns, err)
	}
	if err := cmd.Wait(); err != nil {
		return out.Bytes(), runError(line, ns, err, errb.String())
	}
	return out.Bytes(), nil
}

// runError is Run's error for a program that ran and failed.
func runError(line, ns string, err error, stderr string) error {
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		return fmt.Errorf("%s in %s: %w", line, ns, err)
	}
	if len(msg) > maxStderr {
		msg = msg[:maxStderr] + "..."
	}
	return fmt.Errorf("%s in %s: %w: %s", line, ns, err, msg)
}

// Exec replaces the current process with argv run inside the named
// namespace, the way `ip netns exec NAME argv...` does: it also gives the
// command a private mount namespace in which /sys shows the namespace's own
// devices. It returns only on error.
func Exec(name string, argv []string, env []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	h, err := Open(name)
	if err != nil {
		return err
	}
	// runtime.LockOSThread is never undone: the process image is replaced.
	lockForExec()
	if err := vns.Set(h); err != nil {
		return fmt.Errorf("enter netns %s: %w", name, err)
	}
	remountSys(name)
	return syscall.Exec(path, argv, env)
}

// remountSys gives the calling thread a private mount namespace with a fresh
// sysfs, so tools reading /sys/class/net see the lab namespace. Failure is
// not fatal: most tools use netlink and do not need it.
func remountSys(name string) {
	if unix.Unshare(unix.CLONE_NEWNS) != nil {
		return
	}
	if unix.Mount("", "/", "none", unix.MS_SLAVE|unix.MS_REC, "") != nil {
		return
	}
	if unix.Unmount("/sys", unix.MNT_DETACH) != nil {
		return
	}
	_ = unix.Mount(name, "/sys", "sysfs", 0, "")
}

// HasTCPSockets reports whether the namespace holds any TCP socket other
// than in TIME_WAIT (which does not keep a namespace alive): listening,
// connected, or orphaned — closed by its process, still sending. It reads
// the namespace's own counters (/proc/net/sockstat and sockstat6, "TCP:
// inuse N") from a thread inside it, without starting a process. Teardown
// runs `ss -K` only in namespaces where this is true or cannot be known.
// (An INET_DIAG dump would say the same, but walks the kernel's TCP hash
// tables, shared by every namespace: 0.6 ms a namespace with 10,000 of
// them, 6 s for a lab that size.)
func HasTCPSockets(h vns.NsHandle) (bool, error) {
	found := false
	err := DoHandle(h, func() error {
		for _, f := range []string{"sockstat", "sockstat6"} {
			data, err := os.ReadFile("/proc/thread-self/net/" + f)
			if err != nil {
				return err
			}
			n, err := tcpInUse(data)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if n > 0 {
				found = true
				return nil
			}
		}
		return nil
	})
	return found, err
}

// tcpInUse reads the "TCP: inuse N" (or "TCP6: inuse N") line of a
// sockstat file.
func tcpInUse(data []byte) (int, error) {
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == "TCP:" || f[0] == "TCP6:") && f[1] == "inuse" {
			return strconv.Atoi(f[2])
		}
	}
	return 0, errors.New("no TCP inuse line")
}
