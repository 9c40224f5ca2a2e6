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
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/bpffs"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

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
		if n := len(change.LocalEndpoints(lab, h.Name)); n > lab.EBPF.MaxEndpoints {
			return fmt.Errorf("host %s has %d endpoints, but ebpf.maxEndpoints is %d (raise it in the topology, at most %d)",
				h.Name, n, lab.EBPF.MaxEndpoints, kind.MaxMaxEndpoints)
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
	// Before generations had pins of their own, policy/ was a directory
	// of the active maps' pins.
	if fi, err := os.Lstat(filepath.Join(dir, "policy")); err == nil && fi.IsDir() {
		return fmt.Errorf("the maps pinned in %s were made by an older cnlab: take the lab down first", dir)
	}
	for _, sub := range []string{"links", "gen0/policy", "gen0/policy_exact", "gen1/policy", "gen1/policy_exact"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	var flags uint32
	if lab.EBPF.HostRouting == kind.HostRoutingBPF {
		flags = uint32(cnlabConfigFlagFLAG_HOST_ROUTING_BPF)
	}
	if lab.EBPF.ConnectHook {
		flags |= uint32(cnlabConfigFlagFLAG_CONNECT_HOOK)
	}
	want := cnlabConfig{Flags: flags, MaxEp: uint32(lab.EBPF.MaxEndpoints), PolicySize: uint32(lab.EBPF.PolicyMapSize)}
	if err := netns.Do(h.Netns, func() error {
		br, err := net.InterfaceByName(h.Bridge)
		if err == nil {
			want.BridgeIfindex = uint32(br.Index)
			copy(want.BridgeMac[:], br.HardwareAddr)
		}
		return err
	}); err != nil {
		return fmt.Errorf("find the bridge %s: %w", h.Bridge, err)
	}
	// Maps pinned by an earlier Setup must have been made for the same
	// options: say so before cilium/ebpf finds a size that differs.
	if old, err := ebpf.LoadPinnedMap(filepath.Join(dir, "cnlab_config"), nil); err == nil {
		var have cnlabConfig
		err := old.Lookup(uint32(0), &have)
		old.Close()
		perGen := uint32(cnlabConfigFlagFLAG_L7) // written by apply
		if err == nil && (have.Flags&^perGen != want.Flags || have.MaxEp != want.MaxEp || have.PolicySize != want.PolicySize) {
			return fmt.Errorf("the maps pinned in %s were made with other ebpf options (host routing, connect hook, maxEndpoints or policyMapSize): take the lab down first", dir)
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
		cfg = want
	} else {
		// The bridge may have been made again since the maps were
		// pinned: its index and MAC are written on every setup.
		cfg.BridgeIfindex, cfg.BridgeMac = want.BridgeIfindex, want.BridgeMac
	}
	if err := objs.CnlabConfig.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	for slot, ep := range change.LocalEndpoints(lab, h.Name) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := attach(lab, h, ep, uint32(slot), &objs); err != nil {
			return fmt.Errorf("endpoint %s: %w", ep.ID(), err)
		}
	}
	// Node ports' masqueraded replies come back on the host's links.
	for _, l := range lab.Links {
		for _, e := range l.Ends {
			dev := e.WireDev
			if e.OverDev != "" {
				dev = e.OverDev
			}
			if e.Host != h.Name || dev == "" {
				continue
			}
			if err := attachTCX(lab, h, dev, "wire", objs.CnlabFromWire, ebpf.AttachTCXIngress); err != nil {
				return err
			}
		}
	}
	// The connect hook needs connect4 and connect6; socket LB all of them.
	hook, lb := lab.EBPF.ConnectHook || lab.EBPF.SocketLB, lab.EBPF.SocketLB
	for _, h := range []struct {
		name string
		typ  ebpf.AttachType
		prog *ebpf.Program
		on   bool
	}{
		{"connect4", ebpf.AttachCGroupInet4Connect, objs.CnlabConnect4, hook},
		{"connect6", ebpf.AttachCGroupInet6Connect, objs.CnlabConnect6, hook},
		{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, objs.CnlabSendmsg4, lb},
		{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, objs.CnlabRecvmsg4, lb},
		{"getpeername4", ebpf.AttachCgroupInet4GetPeername, objs.CnlabGetpeername4, lb},
		{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, objs.CnlabSendmsg6, lb},
		{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, objs.CnlabRecvmsg6, lb},
		{"getpeername6", ebpf.AttachCgroupInet6GetPeername, objs.CnlabGetpeername6, lb},
	} {
		if !h.on {
			continue
		}
		if err := attachCgroup(dir, h.name, h.typ, h.prog); err != nil {
			return err
		}
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

// attachCgroup attaches (or atomically updates) a socket hook at the root
// of the cgroup v2 hierarchy, pinned as links/NAME.
func attachCgroup(dir, name string, typ ebpf.AttachType, prog *ebpf.Program) error {
	pin := filepath.Join(dir, "links", name)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		err = l.Update(prog)
		l.Close()
		return err
	}
	root, err := cgroupRoot()
	if err != nil {
		return err
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: root, Attach: typ, Program: prog})
	if err != nil {
		return fmt.Errorf("attach the %s hook to %s: %w", name, root, err)
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
	e := cnlabEndpoint{Index: slot, Ip: noIPv4, Ifindex: uint32(lxc.Attrs().Index)}
	a4, has4 := ep.Addr(4)
	if has4 {
		e.Ip = ip4(a4)
	}
	a6, has6 := ep.Addr(6)
	if has6 {
		e.Ip6 = ip6(a6)
	}
	copy(e.Mac[:], eth0.Attrs().HardwareAddr)
	copy(e.LxcMac[:], lxc.Attrs().HardwareAddr)
	var old cnlabEndpoint
	if objs.CnlabLxc.Lookup(e.Ifindex, &old) == nil {
		e.Identity = old.Identity
	}
	if err := objs.CnlabLxc.Put(e.Ifindex, e); err != nil {
		return fmt.Errorf("endpoint map: %w", err)
	}
	if has4 {
		if err := objs.CnlabLocal.Put(e.Ip, e); err != nil {
			return fmt.Errorf("local endpoint map: %w", err)
		}
	}
	if has6 {
		if err := objs.CnlabLocal6.Put(ipcacheKey6(netip.PrefixFrom(a6, 128)), e); err != nil {
			return fmt.Errorf("local endpoint map (IPv6): %w", err)
		}
	}
	if lab.EBPF.ConnectHook || lab.EBPF.SocketLB {
		cookie, err := netnsCookie(ep.Netns)
		if err != nil {
			return err
		}
		if err := objs.CnlabSockep.Put(cookie, e); err != nil {
			return fmt.Errorf("socket endpoint map: %w", err)
		}
	}
	if lab.EBPF.HostRouting == kind.HostRoutingBPF {
		// Off the bridge: the host reaches the endpoint by a /32 route
		// and a permanent neighbour entry; the endpoint reaches
		// everything through the program's ARP answers.
		if lxc.Attrs().MasterIndex != 0 {
			if err := nh.LinkSetNoMaster(lxc); err != nil {
				return fmt.Errorf("take %s off the bridge: %w", ep.HostVeth, err)
			}
		}
		// The same for each of its addresses (/128 for IPv6); the
		// program answers its neighbour solicitations.
		for _, a := range ep.Addrs() {
			bits, fam := 32, unix.AF_INET
			if !a.Is4() {
				bits, fam = 128, unix.AF_INET6
			}
			rt := &netlink.Route{Dst: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)},
				LinkIndex: lxc.Attrs().Index, Scope: netlink.SCOPE_LINK}
			if err := nh.RouteReplace(rt); err != nil {
				return fmt.Errorf("route to %s: %w", a, err)
			}
			n := &netlink.Neigh{LinkIndex: lxc.Attrs().Index, IP: a.AsSlice(), HardwareAddr: eth0.Attrs().HardwareAddr,
				State: netlink.NUD_PERMANENT, Family: fam}
			if err := nh.NeighSet(n); err != nil {
				return fmt.Errorf("neighbour %s: %w", a, err)
			}
		}
	}
	if err := attachTCX(lab, h, ep.HostVeth, "ingress", objs.CnlabFromEp, ebpf.AttachTCXIngress); err != nil {
		return err
	}
	return attachTCX(lab, h, ep.HostVeth, "egress", objs.CnlabToEp, ebpf.AttachTCXEgress)
}

// attachTCX attaches prog with tcx to a device of host h (or atomically
// replaces the program of the link pinned as links/DEV_SUFFIX).
func attachTCX(lab *topology.Spec, h *topology.Host, dev, suffix string, prog *ebpf.Program, typ ebpf.AttachType) error {
	pin := filepath.Join(HostDir(lab.Name, h.Name), "links", dev+"_"+suffix)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		err = l.Update(prog)
		l.Close()
		if err != nil {
			return fmt.Errorf("replace the %s program of %s: %w", suffix, dev, err)
		}
		return nil
	}
	// The interface index is looked up in the calling thread's network
	// namespace; pinning is done from ours.
	var l link.Link
	err := netns.Do(h.Netns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: prog, Attach: typ})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach tcx %s of %s: %w", suffix, dev, err)
	}
	err = l.Pin(pin)
	l.Close()
	if err != nil {
		return fmt.Errorf("pin link %s: %w", pin, err)
	}
	return nil
}
