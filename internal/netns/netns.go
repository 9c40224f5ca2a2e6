package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RunDir is where named network namespaces are bind-mounted, as iproute2
// does it, so `ip netns list` and `ip netns exec` see cnlab's namespaces.
const RunDir = "/run/netns"

// Path returns the bind-mount path of the named namespace.
func Path(name string) string { return filepath.Join(RunDir, name) }

var (
	runDirMu    sync.Mutex
	runDirReady bool
)

// ensureRunDir makes RunDir a shared mount point, as `ip netns add` does, so
// that namespace mounts propagate to other mount namespaces.
func ensureRunDir() error {
	runDirMu.Lock()
	defer runDirMu.Unlock()
	if runDirReady {
		return nil
	}
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", RunDir, err)
	}
	for attempt := 0; ; attempt++ {
		err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			runDirReady = true
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || attempt > 0 {
			return fmt.Errorf("make %s shared: %w", RunDir, err)
		}
		// Not a mount point yet: bind it onto itself, then retry.
		if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", RunDir, err)
		}
	}
}

// onThread runs fn on a goroutine locked to its own OS thread. fn receives
// the thread's original network namespace. If fn leaves the thread in another
// namespace and switching back fails, the thread is not unlocked, so the Go
// runtime throws it away instead of reusing it.
func onThread(fn func(orig vns.NsHandle) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			runtime.UnlockOSThread()
			return
		}
		defer orig.Close()
		ferr := fn(orig)
		if err := vns.Set(orig); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Create makes a new named network namespace and runs setup inside it (on a
// locked thread) before returning. It fails with os.ErrExist when the name is
// taken. Equivalent to `ip netns add NAME` followed by setup.
func Create(name string, setup func() error) error {
	if err := ensureRunDir(); err != nil {
		return err
	}
	p := Path(name)
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	f.Close()
	err = onThread(func(vns.NsHandle) error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, p, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		if setup != nil {
			return setup()
		}
		return nil
	})
	if err != nil {
		_ = Delete(name)
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	return nil
}

// Delete unmounts and removes the named namespace. A namespace that does not
// exist is not an error. The kernel frees the namespace asynchronously once
// no process or file descriptor refers to it any more.
func Delete(name string) error {
	p := Path(name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", name, err)
	}
	return nil
}

// Exists reports whether a namespace of that name is mounted.
func Exists(name string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(Path(name), &st) != nil || unix.Stat(RunDir, &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev // a bind-mounted nsfs file, not a plain file
}

// List returns the names in RunDir that start with prefix, sorted.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", RunDir, err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Open returns a file descriptor handle on the named namespace. The caller
// closes it.
func Open(name string) (vns.NsHandle, error) {
	h, err := vns.GetFromPath(Path(name))
	if err != nil {
		return vns.None(), fmt.Errorf("open netns %s: %w", name, err)
	}
	return h, nil
}

// Do runs fn with the calling goroutine's work moved to a thread inside the
// named namespace. fn must not start goroutines that expect to be in the
// namespace: only the locked thread is. Sockets created by fn stay in the
// namespace after Do returns. Equivalent to `ip netns exec NAME`.
func Do(name string, fn func() error) error {
	h, err := Open(name)
	if err != nil {
		return err
	}
	defer h.Close()
	return DoHandle(h, fn)
}

// DoHandle is Do with an already opened namespace handle.
func DoHandle(h vns.NsHandle, fn func() error) error {
	return onThread(func(vns.NsHandle) error {
		if err := vns.Set(h); err != nil {
			return fmt.Errorf("enter netns: %w", err)
		}
		return fn()
	})
}

// Handle returns a netlink handle bound to the named namespace: its socket
// lives there, so using it moves no thread. The caller closes it.
func Handle(name string) (*netlink.Handle, error) {
	ns, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := HandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", name, err)
	}
	return h, nil
}

// HandleAt is Handle for an open namespace. The socket is opened on a
// locked thread of our own (netlink.NewHandleAt enters the namespace to
// open it), which is thrown away if it cannot return.
func HandleAt(ns vns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := onThread(func(vns.NsHandle) error {
		var err error
		h, err = netlink.NewHandleAt(ns)
		return err
	})
	return h, err
}

// Anonymous creates a network namespace that has no name and lives only as
// long as the returned handle is open.
func Anonymous() (vns.NsHandle, error) {
	var h vns.NsHandle
	err := onThread(func(vns.NsHandle) error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var err error
		h, err = vns.Get()
		return err
	})
	if err != nil {
		return vns.None(), fmt.Errorf("create anonymous netns: %w", err)
	}
	return h, nil
}

// SetSysctl writes a sysctl of the calling thread's network namespace, e.g.
// SetSysctl("net/ipv4/ip_forward", "1"). Call it inside Do or a Create setup.
func SetSysctl(key, value string) error {
	p := filepath.Join("/proc/sys", key)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// Inode returns the inode number identifying the namespace mounted at the
// given name, which matches /proc/PID/ns/net of the processes inside it.
func Inode(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(Path(name), &st); err != nil {
		return 0, fmt.Errorf("stat netns %s: %w", name, err)
	}
	return st.Ino, nil
}

// nsidBase is where the ids cnlab assigns start, far above the ids the
// kernel assigns by itself (from 0 up).
const nsidBase = 1 << 20

// AssignIDs gives each named namespace an id in the namespace watcher
// (nsidBase + its index), as `ip netns set NAME ID` would. The kernel
// removes an id when its namespace is destroyed, so WatchedAlive tells
// which of them still exist without holding a reference to any.
func AssignIDs(watcher *netlink.Handle, names []string) error {
	for i, n := range names {
		if !Exists(n) {
			continue // gone, or a plain file left by a creation killed halfway
		}
		ns, err := Open(n)
		if err != nil {
			continue
		}
		err = watcher.SetNetNsIdByFd(int(ns), nsidBase+i)
		ns.Close()
		if err != nil {
			return fmt.Errorf("assign id to netns %s: %w", n, err)
		}
	}
	return nil
}

// WatchedAlive returns the names (from the list given to AssignIDs) whose
// namespaces still exist, read from the ids alive in the watcher namespace
// (an RTM_GETNSID dump, as `ip netns list-id`).
func WatchedAlive(watcher vns.NsHandle, names []string) ([]string, error) {
	var alive []string
	err := DoHandle(watcher, func() error {
		req := nl.NewNetlinkRequest(unix.RTM_GETNSID, unix.NLM_F_DUMP)
		req.AddData(nl.NewRtGenMsg())
		msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNSID)
		if err != nil {
			return fmt.Errorf("list netns ids: %w", err)
		}
		for _, m := range msgs {
			attrs, err := nl.ParseRouteAttr(m[nl.DeserializeRtGenMsg(m).Len():])
			if err != nil {
				continue
			}
			for _, a := range attrs {
				if a.Attr.Type != netlink.NETNSA_NSID || len(a.Value) < 4 {
					continue
				}
				id := int(int32(nl.NativeEndian().Uint32(a.Value))) - nsidBase
				if id >= 0 && id < len(names) {
					alive = append(alive, names[id])
				}
			}
		}
		return nil
	})
	sort.Strings(alive)
	return alive, err
}
