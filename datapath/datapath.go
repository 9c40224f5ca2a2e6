// Package datapath defines what a policy datapath does — set a lab's hosts
// up, enforce compiled policy incrementally and atomically, describe its
// kernel state — the Descriptor that binds a kind (datapath/kind) to an
// implementation, and the helpers the implementations share (per-host
// state, the atomic multi-host apply). The list of implementations is
// datapath/registry. Datapaths consume the policy IR only: they never read
// policy YAML. Each host of a lab enforces its own endpoints' egress and
// ingress.
package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Datapath enforces a lab's compiled policy.
type Datapath interface {
	// Setup prepares every host of the lab (sysctls, base chains or
	// tables) and attaches every endpoint. It is idempotent.
	Setup(ctx context.Context, lab *topology.Spec) error
	// Apply makes each host enforce c, changing only what differs from
	// the previous Apply, in one atomic transaction per host: a flow that
	// both the old and the new policy deny never passes in between.
	Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error
	// Describe returns the kernel state of the datapath, per host name.
	Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error)
}

// FlowForgetter is a datapath with its own connection tracking (eBPF): the
// probe asks it to forget the probe's own flows, as it does the kernel's
// conntrack.
type FlowForgetter interface {
	ForgetFlows(ctx context.Context, lab *topology.Spec, proto uint8, srcs []netip.AddrPort) error
}

// Descriptor binds a datapath kind to its implementation. Each
// implementation package exports one; datapath/registry lists them. What a
// kind is, needs and accepts without the kernel is in datapath/kind.
type Descriptor struct {
	Kind kind.Kind
	New  func() Datapath
	// Labs lists the labs that have state of this datapath outside their
	// namespaces (eBPF pins in bpffs), found from the kernel; nil when the
	// datapath keeps everything inside the lab's namespaces.
	Labs func() []string
	// Cleanup removes that state for one lab; idempotent. Called once the
	// lab's namespaces are gone.
	Cleanup func(lab string) error
}

// ErrNoHosts is returned for labs without hosts (chains): there is nothing
// to enforce policies on.
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

// StatePath is where a datapath keeps what it last applied on a host, so
// that the next Apply can change only the difference.
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
func KernelChanged(host string) { _ = fault.At("kernel", host) }

// HostDone marks the fault point after a host is finished, before the next.
func HostDone(host string) { _ = fault.At("host-done", host) }

// dirtyPath marks a host's state as not to be trusted: it exists from just
// before cnlab touches the host's kernel until the state file records what
// the kernel then holds.
func dirtyPath(statePath string) string { return statePath + ".dirty" }

// MarkDirty records, before a host's kernel is changed, that its state file
// may stop describing the kernel: if cnlab dies or fails before ClearDirty,
// the next apply rebuilds the host instead of diffing.
func MarkDirty(statePath string) error {
	return files.WriteAtomic(dirtyPath(statePath), nil)
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
// state. S is the datapath's own state type. update gets a nil have when
// the recorded state cannot be trusted (an earlier apply was interrupted
// or failed on that host, or the state file is missing or unreadable): it
// must then rebuild everything of its own on the host from want, whatever
// the kernel holds. update must return an error only when none of its
// transactions committed (each is atomic; it stops at the first that
// succeeds).
//
// The host's state is marked dirty before its kernel is touched and the
// mark cleared once the new state is saved, so a crash in between is
// repaired by the next apply. If anything fails, the hosts already changed,
// and the failing host when its kernel changed but its state could not be
// saved, are put back to what they had; a host that cannot be put back
// stays marked dirty.
func ApplyHosts[S any](ctx context.Context, lab *topology.Spec, k kind.Kind,
	render func(host string) S, update func(ctx context.Context, ns string, have, want *S) error) error {
	if len(lab.Hosts) == 0 {
		return ErrNoHosts
	}
	type done struct {
		name, netns, path string
		have              *S // nil: unknown, cannot be put back
		want              S
	}
	var applied []done
	// restore puts a host back to what it had and records it.
	restore := func(d done) error {
		if d.have == nil {
			return fmt.Errorf("roll back %s: its previous state was unknown: it is left marked for rebuild", d.name)
		}
		if err := MarkDirty(d.path); err != nil {
			return fmt.Errorf("roll back %s: %w", d.name, err)
		}
		back := *d.have
		if err := update(context.WithoutCancel(ctx), d.netns, &d.want, &back); err != nil {
			return fmt.Errorf("roll back %s: %w", d.name, err)
		}
		if err := SaveState(d.path, back); err != nil {
			return fmt.Errorf("roll back %s: %w (it is left marked for rebuild)", d.name, err)
		}
		return ClearDirty(d.path)
	}
	// rollback puts the hosts already updated back to what they had, so a
	// failure on one host does not leave the lab half on the new policy.
	rollback := func(cause error) error {
		var errs []error
		for i := len(applied) - 1; i >= 0; i-- {
			if err := restore(applied[i]); err != nil {
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
	for _, h := range lab.Hosts {
		want := render(h.Name)
		path := StatePath(lab.Name, k, h.Name)
		have := trustedState[S](path)
		if err := MarkDirty(path); err != nil {
			return rollback(fmt.Errorf("host %s: mark datapath state: %w", h.Name, err))
		}
		err := fault.At("dirty", h.Name)
		if err == nil {
			err = update(ctx, h.Netns, have, &want)
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
		d := done{h.Name, h.Netns, path, have, want}
		if err := SaveState(path, want); err != nil {
			// This host's kernel changed too: put it back first.
			applied = append(applied, d)
			return rollback(fmt.Errorf("host %s: save datapath state: %w", h.Name, err))
		}
		_ = fault.At("saved", h.Name)
		// A mark that cannot be removed only costs the next apply a
		// rebuild of this host.
		_ = ClearDirty(path)
		applied = append(applied, d)
		HostDone(h.Name)
	}
	return nil
}
