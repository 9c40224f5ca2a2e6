package iptables

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Dual-stack: in a lab with IPv6 (topology.Spec.Families) every host has
// the same chains in its IPv6 filter table (ip6tables, same backend),
// rendered per family (renderChains): an endpoint's chains are jumped to
// by its address of the family; an identity peer's rules name its
// endpoints' addresses of the family (/32 or /128), a CIDR peer's rule is
// in its family's table only, a rule for any peer is in both. With peers:
// ipsets a selector's IPv6 addresses are a set of their own (family
// inet6, setName with "-6"). The IPv6 table accepts neighbour
// solicitations and advertisements bridged between a host's endpoints
// (conntrack tracks neither: they would be INVALID); the bridge port
// table (datapath.BindPorts) has already checked they are the
// endpoint's own. The L7 redirect (CNLAB-L7, l7.go) is in each family's
// nat table, over that family's addresses, and each family's ingress
// chains drop new connections to L7 ports not redirected.

// famView renders one family's table.
type famView struct {
	fam int
	// v6of maps each endpoint address to the endpoint's IPv6 address
	// (a selector's set members may name any of its addresses).
	v6of map[netip.Addr]netip.Addr
}

func newFamView(lab *topology.Spec, fam int) famView {
	v := famView{fam: fam}
	if fam != 6 {
		return v
	}
	v.v6of = map[netip.Addr]netip.Addr{}
	for _, ep := range lab.Endpoints {
		a6, ok := ep.Addr(6)
		if !ok {
			continue
		}
		for _, a := range ep.Addrs() {
			v.v6of[a] = a6
		}
	}
	return v
}

// hasIPv6 reports whether the lab's endpoints have IPv6 addresses.
func hasIPv6(lab *topology.Spec) bool { return slices.Contains(lab.Families(), 6) }

// families are the filter tables a lab's hosts have: IPv4's always (its
// CNLAB-FWD is there in an IPv6-only lab too), IPv6's with IPv6.
func families(lab *topology.Spec) []int {
	if hasIPv6(lab) {
		return []int{4, 6}
	}
	return []int{4}
}

// familyTools returns the programs of a family's table: ip6tables' are
// named as iptables' (iptables-nft-restore, ip6tables-nft-restore).
func familyTools(lab *topology.Spec, fam int) (restore, save, bin string) {
	restore, save, bin = tools(lab)
	if fam == 6 {
		restore, save, bin = to6(restore), to6(save), to6(bin)
	}
	return restore, save, bin
}

// ipv6Tools are the programs the IPv6 table needs.
func ipv6Tools(lab *topology.Spec) []string {
	restore, save, bin := familyTools(lab, 6)
	return []string{restore, save, bin}
}

func to6(tool string) string { return strings.Replace(tool, "iptables", "ip6tables", 1) }

// chainsOf returns a state's chains of one family.
func (st *hostState) chainsOf(fam int) map[string][]string {
	if fam == 6 {
		return st.Chains6
	}
	return st.Chains
}

// peerPrefixes are the prefixes of a rule's peer in this family
// (policy.Compiled.PeerPrefixesOf): an identity's endpoints' addresses,
// a CIDR of the family (none for the other's), or for any peer the
// family's /0 (no match).
func (v famView) peerPrefixes(c *policy.Compiled, r policy.Entry) []netip.Prefix {
	return c.PeerPrefixesOf(r, v.fam)
}

// setName names the kernel set of a peer set in this family: IPv6's
// carry "-6" (26 characters, 30 with the temporary set's suffix).
func (v famView) setName(ps *policy.PeerSet) string {
	if v.fam == 6 {
		return setName(ps) + "-6"
	}
	return setName(ps)
}

// renderSet is the kernel set of a peer set in this family: a selector's
// endpoints' addresses of the family, a CIDR term's prefixes of it.
func (v famView) renderSet(ps *policy.PeerSet) ipset {
	if v.fam != 6 {
		return renderSet(ps)
	}
	s := ipset{Type: hashIP, Term: ps.Key, Members: []string{}, Family: 6}
	if ps.Net {
		s.Type = hashNet
	}
	seen := map[string]bool{}
	add := func(m string) {
		if !seen[m] {
			seen[m] = true
			s.Members = append(s.Members, m)
		}
	}
	for _, p := range ps.Members {
		switch {
		case !ps.Net:
			if a, ok := v.v6of[p.Addr()]; ok {
				add(a.String())
			}
		case topology.Family(p.Addr()) != 6:
		case p.Bits() == 0: // hash:net refuses a /0
			add("::/1")
			add("8000::/1")
		default:
			add(p.String())
		}
	}
	return s
}

// ndp are CNLAB-FWD's accepts of neighbour discovery, IPv6's alone.
func (v famView) ndp() []string {
	if v.fam != 6 {
		return nil
	}
	return []string{
		// Bridged on one link only: a routed packet has lost hop limit
		// 255 by the time it is forwarded, so NDP cannot carry data past
		// the policy to another host's endpoint.
		"-p ipv6-icmp -m hl --hl-eq 255 -m icmp6 --icmpv6-type 135 -j ACCEPT", // neighbour solicitation
		"-p ipv6-icmp -m hl --hl-eq 255 -m icmp6 --icmpv6-type 136 -j ACCEPT", // neighbour advertisement
	}
}

// remotePrefixes are the prefixes of other hosts' endpoints in a family
// (datapath.RemotePrefixes for IPv4).
func remotePrefixes(lab *topology.Spec, host string, fam int) []netip.Prefix {
	var out []netip.Prefix
	if fam == 4 {
		for _, p := range datapath.RemotePrefixes(lab, host) {
			if topology.Family(p.Addr()) == 4 {
				out = append(out, p)
			}
		}
		return out
	}
	cidr := map[string]netip.Prefix{}
	for _, h := range lab.Hosts {
		p, ok := h.CIDR(fam)
		if !ok {
			continue
		}
		cidr[h.Name] = p
		if h.Name != host {
			out = append(out, p)
		}
	}
	for _, ep := range lab.Endpoints {
		if a, ok := ep.Addr(fam); ok && ep.Host != host && !cidr[ep.Host].Contains(a) {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}
