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

// cleanupWitness tells when the kernel has destroyed namespaces released
// before it. The kernel frees network namespaces on one ordered work queue,
// in batches, unregistering every device of a batch together. The witness
// is a veth pair between an anonymous "watcher" namespace and an anonymous
// "sentinel" namespace; the sentinel is released after the lab's
// namespaces, so when the watcher's end of the pair disappears, every
// namespace released earlier has had its devices destroyed too. One veth,
// whatever the size of the lab.
type cleanupWitness struct {
	watcher  vns.NsHandle
	sentinel vns.NsHandle
	h        *netlink.Handle
}

const witnessDev = "cnlab-witness"

func newCleanupWitness() (*cleanupWitness, error) {
	w := &cleanupWitness{}
	var err error
	if w.watcher, err = netns.Anonymous(); err != nil {
		return nil, err
	}
	if w.sentinel, err = netns.Anonymous(); err != nil {
		w.watcher.Close()
		return nil, err
	}
	if w.h, err = netlink.NewHandleAt(w.watcher); err != nil {
		w.close()
		return nil, fmt.Errorf("netlink in witness netns: %w", err)
	}
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: witnessDev},
		PeerName:      witnessDev,
		PeerNamespace: netlink.NsFd(int(w.sentinel)),
	}
	if err := w.h.LinkAdd(v); err != nil {
		w.close()
		return nil, fmt.Errorf("add witness veth: %w", err)
	}
	return w, nil
}

func (w *cleanupWitness) close() {
	if w.h != nil {
		w.h.Close()
	}
	w.sentinel.Close()
	w.watcher.Close()
}

// wait releases the sentinel and polls the watcher until its end of the
// pair is gone.
func (w *cleanupWitness) wait(timeout time.Duration) error {
	defer w.close()
	w.sentinel.Close()
	w.sentinel = vns.None()
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		_, err := w.h.LinkByName(witnessDev)
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
