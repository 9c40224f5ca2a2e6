package proxy

import (
	"fmt"
	"net"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
	"github.com/vishvananda/netlink"
)

// PrepareHost does what every netfilter proxy needs on a host: br_netfilter
// on (a reply bridged between two endpoints of the host must meet
// conntrack to be un-DNATed), and a route for the service CIDR to the
// host's bridge (`ip route replace CIDR dev BRIDGE`): a host has no default
// route, so without it a new connection to a cluster IP that is not
// translated (no backend) would fail the route lookup before the proxy's
// filter rules could reject it. Translated connections are routed after
// DNAT and never use it. Idempotent.
func PrepareHost(lab *topology.Spec, h *topology.Host) error {
	if err := datapath.EnableBridgeNetfilter(h.Netns); err != nil {
		return err
	}
	if !lab.Services.CIDR.IsValid() {
		return nil
	}
	nh, err := netns.Handle(h.Netns)
	if err != nil {
		return err
	}
	defer nh.Close()
	br, err := nh.LinkByName(h.Bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", h.Bridge, err)
	}
	cidr := lab.Services.CIDR.Masked()
	dst := &net.IPNet{IP: cidr.Addr().AsSlice(), Mask: net.CIDRMask(cidr.Bits(), 32)}
	if err := nh.RouteReplace(&netlink.Route{Dst: dst, LinkIndex: br.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route %s dev %s: %w", cidr, h.Bridge, err)
	}
	return nil
}
