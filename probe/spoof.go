package probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
	"golang.org/x/sys/unix"
)

// The spoof probe sends hand-built frames from inside an endpoint with
// AF_PACKET sockets — forged IPv4 sources, foreign MACs, forged ARP,
// IPv6, other ethertypes — and sniffs the target's eth0 to see which of
// them arrive. A datapath that binds each bridge port to its endpoint's
// addresses lets none of the forged ones through.

// Ethertypes the spoof probe sends.
const (
	EtherIPv4  = 0x0800
	EtherARP   = 0x0806
	EtherIPv6  = 0x86dd
	EtherOther = 0x88b5 // IEEE local experimental
)

// SpoofCheck is one kind of frame the spoof probe sends.
type SpoofCheck string

// The checks, in the order Spoof runs them. Genuine and GenuineARP carry
// the sender's own addresses: they arrive when the policy allows the
// sender, and are the control that the path and the sniffer work.
const (
	Genuine        SpoofCheck = "udp-genuine"      // IPv4 UDP with the sender's own IP and MAC
	ForgedUnused   SpoofCheck = "udp-forged-ip"    // IPv4 UDP from an unused address of the sender's subnet
	ForgedPeer     SpoofCheck = "udp-peer-ip"      // IPv4 UDP from another endpoint's IP (sender's MAC)
	ForgedPeerMAC  SpoofCheck = "udp-peer-ip-mac"  // IPv4 UDP from another endpoint's IP and MAC
	ForeignMAC     SpoofCheck = "udp-foreign-mac"  // IPv4 UDP with the sender's IP and a foreign source MAC
	GenuineARP     SpoofCheck = "arp-genuine"      // ARP request with the sender's own IP and MAC
	ARPForgedIP    SpoofCheck = "arp-forged-ip"    // ARP request claiming another endpoint's IP
	ARPForeignMAC  SpoofCheck = "arp-foreign-mac"  // ARP request with the sender's IP and a foreign MAC
	IPv6Frame      SpoofCheck = "ipv6"             // an IPv6 UDP packet
	OtherEthertype SpoofCheck = "ethertype-0x88b5" // a frame of ethertype 0x88b5
	VLANTaggedUDP  SpoofCheck = "udp-vlan-tagged"  // UDP (IPv4, or IPv6 in an IPv6-only lab) with the sender's own IP and MAC, tagged VLAN 5

	// The IPv6 checks, run when the lab has IPv6 addresses.
	Genuine6       SpoofCheck = "udp6-genuine"         // IPv6 UDP with the sender's own IPv6 address and MAC
	Forged6Peer    SpoofCheck = "udp6-peer-ip"         // IPv6 UDP from another endpoint's IPv6 address (sender's MAC)
	Forged6Outside SpoofCheck = "udp6-outside-ip"      // IPv6 UDP from an address outside the lab (2001:db8::1)
	Foreign6MAC    SpoofCheck = "udp6-foreign-mac"     // IPv6 UDP with the sender's IPv6 address and a foreign source MAC
	GenuineNS      SpoofCheck = "ndp-ns-genuine"       // neighbour solicitation from the sender's own address and MAC
	GenuineNA      SpoofCheck = "ndp-na-genuine"       // neighbour advertisement of the sender's own address
	NAForgedTarget SpoofCheck = "ndp-na-forged-target" // neighbour advertisement claiming another endpoint's address
)

// SpoofChecks lists every check in the order Spoof runs them. Spoof runs
// the IPv4 and ARP checks when the lab has IPv4, the IPv6 ones (Genuine6
// to NAForgedTarget) when it has IPv6, and the rest always.
var SpoofChecks = []SpoofCheck{Genuine, ForgedUnused, ForgedPeer, ForgedPeerMAC, ForeignMAC,
	GenuineARP, ARPForgedIP, ARPForeignMAC, IPv6Frame, OtherEthertype, VLANTaggedUDP,
	Genuine6, Forged6Peer, Forged6Outside, Foreign6MAC, GenuineNS, GenuineNA, NAForgedTarget}

// Forged reports whether a check sends anything but the sender's own
// IPv4, IPv6, ARP or neighbour discovery: a port bound to its endpoint
// drops it whatever the policy.
func (c SpoofCheck) Forged() bool {
	switch c {
	case Genuine, GenuineARP, Genuine6, GenuineNS, GenuineNA:
		return false
	}
	return true
}

// Family is the address family a check needs the lab to have (4 or 6),
// or 0 when it runs in every lab.
func (c SpoofCheck) Family() int {
	switch c {
	case Genuine, ForgedUnused, ForgedPeer, ForgedPeerMAC, ForeignMAC, GenuineARP, ARPForgedIP, ARPForeignMAC:
		return 4
	case Genuine6, Forged6Peer, Forged6Outside, Foreign6MAC, GenuineNS, GenuineNA, NAForgedTarget:
		return 6
	}
	return 0
}

// NDP reports whether a check is neighbour discovery (ARP or ICMPv6
// NS/NA): not policy-controlled, so its genuine form arrives whatever the
// policy where the two endpoints share a link.
func (c SpoofCheck) NDP() bool {
	switch c {
	case GenuineARP, ARPForgedIP, ARPForeignMAC, GenuineNS, GenuineNA, NAForgedTarget:
		return true
	}
	return false
}

// outsideAddr6 is the forged source of Forged6Outside: a documentation
// address, outside every lab.
var outsideAddr6 = netip.MustParseAddr("2001:db8::1")

// SpoofResult is what the target saw of one check.
type SpoofResult struct {
	From    string     `json:"from"`
	To      string     `json:"to"`
	Check   SpoofCheck `json:"check"`
	Forged  bool       `json:"forged"`
	Arrived bool       `json:"arrived"`
}

// foreignMAC is a locally administered address no endpoint has.
var foreignMAC = net.HardwareAddr{0x02, 0xc7, 0x1a, 0xb0, 0x00, 0x01}

// SpoofOptions tune a spoof probe.
type SpoofOptions struct {
	// Wait is how long the target's sniffer waits for each check's frame
	// (default 300ms; each frame is sent three times within it).
	Wait time.Duration
	// Unused is the forged source of ForgedUnused (default: the last
	// address of the sender's subnet that no endpoint has).
	Unused netip.Addr
	// Port is the UDP destination port (default 81).
	Port uint16
}

// Spoof runs every check from `from` to `to`, impersonating `peer` in the
// checks that take another endpoint's addresses. Frames go to the
// target's MAC when both are on one host, else to the sender's gateway
// (the host bridge). The target needs no listener: a sniffer on its eth0
// sees what arrives.
func Spoof(ctx context.Context, lab *topology.Spec, from, to, peer *topology.Endpoint, o SpoofOptions) ([]SpoofResult, error) {
	if o.Wait <= 0 {
		o.Wait = 300 * time.Millisecond
	}
	if o.Port == 0 {
		o.Port = 81
	}
	has4, has6 := lab.HasFamily(4), lab.HasFamily(6)
	if !o.Unused.IsValid() && has4 {
		o.Unused = unusedAddr(lab, from)
	}
	// The endpoints' addresses of each family (invalid when the lab has
	// not the family).
	from4, _ := from.Addr(4)
	to4, _ := to.Addr(4)
	peer4, _ := peer.Addr(4)
	from6, _ := from.Addr(6)
	to6, _ := to.Addr(6)
	peer6, _ := peer.Addr(6)
	srcMAC, err := EndpointMAC(from)
	if err != nil {
		return nil, err
	}
	peerMAC, err := EndpointMAC(peer)
	if err != nil {
		return nil, err
	}
	dstMAC, err := FrameDst(lab, from, to)
	if err != nil {
		return nil, err
	}
	sn, err := Sniff(to.Netns, "eth0")
	if err != nil {
		return nil, err
	}
	defer sn.Close()
	var out []SpoofResult
	for _, c := range SpoofChecks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if f := c.Family(); f == 4 && !has4 || f == 6 && !has6 {
			continue
		}
		nonce := make([]byte, 16)
		_, _ = rand.Read(nonce)
		udp := func(mac net.HardwareAddr, src netip.Addr) []byte {
			return UDPFrame(mac, dstMAC, netip.AddrPortFrom(src, 40000), netip.AddrPortFrom(to4, o.Port), nonce)
		}
		udp6 := func(mac net.HardwareAddr, src netip.Addr) []byte {
			return UDP6Frame(mac, dstMAC, netip.AddrPortFrom(src, 40000), netip.AddrPortFrom(to6, o.Port), nonce)
		}
		var frame []byte
		match := func(f []byte) bool { return bytes.Contains(f, nonce) }
		switch c {
		case Genuine:
			frame = udp(srcMAC, from4)
		case ForgedUnused:
			frame = udp(srcMAC, o.Unused)
		case ForgedPeer:
			frame = udp(srcMAC, peer4)
		case ForgedPeerMAC:
			frame = udp(peerMAC, peer4)
		case ForeignMAC:
			frame = udp(foreignMAC, from4)
		case GenuineARP, ARPForgedIP, ARPForeignMAC:
			mac, ip := srcMAC, from4
			switch c {
			case ARPForgedIP:
				ip = peer4
			case ARPForeignMAC:
				mac = foreignMAC
			}
			frame = ARPRequest(mac, ip, to4, nonce)
			match = func(f []byte) bool { return isARPFrom(f, mac, ip, to4) && bytes.Contains(f, nonce) }
		case IPv6Frame:
			frame = IPv6UDPFrame(srcMAC, dstMAC, nonce)
		case OtherEthertype:
			frame = EtherFrame(srcMAC, dstMAC, EtherOther, nonce)
		case VLANTaggedUDP:
			if has4 {
				frame = VLANTagged(udp(srcMAC, from4), 0x8100, 5)
			} else {
				frame = VLANTagged(udp6(srcMAC, from6), 0x8100, 5)
			}
		case Genuine6:
			frame = udp6(srcMAC, from6)
		case Forged6Peer:
			frame = udp6(srcMAC, peer6)
		case Forged6Outside:
			frame = udp6(srcMAC, outsideAddr6)
		case Foreign6MAC:
			frame = udp6(foreignMAC, from6)
		case GenuineNS:
			frame = NeighbourSolicitation(srcMAC, dstMAC, from6, to6, to6, nonce)
		case GenuineNA:
			frame = NeighbourAdvertisement(srcMAC, dstMAC, from6, to6, from6, nonce)
		case NAForgedTarget:
			frame = NeighbourAdvertisement(srcMAC, dstMAC, from6, to6, peer6, nonce)
		}
		arrived, err := sn.Expect(from.Netns, match, o.Wait, frame)
		if err != nil {
			return nil, fmt.Errorf("spoof %s from %s: %w", c, from.ID(), err)
		}
		out = append(out, SpoofResult{From: from.ID(), To: to.ID(), Check: c, Forged: c.Forged(), Arrived: arrived})
	}
	return out, nil
}

// unusedAddr is the highest address of the sender's subnet below the
// broadcast that no endpoint of the lab has.
func unusedAddr(lab *topology.Spec, from *topology.Endpoint) netip.Addr {
	ip4, _ := from.Addr(4)
	bits := from.Prefix
	if h := lab.Host(from.Host); h != nil {
		if p, ok := h.CIDR(4); ok {
			bits = p.Bits()
		}
	}
	pfx := netip.PrefixFrom(ip4, bits).Masked()
	taken := map[netip.Addr]bool{from.Gateway: true}
	for _, ep := range lab.Endpoints {
		for _, a := range ep.Addrs() {
			taken[a] = true
		}
	}
	a := pfx.Addr().As4()
	last := binary.BigEndian.Uint32(a[:]) | (1<<(32-pfx.Bits()) - 1)
	for v := last - 1; ; v-- {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		if ip := netip.AddrFrom4(b); !taken[ip] || !pfx.Contains(ip) { // a full subnet: give up outside it
			return ip
		}
	}
}

// EndpointMAC returns the MAC of an endpoint's eth0.
func EndpointMAC(ep *topology.Endpoint) (net.HardwareAddr, error) {
	return datapath.LinkMAC(ep.Netns, "eth0")
}

// FrameDst is the destination MAC of a frame from one endpoint to
// another: the target's when both are on one host, else the sender's
// gateway (its host's bridge).
func FrameDst(lab *topology.Spec, from, to *topology.Endpoint) (net.HardwareAddr, error) {
	if from.Host == to.Host {
		return EndpointMAC(to)
	}
	return bridgeMAC(lab, from.Host)
}

func bridgeMAC(lab *topology.Spec, host string) (net.HardwareAddr, error) {
	h := lab.Host(host)
	if h == nil {
		return nil, fmt.Errorf("no host %q", host)
	}
	return datapath.LinkMAC(h.Netns, h.Bridge)
}

func ethHeader(src, dst net.HardwareAddr, etherType uint16) []byte {
	b := make([]byte, 14, 128)
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:14], etherType)
	return b
}

// pad makes a frame the Ethernet minimum (60 bytes without the FCS).
func pad(b []byte) []byte {
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

// EtherFrame is a frame of any ethertype carrying payload.
func EtherFrame(src, dst net.HardwareAddr, etherType uint16, payload []byte) []byte {
	return pad(append(ethHeader(src, dst, etherType), payload...))
}

// IPv4 is the header of an IPv4 packet the frame builders write: any
// source, fragment fields and options.
type IPv4 struct {
	Src, Dst netip.Addr
	Proto    uint8
	ID       uint16
	Frag     uint16 // flags and fragment offset as on the wire
	Options  []byte // a multiple of 4 bytes
}

// IPv4 flags and fragment offset.
const (
	IPv4DontFragment  = 0x4000
	IPv4MoreFragments = 0x2000
)

// Frame is the packet, with payload after the header (the transport
// header, whole or in part, or a fragment of it), in an Ethernet frame.
func (h IPv4) Frame(srcMAC, dstMAC net.HardwareAddr, payload []byte) []byte {
	hl := 20 + len(h.Options)
	ip := make([]byte, hl, hl+len(payload))
	ip[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(ip[2:], uint16(hl+len(payload)))
	binary.BigEndian.PutUint16(ip[4:], h.ID)
	binary.BigEndian.PutUint16(ip[6:], h.Frag)
	ip[8] = 64
	ip[9] = h.Proto
	s, d := h.Src.As4(), h.Dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	copy(ip[20:], h.Options)
	binary.BigEndian.PutUint16(ip[10:], Checksum(ip))
	return pad(append(append(ethHeader(srcMAC, dstMAC, EtherIPv4), ip...), payload...))
}

// UDP is a UDP header and payload (checksum 0: none, allowed over IPv4).
func UDP(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// TCP flags, as TCP's flags byte holds them.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPPsh = 0x08
	TCPAck = 0x10
	TCPUrg = 0x20
)

// TCP is a TCP segment from src to dst (IPv4 or IPv6) with the given
// flags and payload: sequence number 0x1000, acknowledgment 0x2000 when
// ACK is set, no options, and a correct checksum (conntrack finds a wrong
// one invalid).
func TCP(src, dst netip.AddrPort, flags uint8, payload []byte) []byte {
	b := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(b[0:], src.Port())
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	binary.BigEndian.PutUint32(b[4:], 0x1000)
	if flags&TCPAck != 0 {
		binary.BigEndian.PutUint32(b[8:], 0x2000)
	}
	b[12] = 5 << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	b = append(b, payload...)
	if src.Addr().Is6() {
		binary.BigEndian.PutUint16(b[16:], checksum6(src.Addr(), dst.Addr(), unix.IPPROTO_TCP, b))
		return b
	}
	s, d := src.Addr().As4(), dst.Addr().As4()
	ph := append(append(append(make([]byte, 0, 12+len(b)), s[:]...), d[:]...), 0, unix.IPPROTO_TCP, byte(len(b)>>8), byte(len(b)))
	binary.BigEndian.PutUint16(b[16:], Checksum(append(ph, b...)))
	return b
}

// UDPFrame is an IPv4 UDP packet in an Ethernet frame, with any source.
func UDPFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	h := IPv4{Src: src.Addr(), Dst: dst.Addr(), Proto: unix.IPPROTO_UDP, Frag: IPv4DontFragment}
	return h.Frame(srcMAC, dstMAC, UDP(src.Port(), dst.Port(), payload))
}

// VLANTagged inserts a VLAN tag (tpid 0x8100, or 0x88a8 for an outer
// QinQ tag) after a frame's addresses.
func VLANTagged(frame []byte, tpid, vid uint16) []byte {
	out := make([]byte, 0, len(frame)+4)
	out = append(out, frame[:12]...)
	out = binary.BigEndian.AppendUint16(out, tpid)
	out = binary.BigEndian.AppendUint16(out, vid&0xfff)
	return append(out, frame[12:]...)
}

// IPv6UDPFrame is an IPv6 UDP packet from fe80::1 to ff02::1.
func IPv6UDPFrame(srcMAC, dstMAC net.HardwareAddr, payload []byte) []byte {
	ip := make([]byte, 40+8+len(payload))
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
	ip[6] = unix.IPPROTO_UDP
	ip[7] = 64
	src, dst := netip.MustParseAddr("fe80::1").As16(), netip.MustParseAddr("ff02::1").As16()
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	udp := ip[40:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 81)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(udp[8:], payload)
	return pad(append(ethHeader(srcMAC, dstMAC, EtherIPv6), ip...))
}

// IPv6 is the header of an IPv6 packet the frame builders write.
type IPv6 struct {
	Src, Dst netip.Addr
	Next     uint8 // the next header: the payload's protocol
	HopLimit uint8 // 64 when 0
}

// Frame is the packet, with payload after the header, in an Ethernet
// frame.
func (h IPv6) Frame(srcMAC, dstMAC net.HardwareAddr, payload []byte) []byte {
	return pad(append(ethHeader(srcMAC, dstMAC, EtherIPv6), h.Packet(payload)...))
}

// Packet is the packet without a frame: the header, then payload (as an
// ICMPv6 error quotes one).
func (h IPv6) Packet(payload []byte) []byte {
	ip := make([]byte, 40, 40+len(payload))
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(payload)))
	ip[6] = h.Next
	ip[7] = h.HopLimit
	if ip[7] == 0 {
		ip[7] = 64
	}
	s, d := h.Src.As16(), h.Dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	return append(ip, payload...)
}

// checksum6 is the checksum of an upper-layer packet over IPv6 (RFC 8200
// 8.1): its pseudo-header, then the packet (whose checksum field is 0).
func checksum6(src, dst netip.Addr, next uint8, pkt []byte) uint16 {
	s, d := src.As16(), dst.As16()
	ph := make([]byte, 0, 40+len(pkt))
	ph = append(append(ph, s[:]...), d[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(pkt)))
	ph = append(append(ph, 0, 0, 0, next), pkt...)
	if len(ph)%2 == 1 {
		ph = append(ph, 0)
	}
	return Checksum(ph)
}

// UDP6Frame is an IPv6 UDP packet in an Ethernet frame, with any source
// and a correct checksum (IPv6 requires one).
func UDP6Frame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	return IPv6{Src: src.Addr(), Dst: dst.Addr(), Next: unix.IPPROTO_UDP}.Frame(srcMAC, dstMAC, UDP6(src, dst, payload))
}

// ICMPv6 neighbour discovery (RFC 4861).
const (
	icmp6NS        = 135
	icmp6NA        = 136
	ndOptSourceLL  = 1
	ndOptTargetLL  = 2
	ndOptNonce     = 14 // RFC 3971: carries the probe's nonce, ignored where unknown
	naFlagOverride = 0x20
)

// ndp is a neighbour discovery message of type typ (NS or NA) about
// target, from src to dst with hop limit 255, with a link-layer address
// option (source for NS, target for NA) of mac and a nonce option
// carrying nonce (so a sniffer can tell the frame from others).
func ndp(typ uint8, flags byte, srcMAC, dstMAC net.HardwareAddr, src, dst, target netip.Addr, nonce []byte) []byte {
	m := make([]byte, 24, 64+len(nonce))
	m[0] = typ
	m[4] = flags
	t := target.As16()
	copy(m[8:24], t[:])
	opt := byte(ndOptSourceLL)
	if typ == icmp6NA {
		opt = ndOptTargetLL
	}
	m = append(m, opt, 1)
	m = append(m, srcMAC...)
	n := append([]byte{ndOptNonce, 0}, nonce...)
	for len(n)%8 != 0 {
		n = append(n, 0)
	}
	n[1] = byte(len(n) / 8)
	m = append(m, n...)
	binary.BigEndian.PutUint16(m[2:], checksum6(src, dst, unix.IPPROTO_ICMPV6, m))
	return IPv6{Src: src, Dst: dst, Next: unix.IPPROTO_ICMPV6, HopLimit: 255}.Frame(srcMAC, dstMAC, m)
}

// NeighbourSolicitation is an ICMPv6 neighbour solicitation for target
// from src (its link-layer address srcMAC) to dst, unicast to dstMAC (as
// neighbour unreachability detection sends it).
func NeighbourSolicitation(srcMAC, dstMAC net.HardwareAddr, src, dst, target netip.Addr, nonce []byte) []byte {
	return ndp(icmp6NS, 0, srcMAC, dstMAC, src, dst, target, nonce)
}

// NeighbourAdvertisement is an unsolicited ICMPv6 neighbour
// advertisement (override set) saying that target is at srcMAC, from src
// to dst, unicast to dstMAC.
func NeighbourAdvertisement(srcMAC, dstMAC net.HardwareAddr, src, dst, target netip.Addr, nonce []byte) []byte {
	return ndp(icmp6NA, naFlagOverride, srcMAC, dstMAC, src, dst, target, nonce)
}

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ARPRequest is a broadcast ARP request "who has target, tell senderIP at
// senderMAC"; trailer goes into the frame's padding, so a sniffer can tell
// this frame from others.
func ARPRequest(senderMAC net.HardwareAddr, senderIP, target netip.Addr, trailer []byte) []byte {
	a := make([]byte, 28)
	binary.BigEndian.PutUint16(a[0:], 1) // Ethernet
	binary.BigEndian.PutUint16(a[2:], EtherIPv4)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 1) // request
	copy(a[8:14], senderMAC)
	s, t := senderIP.As4(), target.As4()
	copy(a[14:18], s[:])
	copy(a[24:28], t[:])
	return pad(append(append(ethHeader(senderMAC, broadcast, EtherARP), a...), trailer...))
}

func isARPFrom(f []byte, mac net.HardwareAddr, ip, target netip.Addr) bool {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != EtherARP {
		return false
	}
	s, t := ip.As4(), target.As4()
	return bytes.Equal(f[22:28], mac) && bytes.Equal(f[28:32], s[:]) && bytes.Equal(f[38:42], t[:])
}

// Checksum is the Internet checksum (RFC 1071) of b, as an IPv4 header
// carries it.
func Checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// Htons is a 16-bit value in network byte order, as AF_PACKET sockets
// take protocols.
func Htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket opens an AF_PACKET socket in ns bound to dev.
func packetSocket(ns, dev string) (int, int, error) {
	fd, ifindex := -1, 0
	err := netns.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		ifindex = ifi.Index
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(Htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: Htons(unix.ETH_P_ALL), Ifindex: ifindex})
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, 0, fmt.Errorf("%s in %s: %w", dev, ns, err)
	}
	return fd, ifindex, nil
}

// SendFrames sends raw frames out of dev in ns.
func SendFrames(ns, dev string, frames ...[]byte) error {
	fd, ifindex, err := packetSocket(ns, dev)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, f := range frames {
		to := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6, Protocol: Htons(binary.BigEndian.Uint16(f[12:]))}
		copy(to.Addr[:], f[0:6])
		if err := unix.Sendto(fd, f, 0, to); err != nil {
			return fmt.Errorf("send on %s in %s: %w", dev, ns, err)
		}
	}
	return nil
}

// Sniffer records the frames a device receives (not those it sends).
type Sniffer struct {
	fd     int
	mu     sync.Mutex
	frames [][]byte
	stop   chan struct{}
	done   chan struct{}
}

// Sniff starts recording the frames dev in ns receives.
func Sniff(ns, dev string) (*Sniffer, error) {
	fd, _, err := packetSocket(ns, dev)
	if err != nil {
		return nil, err
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &Sniffer{fd: fd, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s, nil
}

func (s *Sniffer) loop() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		s.mu.Lock()
		s.frames = append(s.frames, bytes.Clone(buf[:n]))
		s.mu.Unlock()
	}
}

// Saw reports whether a frame received so far matches.
func (s *Sniffer) Saw(match func([]byte) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.frames {
		if match(f) {
			return true
		}
	}
	return false
}

// Expect sends frames (in order) three times from the sender's eth0
// within wait and reports whether the sniffer saw one that matches.
func (s *Sniffer) Expect(ns string, match func([]byte) bool, wait time.Duration, frames ...[]byte) (bool, error) {
	deadline := time.Now().Add(wait)
	for i := 0; i < 3; i++ {
		if err := SendFrames(ns, "eth0", frames...); err != nil {
			return false, err
		}
		time.Sleep(wait / 6)
		if s.Saw(match) {
			return true, nil
		}
	}
	time.Sleep(time.Until(deadline))
	return s.Saw(match), nil
}

// Close stops the sniffer.
func (s *Sniffer) Close() {
	close(s.stop)
	<-s.done
	unix.Close(s.fd)
}

// SpoofAll runs Spoof from every endpoint of a lab with hosts: to another
// endpoint of its host when there is one (so the frames cross the bridge),
// impersonating a third endpoint (of the same host when possible).
func SpoofAll(ctx context.Context, lab *topology.Spec, o SpoofOptions) ([]SpoofResult, error) {
	if len(lab.Endpoints) < 3 {
		return nil, errors.New("the spoof probe needs at least three endpoints (a sender, a target and one to impersonate)")
	}
	var out []SpoofResult
	for i := range lab.Endpoints {
		from := &lab.Endpoints[i]
		to := pickOther(lab, from.Host, from)
		peer := pickOther(lab, from.Host, from, to)
		res, err := Spoof(ctx, lab, from, to, peer, o)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// pickOther returns the first endpoint not in not, on host if one is.
func pickOther(lab *topology.Spec, host string, not ...*topology.Endpoint) *topology.Endpoint {
	var other *topology.Endpoint
	for i := range lab.Endpoints {
		ep := &lab.Endpoints[i]
		if slices.Contains(not, ep) {
			continue
		}
		if ep.Host == host {
			return ep
		}
		if other == nil {
			other = ep
		}
	}
	return other
}
