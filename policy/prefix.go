package policy

import (
	"net/netip"
	"sort"
)

// Subtract returns prefix p minus the excepted prefixes, as a minimal list
// of disjoint prefixes (sorted). ipBlock's except and CIDR sets compile to
// it, so that datapaths only ever see plain prefixes. p may be of either
// family; excepted prefixes of the other family are ignored (they cover
// none of p).
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

// halves splits a prefix of either family into its two halves.
func halves(q netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := q.Bits() + 1
	b := q.Addr().AsSlice() // 4 bytes for IPv4, 16 for IPv6
	b[q.Bits()/8] |= 0x80 >> (q.Bits() % 8)
	hi, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(q.Addr(), bits), netip.PrefixFrom(hi, bits)
}
