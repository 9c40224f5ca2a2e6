package datapath_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// csum6 is the Internet checksum of an upper-layer packet over IPv6's
// pseudo-header.
func csum6(src, dst netip.Addr, proto uint8, l4 []byte) uint16 {
	var b []byte
	s, d := src.As16(), dst.As16()
	b = append(b, s[:]...)
	b = append(b, d[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l4)))
	b = append(b, 0, 0, 0, proto)
	b = append(b, l4...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// frame6 builds an Ethernet frame holding an IPv6 packet (hop limit 255).
func frame6(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, proto uint8, l4 []byte) []byte {
	switch proto {
	case unix.IPPROTO_ICMPV6:
		binary.BigEndian.PutUint16(l4[2:], 0)
		binary.BigEndian.PutUint16(l4[2:], csum6(src, dst, proto, l4))
	case unix.IPPROTO_UDP:
		binary.BigEndian.PutUint16(l4[6:], 0)
		binary.BigEndian.PutUint16(l4[6:], csum6(src, dst, proto, l4))
	}
	f := append(append([]byte{}, dstMAC...), srcMAC...)
	f = append(f, 0x86, 0xdd)
	f = append(f, 0x60, 0, 0, 0)
	f = binary.BigEndian.AppendUint16(f, uint16(len(l4)))
	f = append(f, proto, 255)
	s, d := src.As16(), dst.As16()
	f = append(f, s[:]...)
	f = append(f, d[:]...)
	return append(f, l4...)
}

// nd is an ICMPv6 neighbour solicitation (135) or advertisement (136) of
// target with the link-layer address option (source for 135, target for 136).
func nd(typ uint8, target netip.Addr, mac net.HardwareAddr) []byte {
	b := []byte{typ, 0, 0, 0, 0, 0, 0, 0}
	if typ == 136 {
		b[4] = 0x60 // solicited, override
	}
	t := target.As16()
	b = append(b, t[:]...)
	opt := byte(1)
	if typ == 136 {
		opt = 2
	}
	b = append(b, opt, 1)
	return append(b, mac...)
}

func udp(payload string) []byte {
	b := []byte{0x30, 0x39, 0x1f, 0x90, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// packetSocket opens an AF_PACKET socket on eth0 of an endpoint.
func packetSocket(t *testing.T, ep *topology.Endpoint) (int, int) {
	t.Helper()
	var fd, idx int
	if err := netns.Do(ep.Netns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		idx = ifi.Index
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: idx})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd, idx
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestPortTableIPv6 sends hand-built IPv6 frames from x/c to y/b (both on
// host flip's bridge, no policy) in a dual-stack lab on the iptables
// datapath and sniffs y/b's eth0: its own neighbour solicitation and
// advertisement and UDP from its own address arrive; a neighbour
// advertisement for x/a's address (forged), UDP from x/a's address or
// from x/c's address but another MAC, a router advertisement, and UDP to
// x/a's address in a frame sent to y/b's MAC do not.
func TestPortTableIPv6(t *testing.T) {
	spec := upFile(t, "dual-stack.yaml", "t-h6i-port", "iptables")
	xa, xc, yb := endpoint(t, spec, "x/a"), endpoint(t, spec, "x/c"), endpoint(t, spec, "y/b")
	a6, _ := xa.Addr(6)
	c6, _ := xc.Addr(6)
	b6, _ := yb.Addr(6)
	cMAC, err := datapath.LinkMAC(xc.Netns, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	bMAC, err := datapath.LinkMAC(yb.Netns, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	other := net.HardwareAddr{0x02, 0xde, 0xad, 0, 0, 1}
	b16 := b6.As16()
	solicited := netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: b16[13], 14: b16[14], 15: b16[15]})
	solicitedMAC := net.HardwareAddr{0x33, 0x33, 0xff, b16[13], b16[14], b16[15]}
	allNodesMAC := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	ra := []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
	cases := []struct {
		name   string
		frame  []byte
		arrive bool
	}{
		{"genuine NS", frame6(solicitedMAC, cMAC, c6, solicited, unix.IPPROTO_ICMPV6, nd(135, b6, cMAC)), true},
		{"genuine NA", frame6(bMAC, cMAC, c6, b6, unix.IPPROTO_ICMPV6, nd(136, c6, cMAC)), true},
		{"genuine UDP", frame6(bMAC, cMAC, c6, b6, unix.IPPROTO_UDP, udp("genuine")), true},
		{"forged NA target", frame6(bMAC, cMAC, c6, b6, unix.IPPROTO_ICMPV6, nd(136, a6, cMAC)), false},
		{"forged source", frame6(bMAC, cMAC, a6, b6, unix.IPPROTO_UDP, udp("forged-src")), false},
		{"foreign MAC", frame6(bMAC, other, c6, b6, unix.IPPROTO_UDP, udp("forged-mac")), false},
		{"router advertisement", frame6(allNodesMAC, cMAC, c6, netip.MustParseAddr("ff02::1"), unix.IPPROTO_ICMPV6, ra), false},
		{"another's packet", frame6(bMAC, cMAC, c6, a6, unix.IPPROTO_UDP, udp("not-for-b")), false},
	}
	send, idx := packetSocket(t, xc)
	recv, _ := packetSocket(t, yb)
	for _, tc := range cases {
		// Drain what arrived before.
		buf := make([]byte, 2048)
		for {
			if n, _, _ := unix.Recvfrom(recv, buf, unix.MSG_DONTWAIT); n <= 0 {
				break
			}
		}
		if err := unix.Sendto(send, tc.frame, 0, &unix.SockaddrLinklayer{Ifindex: idx, Halen: 6, Addr: [8]byte{tc.frame[0], tc.frame[1], tc.frame[2], tc.frame[3], tc.frame[4], tc.frame[5]}}); err != nil {
			t.Fatalf("%s: send: %v", tc.name, err)
		}
		arrived := false
		deadline := time.Now().Add(300 * time.Millisecond)
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		_ = unix.SetsockoptTimeval(recv, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		for !arrived && time.Now().Before(deadline) {
			n, _, err := unix.Recvfrom(recv, buf, 0)
			if err != nil || n < 14 {
				continue
			}
			arrived = bytes.Equal(buf[14:n], tc.frame[14:])
		}
		if arrived != tc.arrive {
			t.Errorf("%s: arrived=%v, want %v", tc.name, arrived, tc.arrive)
		}
	}
}
