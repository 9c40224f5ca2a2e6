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
// addresses allowed to enter the bridge through it: IP, or all of the
// endpoint's addresses (one per family) in Addrs when set.
type Port struct {
	Dev   string
	MAC   net.HardwareAddr
	IP    netip.Addr
	Addrs []netip.Addr
}

// addrs returns the port's addresses of family fam (4 or 6).
func (p Port) addrs(fam int) []netip.Addr {
	all := p.Addrs
	if len(all) == 0 && p.IP.IsValid() {
		all = []netip.Addr{p.IP}
	}
	var out []netip.Addr
	for _, a := range all {
		if a.IsValid() && topology.Family(a) == fam {
			out = append(out, a)
		}
	}
	return out
}

// PortScript renders the port table for a host, replacing any table left
// from before, in one transaction. A frame entering the bridge from an
// endpoint's port passes only if it is IPv4 from the endpoint's MAC and
// IP, or ARP whose Ethernet source and sender MAC are the endpoint's and
// whose sender IP is the endpoint's; everything else from that port
// (forged sources, other ethertypes, VLAN-tagged frames) is dropped. Frames
// from other ports (a VXLAN device) are not looked at. A frame the bridge
// forwards to an endpoint's port that holds IPv4 passes only if the
// packet is addressed to that endpoint: broadcast (the subnet's or
// 255.255.255.255), multicast and another endpoint's packet in a flooded
// frame are dropped, as the eBPF datapath drops them (docs/policy.md);
// the policy chains match the endpoint's address and would not see them.
// The cost is one hash lookup for every bridged frame and one more for
// endpoints' frames, on the way in and on the way out. It is pure, so it
// is tested without root.
//
// When an endpoint has an IPv6 address (dual-stack and IPv6-only labs),
// IPv6 is bound the same way: a packet from its port passes only with
// its MAC and one of its IPv6 addresses as source (neighbour
// solicitations and advertisements included: the lab gives endpoints no
// link-local addresses, so they come from the endpoint's own address),
// a neighbour advertisement whose target is not one of the endpoint's
// addresses (a forged one, as forged ARP) and router advertisements and
// redirects are dropped; out of its port, IPv6 passes only if addressed
// to the endpoint, or a neighbour solicitation or advertisement to
// all-nodes (ff02::1) or a solicited-node group (ff02::1:ff00:0/104).
// Without IPv6 addresses the script is the IPv4 one, and every IPv6
// frame from an endpoint is dropped.
func PortScript(ports []Port) string {
	ports = append([]Port(nil), ports...)
	sort.Slice(ports, func(i, j int) bool { return ports[i].Dev < ports[j].Dev })
	v6 := false
	for _, p := range ports {
		if len(p.addrs(6)) > 0 {
			v6 = true
		}
	}
	var b strings.Builder
	t := PortTable
	fmt.Fprintf(&b, "add table %s\ndelete table %s\nadd table %s\n", t, t, t)
	fmt.Fprintf(&b, "add set %s ports { type ifname; }\n", t)
	fmt.Fprintf(&b, "add set %s ip4 { type ifname . ether_addr . ipv4_addr; }\n", t)
	fmt.Fprintf(&b, "add set %s arp4 { type ifname . ether_addr . ether_addr . ipv4_addr; }\n", t)
	fmt.Fprintf(&b, "add set %s dst4 { type ifname . ipv4_addr; }\n", t)
	if v6 {
		fmt.Fprintf(&b, "add set %s src6 { type ifname . ether_addr . ipv6_addr; }\n", t)
		fmt.Fprintf(&b, "add set %s dst6 { type ifname . ipv6_addr; }\n", t)
		// The endpoint's own IPv6 addresses again, as the 128-bit
		// integers the target field of a neighbour advertisement is
		// read as (this nft has no `icmpv6 taddr`).
		fmt.Fprintf(&b, "add set %s nd6 { typeof iifname . @th,64,128; }\n", t)
	}
	// One verdict-map lookup on the ethertype sends a frame to its
	// family's rules: an IPv6 packet meets no IPv4 rule, and no
	// family's packet pays for the other's (BENCHMARKS.md, "Dual-stack").
	// A VLAN or QinQ tag, other ethertypes, and IPv6 in a lab without
	// IPv6 have no entry and are dropped. (A VLAN tag is stripped into
	// the packet's metadata before the bridge, where `ip saddr` then
	// reads the inner header, and br_netfilter does not show tagged
	// frames to the policy's chains, bridge-nf-filter-vlan-tagged being
	// off: `ether type` still reads the tag.)
	// Out of a port, a tagged frame (from the wire or a VXLAN device:
	// endpoints' own are dropped on the way in) is dropped too: `ether
	// type` reads its tag, so it would meet neither family's
	// destination check, and an endpoint's kernel takes VLAN 0 frames.
	from, to := "ip : jump from4, arp : jump fromarp", "ip : jump to4, 8021q : drop, 8021ad : drop"
	if v6 {
		from, to = from+", ip6 : jump from6", to+", ip6 : jump to6"
	}
	fmt.Fprintf(&b, "add chain %s prerouting { type filter hook prerouting priority filter; policy accept; }\n", t)
	for _, c := range []string{"port", "from4", "fromarp", "from6", "nd6check", "to4", "to6"} {
		if v6 || (c != "from6" && c != "nd6check" && c != "to6") {
			fmt.Fprintf(&b, "add chain %s %s\n", t, c)
		}
	}
	fmt.Fprintf(&b, "add rule %s prerouting iifname @ports jump port\n", t)
	fmt.Fprintf(&b, "add rule %s port ether type vmap { %s }\n", t, from)
	fmt.Fprintf(&b, "add rule %s port counter drop\n", t)
	fmt.Fprintf(&b, "add rule %s from4 iifname . ether saddr . ip saddr @ip4 accept\n", t)
	fmt.Fprintf(&b, "add rule %s from4 counter drop\n", t)
	fmt.Fprintf(&b, "add rule %s fromarp iifname . ether saddr . arp saddr ether . arp saddr ip @arp4 accept\n", t)
	fmt.Fprintf(&b, "add rule %s fromarp counter drop\n", t)
	if v6 {
		fmt.Fprintf(&b, "add rule %s from6 meta l4proto ipv6-icmp jump nd6check\n", t)
		fmt.Fprintf(&b, "add rule %s from6 iifname . ether saddr . ip6 saddr @src6 accept\n", t)
		fmt.Fprintf(&b, "add rule %s from6 counter drop\n", t)
		// An endpoint is no router: no advertisements, no redirects.
		fmt.Fprintf(&b, "add rule %s nd6check icmpv6 type { nd-router-advert, nd-redirect } counter drop\n", t)
		// The target of a neighbour advertisement (the field after
		// the reserved word) must be the endpoint's own address.
		fmt.Fprintf(&b, "add rule %s nd6check icmpv6 type nd-neighbor-advert iifname . @th,64,128 != @nd6 counter drop\n", t)
	}
	// Before br_netfilter (priority 0) shows the frame to the policy's
	// forward chains, once for each port a flooded frame goes out of.
	fmt.Fprintf(&b, "add chain %s forward { type filter hook forward priority filter; policy accept; }\n", t)
	fmt.Fprintf(&b, "add rule %s forward oifname @ports ether type vmap { %s }\n", t, to)
	fmt.Fprintf(&b, "add rule %s to4 oifname . ip daddr != @dst4 counter drop\n", t)
	if v6 {
		fmt.Fprintf(&b, "add rule %s to6 ip6 daddr { ff02::1, ff02::1:ff00:0/104 } icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept\n", t)
		fmt.Fprintf(&b, "add rule %s to6 oifname . ip6 daddr != @dst6 counter drop\n", t)
	}
	if len(ports) == 0 {
		return b.String()
	}
	var devs, ip4, arp4, dst4, src6, dst6, nd6 []string
	for _, p := range ports {
		devs = append(devs, fmt.Sprintf("%q", p.Dev))
		for _, a := range p.addrs(4) {
			ip4 = append(ip4, fmt.Sprintf("%q . %s . %s", p.Dev, p.MAC, a))
			arp4 = append(arp4, fmt.Sprintf("%q . %s . %s . %s", p.Dev, p.MAC, p.MAC, a))
			dst4 = append(dst4, fmt.Sprintf("%q . %s", p.Dev, a))
		}
		for _, a := range p.addrs(6) {
			src6 = append(src6, fmt.Sprintf("%q . %s . %s", p.Dev, p.MAC, a))
			dst6 = append(dst6, fmt.Sprintf("%q . %s", p.Dev, a))
			a16 := a.As16()
			nd6 = append(nd6, fmt.Sprintf("%q . 0x%x", p.Dev, a16[:]))
		}
	}
	for _, s := range []struct {
		name  string
		elems []string
	}{{"ports", devs}, {"ip4", ip4}, {"arp4", arp4}, {"dst4", dst4}, {"src6", src6}, {"dst6", dst6}, {"nd6", nd6}} {
		if len(s.elems) == 0 {
			continue
		}
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
			ports = append(ports, Port{Dev: ep.HostVeth, MAC: mac, IP: ep.IP, Addrs: ep.Addrs()})
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
