// Package ebpf is cnlab's eBPF datapath: label-identity policy enforced by
// tc programs (attached with tcx) on each endpoint's host-side veth, with an
// ipcache, per-endpoint policy maps, conntrack, per-endpoint counters and
// verdict events, all pinned under /sys/fs/bpf/cnlab/LAB/HOST. With host
// routing "bpf" (the default) same-host traffic skips the bridge: the
// sender's program checks both sides and redirects the packet straight into
// the destination's namespace. With "legacy" the endpoints stay on the
// bridge and the programs only filter. See docs/ebpf.md.
package ebpf

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
)

// PinRoot holds the pins of every lab, one directory per lab and host.
var PinRoot = "/sys/fs/bpf/cnlab"

// Descriptor binds the ebpf kind to this implementation. Its pins live in
// bpffs, outside the lab's namespaces: Labs finds them and Cleanup removes
// them when the lab goes down.
var Descriptor = datapath.Descriptor{Kind: kind.EBPF, New: New, Labs: pinnedLabs, Cleanup: removePins}

// pinnedLabs lists the labs with a pin directory.
func pinnedLabs() []string {
	ents, _ := os.ReadDir(PinRoot)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// removePins removes a lab's pins, and the root once no lab has any.
func removePins(lab string) error {
	forgetPinned(filepath.Join(PinRoot, lab))
	if err := os.RemoveAll(filepath.Join(PinRoot, lab)); err != nil {
		return fmt.Errorf("remove pins of lab %s: %w", lab, err)
	}
	if ents, err := os.ReadDir(PinRoot); err == nil && len(ents) == 0 {
		_ = os.Remove(PinRoot)
	}
	return nil
}

// New returns the eBPF datapath.
func New() datapath.Datapath { return &Datapath{} }

// Datapath implements datapath.Datapath with eBPF programs.
type Datapath struct{}
