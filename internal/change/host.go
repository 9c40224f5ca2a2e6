// Package change is the change protocol of everything a lab applies
// (policies, Services): the change record and the staged files of a lab's
// store (Store, Record), and what the datapaths and service proxies do to
// each host (per-host state files, dirty marks and recorded sets, the
// atomic multi-host apply ApplyHosts, the atomic loaders, the fault points
// between). lab drives the store; datapaths and proxies use the per-host
// half without importing each other. docs/design.md, "A policy change,
// killed at any step", says what holds after a kill at each point.
package change

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/topology"
)

// ErrNoHosts is returned for labs without hosts (chains): there is nothing
// to enforce policies or serve Services on.
var ErrNoHosts = errors.New("a chain lab has no hosts to enforce policies on")

// LocalEndpoints returns the endpoints placed on a host.
func LocalEndpoints(lab *topology.Spec, host string) []*topology.Endpoint {
	var out []*topology.Endpoint
	for i := range lab.Endpoints {
		if lab.Endpoints[i].Host == host {
			out = append(out, &lab.Endpoints[i])
		}
	}
	return out
}

// StatePath is where a datapath or service proxy (k: its state kind)
// keeps what it last applied on a host, so that the next Apply can change
// only the difference.
func StatePath(lab string, k kind.Kind, host string) string {
	return filepath.Join(rundir.Lab(lab), "datapath", string(k)+"-"+host+".json")
}

// LoadState reads a datapath's state for a host into v; a missing file
// leaves v unchanged and is not an error. It does not look at the dirty
// mark (see Dirty).
func LoadState(path string, v any) error {
	if err := files.ReadJSON(path, v); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// SaveState writes a datapath's state for a host.
func SaveState(path string, v any) error {
	if saveFault != nil {
		if err := saveFault(path); err != nil {
			return err
		}
	}
	return files.WriteJSON(path, v, false)
}

// saveFault, set only by tests, makes SaveState fail for a path: a state
// that cannot be written, whatever the file system (state files are
// written under a random temporary name, which no test can block).
var saveFault func(path string) error

// SetSaveFault makes SaveState fail with the error f returns for a path
// (nil: no fault). For the fault-injection tests only.
func SetSaveFault(f func(path string) error) { saveFault = f }

// EnableBridgeNetfilter makes bridged IPv4 traffic traverse the host's
// netfilter hooks (br_netfilter), so that rules in the forward path see
// traffic between two endpoints of the same host, as on a Docker host.
func EnableBridgeNetfilter(hostNetns string) error {
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		// A modular kernel: load it (a built-in one has the directory).
		_ = exec.Command("modprobe", "br_netfilter").Run()
	}
	return netns.Do(hostNetns, func() error {
		err := netns.SetSysctl("net/bridge/bridge-nf-call-iptables", "1")
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("br_netfilter is not available (modprobe br_netfilter failed): traffic bridged between endpoints of one host would bypass the datapath")
		}
		return err
	})
}

// KernelChanged marks the fault point between changing a host's kernel
// and saving its state (ApplyHosts calls it, and the eBPF datapath with
// its own apply): the fault-injection tests stop cnlab there.
func KernelChanged(host string) { _ = fault.At(fault.Kernel, host) }

// HostDone marks the fault point after a host is finished, before the next.
func HostDone(host string) { _ = fault.At(fault.HostDone, host) }

// Load runs an atomic loader (iptables-restore, nft -f) in a host's
// namespace with script on its standard input: one transaction, which the
// kernel commits whole or not at all. The fault point atomic-load is just
// before it; an error injected there fails the load as the tool would.
func Load(ctx context.Context, h *topology.Host, script string, name string, args ...string) error {
	if err := fault.At(fault.AtomicLoad, h.Name); err != nil {
		return err
	}
	_, err := netns.Run(ctx, h.Netns, []byte(script), name, args...)
	return err
}

// dirtyPath marks a host's state as not to be trusted: it exists from just
// before cnlab touches the host's kernel until the state file records what
// the kernel then holds.
func dirtyPath(statePath string) string { return statePath + ".dirty" }

// setPath records the set (policy.Digest, proxy.Digest) a host enforces, written
// with its state and trusted only while the host is not marked dirty.
func setPath(statePath string) string { return statePath + ".set" }

// dirtyMark is what a dirty mark holds: the sets the host's kernel
// may hold while the mark stands.
type dirtyMark struct {
	Sets []string `json:"sets"`
}

// HostSets is what cnlab knows of the set (of policies, or of Services) a
// host's kernel enforces, from its files alone (status reads it; nothing asks the
// kernel).
type HostSets struct {
	// Dirty is set while the host's state file is not to be trusted: a
	// change was interrupted or failed on the host, or is running on it.
	// The next apply rebuilds such a host from the kernel.
	Dirty bool
	// Sets are the policy sets (policy.Digest) the kernel may hold: the
	// one it enforces when the host is clean; when dirty, the one it
	// enforced before and each it was being changed to since (every
	// change of a host's kernel is one atomic transaction, so it holds
	// exactly one of them). "" stands for a set cnlab did not record.
	Sets []string
}

// ReadHost reads what a host's files say it enforces.
func ReadHost(statePath string) HostSets {
	if Dirty(statePath) {
		var m dirtyMark
		data, err := os.ReadFile(dirtyPath(statePath))
		if err != nil || json.Unmarshal(data, &m) != nil || len(m.Sets) == 0 {
			return HostSets{Dirty: true, Sets: []string{""}}
		}
		return HostSets{Dirty: true, Sets: m.Sets}
	}
	data, err := os.ReadFile(setPath(statePath))
	if err != nil {
		return HostSets{Sets: []string{""}}
	}
	return HostSets{Sets: []string{strings.TrimSpace(string(data))}}
}

// MarkDirty records, before a host's kernel is changed towards the
// set to, that its state file may stop describing the kernel: if cnlab
// dies or fails before ClearDirty, the next apply rebuilds the host
// instead of diffing. The mark lists the sets the kernel may hold until
// then: the one it enforced (or those an earlier mark listed) and to.
func MarkDirty(statePath, to string) error {
	return MarkDirtyFrom(statePath, ReadHost(statePath), to)
}

// MarkDirtyFrom is MarkDirty for a caller that has read the host's sets
// (have, from ReadHost) since the last change of its files. A clean host
// gets its mark in one exclusive create and one write, at its path: the
// mark exists from the create, and a process killed before the write
// leaves an empty one, which reads as marked with a set not recorded
// (the next apply rebuilds the host, as for any mark). A marked host's
// mark is replaced whole, so that the sets it lists are never lost.
func MarkDirtyFrom(statePath string, have HostSets, to string) error {
	sets := slices.Clone(have.Sets)
	if !slices.Contains(sets, to) {
		sets = append(sets, to)
	}
	data, err := json.Marshal(dirtyMark{Sets: sets})
	if err != nil {
		return err
	}
	if have.Dirty {
		return files.WriteAtomic(dirtyPath(statePath), data)
	}
	// O_EXCL: never through a link planted at the path either.
	f, err := os.OpenFile(dirtyPath(statePath), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	switch {
	case errors.Is(err, os.ErrExist):
		// Marked meanwhile: merge with what the mark lists.
		return MarkDirty(statePath, to)
	case err != nil:
		// No directory yet (WriteAtomic makes it), or another error.
		return files.WriteAtomic(dirtyPath(statePath), data)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dirtyPath(statePath))
	}
	return err
}

// RecordSet records the set a host's kernel enforces, once its
// state is saved and before ClearDirty.
func RecordSet(statePath, set string) error {
	return files.WriteAtomic(setPath(statePath), []byte(set+"\n"))
}

// ClearDirty removes the mark once the state file matches the kernel.
func ClearDirty(statePath string) error {
	if err := os.Remove(dirtyPath(statePath)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Dirty reports whether a host's state is marked as not to be trusted.
func Dirty(statePath string) bool {
	_, err := os.Lstat(dirtyPath(statePath))
	return !errors.Is(err, os.ErrNotExist)
}

// trustedState returns the state recorded for a host, or nil when it cannot
// be trusted to describe the kernel: marked dirty, missing or unreadable.
func trustedState[S any](path string) *S {
	if Dirty(path) {
		return nil
	}
	var have S
	if err := files.ReadJSON(path, &have); err != nil {
		return nil
	}
	return &have
}

// ApplyHosts runs the update every datapath makes on each host: render what
// the host should have, load what it had from the last apply, let update
// send the difference (in one atomic transaction), and record the new
// state and set (the digest of what is applied). S is the
// datapath's own state type. update gets a nil have when the recorded
// state cannot be trusted (an earlier apply was interrupted or failed on
// that host, or the state file is missing or unreadable): it must then
// rebuild everything of its own on the host from want, whatever the
// kernel holds. update must return an error only when none of its
// transactions committed (each is atomic; it stops at the first that
// succeeds).
//
// The host's state is marked dirty before its kernel is touched and the
// mark cleared once the new state is saved, so a crash in between is
// repaired by the next apply. If anything fails, the hosts already changed,
// and the failing host when its kernel changed but its state could not be
// saved, are put back to what they had; a host that cannot be put back
// stays marked dirty, and a host that was rebuilt (what it had was not
// known) keeps the new set, recorded as such: the caller must apply the
// set it stores again to bring it back (lab does).
func ApplyHosts[S any](ctx context.Context, lab *topology.Spec, k kind.Kind, set string,
	render func(host string) S, update func(ctx context.Context, h *topology.Host, have, want *S) error) error {
	if len(lab.Hosts) == 0 {
		return ErrNoHosts
	}
	type done struct {
		host    *topology.Host
		path    string
		have    *S     // nil: unknown, cannot be put back
		haveSet string // the set it enforced, with have
		want    S
	}
	var applied []done
	// restore puts a host back to what it had and records it.
	restore := func(d done) error {
		if d.have == nil {
			return fmt.Errorf("roll back %s: it was rebuilt, what it held before is not known: it keeps the new set", d.host.Name)
		}
		if err := MarkDirty(d.path, d.haveSet); err != nil {
			return fmt.Errorf("roll back %s: %w", d.host.Name, err)
		}
		back := *d.have
		if err := update(context.WithoutCancel(ctx), d.host, &d.want, &back); err != nil {
			return fmt.Errorf("roll back %s: %w", d.host.Name, err)
		}
		err := SaveState(d.path, back)
		if err == nil {
			err = RecordSet(d.path, d.haveSet)
		}
		if err != nil {
			return fmt.Errorf("roll back %s: %w (it is left marked for rebuild)", d.host.Name, err)
		}
		return ClearDirty(d.path)
	}
	// rollback puts the hosts already updated back to what they had, so a
	// failure on one host does not leave the lab half on the new set.
	rollback := func(cause error) error { return RollBack(cause, applied, restore) }
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		want := render(h.Name)
		path := StatePath(lab.Name, k, h.Name)
		have := trustedState[S](path)
		var haveSet string
		if have != nil {
			haveSet = ReadHost(path).Sets[0]
		}
		if err := MarkDirty(path, set); err != nil {
			return rollback(fmt.Errorf("host %s: mark datapath state: %w", h.Name, err))
		}
		err := fault.At(fault.Dirty, h.Name)
		if err == nil {
			err = update(ctx, h, have, &want)
		}
		if err != nil {
			// update fails only when no transaction of it committed: a
			// host whose state was known still has it. A cancelled
			// context may have hit a tool after its commit: keep the mark.
			if have != nil && ctx.Err() == nil {
				_ = ClearDirty(path)
			}
			return rollback(fmt.Errorf("host %s: %w", h.Name, err))
		}
		KernelChanged(h.Name)
		d := done{h, path, have, haveSet, want}
		err = SaveState(path, want)
		if err == nil {
			err = RecordSet(path, set)
		}
		if err != nil {
			// This host's kernel changed too: put it back first.
			applied = append(applied, d)
			return rollback(fmt.Errorf("host %s: save datapath state: %w", h.Name, err))
		}
		_ = fault.At(fault.Saved, h.Name)
		// A mark that cannot be removed only costs the next apply a
		// rebuild of this host.
		_ = ClearDirty(path)
		applied = append(applied, d)
		HostDone(h.Name)
	}
	return nil
}

// RollBack undoes the hosts a change already changed, the last first
// (undo), when it fails with cause on a later one, so that a failure does
// not leave the lab half on the new set; the error says what was done.
func RollBack[H any](cause error, applied []H, undo func(H) error) error {
	var errs []error
	for i := len(applied) - 1; i >= 0; i-- {
		if err := undo(applied[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; rolling back failed too: %w", cause, errors.Join(errs...))
	}
	if len(applied) > 0 {
		return fmt.Errorf("%w (the %d hosts already changed were rolled back)", cause, len(applied))
	}
	return cause
}

// Memos keep, per lab, what this process last applied to it (a proxy's
// or a datapath's memo of its incremental change path). A change takes
// the memo (no other change can then use it half updated) and keeps the
// new one when it succeeds.
type Memos[T any] struct {
	mu sync.Mutex
	by map[string]T
}

// Take removes and returns a lab's memo (the zero T when there is none).
func (m *Memos[T]) Take(lab string) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.by[lab]
	delete(m.by, lab)
	return v
}

// Keep stores a lab's memo.
func (m *Memos[T]) Keep(lab string, v T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil {
		m.by = map[string]T{}
	}
	m.by[lab] = v
}
