package probe

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// sums6 is the checksum over an upper-layer packet's pseudo-header and
// the packet, its checksum field included: 0 when the field is right.
func sums6(src, dst netip.Addr, next uint8, pkt []byte) uint16 {
	s, d := src.As16(), dst.As16()
	b := append(append(append([]byte{}, s[:]...), d[:]...), 0, 0, 0, 0, 0, 0, 0, next)
	binary.BigEndian.PutUint32(b[32:], uint32(len(pkt)))
	b = append(b, pkt...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	return Checksum(b)
}

func TestIPv6Builders(t *testing.T) {
	a, b := netip.MustParseAddr("fd00:0:192::10"), netip.MustParseAddr("fd00:0:191::20")
	src, dst := netip.AddrPortFrom(a, 40000), netip.AddrPortFrom(b, 81)
	if s := sums6(a, b, unix.IPPROTO_UDP, UDP6(src, dst, []byte("odd"))); s != 0 {
		t.Errorf("UDP6: checksum off by %#x", s)
	}
	if s := sums6(a, b, unix.IPPROTO_TCP, TCP(src, dst, TCPSyn, []byte("odd"))); s != 0 {
		t.Errorf("TCP over IPv6: checksum off by %#x", s)
	}
	msg := ICMPv6(a, b, ICMPv6PacketTooBig, 0, 1280, IPv6{Src: b, Dst: a, Next: unix.IPPROTO_UDP}.Packet(UDP6(dst, src, nil)))
	if s := sums6(a, b, unix.IPPROTO_ICMPV6, msg); s != 0 {
		t.Errorf("ICMPv6: checksum off by %#x", s)
	}
	if binary.BigEndian.Uint32(msg[4:]) != 1280 || len(msg) != 8+40+8 {
		t.Errorf("ICMPv6: % x", msg)
	}
	for n := 0; n <= 20; n++ {
		h := IPv6Options(unix.IPPROTO_UDP, make([]byte, n))
		if len(h)%8 != 0 || int(h[1]+1)*8 != len(h) || h[0] != unix.IPPROTO_UDP || h[2] != 0x1e || int(h[3]) != n {
			t.Errorf("IPv6Options with %d bytes: % x", n, h)
		}
		// The padding: Pad1, or one PadN of at most 7 bytes, of zeros.
		switch p := h[4+n:]; {
		case len(p) == 1 && p[0] != 0, len(p) > 7,
			len(p) > 1 && (p[0] != 1 || int(p[1]) != len(p)-2):
			t.Errorf("IPv6Options with %d bytes: padding % x", n, p)
		}
	}
	if f := IPv6FragmentHeader(unix.IPPROTO_UDP, 24, true, 0x01020304); string(f) != "\x11\x00\x00\x19\x01\x02\x03\x04" {
		t.Errorf("IPv6FragmentHeader: % x", f)
	}
	if r := IPv6RoutingHeader(unix.IPPROTO_UDP, 0, 1, a); len(r) != 24 || r[1] != 2 || r[2] != 0 || r[3] != 1 {
		t.Errorf("IPv6RoutingHeader: % x", r)
	}
	if p := (IPv6{Src: a, Dst: b, Next: 253}).Packet([]byte{1, 2}); len(p) != 42 || p[0] != 0x60 || p[5] != 2 || p[6] != 253 || p[7] != 64 {
		t.Errorf("IPv6.Packet: % x", p)
	}
}
