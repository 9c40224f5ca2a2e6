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
// leaves v unchanged and is not an error.
func LoadState(path string, v any) error {
	if err := files.ReadJSON(path, v); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// SaveState writes a datapath's state for a host.
func SaveState(path string, v any) error { return files.WriteJSON(path, v, false) }

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

// ApplyHosts runs the update every datapath makes on each host: render what
// the host should have, load what it had from the last apply, let update
// send the difference (in one atomic transaction), and record the new
// state. S is the datapath's own state type.
func ApplyHosts[S any](ctx context.Context, lab *topology.Spec, k kind.Kind,
	render func(host string) S, update func(ctx context.Context, ns string, have S, want *S) error) error {
	if len(lab.Hosts) == 0 {
		return ErrNoHosts
	}
	type done struct {
		netns, path string
		have, want  S
	}
	var applied []done
	// rollback puts the hosts already updated back to what they had, so a
	// failure on one host does not leave the lab half on the new policy.
	rollback := func(cause error) error {
		var errs []error
		for i := len(applied) - 1; i >= 0; i-- {
			d := applied[i]
			back := d.have
			if err := update(context.WithoutCancel(ctx), d.netns, d.want, &back); err != nil {
				errs = append(errs, fmt.Errorf("roll back %s: %w", d.netns, err))
				continue
			}
			if err := SaveState(d.path, back); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w; rolling back the other hosts failed too: %w", cause, errors.Join(errs...))
		}
		if len(applied) > 0 {
			return fmt.Errorf("%w (the %d hosts already updated were rolled back)", cause, len(applied))
		}
		return cause
	}
	for _, h := range lab.Hosts {
		want := render(h.Name)
		path := StatePath(lab.Name, k, h.Name)
		var have S
		if err := LoadState(path, &have); err != nil {
			return rollback(fmt.Errorf("host %s: read datapath state: %w", h.Name, err))
		}
		if err := update(ctx, h.Netns, have, &want); err != nil {
			return rollback(fmt.Errorf("host %s: %w", h.Name, err))
		}
		if err := SaveState(path, want); err != nil {
			return rollback(fmt.Errorf("host %s: save datapath state: %w", h.Name, err))
		}
		applied = append(applied, done{h.Netns, path, have, want})
	}
	return nil
}
