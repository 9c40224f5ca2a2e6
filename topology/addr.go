package topology

import (
	"fmt"
	"net/netip"
)

// unicastRange rejects ranges that cannot hold endpoints: loopback,
// multicast, link-local, "this network" and the reserved class E.
func unicastRange(p netip.Prefix) error {
	for _, bad := range []struct{ p, what string }{
		{"0.0.0.0/8", "\"this network\" (0.0.0.0/8)"}, {"127.0.0.0/8", "loopback (127.0.0.0/8)"},
		{"169.254.0.0/16", "link-local (169.254.0.0/16)"}, {"224.0.0.0/4", "multicast (224.0.0.0/4)"},
		{"240.0.0.0/4", "reserved (240.0.0.0/4)"},
	} {
		if p.Overlaps(netip.MustParsePrefix(bad.p)) {
			return fmt.Errorf("%s overlaps the %s range: use a private unicast range such as 10.0.0.0/8", p, bad.what)
		}
	}
	return nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR (e.g. 10.0.192.0/24)", s)
	}
	if !p.Addr().Is4() {
		return p, fmt.Errorf("%s: only IPv4 is supported", s)
	}
	if p.Masked() != p {
		return p, fmt.Errorf("%s has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// nthSubnet returns the n-th subnet of length bits inside p.
func nthSubnet(p netip.Prefix, bits, n int) (netip.Prefix, bool) {
	if bits < p.Bits() || n < 0 || (bits-p.Bits() < 31 && n >= 1<<(bits-p.Bits())) {
		return netip.Prefix{}, false
	}
	base := addrToU32(p.Addr()) + uint32(n)<<(32-bits)
	return netip.PrefixFrom(u32ToAddr(base), bits), true
}

func nthAddr(p netip.Prefix, n int) netip.Addr {
	return u32ToAddr(addrToU32(p.Addr()) + uint32(n))
}

// usable reports whether a is a host address of p other than the gateway
// (the first address) and the broadcast address.
func usable(p netip.Prefix, a netip.Addr) bool {
	if !p.Contains(a) {
		return false
	}
	off := addrToU32(a) - addrToU32(p.Addr())
	size := uint32(1) << (32 - p.Bits())
	return off >= 2 && off < size-1
}

func usableCount(p netip.Prefix) int { return (1 << (32 - p.Bits())) - 3 }

func addrToU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u32ToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
