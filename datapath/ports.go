package datapath

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// PortTable is the nftables table, in the bridge family, that binds each
// endpoint's bridge port to the endpoint's addresses on a host of the
// netfilter datapaths. It lives in the host namespace and goes with it.
const PortTable = "bridge cnlab"

// Port is an endpoint's bridge port (its host-side veth) and the
// addresses allowed to enter the bridge through it.
type Port struct {
	Dev string
	MAC net.HardwareAddr
	IP  netip.Addr
}

// PortScript renders the port table for a host, replacing any table left
// from before, in one transaction. A frame entering the bridge from an
// endpoint's port passes only if it is IPv4 from the endpoint's MAC and
// IP, or ARP whose Ethernet source and sender MAC are the endpoint's and
// whose sender IP is the endpoint's; everything else from that port
// (forged sources, IPv6, other ethertypes, VLAN-tagged frames) is dropped. Frames
// from other ports (a VXLAN device) are not looked at. A frame the bridge
// forwards to an endpoint's port that holds IPv4 passes only if the
// packet is addressed to that endpoint: broadcast (the subnet's or
// 255.255.255.255), multicast and another endpoint's packet in a flooded
// frame are dropped, as the eBPF datapath drops them (docs/policy.md);
// the policy chains match the endpoint's address and would not see them.
// The cost is one hash lookup for every bridged frame and one more for
// endpoints' frames, on the way in and on the way out. It is pure, so it
// is tested without root.
func PortScript(ports []Port) string {
	ports = append([]Port(nil), ports...)
	sort.Slice(ports, func(i, j int) bool { return ports[i].Dev < ports[j].Dev })
	var b strings.Builder
	t := PortTable
	fmt.Fprintf(&b, "add table %s\ndelete table %s\nadd table %s\n", t, t, t)
	fmt.Fprintf(&b, "add set %s ports { type ifname; }\n", t)
	fmt.Fprintf(&b, "add set %s ip4 { type ifname . ether_addr . ipv4_addr; }\n", t)
	fmt.Fprintf(&b, "add set %s arp4 { type ifname . ether_addr . ether_addr . ipv4_addr; }\n", t)
	fmt.Fprintf(&b, "add set %s dst4 { type ifname . ipv4_addr; }\n", t)
	fmt.Fprintf(&b, "add chain %s prerouting { type filter hook prerouting priority filter; policy accept; }\n", t)
	fmt.Fprintf(&b, "add chain %s port\n", t)
	fmt.Fprintf(&b, "add rule %s prerouting iifname @ports jump port\n", t)
	// A VLAN tag is stripped into the packet's metadata before the
	// bridge, where `ip saddr` then reads the inner header, and
	// br_netfilter does not show tagged frames to the policy's chains
	// (bridge-nf-filter-vlan-tagged is off): drop them first.
	fmt.Fprintf(&b, "add rule %s port ether type { 8021q, 8021ad } counter drop\n", t)
	fmt.Fprintf(&b, "add rule %s port iifname . ether saddr . ip saddr @ip4 accept\n", t)
	fmt.Fprintf(&b, "add rule %s port iifname . ether saddr . arp saddr ether . arp saddr ip @arp4 accept\n", t)
	fmt.Fprintf(&b, "add rule %s port counter drop\n", t)
	// Before br_netfilter (priority 0) shows the frame to the policy's
	// forward chains, once for each port a flooded frame goes out of.
	fmt.Fprintf(&b, "add chain %s forward { type filter hook forward priority filter; policy accept; }\n", t)
	fmt.Fprintf(&b, "add rule %s forward oifname @ports oifname . ip daddr != @dst4 counter drop\n", t)
	if len(ports) == 0 {
		return b.String()
	}
	var devs, ip4, arp4, dst4 []string
	for _, p := range ports {
		devs = append(devs, fmt.Sprintf("%q", p.Dev))
		ip4 = append(ip4, fmt.Sprintf("%q . %s . %s", p.Dev, p.MAC, p.IP))
		arp4 = append(arp4, fmt.Sprintf("%q . %s . %s . %s", p.Dev, p.MAC, p.MAC, p.IP))
		dst4 = append(dst4, fmt.Sprintf("%q . %s", p.Dev, p.IP))
	}
	for _, s := range []struct {
		name  string
		elems []string
	}{{"ports", devs}, {"ip4", ip4}, {"arp4", arp4}, {"dst4", dst4}} {
		fmt.Fprintf(&b, "add element %s %s { %s }\n", t, s.name, strings.Join(s.elems, ", "))
	}
	return b.String()
}

// BindPorts creates the port table in every host of the lab, with the
// host's endpoints' ports: their MACs are read from the kernel.
func BindPorts(ctx context.Context, lab *topology.Spec) error {
	for _, h := range lab.Hosts {
		var ports []Port
		for _, ep := range change.LocalEndpoints(lab, h.Name) {
			if ep.HostVeth == "" {
				continue
			}
			mac, err := LinkMAC(ep.Netns, "eth0")
			if err != nil {
				return fmt.Errorf("host %s: endpoint %s: %w", h.Name, ep.ID(), err)
			}
			ports = append(ports, Port{Dev: ep.HostVeth, MAC: mac, IP: ep.IP})
		}
		if _, err := netns.Run(ctx, h.Netns, []byte(PortScript(ports)), "nft", "-f", "-"); err != nil {
			return fmt.Errorf("host %s: bind endpoint ports: %w", h.Name, err)
		}
	}
	return nil
}

// DescribePorts lists a host's port table.
func DescribePorts(ctx context.Context, hostNetns string) (string, error) {
	out, err := netns.Run(ctx, hostNetns, nil, "nft", "list", "table", PortTable)
	return string(out), err
}
