package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
		"cnlab_local6":       uint32(o.MaxEndpoints),
		"cnlab_sockep":       uint32(o.MaxEndpoints),
		"cnlab_policy":       uint32(2 * o.MaxEndpoints),
		"cnlab_policy_exact": uint32(2 * o.MaxEndpoints),
		"cnlab_enforce":      uint32(2 * o.MaxEndpoints),
		"cnlab_counters":     uint32(o.MaxEndpoints) * 2 * uint32(cnlabReasonR_MAX),
		"cnlab_ct":           uint32(o.CTMapSize),
		"cnlab_ct6":          uint32(o.CTMapSize),
		"cnlab_nat":          uint32(o.CTMapSize),
		"cnlab_nat6":         uint32(o.CTMapSize),
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
	cs.Maps["cnlab_ipcache6"].InnerMap.MaxEntries = ipcacheSize
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
	ipcache6, local6, ct6                                        *ebpf.Map // the IPv6 path's
	lost, ruleCounters                                           *ebpf.Map // opened on demand (open)
}

func (m *hostMaps) Close() {
	for _, x := range []*ebpf.Map{m.config, m.monitor, m.lxc, m.local, m.ipcache, m.policy, m.exact, m.enforce, m.ct, m.counters, m.events, m.sockep, m.lost, m.ruleCounters, m.ipcache6, m.local6, m.ct6} {
		if x != nil {
			x.Close()
		}
	}
}

// openHost opens the pinned maps of a host of a lab set up with eBPF.
func openHost(lab, host string) (*hostMaps, error) {
	m := &hostMaps{dir: HostDir(lab, host)}
	if err := m.open(host, allMaps...); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// The pinned maps of a host, by pin name.
const (
	mapConfig  = "cnlab_config"
	mapMonitor = "cnlab_monitor"
	mapLXC     = "cnlab_lxc"
	mapLocal   = "cnlab_local"
	mapIPCache = "cnlab_ipcache"
	mapPolicy  = "cnlab_policy"
	mapExact   = "cnlab_policy_exact"
	mapEnforce = "cnlab_enforce"
	mapCT      = "cnlab_ct"
	mapCounter = "cnlab_counters"
	mapEvents  = "cnlab_events"
	mapSockEP  = "cnlab_sockep"
	// The IPv6 path's ipcache, endpoints by address and conntrack.
	mapIPCache6 = "cnlab_ipcache6"
	mapLocal6   = "cnlab_local6"
	mapCT6      = "cnlab_ct6"
	// Not in allMaps: opened by the monitor and RuleCounters only.
	mapLost         = "cnlab_lost"
	mapRuleCounters = "cnlab_rule_counters"
)

var allMaps = []string{mapConfig, mapMonitor, mapLXC, mapLocal, mapIPCache, mapPolicy, mapExact,
	mapEnforce, mapCT, mapCounter, mapEvents, mapSockEP, mapIPCache6, mapLocal6, mapCT6}

// stageMaps are the maps an apply needs up to the switch (each map
// opened costs tens of microseconds; see openStaged).
var stageMaps = []string{mapConfig, mapIPCache, mapIPCache6, mapPolicy, mapExact, mapEnforce}

// open opens the named pinned maps of the host that are not open yet.
func (m *hostMaps) open(host string, names ...string) error {
	for _, name := range names {
		dst := m.field(name)
		if *dst != nil {
			continue
		}
		x, err := loadPinned(filepath.Join(m.dir, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("host %s: the eBPF datapath is not set up (no %s under %s)", host, name, m.dir)
			}
			return fmt.Errorf("host %s: open map %s: %w", host, name, err)
		}
		*dst = x
	}
	return nil
}

func (m *hostMaps) field(name string) **ebpf.Map {
	switch name {
	case mapConfig:
		return &m.config
	case mapMonitor:
		return &m.monitor
	case mapLXC:
		return &m.lxc
	case mapLocal:
		return &m.local
	case mapIPCache:
		return &m.ipcache
	case mapPolicy:
		return &m.policy
	case mapExact:
		return &m.exact
	case mapEnforce:
		return &m.enforce
	case mapCT:
		return &m.ct
	case mapCounter:
		return &m.counters
	case mapEvents:
		return &m.events
	case mapSockEP:
		return &m.sockep
	case mapIPCache6:
		return &m.ipcache6
	case mapLocal6:
		return &m.local6
	case mapCT6:
		return &m.ct6
	case mapLost:
		return &m.lost
	case mapRuleCounters:
		return &m.ruleCounters
	}
	panic("unknown map " + name)
}

func (m *hostMaps) readConfig() (cnlabConfig, error) {
	var c cnlabConfig
	err := m.config.Lookup(uint32(0), &c)
	return c, err
}

// pinnedCache keeps, by pin path, a handle on each map this process
// opened from a pin, with the pin's stamp: opening a pinned map costs a
// BPF_OBJ_GET, a readlink of /proc/self/fd and a BPF_OBJ_GET_INFO_BY_FD
// (tens of microseconds, times five maps and two hosts per policy
// change); a stat and a dup cost a few. A pin is never rewritten: a map
// pinned again at the path (a lab set up again) is a new bpffs inode, so
// a pin with the same stamp is the same map. The handles of a lab are
// closed when its pins are removed (removePins), or when a pin is found
// gone or replaced.
var pinnedCache struct {
	sync.Mutex
	by map[string]cachedMap
}

type cachedMap struct {
	stamp fileStamp
	m     *ebpf.Map // the cache's own handle: callers get clones
}

// loadPinned is ebpf.LoadPinnedMap, from a handle this process keeps
// when the pin is the one it opened before. The caller closes the map it
// gets.
func loadPinned(path string) (*ebpf.Map, error) {
	stamp, ok := stampOf(path)
	pinnedCache.Lock()
	c, hit := pinnedCache.by[path]
	if hit && (!ok || c.stamp != stamp) {
		delete(pinnedCache.by, path)
		c.m.Close()
		hit = false
	}
	var m *ebpf.Map
	var err error
	if hit {
		m, err = c.m.Clone()
	}
	pinnedCache.Unlock()
	if hit && err == nil {
		return m, nil
	}
	if m, err = ebpf.LoadPinnedMap(path, nil); err != nil {
		return nil, err
	}
	if after, same := stampOf(path); ok && same && after == stamp {
		if keep, err := m.Clone(); err == nil {
			pinnedCache.Lock()
			if pinnedCache.by == nil {
				pinnedCache.by = map[string]cachedMap{}
			}
			if old, ok := pinnedCache.by[path]; ok {
				old.m.Close()
			}
			pinnedCache.by[path] = cachedMap{stamp, keep}
			pinnedCache.Unlock()
		}
	}
	return m, nil
}

// forgetPinned closes the handles kept for the pins under dir.
func forgetPinned(dir string) {
	pinnedCache.Lock()
	defer pinnedCache.Unlock()
	for path, c := range pinnedCache.by {
		if path == dir || strings.HasPrefix(path, dir+string(filepath.Separator)) {
			c.m.Close()
			delete(pinnedCache.by, path)
		}
	}
}
