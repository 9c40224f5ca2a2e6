package probe

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
)

// Builders of the IPv6 packets the odd-packet and ICMPv6 error tests
// send (lab/oddpacket6_test.go): extension headers (RFC 8200 4), UDP with
// its checksum, ICMPv6 messages. Each returns the bytes that follow the
// header before it; a caller chains them and hands the result to
// IPv6.Frame with the first one's type as IPv6.Next.

// Next header values of the IPv6 extension headers (RFC 8200 4.1) and of
// "no next header".
const (
	IPv6HopByHop = 0
	IPv6Routing  = 43
	IPv6Fragment = 44
	IPv6NoNext   = 59
	IPv6DestOpts = 60
)

// ipv6OptExperimental is an option type set aside for experiments (RFC
// 4727), whose two high bits (00) tell a node that does not know it to
// skip it.
const ipv6OptExperimental = 0x1e

// IPv6Options is a hop-by-hop or destination options header before
// next: one option of an experimental type (skipped where unknown)
// carrying data, then padding to a multiple of 8 bytes (Pad1 or PadN of
// zeros, at most 7 bytes, as Linux requires of padding).
func IPv6Options(next uint8, data []byte) []byte {
	b := append([]byte{next, 0, ipv6OptExperimental, byte(len(data))}, data...)
	switch n := (8 - len(b)%8) % 8; n {
	case 0:
	case 1:
		b = append(b, 0) // Pad1
	default:
		b = append(b, 1, byte(n-2)) // PadN
		b = append(b, make([]byte, n-2)...)
	}
	b[1] = byte(len(b)/8 - 1)
	return b
}

// IPv6RoutingHeader is a routing header before next of type typ (0: the
// deprecated source route, RFC 5095) with segLeft segments left and the
// addresses given.
func IPv6RoutingHeader(next, typ, segLeft uint8, addrs ...netip.Addr) []byte {
	b := []byte{next, byte(2 * len(addrs)), typ, segLeft, 0, 0, 0, 0}
	for _, a := range addrs {
		a16 := a.As16()
		b = append(b, a16[:]...)
	}
	return b
}

// IPv6FragmentHeader is a fragment header before next: the fragment's
// offset off in bytes (a multiple of 8), whether more fragments follow,
// and the datagram's identification.
func IPv6FragmentHeader(next uint8, off int, more bool, id uint32) []byte {
	fo := uint16(off) &^ 7
	if more {
		fo |= 1
	}
	b := []byte{next, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b[:2], fo)
	return binary.BigEndian.AppendUint32(b, id)
}

// UDP6 is a UDP header and payload from src to dst over IPv6, with the
// checksum IPv6 requires.
func UDP6(src, dst netip.AddrPort, payload []byte) []byte {
	u := UDP(src.Port(), dst.Port(), payload)
	sum := checksum6(src.Addr(), dst.Addr(), unix.IPPROTO_UDP, u)
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], sum)
	return u
}

// ICMPv6 types of the errors (RFC 4443 3) and of echo.
const (
	ICMPv6DstUnreach   = 1
	ICMPv6PacketTooBig = 2
	ICMPv6TimeExceeded = 3
	ICMPv6ParamProblem = 4
	ICMPv6EchoRequest  = 128
)

// ICMPv6 is an ICMPv6 message from src to dst: its type and code, the
// 32 bits after the checksum (an error's MTU or pointer, an echo's id
// and sequence), then body (an error's quoted packet), checksummed.
func ICMPv6(src, dst netip.Addr, typ, code uint8, rest uint32, body []byte) []byte {
	m := make([]byte, 8, 8+len(body))
	m[0], m[1] = typ, code
	binary.BigEndian.PutUint32(m[4:], rest)
	m = append(m, body...)
	binary.BigEndian.PutUint16(m[2:], checksum6(src, dst, unix.IPPROTO_ICMPV6, m))
	return m
}

// SendIPv6 sends raw IPv6 packets (from their fixed header on, as
// IPv6.Packet builds them) from inside ns: its stack routes each to its
// destination and finds the next hop's MAC, but sends the packet as it
// is (payload length, extension headers, fragments and checksums
// included).
func SendIPv6(ns string, pkts ...[]byte) error {
	return netns.Do(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW) // header included
		if err != nil {
			return fmt.Errorf("raw IPv6 socket in %s: %w", ns, err)
		}
		defer unix.Close(fd)
		for _, p := range pkts {
			if len(p) < 40 {
				return fmt.Errorf("an IPv6 packet of %d bytes", len(p))
			}
			if err := unix.Sendto(fd, p, 0, &unix.SockaddrInet6{Addr: [16]byte(p[24:40])}); err != nil {
				return fmt.Errorf("send to %s in %s: %w", netip.AddrFrom16([16]byte(p[24:40])), ns, err)
			}
		}
		return nil
	})
}
