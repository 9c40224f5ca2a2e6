package topology

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
)

// Timeouts of teardown.
var (
	killTimeout    = 10 * time.Second
	cleanupTimeout = 60 * time.Second
	// settleTimeout is how long a namespace may outlive its processes
	// (its last reference dropped by deferred work) before Teardown calls
	// it held.
	settleTimeout = 5 * time.Second
)

// Teardown removes a lab's namespaces, and with them every link, bridge,
// route, rule and program inside, and returns once the kernel has finished
// destroying their devices. It finds what to delete from the kernel's
// state (namespace names carry the lab's name), not from a ledger, so it
// also removes a lab left half-built by a crash. It takes no lock: package
// lab calls it under the lab's. A lab without namespaces is nothing to do.
//
// Order matters. The namespaces' mounts are removed first, so no new
// process can enter them (`cnlab exec` takes no lock); then every process
// holding them (a thread inside, or an open file on them) is killed; then
// the kernel's cleanup is awaited; last, ids assigned beforehand in the
// witness's watcher namespace tell whether every namespace is really gone,
// or still held by something cnlab cannot see (a socket kept by a process
// that was never inside, for example).
func Teardown(lab string, progress Progress) error {
	if progress == nil {
		progress = func(string) {}
	}
	names, err := listNetns(LabNetnsPrefix(lab))
	if err != nil {
		return err
	}
	if len(names) > 0 {
		progress(fmt.Sprintf("lab %s: deleting %s", lab, plural.N(len(names), "namespace")))
		if err := stopOVS(lab); err != nil {
			return err
		}
		inodes := netns.Inodes(names)
		w, err := newCleanupWitness()
		if err != nil {
			return err
		}
		if err := netns.AssignIDs(w.h, names); err != nil {
			w.close()
			return err
		}
		// Handles keep the namespaces reachable once unmounted, to close
		// the sockets their processes leave behind.
		var handles []vns.NsHandle
		for _, n := range names {
			if h, err := netns.Open(n); err == nil {
				handles = append(handles, h)
			}
		}
		var errs []error
		for _, n := range names {
			if err := netns.Delete(n); err != nil {
				errs = append(errs, err)
			}
		}
		if err := netns.KillAll(inodes, killTimeout); err != nil {
			errs = append(errs, err)
		}
		destroySockets(handles)
		for _, h := range handles {
			h.Close()
		}
		if err := w.settle(names, cleanupTimeout); err != nil {
			errs = append(errs, fmt.Errorf("lab %s: %w", lab, err))
		}
		w.close()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	// The OvS daemons died with their namespace: their files can go.
	return removeOVSDir(lab)
}

// destroySockets closes (SOCK_DESTROY, `ss -K`) every socket left in each
// namespace once its processes are gone. A TCP socket its process closed
// with data not yet acknowledged lives on as an orphan, retransmitting for
// minutes (tcp_orphan_retries) towards a peer that is going away, and
// keeps its namespace alive all that time: seen after Open vSwitch labs,
// whose userspace switch drops packets under load. A socket still open in
// some process is only aborted, not freed: its namespace stays held, and
// Teardown says so.
//
// Only namespaces that hold a TCP socket (an orphan is one) are handed to
// `ss` (netns.HasTCPSockets reads the namespace's own counter): a process
// per namespace costs a few milliseconds, which at 10,000 endpoints was
// most of `down` (BENCHMARKS.md, "Labs of 10,000 endpoints"). A namespace
// whose counter cannot be read is handed to `ss` as before.
func destroySockets(handles []vns.NsHandle) {
	for _, h := range handles {
		if has, err := netns.HasTCPSockets(h); err == nil && !has {
			continue
		}
		cmd := exec.Command("ss", "-K", "-a", "-n")
		if err := netns.DoHandle(h, cmd.Start); err == nil {
			_ = cmd.Wait()
		}
	}
}

// abbreviate lists the first n items and says how many more there are.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// cleanupWitness tells when the kernel has finished destroying namespaces
// released before it. The kernel frees network namespaces on one ordered
// work queue, in batches: each run of cleanup_net takes every namespace
// released so far and destroys them together, unregistering all their
// devices at once. The witness holds two veth pairs, each between an
// anonymous "watcher" namespace and an anonymous "sentinel" namespace.
// Sentinel 1 is released right after the lab's namespaces: when its veth
// end vanishes from the watcher, the batch holding the lab's namespaces has
// unregistered its devices. Sentinel 2 is released only then, so it lands
// in a later batch; when its veth end vanishes, the lab's batch has run to
// its end (devices gone, namespace counts released). Only the RCU-deferred
// freeing of memory may still follow. Two veths, whatever the lab's size.
type cleanupWitness struct {
	watcher   vns.NsHandle
	sentinels [2]vns.NsHandle
	h         *netlink.Handle
}

func newCleanupWitness() (*cleanupWitness, error) {
	w := &cleanupWitness{sentinels: [2]vns.NsHandle{vns.None(), vns.None()}}
	var err error
	if w.watcher, err = netns.Anonymous(); err != nil {
		return nil, err
	}
	if w.h, err = netns.HandleAt(w.watcher); err != nil {
		w.close()
		return nil, fmt.Errorf("netlink in witness netns: %w", err)
	}
	if err := w.arm(); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// arm creates the two sentinels and their veth pairs to the watcher.
func (w *cleanupWitness) arm() error {
	var err error
	for i := range w.sentinels {
		if w.sentinels[i], err = netns.Anonymous(); err != nil {
			return err
		}
		v := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: witnessDev(i)},
			PeerName:      "witness",
			PeerNamespace: netlink.NsFd(int(w.sentinels[i])),
		}
		if err := w.h.LinkAdd(v); err != nil {
			return fmt.Errorf("add witness veth: %w", err)
		}
	}
	return nil
}

func witnessDev(i int) string { return fmt.Sprintf("witness%d", i) }

func (w *cleanupWitness) close() {
	if w.h != nil {
		w.h.Close()
	}
	for i := range w.sentinels {
		w.sentinels[i].Close()
	}
	w.watcher.Close()
}

// settle waits until the kernel has destroyed every namespace of names.
// A namespace may be released a little after the processes holding it are
// gone (a socket's last reference dropped from deferred work, or a packet
// in flight): then a later batch destroys it, so the sentinels are armed
// again and awaited, until timeout.
func (w *cleanupWitness) settle(names []string, timeout time.Duration) error {
	if err := w.wait(timeout); err != nil {
		return err
	}
	deadline := time.Now().Add(settleTimeout)
	for {
		alive, err := netns.WatchedAlive(w.watcher, names)
		if err != nil {
			return err
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s unmounted but still held by something (an open socket or file?) %v after their processes, so the kernel keeps them: %s",
				plural.N(len(alive), "namespace"), settleTimeout, abbreviate(alive, 5))
		}
		time.Sleep(50 * time.Millisecond)
		if err := w.arm(); err != nil {
			return err
		}
		if err := w.wait(timeout); err != nil {
			return err
		}
	}
}

// wait releases the sentinels one after the other, each time polling the
// watcher until its end of the pair is gone.
func (w *cleanupWitness) wait(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := range w.sentinels {
		w.sentinels[i].Close()
		if err := w.waitGone(witnessDev(i), deadline, timeout); err != nil {
			return err
		}
	}
	return nil
}

func (w *cleanupWitness) waitGone(dev string, deadline time.Time, timeout time.Duration) error {
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		_, err := w.h.LinkByName(dev)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch namespace cleanup: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the kernel has not finished destroying the lab's namespaces after %v", timeout)
		}
		time.Sleep(delay)
	}
}
