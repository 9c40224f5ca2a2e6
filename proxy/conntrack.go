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
	var filters []netlink.CustomConntrackFilter
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
		filters = append(filters, cf)
	}
	n, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filters...)
	if err != nil {
		return n, fmt.Errorf("delete stale UDP conntrack entries in %s: %w", ns, err)
	}
	return n, nil
}
