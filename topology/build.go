package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"sync"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Progress receives one short line per step of a long operation.
type Progress func(msg string)

// BuildOptions tunes Build.
type BuildOptions struct {
	Progress Progress
	Workers  int // endpoints built in parallel (default 4)
}

// Build creates the lab in the kernel: its namespaces, bridges, links,
// routes and endpoints. It takes no lock and keeps no ledger (package lab
// does both); on failure, or when ctx is cancelled, it returns with what it
// built still there, for Teardown to remove. The root network namespace is
// never modified.
func Build(ctx context.Context, spec *Spec, o BuildOptions) error {
	b := &builder{spec: spec, progress: o.Progress, workers: o.Workers}
	if b.progress == nil {
		b.progress = func(string) {}
	}
	if b.workers <= 0 {
		b.workers = 4
	}
	return b.build(ctx)
}

type builder struct {
	spec     *Spec
	progress Progress
	workers  int
}

func (b *builder) build(ctx context.Context) error {
	s := b.spec
	if s.Chain != nil {
		return b.buildChain(ctx)
	}
	for i := range s.Hosts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.buildHost(&s.Hosts[i]); err != nil {
			return err
		}
	}
	for _, l := range s.Links {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.buildLink(l); err != nil {
			return err
		}
	}
	for _, h := range s.Hosts {
		if err := b.hostRoutes(h); err != nil {
			return err
		}
	}
	if len(s.Endpoints) >= 50 {
		b.progress(fmt.Sprintf("hosts and links up; creating %s", plural.N(len(s.Endpoints), "endpoint")))
	}
	if err := b.parallelEndpoints(ctx); err != nil {
		return err
	}
	return b.proxyNeighbours()
}

// proxyNeighbours makes each host with leaf bridges answer neighbour
// solicitations for the IPv6 addresses that are not on the bridge asked
// (its endpoints' on other bridges, and the gateway on the leaves): IPv6
// has no proxy_arp. It runs once every endpoint is plugged in, since the
// kernel forgets a device's proxy entries when its carrier goes down, as
// a leaf's does until its first endpoint.
func (b *builder) proxyNeighbours() error {
	for i := range b.spec.Hosts {
		h := &b.spec.Hosts[i]
		gw, ok := h.GatewayOf(6)
		if !ok || len(h.Leaves) == 0 {
			continue
		}
		hc, err := openHost(h)
		if err != nil {
			return err
		}
		err = proxyNeigh(hc.h, gw, hc.bridges, h.Bridge)
		for _, ep := range b.spec.Endpoints {
			ip, ok := ep.Addr(6)
			if err != nil || ep.Host != h.Name || !ok {
				continue
			}
			on := h.Bridge
			if ep.Bridge != "" {
				on = ep.Bridge
			}
			err = proxyNeigh(hc.h, ip, hc.bridges, on)
		}
		hc.close()
		if err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// addrOf is an address to add; IPv6 ones skip duplicate address
// detection (the lab allocated them), so they are usable at once.
func addrOf(a netip.Addr, bits int) *netlink.Addr {
	ad := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}}
	if a.Is6() {
		ad.Flags = unix.IFA_F_NODAD
	}
	return ad
}

// linkLocal is the link-local address (fe80::/64) a host gives a device
// beside the global a: the kernel sends neighbour solicitations for
// traffic it forwards from a link-local source only, and the lab's hosts
// generate none themselves (addr_gen_mode none, so that the endpoints'
// veths stay silent). Its interface ID is a's, unique on the link.
func linkLocal(a netip.Addr) *netlink.Addr {
	b := a.As16()
	ll := [16]byte{0: 0xfe, 1: 0x80}
	copy(ll[8:], b[8:])
	return addrOf(netip.AddrFrom16(ll), 64)
}

// addAddr6 gives a host's device its IPv6 address and a link-local one.
func addAddr6(h *netlink.Handle, dev netlink.Link, a netip.Addr, bits int) error {
	if err := h.AddrAdd(dev, addrOf(a, bits)); err != nil {
		return err
	}
	return h.AddrAdd(dev, linkLocal(a))
}

// newHostNetns creates a host's namespace: IPv6 stays off unless the lab
// has it, and then no device gets a link-local address (addr_gen_mode
// none), so the host sends no router solicitation, DAD or MLD of its own,
// and it forwards IPv6.
func newHostNetns(name string, v6 bool) error {
	if !v6 {
		return newNetns(name, true)
	}
	return netns.Create(name, func() error {
		for _, kv := range [][2]string{
			{"net/ipv6/conf/default/addr_gen_mode", "1"},
			{"net/ipv6/conf/all/forwarding", "1"},
			{"net/ipv6/conf/default/accept_ra", "0"},
			{"net/ipv4/ip_forward", "1"},
		} {
			if err := netns.SetSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// newNetns creates a lab namespace with IPv6 off (so no router
// solicitations or DAD traffic pollute measurements) and, for nodes that
// route, forwarding on.
func newNetns(name string, forward bool) error {
	return netns.Create(name, func() error {
		for _, kv := range [][2]string{
			{"net/ipv6/conf/all/disable_ipv6", "1"},
			{"net/ipv6/conf/default/disable_ipv6", "1"},
		} {
			if err := netns.SetSysctl(kv[0], kv[1]); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if forward {
			return netns.SetSysctl("net/ipv4/ip_forward", "1")
		}
		return nil
	})
}

func (b *builder) buildHost(h *Host) error {
	if err := newHostNetns(h.Netns, b.spec.HasFamily(6)); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	nh, err := netns.Handle(h.Netns)
	if err != nil {
		return err
	}
	defer nh.Close()
	if err := linkUp(nh, "lo"); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: h.Bridge, MTU: b.spec.MTU}}
	if err := nh.LinkAdd(br); err != nil {
		return fmt.Errorf("host %s: add bridge %s: %w", h.Name, h.Bridge, err)
	}
	for k, gw := range h.Gateways {
		add := nh.AddrAdd
		if gw.Is6() {
			add = func(l netlink.Link, a *netlink.Addr) error { return addAddr6(nh, l, gw, h.PodCIDRs[k].Bits()) }
		}
		if err := add(br, addrOf(gw, h.PodCIDRs[k].Bits())); err != nil {
			return fmt.Errorf("host %s: address %s on %s: %w", h.Name, gw, h.Bridge, err)
		}
	}
	if err := nh.LinkSetUp(br); err != nil {
		return fmt.Errorf("host %s: up %s: %w", h.Name, h.Bridge, err)
	}
	if err := b.buildLeaves(nh, h); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	return nil
}

// buildLeaves creates a host's leaf bridges. They hold no address and
// are joined to nothing: the host routes between its bridges. Each of
// the leaves' endpoints gets a /32 route to its leaf (buildEndpoint); an
// endpoint asking for the address of one on another bridge (all are in
// the pod CIDR, so on its link) gets the host's MAC by proxy ARP, sent at
// once (proxy_delay 0), and one asking for the gateway's gets it from the
// leaf too, as from any device of the host (arp_ignore 0). Leaves never
// send redirects: traffic that re-enters the bridge it arrived by (a
// Service's backend next to its client) is routed on purpose.
func (b *builder) buildLeaves(nh *netlink.Handle, h *Host) error {
	if len(h.Leaves) == 0 {
		return nil
	}
	for _, name := range h.Leaves {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: b.spec.MTU}}
		if err := nh.LinkAdd(br); err != nil {
			return fmt.Errorf("add leaf bridge %s: %w", name, err)
		}
		if err := nh.LinkSetUp(br); err != nil {
			return fmt.Errorf("up %s: %w", name, err)
		}
		if gw, ok := h.GatewayOf(6); ok {
			if err := nh.AddrAdd(br, linkLocal(gw)); err != nil {
				return fmt.Errorf("link-local address on %s: %w", name, err)
			}
		}
	}
	v6 := b.spec.HasFamily(6)
	return netns.Do(h.Netns, func() error {
		for _, dev := range append([]string{h.Bridge}, h.Leaves...) {
			kvs := [][2]string{
				{"net/ipv4/conf/" + dev + "/proxy_arp", "1"},
				{"net/ipv4/neigh/" + dev + "/proxy_delay", "0"},
			}
			if v6 {
				kvs = append(kvs, [2]string{"net/ipv6/conf/" + dev + "/proxy_ndp", "1"},
					[2]string{"net/ipv6/neigh/" + dev + "/proxy_delay", "0"})
			}
			if dev != h.Bridge {
				kvs = append(kvs, [2]string{"net/ipv4/conf/" + dev + "/send_redirects", "0"})
			}
			for _, kv := range kvs {
				if err := netns.SetSysctl(kv[0], kv[1]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("up %s: %w", name, err)
	}
	return nil
}

// vethPair creates a veth named dev in the namespace of h whose peer, named
// peer, is created directly inside the namespace peerNs, then sets addresses
// (if valid) and brings both ends up. Equivalent to `ip link add DEV type
// veth peer name PEER netns PEERNS`.
func vethPair(h *netlink.Handle, dev string, peerH *netlink.Handle, peerNs vns.NsHandle, peer string, mtu int, master int) error {
	if err := addVeth(h, dev, peerNs, peer, mtu, master); err != nil {
		return err
	}
	return linkUp(peerH, peer)
}

// vethPairQuiet is vethPair for an endpoint whose namespace keeps IPv6 on:
// the peer's IPv6 address generation is turned off (`ip link set PEER
// addrgenmode none`) before it comes up, so it never sends an IPv6 packet.
func vethPairQuiet(h *netlink.Handle, dev string, peerH *netlink.Handle, peerNs vns.NsHandle, peer string, mtu int, master int) error {
	if err := addVeth(h, dev, peerNs, peer, mtu, master); err != nil {
		return err
	}
	l, err := peerH.LinkByName(peer)
	if err != nil {
		return fmt.Errorf("find %s: %w", peer, err)
	}
	if err := peerH.LinkSetIP6AddrGenMode(l, addrGenModeNone); err != nil {
		return fmt.Errorf("addrgenmode none on %s: %w", peer, err)
	}
	if err := peerH.LinkSetUp(l); err != nil {
		return fmt.Errorf("up %s: %w", peer, err)
	}
	return nil
}

// addVeth creates the pair, dev up in h's namespace (on bridge master if
// not 0) and peer, down, in peerNs.
func addVeth(h *netlink.Handle, dev string, peerNs vns.NsHandle, peer string, mtu int, master int) error {
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: dev, MTU: mtu, MasterIndex: master, Flags: net.FlagUp},
		PeerName:      peer,
		PeerNamespace: netlink.NsFd(int(peerNs)),
		PeerMTU:       uint32(mtu),
	}
	if err := h.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth %s/%s: %w", dev, peer, err)
	}
	return nil
}

func (b *builder) buildLink(l Link) error {
	var hs [2]*netlink.Handle
	var fds [2]vns.NsHandle
	for k, end := range l.Ends {
		host := b.spec.Host(end.Host)
		h, err := netns.Handle(host.Netns)
		if err != nil {
			return err
		}
		defer h.Close()
		fd, err := netns.Open(host.Netns)
		if err != nil {
			return err
		}
		defer fd.Close()
		hs[k], fds[k] = h, fd
	}
	a, z := l.Ends[0], l.Ends[1]
	if err := vethPair(hs[0], a.WireDev, hs[1], fds[1], z.WireDev, l.MTU, 0); err != nil {
		return fmt.Errorf("link %s-%s: %w", a.Host, z.Host, err)
	}
	for k, end := range l.Ends {
		dev, err := hs[k].LinkByName(end.WireDev)
		if err != nil {
			return err
		}
		if err := hs[k].AddrAdd(dev, addrOf(end.WireAddr, l.Wire.Bits())); err != nil {
			return fmt.Errorf("link %s-%s: address %s on %s: %w", a.Host, z.Host, end.WireAddr, end.Host, err)
		}
		if end.WireAddr6.IsValid() {
			if err := addAddr6(hs[k], dev, end.WireAddr6, l.Wire6.Bits()); err != nil {
				return fmt.Errorf("link %s-%s: address %s on %s: %w", a.Host, z.Host, end.WireAddr6, end.Host, err)
			}
		}
		if l.Kind != LinkVXLAN {
			continue
		}
		peer := l.Ends[1-k]
		src, dst := end.WireAddr, peer.WireAddr
		if !b.spec.HasFamily(4) { // an IPv6-only lab's overlay runs over IPv6
			src, dst = end.WireAddr6, peer.WireAddr6
		}
		vx := &netlink.Vxlan{
			LinkAttrs:    netlink.LinkAttrs{Name: end.OverDev, MTU: b.spec.MTU},
			VxlanId:      l.VNI,
			VtepDevIndex: dev.Attrs().Index,
			SrcAddr:      src.AsSlice(),
			Group:        dst.AsSlice(), // a unicast group is the fixed remote
			Port:         4789,
			Learning:     true,
		}
		if err := hs[k].LinkAdd(vx); err != nil {
			return fmt.Errorf("link %s-%s: add vxlan on %s: %w", a.Host, z.Host, end.Host, err)
		}
		if err := hs[k].AddrAdd(vx, addrOf(end.OverAddr, l.Over.Bits())); err != nil {
			return fmt.Errorf("link %s-%s: vxlan address on %s: %w", a.Host, z.Host, end.Host, err)
		}
		if end.OverAddr6.IsValid() {
			if err := addAddr6(hs[k], vx, end.OverAddr6, l.Over6.Bits()); err != nil {
				return fmt.Errorf("link %s-%s: vxlan address on %s: %w", a.Host, z.Host, end.Host, err)
			}
		}
		if err := hs[k].LinkSetUp(vx); err != nil {
			return fmt.Errorf("link %s-%s: up vxlan on %s: %w", a.Host, z.Host, end.Host, err)
		}
	}
	return nil
}

func addRoutes(h *netlink.Handle, routes []Route) error {
	for _, rt := range routes {
		dev, err := h.LinkByName(rt.Dev)
		if err != nil {
			return fmt.Errorf("route %s: find %s: %w", rt.Dst, rt.Dev, err)
		}
		r := &netlink.Route{Dst: ipNet(rt.Dst), Gw: rt.Via.AsSlice(), LinkIndex: dev.Attrs().Index}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("route %s via %s dev %s: %w", rt.Dst, rt.Via, rt.Dev, err)
		}
	}
	return nil
}

func (b *builder) hostRoutes(h Host) error {
	nh, err := netns.Handle(h.Netns)
	if err != nil {
		return err
	}
	defer nh.Close()
	if err := addRoutes(nh, h.Routes); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	return nil
}

// parallelEndpoints creates the endpoints with a few workers; each worker
// keeps its own netlink handles (a handle is not safe for concurrent use).
func (b *builder) parallelEndpoints(ctx context.Context) error {
	s := b.spec
	jobs := make(chan *Endpoint)
	errc := make(chan error, b.workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	step := max(len(s.Endpoints)/10, 50)
	for w := 0; w < b.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hosts := map[string]*hostCtx{}
			defer func() {
				for _, hc := range hosts {
					hc.close()
				}
			}()
			for ep := range jobs {
				hc, ok := hosts[ep.Host]
				if !ok {
					var err error
					if hc, err = openHost(s.Host(ep.Host)); err != nil {
						errc <- err
						return
					}
					hosts[ep.Host] = hc
				}
				if err := b.buildEndpoint(hc, ep); err != nil {
					errc <- fmt.Errorf("endpoint %s: %w", ep.ID(), err)
					return
				}
				mu.Lock()
				done++
				if done%step == 0 && done < len(s.Endpoints) {
					b.progress(fmt.Sprintf("%d/%s", done, plural.N(len(s.Endpoints), "endpoint")))
				}
				mu.Unlock()
			}
		}()
	}
	var err error
feed:
	for i := range s.Endpoints {
		select {
		case jobs <- &s.Endpoints[i]:
		case err = <-errc:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return err
}

type hostCtx struct {
	host    *Host
	h       *netlink.Handle
	bridges map[string]int // ifindex of each bridge, by name
	main    string         // the host's own bridge
}

func openHost(host *Host) (*hostCtx, error) {
	h, err := netns.Handle(host.Netns)
	if err != nil {
		return nil, err
	}
	hc := &hostCtx{host: host, h: h, bridges: map[string]int{}, main: host.Bridge}
	for _, name := range append([]string{host.Bridge}, host.Leaves...) {
		br, err := h.LinkByName(name)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("host %s: find %s: %w", host.Name, name, err)
		}
		hc.bridges[name] = br.Attrs().Index
	}
	return hc, nil
}

func (hc *hostCtx) close() { hc.h.Close() }

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE: a device that gets no IPv6
// link-local address, so sends no DAD, router solicitation or MLD report.
const addrGenModeNone = 1

func (b *builder) buildEndpoint(hc *hostCtx, ep *Endpoint) error {
	// No sysctl here: the first look-up of /proc/sys/net/ipv6 in a new
	// namespace walks a dentry hash chain holding every other namespace's
	// (they share one parent and one name), which made writing
	// disable_ipv6 cost O(namespaces) per endpoint, 80% of `up` at 10,000
	// endpoints. The endpoint's eth0 comes up with no IPv6 address
	// instead (vethPair), which is as silent on the wire.
	if err := netns.Create(ep.Netns, nil); err != nil {
		return err
	}
	fd, err := netns.Open(ep.Netns)
	if err != nil {
		return err
	}
	defer fd.Close()
	eh, err := netns.HandleAt(fd)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", ep.Netns, err)
	}
	defer eh.Close()
	br := hc.main
	if ep.Bridge != "" {
		br = ep.Bridge
	}
	if err := vethPairQuiet(hc.h, ep.HostVeth, eh, fd, "eth0", b.spec.MTU, hc.bridges[br]); err != nil {
		return err
	}
	if hv, err := hc.h.LinkByName(ep.HostVeth); err == nil {
		_ = hc.h.LinkSetAlias(hv, ep.ID()) // for `ip link` readers; not relied on
	}
	for _, ip := range ep.Addrs() {
		if ep.Bridge != "" {
			// `ip route add IP/32 dev LEAF scope link` in the host.
			rt := &netlink.Route{Dst: ipNet(netip.PrefixFrom(ip, ip.BitLen())), LinkIndex: hc.bridges[br], Scope: netlink.SCOPE_LINK}
			if err := hc.h.RouteAdd(rt); err != nil {
				return fmt.Errorf("route %s dev %s: %w", ip, br, err)
			}
		}
	}
	return configureEndpoint(eh, ep, hc.host)
}

// proxyNeigh makes the host answer neighbour solicitations for ip on every
// bridge but the one it is on (`ip -6 neigh add proxy IP dev BR`): IPv6
// has no proxy_arp, and a host with leaf bridges routes between them.
func proxyNeigh(h *netlink.Handle, ip netip.Addr, bridges map[string]int, on string) error {
	for name, idx := range bridges {
		if name == on {
			continue
		}
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET6, Flags: netlink.NTF_PROXY, IP: ip.AsSlice()}
		if err := h.NeighAdd(n); err != nil {
			return fmt.Errorf("proxy neighbour %s dev %s: %w", ip, name, err)
		}
	}
	return nil
}

// configureEndpoint gives an endpoint its loopback, addresses and default
// routes (its eth0 already exists and is up), one of each per family of
// its host.
func configureEndpoint(eh *netlink.Handle, ep *Endpoint, host *Host) error {
	if err := linkUp(eh, "lo"); err != nil {
		return err
	}
	eth0, err := eh.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("find eth0: %w", err)
	}
	if host == nil || len(host.PodCIDRs) == 0 { // a chain's end
		host = &Host{PodCIDRs: []netip.Prefix{netip.PrefixFrom(ep.IP, ep.Prefix)}, Gateways: []netip.Addr{ep.Gateway}}
	}
	for k, ip := range ep.Addrs() {
		if err := eh.AddrAdd(eth0, addrOf(ip, host.PodCIDRs[k].Bits())); err != nil {
			return fmt.Errorf("address %s: %w", ip, err)
		}
		gw := host.Gateways[k]
		def := &netlink.Route{Gw: gw.AsSlice(), LinkIndex: eth0.Attrs().Index}
		if err := eh.RouteAdd(def); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

func (b *builder) buildChain(ctx context.Context) error {
	c := b.spec.Chain
	s := b.spec
	for _, ep := range s.Endpoints {
		if err := newNetns(ep.Netns, false); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := newNetns(n.Netns, true); err != nil {
			return err
		}
	}
	handles := map[string]*netlink.Handle{}
	fds := map[string]vns.NsHandle{}
	defer func() {
		for _, h := range handles {
			h.Close()
		}
		for _, fd := range fds {
			fd.Close()
		}
	}()
	open := func(name string) (*netlink.Handle, vns.NsHandle, error) {
		if h, ok := handles[name]; ok {
			return h, fds[name], nil
		}
		fd, err := netns.Open(name)
		if err != nil {
			return nil, 0, err
		}
		h, err := netns.HandleAt(fd)
		if err != nil {
			fd.Close()
			return nil, 0, fmt.Errorf("netlink in %s: %w", name, err)
		}
		handles[name], fds[name] = h, fd
		return h, fd, linkUp(h, "lo")
	}
	var sw *ovs
	if c.Link == ChainOVS {
		var err error
		if sw, err = startOVS(ctx, s.Name); err != nil {
			return fmt.Errorf("open vswitch: %w", err)
		}
	}
	for i, sg := range c.Segments {
		if err := ctx.Err(); err != nil {
			return err
		}
		lh, lfd, err := open(sg.LeftNetns)
		if err != nil {
			return err
		}
		rh, rfd, err := open(sg.RightNetns)
		if err != nil {
			return err
		}
		switch {
		case sw != nil:
			if err := b.ovsSegment(ctx, sw, i, sg, lh, lfd, rh, rfd, open); err != nil {
				return fmt.Errorf("chain segment %d: open vswitch: %w", i, err)
			}
		case sg.Switch == "":
			if err := vethPair(lh, sg.LeftDev, rh, rfd, sg.RightDev, s.MTU, 0); err != nil {
				return fmt.Errorf("chain segment %d: %w", i, err)
			}
		default:
			if err := b.switchSegment(sg, lh, lfd, rh, rfd, open); err != nil {
				return fmt.Errorf("chain segment %d: %w", i, err)
			}
		}
		for _, side := range []struct {
			h    *netlink.Handle
			dev  string
			addr netip.Addr
		}{{lh, sg.LeftDev, sg.Left}, {rh, sg.RightDev, sg.Right}} {
			l, err := side.h.LinkByName(side.dev)
			if err != nil {
				return fmt.Errorf("chain segment %d: find %s: %w", i, side.dev, err)
			}
			if err := side.h.AddrAdd(l, addrOf(side.addr, sg.Prefix.Bits())); err != nil {
				return fmt.Errorf("chain segment %d: address %s: %w", i, side.addr, err)
			}
		}
	}
	for _, ep := range s.Endpoints {
		h, _, err := open(ep.Netns)
		if err != nil {
			return err
		}
		eth0, err := h.LinkByName("eth0")
		if err != nil {
			return fmt.Errorf("endpoint %s: find eth0: %w", ep.ID(), err)
		}
		if err := h.RouteAdd(&netlink.Route{Gw: ep.Gateway.AsSlice(), LinkIndex: eth0.Attrs().Index}); err != nil {
			return fmt.Errorf("endpoint %s: default route: %w", ep.ID(), err)
		}
	}
	for _, n := range c.Nodes {
		h, _, err := open(n.Netns)
		if err != nil {
			return err
		}
		if err := addRoutes(h, n.Routes); err != nil {
			return fmt.Errorf("%s: %w", n.Netns, err)
		}
	}
	return b.buildFunctions(ctx, func(name string) (*netlink.Handle, error) {
		h, _, err := open(name)
		return h, err
	})
}

// switchSegment joins the two neighbours of a segment through a Linux
// bridge in a namespace of its own, as seed 001 did with a switch between
// each pair of namespaces.
func (b *builder) switchSegment(sg Segment, lh *netlink.Handle, lfd vns.NsHandle, rh *netlink.Handle, rfd vns.NsHandle,
	open func(string) (*netlink.Handle, vns.NsHandle, error)) error {
	if err := newNetns(sg.Switch, false); err != nil {
		return err
	}
	sh, _, err := open(sg.Switch)
	if err != nil {
		return err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: HostBridge, MTU: b.spec.MTU}}
	if err := sh.LinkAdd(br); err != nil {
		return fmt.Errorf("add bridge: %w", err)
	}
	if err := sh.LinkSetUp(br); err != nil {
		return fmt.Errorf("up bridge: %w", err)
	}
	idx := br.Attrs().Index
	if err := vethPair(sh, "p0", lh, lfd, sg.LeftDev, b.spec.MTU, idx); err != nil {
		return err
	}
	return vethPair(sh, "p1", rh, rfd, sg.RightDev, b.spec.MTU, idx)
}

// Same reports whether two specs describe the same lab, whatever file they
// came from.
func Same(a, b *Spec) bool {
	x, y := *a, *b
	x.Source, y.Source = "", ""
	return reflect.DeepEqual(jsonRoundTrip(&x), jsonRoundTrip(&y))
}

func jsonRoundTrip(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}

func listNetns(prefix string) ([]string, error) { return netns.List(prefix) }

// Netns lists the namespaces of a lab present in the kernel, whatever its
// ledger says.
func Netns(lab string) ([]string, error) { return listNetns(LabNetnsPrefix(lab)) }

// KernelLabs lists the labs that have namespaces in the kernel.
func KernelLabs() ([]string, error) {
	names, err := listNetns(NetnsPrefix)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	var out []string
	for _, n := range names {
		if lab := LabOfNetns(n); lab != "" && !set[lab] {
			set[lab] = true
			out = append(out, lab)
		}
	}
	return out, nil
}
