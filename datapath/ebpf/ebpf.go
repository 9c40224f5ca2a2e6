// Package ebpf is cnlab's eBPF datapath: label-identity policy enforced by
// tc programs (attached with tcx) on each endpoint's host-side veth, with an
// ipcache, per-endpoint policy maps, conntrack, per-endpoint counters and
// verdict events, all pinned under /sys/fs/bpf/cnlab/LAB/HOST. With host
// routing "bpf" (the default) same-host traffic skips the bridge: the
// sender's program checks both sides and redirects the packet straight into
// the destination's namespace. With "legacy" the endpoints stay on the
// bridge and the programs only filter. See docs/ebpf.md.
package ebpf

import "github.com/cnlab/cnlab/datapath"

// Name is the datapath's name in topology files.
const Name = "ebpf"

// New returns the eBPF datapath.
func New() datapath.Datapath { return &Datapath{} }

// Datapath implements datapath.Datapath with eBPF programs.
type Datapath struct{}
