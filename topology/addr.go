package topology

import (
	"encoding/binary"
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
		return p, fmt.Errorf("%q is not a CIDR (e.g. 10.0.192.0/24 or fd00:0:192::/64)", s)
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("%s: an IPv4-mapped IPv6 prefix is not a pod range (write the IPv4 prefix)", s)
	}
	if p.Masked() != p {
		return p, fmt.Errorf("%s has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// parsePrefix4 is parsePrefix for the keys that take IPv4 only.
func parsePrefix4(s string) (netip.Prefix, error) {
	p, err := parsePrefix(s)
	if err == nil && !p.Addr().Is4() {
		return p, fmt.Errorf("%s: only IPv4 is supported here", s)
	}
	return p, err
}

// unicastRange6 rejects IPv6 ranges that cannot hold endpoints.
func unicastRange6(p netip.Prefix) error {
	for _, bad := range []struct{ p, what string }{
		{"::/8", "reserved (::/8: unspecified, loopback, IPv4-mapped)"}, {"fe80::/10", "link-local (fe80::/10)"},
		{"ff00::/8", "multicast (ff00::/8)"},
	} {
		if p.Overlaps(netip.MustParsePrefix(bad.p)) {
			return fmt.Errorf("%s overlaps the %s range: use a unique local range such as fd00::/8", p, bad.what)
		}
	}
	return nil
}

// hostBits is the number of host bits of p (32 or 128 minus its length).
func hostBits(p netip.Prefix) int { return p.Addr().BitLen() - p.Bits() }

// nthSubnet returns the n-th subnet of length bits inside p.
func nthSubnet(p netip.Prefix, bits, n int) (netip.Prefix, bool) {
	if bits < p.Bits() || bits > p.Addr().BitLen() || n < 0 || (bits-p.Bits() < 31 && n >= 1<<(bits-p.Bits())) {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(addOffset(p.Addr(), uint64(n), p.Addr().BitLen()-bits), bits), true
}

func nthAddr(p netip.Prefix, n int) netip.Addr { return addOffset(p.Addr(), uint64(n), 0) }

// addOffset returns a + n<<shift (within the low 64 bits for IPv6).
func addOffset(a netip.Addr, n uint64, shift int) netip.Addr {
	if a.Is4() {
		return u32ToAddr(addrToU32(a) + uint32(n)<<shift)
	}
	b := a.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + n<<shift
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// offset is a's distance from p's first address (p contains a).
func offset(p netip.Prefix, a netip.Addr) uint64 {
	if a.Is4() {
		return uint64(addrToU32(a) - addrToU32(p.Addr()))
	}
	x, y := a.As16(), p.Addr().As16()
	return binary.BigEndian.Uint64(x[8:]) - binary.BigEndian.Uint64(y[8:])
}

// usable reports whether a is a host address of p other than the gateway
// (the first address) and, in IPv4, the broadcast address; in IPv6 the
// subnet's first address (the subnet-router anycast) is not one either.
func usable(p netip.Prefix, a netip.Addr) bool {
	if !p.Contains(a) {
		return false
	}
	off := offset(p, a)
	if a.Is6() {
		return off >= 2
	}
	size := uint64(1) << hostBits(p)
	return off >= 2 && off < size-1
}

// usableCount is the number of endpoint addresses p holds (capped for
// large IPv6 prefixes).
func usableCount(p netip.Prefix) int {
	if hb := hostBits(p); hb < 40 {
		if p.Addr().Is6() {
			return (1 << hb) - 2
		}
		return (1 << hb) - 3
	}
	return 1 << 40
}

func addrToU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u32ToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// embed6 puts an IPv4 address into the low 32 bits of an IPv6 prefix
// (the lab's TransitCIDR6): a wire's IPv6 addresses mirror its IPv4 ones.
func embed6(base netip.Prefix, a netip.Addr) netip.Addr {
	b := base.Addr().As16()
	v := a.As4()
	copy(b[12:], v[:])
	return netip.AddrFrom16(b)
}
