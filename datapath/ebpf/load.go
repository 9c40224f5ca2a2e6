package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/topology"
)

// ipcacheSize bounds the ipcache: endpoints plus CIDR prefixes.
const ipcacheSize = 1 << 20

// HostDir is where a host's maps and links are pinned.
func HostDir(lab, host string) string { return filepath.Join(PinRoot, lab, host) }

// collectionSpec is the compiled programs with the lab's map sizes and
// load-time constants.
func collectionSpec(lab *topology.Spec) (*ebpf.CollectionSpec, error) {
	cs, err := loadCnlab()
	if err != nil {
		return nil, err
	}
	o := lab.EBPF
	sizes := map[string]uint32{
		"cnlab_lxc":          uint32(o.MaxEndpoints),
		"cnlab_local":        uint32(o.MaxEndpoints),
		"cnlab_sockep":       uint32(o.MaxEndpoints),
		"cnlab_policy":       uint32(2 * o.MaxEndpoints),
		"cnlab_policy_exact": uint32(2 * o.MaxEndpoints),
		"cnlab_enforce":      uint32(2 * o.MaxEndpoints),
		"cnlab_counters":     uint32(o.MaxEndpoints) * 2 * uint32(cnlabReasonR_MAX),
		"cnlab_ct":           uint32(o.CTMapSize),
		"cnlab_nat":          uint32(o.CTMapSize),
	}
	for name, m := range cs.Maps {
		if n, ok := sizes[name]; ok {
			m.MaxEntries = n
		}
		if strings.HasPrefix(name, "cnlab_") {
			m.Pinning = ebpf.PinByName
		}
	}
	// Inner maps must match their template, max_entries included (LPM
	// tries cannot be BPF_F_INNER_MAP); without preallocation a large
	// bound costs nothing until used.
	cs.Maps["cnlab_policy"].InnerMap.MaxEntries = uint32(o.PolicyMapSize)
	cs.Maps["cnlab_ipcache"].InnerMap.MaxEntries = ipcacheSize
	// The host routing is fixed for a lab's life (Setup refuses to
	// change it under pinned maps): a constant of the programs, which
	// the verifier folds, not a flag read per packet.
	var bpfRouting uint32
	if o.HostRouting == kind.HostRoutingBPF {
		bpfRouting = 1
	}
	if err := cs.Variables["host_routing_bpf"].Set(bpfRouting); err != nil {
		return nil, fmt.Errorf("set host_routing_bpf: %w", err)
	}
	return cs, nil
}

// hostMaps are a host's pinned maps, opened by any cnlab process.
type hostMaps struct {
	dir                                                          string
	config, monitor, lxc, local, ipcache, policy, exact, enforce *ebpf.Map
	ct, counters, events, sockep                                 *ebpf.Map
}

func (m *hostMaps) Close() {
	for _, x := range []*ebpf.Map{m.config, m.monitor, m.lxc, m.local, m.ipcache, m.policy, m.exact, m.enforce, m.ct, m.counters, m.events, m.sockep} {
		if x != nil {
			x.Close()
		}
	}
}

// openHost opens the pinned maps of a host of a lab set up with eBPF.
func openHost(lab, host string) (*hostMaps, error) {
	m := &hostMaps{dir: HostDir(lab, host)}
	for name, dst := range map[string]**ebpf.Map{
		"cnlab_config": &m.config, "cnlab_monitor": &m.monitor, "cnlab_lxc": &m.lxc,
		"cnlab_local": &m.local, "cnlab_ipcache": &m.ipcache, "cnlab_policy": &m.policy, "cnlab_policy_exact": &m.exact,
		"cnlab_enforce": &m.enforce, "cnlab_ct": &m.ct, "cnlab_counters": &m.counters,
		"cnlab_events": &m.events, "cnlab_sockep": &m.sockep,
	} {
		x, err := ebpf.LoadPinnedMap(filepath.Join(m.dir, name), nil)
		if err != nil {
			m.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("host %s: the eBPF datapath is not set up (no %s under %s)", host, name, m.dir)
			}
			return nil, fmt.Errorf("host %s: open map %s: %w", host, name, err)
		}
		*dst = x
	}
	return m, nil
}

func (m *hostMaps) readConfig() (cnlabConfig, error) {
	var c cnlabConfig
	err := m.config.Lookup(uint32(0), &c)
	return c, err
}
