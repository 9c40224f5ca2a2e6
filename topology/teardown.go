package topology

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
)

// Timeouts of teardown.
var (
	killTimeout    = 10 * time.Second
	cleanupTimeout = 60 * time.Second
)

// BPFFSDir is where later datapaths pin their objects, one directory per
// lab; teardown removes the lab's directory.
var BPFFSDir = "/sys/fs/bpf/cnlab"

// Down removes a lab: it kills the processes inside its namespaces, deletes
// the namespaces (and with them every link, bridge, route and rule inside),
// removes its pins and ledger, and returns once the kernel has finished
// destroying the namespaces' devices. It finds what to delete from the
// kernel's state (namespace names carry the lab's name), not from the
// ledger. A lab that does not exist is a NotFoundError.
func Down(lab string, progress Progress) error {
	unlock, err := lockLab(lab)
	if err != nil {
		return err
	}
	defer unlock()
	names, err := listNetns(LabNetnsPrefix(lab))
	if err != nil {
		return err
	}
	if _, serr := os.Stat(labDir(lab)); len(names) == 0 && serr != nil && !bpffsExists(lab) {
		return &NotFoundError{What: "lab", Name: lab}
	}
	return teardown(lab, progress)
}

// DownAll removes every cnlab lab on the machine and returns their names.
func DownAll(progress Progress) ([]string, error) {
	labs, err := Labs()
	if err != nil {
		return nil, err
	}
	for _, lab := range bpffsLabs() {
		if !containsStr(labs, lab) {
			labs = append(labs, lab)
		}
	}
	var errs []error
	for _, lab := range labs {
		if err := Down(lab, progress); err != nil {
			var nf *NotFoundError
			if !errors.As(err, &nf) {
				errs = append(errs, fmt.Errorf("down %s: %w", lab, err))
			}
		}
	}
	return labs, errors.Join(errs...)
}

func containsStr(list []string, s string) bool { return contains(list, s) }

func bpffsExists(lab string) bool {
	_, err := os.Stat(filepath.Join(BPFFSDir, lab))
	return err == nil
}

func bpffsLabs() []string {
	ents, _ := os.ReadDir(BPFFSDir)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// teardown does the work of Down without taking the lock.
func teardown(lab string, progress Progress) error {
	if progress == nil {
		progress = func(string) {}
	}
	names, err := listNetns(LabNetnsPrefix(lab))
	if err != nil {
		return err
	}
	if len(names) > 0 {
		progress(fmt.Sprintf("lab %s: stopping processes in %d namespaces", lab, len(names)))
		if err := netns.KillAll(names, killTimeout); err != nil {
			return err
		}
		w, err := newCleanupWitness()
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range names {
			if err := netns.Delete(n); err != nil {
				errs = append(errs, err)
			}
		}
		progress(fmt.Sprintf("lab %s: waiting for the kernel to destroy %d namespaces", lab, len(names)))
		if err := w.wait(cleanupTimeout); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(filepath.Join(BPFFSDir, lab)); err != nil {
		return fmt.Errorf("remove pins of lab %s: %w", lab, err)
	}
	if ents, err := os.ReadDir(BPFFSDir); err == nil && len(ents) == 0 {
		_ = os.Remove(BPFFSDir)
	}
	return removeState(lab)
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
	if w.h, err = netlink.NewHandleAt(w.watcher); err != nil {
		w.close()
		return nil, fmt.Errorf("netlink in witness netns: %w", err)
	}
	for i := range w.sentinels {
		if w.sentinels[i], err = netns.Anonymous(); err != nil {
			w.close()
			return nil, err
		}
		v := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: witnessDev(i)},
			PeerName:      "witness",
			PeerNamespace: netlink.NsFd(int(w.sentinels[i])),
		}
		if err := w.h.LinkAdd(v); err != nil {
			w.close()
			return nil, fmt.Errorf("add witness veth: %w", err)
		}
	}
	return w, nil
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

// wait releases the sentinels one after the other, each time polling the
// watcher until its end of the pair is gone.
func (w *cleanupWitness) wait(timeout time.Duration) error {
	defer w.close()
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
