package proxy

import (
	"fmt"
	"net"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FlushUDP deletes the UDP conntrack entries of a namespace that flows
// select (`conntrack -D -p udp --orig-dst VIP --orig-port-dst P
// --reply-src BACKEND`), through a netlink handle bound to it. Without
// this a client that keeps sending from one socket stays translated to a
// backend that is gone, since conntrack never looks at the rules again.
func FlushUDP(ns string, flows []StaleFlow) (uint, error) {
	if len(flows) == 0 {
		return 0, nil
	}
	h, err := netns.Handle(ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	// One dump per family: IPv4 flows (and those naming no address), then
	// IPv6 ones (a dual-stack lab's).
	byFam := map[bool][]netlink.CustomConntrackFilter{}
	for _, f := range flows {
		cf := &netlink.ConntrackFilter{}
		if err := cf.AddProtocol(unix.IPPROTO_UDP); err != nil {
			return 0, err
		}
		if f.Dst.IsValid() {
			if err := cf.AddIP(netlink.ConntrackOrigDstIP, net.IP(f.Dst.AsSlice())); err != nil {
				return 0, err
			}
		}
		if err := cf.AddPort(netlink.ConntrackOrigDstPort, f.DstPort); err != nil {
			return 0, err
		}
		if f.Backend.IsValid() {
			if err := cf.AddIP(netlink.ConntrackReplySrcIP, net.IP(f.Backend.AsSlice())); err != nil {
				return 0, err
			}
		}
		v6 := f.Dst.Is6() && !f.Dst.Is4In6() || f.Backend.Is6() && !f.Backend.Is4In6()
		byFam[v6] = append(byFam[v6], cf)
	}
	var total uint
	for _, v6 := range []bool{false, true} {
		if len(byFam[v6]) == 0 {
			continue
		}
		af := unix.AF_INET
		if v6 {
			af = unix.AF_INET6
		}
		n, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.InetFamily(af), byFam[v6]...)
		total += n
		if err != nil {
			return total, fmt.Errorf("delete stale UDP conntrack entries in %s: %w", ns, err)
		}
	}
	return total, nil
}
