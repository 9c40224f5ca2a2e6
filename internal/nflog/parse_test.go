package nflog

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
)

// ipv4 builds an IPv4 header of ihl 32-bit words followed by l4.
func ipv4(ihl int, proto uint8, frag uint16, l4 []byte) []byte {
	b := make([]byte, ihl*4)
	b[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)+len(l4)+100)) // the copy is shorter than the packet
	binary.BigEndian.PutUint16(b[6:], frag)
	b[9] = proto
	copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	return append(b, l4...)
}

func TestParseIP(t *testing.T) {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp, 40000)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[13] = 0x12 // SYN ACK
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for _, c := range []struct {
		name string
		pkt  []byte
		want Packet
	}{
		{"tcp with options", ipv4(6, 6, 0, tcp), Packet{Src: netip.AddrPortFrom(src, 40000), Dst: netip.AddrPortFrom(dst, 80), Proto: 6, TCPFlags: 0x12, Len: 24 + 20 + 100}},
		{"udp first fragment", ipv4(5, 17, 0x2000, tcp[:8]), Packet{Src: netip.AddrPortFrom(src, 40000), Dst: netip.AddrPortFrom(dst, 80), Proto: 17, Len: 128}},
		{"non-first fragment", ipv4(5, 6, 0x0010, tcp), Packet{Src: netip.AddrPortFrom(src, 0), Dst: netip.AddrPortFrom(dst, 0), Proto: 6, Len: 140}},
		{"icmp", ipv4(5, 1, 0, []byte{8, 0, 0, 0}), Packet{Src: netip.AddrPortFrom(src, 0), Dst: netip.AddrPortFrom(dst, 0), Proto: 1, Len: 124}},
		{"truncated tcp", ipv4(5, 6, 0, tcp[:6]), Packet{Src: netip.AddrPortFrom(src, 40000), Dst: netip.AddrPortFrom(dst, 80), Proto: 6, Len: 126}},
		{"short", []byte{0x45, 0}, Packet{}},
		{"empty", nil, Packet{}},
	} {
		var got Packet
		parseIP(c.pkt, &got)
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

// ctTuple encodes a CTA_TUPLE_* attribute's content.
func ctTuple(ae *netlink.AttributeEncoder, proto uint8, src, dst netip.AddrPort) {
	ae.Nested(ctaIP, func(nae *netlink.AttributeEncoder) error {
		nae.Bytes(ctaV4Src, src.Addr().AsSlice())
		nae.Bytes(ctaV4Dst, dst.Addr().AsSlice())
		return nil
	})
	ae.Nested(ctaProto, func(nae *netlink.AttributeEncoder) error {
		nae.ByteOrder = binary.BigEndian
		nae.Uint8(ctaProtoNum, proto)
		nae.Uint16(ctaSrcPort, src.Port())
		nae.Uint16(ctaDstPort, dst.Port())
		return nil
	})
}

func TestParseCT(t *testing.T) {
	ap := netip.MustParseAddrPort
	client, front, back, masq := ap("10.0.0.1:40000"), ap("10.96.0.10:80"), ap("10.1.2.3:8080"), ap("10.0.0.9:40001")
	enc := func(replyDst netip.AddrPort) []byte {
		ae := netlink.NewAttributeEncoder()
		ae.Nested(ctaOrig, func(nae *netlink.AttributeEncoder) error { ctTuple(nae, 6, client, front); return nil })
		ae.Nested(ctaReply, func(nae *netlink.AttributeEncoder) error { ctTuple(nae, 6, back, replyDst); return nil })
		b, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	got, ok := parseCT(enc(client))
	want := Translation{Proto: 6, Src: client, Frontend: front, Backend: back}
	if !ok || got != want {
		t.Errorf("DNAT: got %+v %v, want %+v", got, ok, want)
	}
	got, ok = parseCT(enc(masq))
	want.SNAT = masq
	if !ok || got != want {
		t.Errorf("DNAT and SNAT: got %+v %v, want %+v", got, ok, want)
	}
	if _, ok := parseCT([]byte{1, 2, 3}); ok {
		t.Error("garbage parsed")
	}
}
