package policy

import (
	"net/netip"
	"sort"
)

// Subtract returns prefix p minus the excepted prefixes, as a minimal list
// of disjoint prefixes (sorted). ipBlock's except and CIDR sets compile to
// it, so that datapaths only ever see plain prefixes.
func Subtract(p netip.Prefix, except []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	var walk func(q netip.Prefix)
	walk = func(q netip.Prefix) {
		inside := false
		for _, x := range except {
			if x.Bits() <= q.Bits() && x.Contains(q.Addr()) {
				return // q is entirely excepted
			}
			if x.Bits() > q.Bits() && q.Contains(x.Addr()) {
				inside = true
			}
		}
		if !inside {
			out = append(out, q)
			return
		}
		lo, hi := halves(q)
		walk(lo)
		walk(hi)
	}
	walk(p.Masked())
	sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
	return out
}

// halves splits a prefix into its two halves.
func halves(q netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := q.Bits() + 1
	lo := netip.PrefixFrom(q.Addr(), bits)
	a := q.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1 << (32 - bits)
	hi := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
	return lo, hi
}
