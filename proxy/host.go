package proxy

import (
	"fmt"
	"net"

	"github.com/cnlab/cnlab/internal/change"
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
// DNAT and never use it. And hairpin mode on every endpoint's bridge port
// (`ip link set VETH type bridge_slave hairpin on`): a connection from a
// backend to its own service is DNATed back to it while br_netfilter
// bridges it, so the bridge must send it out of the port it came in by,
// as kubelet's hairpin-veth mode does. And no ICMP redirects from the
// host: a connection to a cluster IP leaves by the bridge it came in by,
// which would make the host send a redirect for every new one, and the
// redirect would use up the ICMP rate limit's token for the client, so
// that the port-unreachable rejecting a frontend without backends would
// not be sent. A lab with IPv6 gets the same for IPv6 (its service range
// routed, bridge-nf-call-ip6tables on, no ICMPv6 rate limit). Idempotent.
func PrepareHost(lab *topology.Spec, h *topology.Host) error {
	if err := change.EnableBridgeNetfilter(h.Netns); err != nil {
		return err
	}
	v6 := lab.HasFamily(6)
	err := netns.Do(h.Netns, func() error {
		for _, dev := range []string{"all", h.Bridge} {
			if err := netns.SetSysctl("net/ipv4/conf/"+dev+"/send_redirects", "0"); err != nil {
				return err
			}
		}
		if !v6 {
			return nil
		}
		// IPv6: bridged frames meet ip6tables/nftables' ip6 hooks too (the
		// reply un-DNATed), and, as IPv6 has no knob against redirects,
		// no ICMPv6 rate limit in the host, so that the redirects a
		// connection to a cluster IP makes never use up the token of the
		// port-unreachable rejecting a frontend without backends.
		if err := netns.SetSysctl("net/bridge/bridge-nf-call-ip6tables", "1"); err != nil {
			return err
		}
		return netns.SetSysctl("net/ipv6/icmp/ratelimit", "0")
	})
	if err != nil {
		return err
	}
	nh, err := netns.Handle(h.Netns)
	if err != nil {
		return err
	}
	defer nh.Close()
	for _, ep := range change.LocalEndpoints(lab, h.Name) {
		if ep.HostVeth == "" {
			continue
		}
		port, err := nh.LinkByName(ep.HostVeth)
		if err != nil {
			return fmt.Errorf("endpoint %s: %w", ep.ID(), err)
		}
		if err := nh.LinkSetHairpin(port, true); err != nil {
			return fmt.Errorf("endpoint %s: hairpin on %s: %w", ep.ID(), ep.HostVeth, err)
		}
	}
	if len(lab.Services.All()) == 0 {
		return nil
	}
	br, err := nh.LinkByName(h.Bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", h.Bridge, err)
	}
	for _, cidr := range lab.Services.All() {
		cidr = cidr.Masked()
		dst := &net.IPNet{IP: cidr.Addr().AsSlice(), Mask: net.CIDRMask(cidr.Bits(), cidr.Addr().BitLen())}
		if err := nh.RouteReplace(&netlink.Route{Dst: dst, LinkIndex: br.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("route %s dev %s: %w", cidr, h.Bridge, err)
		}
	}
	return nil
}
