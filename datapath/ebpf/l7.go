package ebpf

// What the eBPF datapath needs on a host to hand connections to the L7
// proxy (docs/l7.md): the programs assign packets to the proxy's sockets;
// here is what the host's namespace needs for that.

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// proxyRouting routes what the programs hand to the L7 proxy (marked
// MARK_TO_PROXY, assigned to the proxy's socket) to the host's local
// table: its destination is an endpoint's address, which is not the
// host's, and without the route the stack drops the packet before the
// socket sees it; and it keeps no TIME_WAIT socket. Apply sets it up before a host first enforces L7
// ports, not before: a rule of its own makes the kernel look up every
// route of the host through its rules, a cost a lab without L7 rules
// should not measure. It stays until the lab goes down, with the host's
// namespace.
//
// Each family the lab has gets its rule and route (IPv6: ip -6 rule
// fwmark ... lookup L7_TABLE; local ::/0 dev lo in L7_TABLE).
func proxyRouting(lab *topology.Spec, h *topology.Host) error {
	nh, err := netns.Handle(h.Netns)
	if err != nil {
		return err
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, fam := range []int{4, 6} {
		if fam == 6 && !lab.HasFamily(6) {
			continue
		}
		af, all, name := unix.AF_INET, &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, "0.0.0.0/0"
		if fam == 6 {
			af, all, name = unix.AF_INET6, &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, "::/0"
		}
		mask := uint32(cnlabL7MARK_MASK)
		rule := netlink.NewRule()
		rule.Family = af
		rule.Mark = uint32(cnlabL7MARK_TO_PROXY)
		rule.Mask = &mask
		rule.Table = int(cnlabL7L7TABLE)
		rules, err := nh.RuleListFiltered(af, rule, netlink.RT_FILTER_MARK|netlink.RT_FILTER_MASK|netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("list ip rules (IPv%d): %w", fam, err)
		}
		if len(rules) == 0 {
			if err := nh.RuleAdd(rule); err != nil {
				return fmt.Errorf("ip -%d rule fwmark %#x/%#x lookup %d: %w", fam, rule.Mark, mask, rule.Table, err)
			}
		}
		rt := &netlink.Route{Dst: all, LinkIndex: lo.Attrs().Index,
			Table: int(cnlabL7L7TABLE), Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
		if err := nh.RouteReplace(rt); err != nil {
			return fmt.Errorf("route local %s dev lo table %d: %w", name, rt.Table, err)
		}
	}
	// No TIME_WAIT sockets in the host's namespace, where only the proxy
	// (and no measured workload) has TCP sockets: a client reusing the
	// port of a connection the proxy closed would otherwise meet the
	// proxy's TIME_WAIT socket, and its SYN be lost (to_proxy in
	// bpf/cnlab.c). The lab's links carry no stray old segment for
	// TIME_WAIT to guard against.
	return netns.Do(h.Netns, func() error {
		return netns.SetSysctl("net/ipv4/tcp_max_tw_buckets", "0")
	})
}
