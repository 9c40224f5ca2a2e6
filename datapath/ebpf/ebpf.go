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
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/bpffs"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Name is the datapath's name in topology files.
const Name = "ebpf"

// New returns the eBPF datapath.
func New() datapath.Datapath { return &Datapath{} }

// Datapath implements datapath.Datapath with eBPF programs.
type Datapath struct{}

// ipcacheSize bounds the ipcache: endpoints plus CIDR prefixes.
const ipcacheSize = 1 << 20

// HostDir is where a host's maps and links are pinned.
func HostDir(lab, host string) string { return filepath.Join(topology.BPFFSDir, lab, host) }

// collectionSpec is the compiled programs with the lab's map sizes.
func collectionSpec(lab *topology.Spec) (*ebpf.CollectionSpec, error) {
	cs, err := loadCnlab()
	if err != nil {
		return nil, err
	}
	o := lab.EBPF
	sizes := map[string]uint32{
		"cnlab_lxc":      uint32(o.MaxEndpoints),
		"cnlab_local":    uint32(o.MaxEndpoints),
		"cnlab_sockep":   uint32(o.MaxEndpoints),
		"cnlab_policy":   uint32(2 * o.MaxEndpoints),
		"cnlab_enforce":  uint32(2 * o.MaxEndpoints),
		"cnlab_counters": uint32(o.MaxEndpoints) * 2 * uint32(cnlabReasonR_MAX),
		"cnlab_ct":       uint32(o.CTMapSize),
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
	return cs, nil
}

// hostMaps are a host's pinned maps, opened by any cnlab process.
type hostMaps struct {
	dir                                                   string
	config, monitor, lxc, local, ipcache, policy, enforce *ebpf.Map
	ct, counters, events, sockep                          *ebpf.Map
}

func (m *hostMaps) Close() {
	for _, x := range []*ebpf.Map{m.config, m.monitor, m.lxc, m.local, m.ipcache, m.policy, m.enforce, m.ct, m.counters, m.events, m.sockep} {
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
		"cnlab_local": &m.local, "cnlab_ipcache": &m.ipcache, "cnlab_policy": &m.policy,
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

// Setup implements datapath.Datapath: it loads the programs and maps of
// every host (pinned, so later commands find them) and attaches every
// endpoint. Run again, it keeps the maps and atomically replaces the
// programs of the existing links.
func (d *Datapath) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	if err := bpffs.Ensure(); err != nil {
		return err
	}
	for _, h := range lab.Hosts {
		if n := len(datapath.LocalEndpoints(lab, h.Name)); n > lab.EBPF.MaxEndpoints {
			return fmt.Errorf("host %s has %d endpoints, but ebpf.maxEndpoints is %d (raise it in the topology, at most %d)",
				h.Name, n, lab.EBPF.MaxEndpoints, topology.MaxMaxEndpoints)
		}
	}
	for i := range lab.Hosts {
		if err := d.setupHost(ctx, lab, &lab.Hosts[i]); err != nil {
			return fmt.Errorf("host %s: %w", lab.Hosts[i].Name, err)
		}
	}
	return nil
}

func (d *Datapath) setupHost(ctx context.Context, lab *topology.Spec, h *topology.Host) error {
	dir := HostDir(lab.Name, h.Name)
	for _, sub := range []string{"links", "policy"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	var flags uint32
	if lab.EBPF.HostRouting == topology.HostRoutingBPF {
		flags = uint32(cnlabConfigFlagFLAG_HOST_ROUTING_BPF)
	}
	want := cnlabConfig{Flags: flags, MaxEp: uint32(lab.EBPF.MaxEndpoints), PolicySize: uint32(lab.EBPF.PolicyMapSize)}
	// Maps pinned by an earlier Setup must have been made for the same
	// options: say so before cilium/ebpf finds a size that differs.
	if old, err := ebpf.LoadPinnedMap(filepath.Join(dir, "cnlab_config"), nil); err == nil {
		var have cnlabConfig
		err := old.Lookup(uint32(0), &have)
		old.Close()
		if err == nil && (have.Flags != want.Flags || have.MaxEp != want.MaxEp || have.PolicySize != want.PolicySize) {
			return fmt.Errorf("the maps pinned in %s were made with other ebpf options (host routing, maxEndpoints or policyMapSize): take the lab down first", dir)
		}
	}
	cs, err := collectionSpec(lab)
	if err != nil {
		return err
	}
	var objs cnlabObjects
	if err := cs.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load programs: %+v", ve)
		}
		return fmt.Errorf("load programs: %w", err)
	}
	defer objs.Close()
	var cfg cnlabConfig
	if err := objs.CnlabConfig.Lookup(uint32(0), &cfg); err != nil {
		return err
	}
	if cfg.MaxEp == 0 {
		if err := objs.CnlabConfig.Put(uint32(0), want); err != nil {
			return fmt.Errorf("write config: %w", err)
		}
	}
	for slot, ep := range datapath.LocalEndpoints(lab, h.Name) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := attach(lab, h, ep, uint32(slot), &objs); err != nil {
			return fmt.Errorf("endpoint %s: %w", ep.ID(), err)
		}
	}
	if lab.EBPF.ConnectHook {
		return attachConnectHook(dir, &objs)
	}
	return nil
}

// cgroupRoot finds where the connect hook is attached: the root of the
// cgroup v2 hierarchy, so that every process, whatever runs inside an
// endpoint included, is covered (the program passes sockets of other
// namespaces at once). It is /sys/fs/cgroup on unified systems and
// /sys/fs/cgroup/unified on hybrid ones.
func cgroupRoot() (string, error) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted: the connect hook needs one (mount -t cgroup2 none /sys/fs/cgroup/unified)")
}

func attachConnectHook(dir string, objs *cnlabObjects) error {
	pin := filepath.Join(dir, "links", "connect4")
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		err = l.Update(objs.CnlabConnect4)
		l.Close()
		return err
	}
	root, err := cgroupRoot()
	if err != nil {
		return err
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: root, Attach: ebpf.AttachCGroupInet4Connect, Program: objs.CnlabConnect4})
	if err != nil {
		return fmt.Errorf("attach the connect hook to %s: %w", root, err)
	}
	defer l.Close()
	return l.Pin(pin)
}

// netnsCookie returns the kernel's cookie of a network namespace, which
// the connect hook reads with bpf_get_netns_cookie.
func netnsCookie(ns string) (uint64, error) {
	var cookie uint64
	err := netns.Do(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var buf [8]byte
		n := uint32(len(buf))
		if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0); errno != 0 {
			return fmt.Errorf("SO_NETNS_COOKIE: %w", errno)
		}
		cookie = binary.NativeEndian.Uint64(buf[:])
		return nil
	})
	return cookie, err
}

func ip4(a netip.Addr) uint32 { b := a.As4(); return binary.LittleEndian.Uint32(b[:]) }

func addrOf(x uint32) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], x)
	return netip.AddrFrom4(b)
}

func htons(p uint16) uint16 { return p<<8 | p>>8 }

// attach writes the endpoint's map entries, plumbs it for the host routing
// mode, and attaches (or atomically updates) its two tcx links.
func attach(lab *topology.Spec, h *topology.Host, ep *topology.Endpoint, slot uint32, objs *cnlabObjects) error {
	nh, err := netns.Handle(h.Netns)
	if err != nil {
		return err
	}
	defer nh.Close()
	lxc, err := nh.LinkByName(ep.HostVeth)
	if err != nil {
		return fmt.Errorf("find %s: %w", ep.HostVeth, err)
	}
	eh, err := netns.Handle(ep.Netns)
	if err != nil {
		return err
	}
	eth0, err := eh.LinkByName("eth0")
	eh.Close()
	if err != nil {
		return fmt.Errorf("find eth0: %w", err)
	}
	e := cnlabEndpoint{Index: slot, Ip: ip4(ep.IP), Ifindex: uint32(lxc.Attrs().Index)}
	copy(e.Mac[:], eth0.Attrs().HardwareAddr)
	copy(e.LxcMac[:], lxc.Attrs().HardwareAddr)
	var old cnlabEndpoint
	if objs.CnlabLxc.Lookup(e.Ifindex, &old) == nil {
		e.Identity = old.Identity
	}
	if err := objs.CnlabLxc.Put(e.Ifindex, e); err != nil {
		return fmt.Errorf("endpoint map: %w", err)
	}
	if err := objs.CnlabLocal.Put(e.Ip, e); err != nil {
		return fmt.Errorf("local endpoint map: %w", err)
	}
	if lab.EBPF.ConnectHook {
		cookie, err := netnsCookie(ep.Netns)
		if err != nil {
			return err
		}
		if err := objs.CnlabSockep.Put(cookie, e); err != nil {
			return fmt.Errorf("socket endpoint map: %w", err)
		}
	}
	if lab.EBPF.HostRouting == topology.HostRoutingBPF {
		// Off the bridge: the host reaches the endpoint by a /32 route
		// and a permanent neighbour entry; the endpoint reaches
		// everything through the program's ARP answers.
		if lxc.Attrs().MasterIndex != 0 {
			if err := nh.LinkSetNoMaster(lxc); err != nil {
				return fmt.Errorf("take %s off the bridge: %w", ep.HostVeth, err)
			}
		}
		rt := &netlink.Route{Dst: &net.IPNet{IP: ep.IP.AsSlice(), Mask: net.CIDRMask(32, 32)},
			LinkIndex: lxc.Attrs().Index, Scope: netlink.SCOPE_LINK}
		if err := nh.RouteReplace(rt); err != nil {
			return fmt.Errorf("route to %s: %w", ep.IP, err)
		}
		n := &netlink.Neigh{LinkIndex: lxc.Attrs().Index, IP: ep.IP.AsSlice(), HardwareAddr: eth0.Attrs().HardwareAddr,
			State: netlink.NUD_PERMANENT, Family: unix.AF_INET}
		if err := nh.NeighSet(n); err != nil {
			return fmt.Errorf("neighbour %s: %w", ep.IP, err)
		}
	}
	dir := HostDir(lab.Name, h.Name)
	for _, a := range []struct {
		suffix string
		prog   *ebpf.Program
		typ    ebpf.AttachType
	}{
		{"ingress", objs.CnlabFromEp, ebpf.AttachTCXIngress},
		{"egress", objs.CnlabToEp, ebpf.AttachTCXEgress},
	} {
		pin := filepath.Join(dir, "links", ep.HostVeth+"_"+a.suffix)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			err = l.Update(a.prog)
			l.Close()
			if err != nil {
				return fmt.Errorf("replace the %s program of %s: %w", a.suffix, ep.HostVeth, err)
			}
			continue
		}
		// The interface index is looked up in the calling thread's
		// network namespace; pinning is done from ours.
		var l link.Link
		err := netns.Do(h.Netns, func() (err error) {
			l, err = link.AttachTCX(link.TCXOptions{Interface: lxc.Attrs().Index, Program: a.prog, Attach: a.typ})
			return err
		})
		if err != nil {
			return fmt.Errorf("attach tcx %s of %s: %w", a.suffix, ep.HostVeth, err)
		}
		err = l.Pin(pin)
		l.Close()
		if err != nil {
			return fmt.Errorf("pin link %s: %w", pin, err)
		}
	}
	return nil
}

// hostState is what the last apply left active on a host.
type hostState struct {
	Gen       uint32            `json:"gen"`
	IPCache   string            `json:"ipcache"`   // hash of the ipcache contents
	Endpoints map[string]string `json:"endpoints"` // endpoint -> hash of its policy map
}

// staged is a host whose next generation is built but not yet active.
type staged struct {
	host  *topology.Host
	maps  *hostMaps
	cfg   cnlabConfig
	state hostState
	pins  map[string]*ebpf.Map // new active inner maps to pin, by pin name
}

// Apply implements datapath.Datapath. Every host gets its next generation
// of maps built beside the active one (unchanged maps are shared, changed
// ones rebuilt whole with a batch update), then each host switches with
// one word: a packet sees either the old or the new policy, never a mix.
// If building fails on any host, no host switches.
func (d *Datapath) Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	plans, err := plan(lab, c)
	if err != nil {
		return err
	}
	var all []*staged
	defer func() {
		for _, s := range all {
			s.maps.Close()
			for _, m := range s.pins {
				m.Close()
			}
		}
	}()
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		s, err := stage(lab, h, plans[h.Name])
		if s != nil {
			all = append(all, s)
		}
		if err != nil {
			return fmt.Errorf("host %s: %w (no host changed)", h.Name, err)
		}
	}
	for i, s := range all {
		next := s.cfg
		next.Gen = 1 - s.cfg.Gen
		if err := s.maps.config.Put(uint32(0), next); err != nil {
			for _, p := range all[:i] {
				_ = p.maps.config.Put(uint32(0), p.cfg)
			}
			return fmt.Errorf("host %s: switch generation: %w", s.host.Name, err)
		}
	}
	// The new policy is in force on every host: what follows only helps
	// the next apply and bpftool users, and must not make this one look
	// failed (the lab would then store the old policy set).
	for _, s := range all {
		s.state.Gen = 1 - s.cfg.Gen
		path := datapath.StatePath(lab.Name, Name, s.host.Name)
		if err := datapath.SaveState(path, s.state); err != nil {
			_ = os.Remove(path) // the next apply then rebuilds every map
		}
		_ = pinActive(s)
		_ = setIdentities(s.maps, plans[s.host.Name])
	}
	return nil
}

// setIdentities writes the endpoints' identities into the endpoint maps,
// for events (the programs decide by peer key, never by these).
func setIdentities(m *hostMaps, hp *hostPlan) error {
	ident := map[uint32]uint32{}
	for _, ep := range hp.Endpoints {
		ident[ep.Slot] = ep.Identity
	}
	var errs []error
	for _, mp := range []*ebpf.Map{m.lxc, m.local, m.sockep} {
		if mp == nil {
			continue
		}
		type kv struct {
			k any
			v cnlabEndpoint
		}
		var upd []kv
		var e cnlabEndpoint
		var k32 uint32
		var k64 uint64
		it := mp.Iterate()
		if mp == m.sockep {
			for it.Next(&k64, &e) {
				if id, ok := ident[e.Index]; ok && e.Identity != id {
					e.Identity = id
					upd = append(upd, kv{k64, e})
				}
			}
		} else {
			for it.Next(&k32, &e) {
				if id, ok := ident[e.Index]; ok && e.Identity != id {
					e.Identity = id
					upd = append(upd, kv{k32, e})
				}
			}
		}
		errs = append(errs, it.Err())
		for _, u := range upd { // after the walk: a hash walk may skip keys updated during it
			errs = append(errs, mp.Put(u.k, u.v))
		}
	}
	return errors.Join(errs...)
}

// stage builds a host's next generation.
func stage(lab *topology.Spec, h *topology.Host, hp *hostPlan) (*staged, error) {
	m, err := openHost(lab.Name, h.Name)
	if err != nil {
		return nil, err
	}
	s := &staged{host: h, maps: m, pins: map[string]*ebpf.Map{}}
	if s.cfg, err = m.readConfig(); err != nil {
		return s, err
	}
	var have hostState
	if err := datapath.LoadState(datapath.StatePath(lab.Name, Name, h.Name), &have); err != nil {
		return s, err
	}
	if have.Gen != s.cfg.Gen {
		have = hostState{} // not ours to trust: rebuild everything
	}
	cur, next := s.cfg.Gen, 1-s.cfg.Gen
	maxEp := s.cfg.MaxEp
	s.state = hostState{IPCache: ipcacheHash(hp.IPCache), Endpoints: map[string]string{}}
	// ipcache
	ipc, err := reuseOrBuild(m.ipcache, cur, have.IPCache == s.state.IPCache, func() (*ebpf.Map, error) {
		return buildIPCache(hp.IPCache)
	})
	if err != nil {
		return s, fmt.Errorf("ipcache: %w", err)
	}
	var nextIPC uint32
	if m.ipcache.Lookup(next, &nextIPC) != nil || nextIPC != mapID(ipc) {
		if err := m.ipcache.Put(next, ipc); err != nil {
			ipc.Close()
			return s, fmt.Errorf("ipcache: %w", err)
		}
	}
	s.pins["ipcache"] = ipc
	// Inner maps go into the next generation's slots in one batch: every
	// syscall update of a map-of-maps waits for an RCU grace period
	// (milliseconds), once per batch rather than once per endpoint. Slots
	// that already hold the wanted map are left alone.
	var putKeys, putFDs, delKeys []uint32
	for i := range hp.Endpoints {
		ep := &hp.Endpoints[i]
		hash := ep.hash()
		s.state.Endpoints[ep.ID] = hash
		slotCur, slotNext := cur*maxEp+ep.Slot, next*maxEp+ep.Slot
		if err := m.enforce.Put(slotNext, ep.Enforce); err != nil {
			return s, fmt.Errorf("endpoint %s: enforcement: %w", ep.ID, err)
		}
		var nextID uint32
		hasNext := m.policy.Lookup(slotNext, &nextID) == nil
		if len(ep.Entries) == 0 {
			if hasNext {
				delKeys = append(delKeys, slotNext)
			}
			s.pins[pinName(ep.ID)] = nil
			continue
		}
		pm, err := reuseOrBuild(m.policy, slotCur, have.Endpoints[ep.ID] == hash, func() (*ebpf.Map, error) {
			return buildPolicy(ep.Entries, lab.EBPF.PolicyMapSize)
		})
		if err != nil {
			return s, fmt.Errorf("endpoint %s: policy map: %w", ep.ID, err)
		}
		s.pins[pinName(ep.ID)] = pm
		if hasNext && mapID(pm) == nextID {
			continue
		}
		putKeys = append(putKeys, slotNext)
		putFDs = append(putFDs, uint32(pm.FD()))
	}
	if err := batchPut(m.policy, putKeys, putFDs); err != nil {
		return s, fmt.Errorf("policy maps: %w", err)
	}
	if err := batchDelete(m.policy, delKeys); err != nil {
		return s, fmt.Errorf("policy maps: %w", err)
	}
	return s, nil
}

// mapID is a map's kernel ID (0 if unknown).
func mapID(m *ebpf.Map) uint32 {
	info, err := m.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return uint32(id)
}

// batchDelete deletes keys with one syscall where supported.
func batchDelete(m *ebpf.Map, keys []uint32) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchDelete(keys, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// pinName is where an endpoint's active policy map is pinned (bpffs
// refuses dots in names; "_" cannot occur in namespace or endpoint names).
func pinName(ep string) string { return "policy/" + strings.ReplaceAll(ep, "/", "_") }

// reuseOrBuild returns the inner map active at slot cur when it already
// holds what is wanted, else a newly built one.
func reuseOrBuild(outer *ebpf.Map, cur uint32, same bool, build func() (*ebpf.Map, error)) (*ebpf.Map, error) {
	if same {
		var id uint32
		if err := outer.Lookup(cur, &id); err == nil {
			if m, err := ebpf.NewMapFromID(ebpf.MapID(id)); err == nil {
				return m, nil
			}
		}
	}
	return build()
}

func buildIPCache(es []ipEntry) (*ebpf.Map, error) {
	if len(es) > ipcacheSize {
		return nil, fmt.Errorf("%d addresses and CIDR prefixes, the ipcache holds %d", len(es), ipcacheSize)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "cnlab_ipc", Type: ebpf.LPMTrie,
		KeySize: uint32(unsafe.Sizeof(cnlabIpcacheKey{})), ValueSize: uint32(unsafe.Sizeof(cnlabPeer{})),
		MaxEntries: ipcacheSize, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		return nil, err
	}
	keys := make([]cnlabIpcacheKey, len(es))
	vals := make([]cnlabPeer, len(es))
	for i, e := range es {
		keys[i] = cnlabIpcacheKey{Prefixlen: uint32(e.Prefix.Bits()), Ip: ip4(e.Prefix.Addr())}
		vals[i] = cnlabPeer{Key: e.Key, Identity: e.Identity}
	}
	if err := batchPut(m, keys, vals); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func buildPolicy(es []polEntry, size int) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "cnlab_pol", Type: ebpf.LPMTrie,
		KeySize: uint32(unsafe.Sizeof(cnlabPolicyKey{})), ValueSize: uint32(unsafe.Sizeof(cnlabPolicyVal{})),
		MaxEntries: uint32(size), Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		return nil, err
	}
	keys := make([]cnlabPolicyKey, len(es))
	vals := make([]cnlabPolicyVal, len(es))
	for i, e := range es {
		keys[i] = cnlabPolicyKey{Prefixlen: uint32(e.Plen), Peer: e.Peer, Dir: e.Dir, Proto: e.Proto, Port: htons(e.Port)}
		vals[i] = cnlabPolicyVal{Rule: e.Rule}
		if e.Deny {
			vals[i].Deny = 1
		}
	}
	if err := batchPut(m, keys, vals); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// batchPut inserts all entries with one batch syscall where the kernel
// supports it for the map type, else one by one.
func batchPut[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchUpdate(keys, vals, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Put(keys[i], vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// pinActive pins the now active inner maps where bpftool users look for
// them: policy/NAMESPACE.NAME and ipcache. A pin is replaced atomically.
func pinActive(s *staged) error {
	var errs []error
	for name, m := range s.pins {
		path := filepath.Join(s.maps.dir, name)
		if m == nil {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		tmp := path + "_new"
		_ = os.Remove(tmp)
		if err := m.Pin(tmp); err != nil {
			errs = append(errs, fmt.Errorf("pin %s: %w", path, err))
			continue
		}
		if err := os.Rename(tmp, path); err != nil {
			errs = append(errs, fmt.Errorf("pin %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// Describe implements datapath.Datapath: per host, the active generation,
// and per endpoint its slot, isolation, policy entries and counters.
func (d *Datapath) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for _, h := range lab.Hosts {
		m, err := openHost(lab.Name, h.Name)
		if err != nil {
			return nil, err
		}
		text, err := describeHost(lab, &h, m)
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		out[h.Name] = text
	}
	return out, nil
}

func describeHost(lab *topology.Spec, h *topology.Host, m *hostMaps) (string, error) {
	cfg, err := m.readConfig()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	routing := topology.HostRoutingLegacy
	if cfg.Flags&uint32(cnlabConfigFlagFLAG_HOST_ROUTING_BPF) != 0 {
		routing = topology.HostRoutingBPF
	}
	fmt.Fprintf(&b, "pins %s, host routing %s, active generation %d\n", m.dir, routing, cfg.Gen)
	counters, err := readCounters(m, cfg.MaxEp)
	if err != nil {
		return "", err
	}
	for slot, ep := range datapath.LocalEndpoints(lab, h.Name) {
		s := cfg.Gen*cfg.MaxEp + uint32(slot)
		var enf cnlabIsolation
		_ = m.enforce.Lookup(s, &enf)
		n := 0
		var id uint32
		if m.policy.Lookup(s, &id) == nil {
			if pm, err := ebpf.NewMapFromID(ebpf.MapID(id)); err == nil {
				var k cnlabPolicyKey
				var v cnlabPolicyVal
				it := pm.Iterate()
				for it.Next(&k, &v) {
					n++
				}
				pm.Close()
			}
		}
		iso := []string{}
		if enf&cnlabIsolationISO_INGRESS != 0 {
			iso = append(iso, "ingress")
		}
		if enf&cnlabIsolationISO_EGRESS != 0 {
			iso = append(iso, "egress")
		}
		if len(iso) == 0 {
			iso = append(iso, "none")
		}
		fmt.Fprintf(&b, "endpoint %s slot %d dev %s: isolated %s, %d policy entries\n", ep.ID(), slot, ep.HostVeth, strings.Join(iso, "+"), n)
		for _, c := range counters[uint32(slot)] {
			fmt.Fprintf(&b, "  %-7s %-20s %d packets %d bytes\n", policy.Dir(c.dir), reasonName(c.reason), c.packets, c.bytes)
		}
	}
	return b.String(), nil
}

type counterLine struct {
	dir            uint8
	reason         cnlabReason
	packets, bytes uint64
}

// counterSlot splits a key of cnlab_counters, (slot*2 + dir)*R_MAX +
// reason as the programs count.
func counterSlot(k uint32) (slot uint32, dir uint8, reason cnlabReason) {
	rmax := uint32(cnlabReasonR_MAX)
	return k / (2 * rmax), uint8(k / rmax % 2), cnlabReason(k % rmax)
}

// readCounters sums the per-CPU counters of every endpoint slot.
func readCounters(m *hostMaps, maxEp uint32) (map[uint32][]counterLine, error) {
	out := map[uint32][]counterLine{}
	var k uint32
	var per []cnlabCounter
	it := m.counters.Iterate()
	for it.Next(&k, &per) {
		var c counterLine
		for _, p := range per {
			c.packets += p.Packets
			c.bytes += p.Bytes
		}
		if c.packets == 0 {
			continue
		}
		slot, dir, reason := counterSlot(k)
		c.dir, c.reason = dir, reason
		out[slot] = append(out[slot], c)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for _, cs := range out {
		sort.Slice(cs, func(i, j int) bool {
			if cs[i].dir != cs[j].dir {
				return cs[i].dir < cs[j].dir
			}
			return cs[i].reason < cs[j].reason
		})
	}
	return out, nil
}

// ForgetFlows deletes the conntrack entries of flows from the given source
// addresses and ports (both directions), for the probe: a later probe that
// reuses a source port must meet the policy, not an old entry.
func (d *Datapath) ForgetFlows(ctx context.Context, lab *topology.Spec, proto uint8, srcs []netip.AddrPort) error {
	want := map[[2]uint32]bool{}
	for _, s := range srcs {
		if s.IsValid() {
			want[[2]uint32{ip4(s.Addr()), uint32(s.Port())}] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	for _, h := range lab.Hosts {
		m, err := openHost(lab.Name, h.Name)
		if err != nil {
			return err
		}
		var k cnlabCtKey
		var v cnlabCtVal
		var del []cnlabCtKey
		it := m.ct.Iterate()
		for it.Next(&k, &v) {
			if k.Proto == proto && (want[[2]uint32{k.Saddr, uint32(k.Sport)}] || want[[2]uint32{k.Daddr, uint32(k.Dport)}]) {
				del = append(del, k)
			}
		}
		for _, k := range del {
			_ = m.ct.Delete(k)
		}
		err = it.Err()
		m.Close()
		if err != nil {
			return fmt.Errorf("host %s: conntrack: %w", h.Name, err)
		}
	}
	return nil
}

// now returns the clock bpf_ktime_get_ns reads.
func now() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
