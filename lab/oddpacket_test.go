package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// aFromZaPort81 lets x/a receive UDP and TCP on port 81 from z/a, and
// nothing else.
const aFromZaPort81 = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-za-81, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {ns: z}}
      podSelector: {matchLabels: {pod: a}}
    ports: [{protocol: UDP, port: 81}, {protocol: TCP, port: 81}]
`

// oddVerdict is what a case's frames may do at x/a, on every datapath.
type oddVerdict int

const (
	// byModel: the model's verdict for the case's protocol and port
	// from the sender to x/a. Allowed, the frames must reach x/a (and
	// a UDP case its port); denied, no frame of the case may arrive.
	byModel oddVerdict = iota
	// notPort82: nothing may reach x/a's port 82. From a sender the
	// policy denies everything, no frame may arrive; from z/a a fragment
	// may (an overlap lets z/a's port-81 fragment through; x/a's kernel
	// then drops the datagram, as Linux drops any IPv4 datagram whose
	// fragments overlap).
	notPort82
	// never: no frame may arrive from any sender: what an endpoint does
	// not speak (tagged frames, IPv6) and IPv4 not addressed to it
	// (broadcast, multicast), which no policy can allow (docs/policy.md).
	never
	// invalid: a transport header no connection can begin with (TCP
	// flag sets conntrack calls invalid, UDP with length 0), to a port
	// the model allows z/a: no frame may arrive from any sender, on any
	// datapath (netfilter: conntrack finds them invalid; eBPF drops them
	// before policy, reason "invalid", or as malformed).
	invalid
	// deniedOnly (TestOddPackets6): no frame may arrive from a sender the
	// model denies the case's protocol and port; from one it allows,
	// nothing is asserted (the target's own stack discards the packet
	// after its eth0, or a datapath drops a shape it does not parse, as
	// eBPF more than 4 IPv6 extension headers: docs/ebpf.md).
	deniedOnly
)

// oddCase is one sequence of frames a sender puts on its eth0, and what
// it may do at x/a. proto and port are what the model is asked about
// (byModel).
type oddCase struct {
	name    string
	verdict oddVerdict
	proto   string
	port    int
	frames  func(f oddFrames) [][]byte
}

// oddFrames builds a case's frames from the sender to x/a. Every fragment
// of at least 24 bytes at an offset that is a multiple of 8 holds the
// whole nonce, so the sniffer sees any such part that arrives.
type oddFrames struct {
	src, dst net.HardwareAddr
	ip       probe.IPv4
	nonce    []byte
	sport    uint16     // the case's own: no two cases share a flow
	bcast    netip.Addr // the broadcast address of x/a's subnet
}

// udp is a UDP datagram to port, whose payload is the nonce three times
// (48 bytes: fragments at 8-byte offsets each hold a copy's part).
func (f oddFrames) udp(port uint16) []byte {
	return probe.UDP(f.sport, port, bytes.Repeat(f.nonce, 3))
}

// tcp is a TCP segment to port with the given flags and the nonce as its
// payload.
func (f oddFrames) tcp(port uint16, flags byte) []byte {
	return probe.TCP(netip.AddrPortFrom(f.ip.Src, f.sport), netip.AddrPortFrom(f.ip.Dst, port), flags, f.nonce)
}

// icmp is an ICMP message of the given type and code whose body is body
// then the nonce (checksummed).
func (f oddFrames) icmp(typ, code byte, body []byte) []byte {
	b := append(append([]byte{typ, code, 0, 0, 0, 0, 0, 0}, body...), f.nonce...)
	binary.BigEndian.PutUint16(b[2:], probe.Checksum(b))
	return b
}

// frag is one fragment: bytes [off, off+n) of payload at offset off.
func (f oddFrames) frag(payload []byte, off, n int, more bool) []byte {
	h := f.ip
	h.Frag = uint16(off / 8)
	if more {
		h.Frag |= probe.IPv4MoreFragments
	}
	return h.Frame(f.src, f.dst, payload[off:off+n])
}

func (f oddFrames) whole(payload []byte) []byte { return f.ip.Frame(f.src, f.dst, payload) }

// to readdresses the frames to an IPv4 destination and a MAC.
func (f oddFrames) to(ip netip.Addr, mac net.HardwareAddr) oddFrames {
	f.ip.Dst, f.dst = ip, mac
	return f
}

var (
	macBroadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	macAllHosts  = net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01} // 224.0.0.1
	allHosts     = netip.MustParseAddr("224.0.0.1")
	limitedBcast = netip.MustParseAddr("255.255.255.255")
)

func udpCase(name string, port int, frames func(f oddFrames) [][]byte) oddCase {
	return oddCase{name, byModel, "UDP", port, frames}
}

func tcpCase(name string, port int, flags byte) oddCase {
	return oddCase{name, byModel, "TCP", port, func(f oddFrames) [][]byte {
		f.ip.Proto = unix.IPPROTO_TCP
		return [][]byte{f.whole(f.tcp(uint16(port), flags))}
	}}
}

func invalidTCP(name string, flags byte) oddCase {
	c := tcpCase(name, 81, flags)
	c.verdict = invalid
	return c
}

var oddCases = []oddCase{
	udpCase("fragmented, port 81", 81, func(f oddFrames) [][]byte {
		d := f.udp(81)
		return [][]byte{f.frag(d, 0, 24, true), f.frag(d, 24, len(d)-24, false)}
	}),
	udpCase("fragmented, port 82", 82, func(f oddFrames) [][]byte {
		d := f.udp(82)
		return [][]byte{f.frag(d, 0, 24, true), f.frag(d, 24, len(d)-24, false)}
	}),
	udpCase("later fragment first, port 82", 82, func(f oddFrames) [][]byte {
		d := f.udp(82)
		return [][]byte{f.frag(d, 24, len(d)-24, false), f.frag(d, 0, 24, true)}
	}),
	udpCase("tiny first fragment (UDP header only), port 82", 82, func(f oddFrames) [][]byte {
		d := f.udp(82)
		return [][]byte{f.frag(d, 0, 8, true), f.frag(d, 8, len(d)-8, false)}
	}),
	{"port 81 first, overlapping offset-0 fragment rewrites it to 82", notPort82, "", 0, func(f oddFrames) [][]byte {
		d81, d82 := f.udp(81), f.udp(82)
		return [][]byte{f.frag(d81, 0, 24, true), f.frag(d82, 0, 24, true), f.frag(d81, 24, len(d81)-24, false)}
	}},
	{"port 82 first, overlapping offset-0 fragment rewrites it to 81", notPort82, "", 0, func(f oddFrames) [][]byte {
		d81, d82 := f.udp(81), f.udp(82)
		return [][]byte{f.frag(d82, 0, 24, true), f.frag(d81, 0, 24, true), f.frag(d82, 24, len(d82)-24, false)}
	}},
	udpCase("IP options (NOPs), port 81", 81, func(f oddFrames) [][]byte {
		f.ip.Options = []byte{1, 1, 1, 0}
		return [][]byte{f.whole(f.udp(81))}
	}),
	udpCase("IP options (NOPs), port 82", 82, func(f oddFrames) [][]byte {
		f.ip.Options = []byte{1, 1, 1, 0}
		return [][]byte{f.whole(f.udp(82))}
	}),
	udpCase("IP options (record route), port 82", 82, func(f oddFrames) [][]byte {
		f.ip.Options = []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		return [][]byte{f.whole(f.udp(82))}
	}),
	// Endpoints speak untagged IPv4 and ARP only: tagged frames and IPv6
	// are dropped whoever sends them.
	{"802.1Q-tagged, port 81", never, "", 0, func(f oddFrames) [][]byte {
		return [][]byte{probe.VLANTagged(f.whole(f.udp(81)), 0x8100, 5)}
	}},
	{"QinQ-tagged, port 81", never, "", 0, func(f oddFrames) [][]byte {
		return [][]byte{probe.VLANTagged(probe.VLANTagged(f.whole(f.udp(81)), 0x8100, 5), 0x88a8, 6)}
	}},
	{"IPv6 to ff02::1, port 81", never, "", 0, func(f oddFrames) [][]byte {
		return [][]byte{probe.IPv6UDPFrame(f.src, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, bytes.Repeat(f.nonce, 3))}
	}},
	// Broadcast and multicast are not addressed to x/a: no policy
	// allows them, whoever sends them (docs/policy.md).
	{"subnet broadcast, port 81", never, "", 0, func(f oddFrames) [][]byte {
		return [][]byte{f.to(f.bcast, macBroadcast).whole(f.udp(81))}
	}},
	{"255.255.255.255, port 81", never, "", 0, func(f oddFrames) [][]byte {
		return [][]byte{f.to(limitedBcast, macBroadcast).whole(f.udp(81))}
	}},
	{"224.0.0.1, port 81", never, "", 0, func(f oddFrames) [][]byte {
		return [][]byte{f.to(allHosts, macAllHosts).whole(f.udp(81))}
	}},
	// Addressed to x/a in a frame every port of the bridge gets: the
	// copy to x/a is judged as any other packet to x/a.
	udpCase("x/a's address in a broadcast frame, port 81", 81, func(f oddFrames) [][]byte {
		return [][]byte{f.to(f.ip.Dst, macBroadcast).whole(f.udp(81))}
	}),
	udpCase("x/a's address in a broadcast frame, port 82", 82, func(f oddFrames) [][]byte {
		return [][]byte{f.to(f.ip.Dst, macBroadcast).whole(f.udp(82))}
	}),
	tcpCase("TCP SYN, port 81", 81, probe.TCPSyn),
	tcpCase("TCP ACK without a connection, port 81", 81, probe.TCPAck),
	tcpCase("TCP SYN, port 82", 82, probe.TCPSyn),
	tcpCase("TCP ACK without a connection, port 82", 82, probe.TCPAck),
	tcpCase("TCP RST, port 82", 82, probe.TCPRst),
	tcpCase("TCP SYN+FIN, port 82", 82, probe.TCPSyn|probe.TCPFin),
	tcpCase("TCP no flags, port 82", 82, 0),
	tcpCase("TCP FIN+PSH+URG, port 82", 82, probe.TCPFin|probe.TCPPsh|probe.TCPUrg),
	invalidTCP("TCP SYN+FIN, port 81", probe.TCPSyn|probe.TCPFin),
	invalidTCP("TCP SYN+RST, port 81", probe.TCPSyn|probe.TCPRst),
	invalidTCP("TCP no flags, port 81", 0),
	invalidTCP("TCP FIN+PSH+URG, port 81", probe.TCPFin|probe.TCPPsh|probe.TCPUrg),
	invalidTCP("TCP RST without a connection, port 81", probe.TCPRst),
	{"UDP length 0, port 81", invalid, "", 0, func(f oddFrames) [][]byte {
		d := f.udp(81)
		d[4], d[5] = 0, 0
		return [][]byte{f.whole(d)}
	}},
	// Forged ICMP: an error quoting a flow that never was (x/a's UDP/81
	// to the sender's port of this case, which no other case sends
	// from), and an echo request; the policy allows no ICMP.
	{"ICMP port unreachable quoting x/a:81 -> sender", byModel, "ICMP", 0, func(f oddFrames) [][]byte {
		q := probe.IPv4{Src: f.ip.Dst, Dst: f.ip.Src, Proto: unix.IPPROTO_UDP, ID: f.ip.ID}
		quoted := q.Frame(f.dst, f.src, probe.UDP(81, f.sport, nil))[14 : 14+28]
		h := f.ip
		h.Proto = unix.IPPROTO_ICMP
		return [][]byte{h.Frame(f.src, f.dst, f.icmp(3, 3, quoted))}
	}},
	{"ICMP echo request", byModel, "ICMP", 0, func(f oddFrames) [][]byte {
		h := f.ip
		h.Proto = unix.IPPROTO_ICMP
		return [][]byte{h.Frame(f.src, f.dst, f.icmp(8, 0, nil))}
	}},
}

// TestOddPackets is the differential packet test: the same crafted
// frames, sent at x/a (which receives only UDP and TCP on port 81 from
// z/a) on every datapath of the registry, must meet the same verdict
// there, the model's. The cases (oddCases): fragments (in order, later
// first, a tiny first fragment, and offset-0 overlaps that rewrite the
// port either way), IP options, VLAN and QinQ tags, IPv6, broadcast and
// multicast, TCP flag sets (and headers no connection begins with, which
// no datapath lets through, from any sender: invalid),
// forged ICMP. They go from z/a (same host,
// allowed UDP and TCP 81), y/b (same host, denied) and y/a (the other
// host, denied), each sender's frames from its eth0, while x/a listens on
// UDP 81 and 82 and sniffs its eth0. A case the model allows must arrive
// (and a UDP one reach port 81): the control that the shape gets through
// when it should. One lab per datapath serves every case.
func TestOddPackets(t *testing.T) {
	for _, dp := range datapaths() {
		t.Run(dp, func(t *testing.T) {
			spec := scenarioLab(t, "t-odd-"+shortName(dp), dp, "wire")
			ctx := context.Background()
			pols := mustParse(t, aFromZaPort81)
			if _, err := Apply(ctx, spec.Name, pols); err != nil {
				t.Fatal(err)
			}
			model, err := policy.NewModel(spec, pols)
			if err != nil {
				t.Fatal(err)
			}
			ep := func(id string) *topology.Endpoint {
				e, err := spec.Endpoint(id)
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			xa := ep("x/a")
			sn, err := probe.Sniff(xa.Netns, "eth0")
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Close()
			port81, port82 := listenUDP(t, xa.Netns, 81), listenUDP(t, xa.Netns, 82)
			bcast := lastAddr(netip.PrefixFrom(xa.IP, xa.Prefix))
			// Every case from every sender goes out at once, three times
			// (the first may meet an empty bridge forwarding table), and is
			// judged after: each has its own nonce, IP ID and source port.
			type shot struct {
				from       *topology.Endpoint
				c          oddCase
				nonce      []byte
				want, deny bool
			}
			var shots []shot
			frames := map[string][][]byte{}
			id := uint16(0x5000)
			for _, from := range []*topology.Endpoint{ep("z/a"), ep("y/b"), ep("y/a")} {
				src, err := probe.EndpointMAC(from)
				if err != nil {
					t.Fatal(err)
				}
				dst, err := probe.FrameDst(spec, from, xa)
				if err != nil {
					t.Fatal(err)
				}
				deniedAll := !model.Verdict(from, xa, "UDP", 81).Allowed
				for i, c := range oddCases {
					id++
					nonce := make([]byte, 16)
					_, _ = rand.Read(nonce)
					f := oddFrames{src: src, dst: dst, nonce: nonce, sport: 40000 + uint16(i), bcast: bcast,
						ip: probe.IPv4{Src: from.IP, Dst: xa.IP, Proto: unix.IPPROTO_UDP, ID: id}}
					want := c.verdict == byModel && model.Verdict(from, xa, c.proto, c.port).Allowed
					shots = append(shots, shot{from, c, nonce, want, deniedAll})
					frames[from.Netns] = append(frames[from.Netns], c.frames(f)...)
				}
			}
			for range 3 {
				for ns, fs := range frames {
					if err := probe.SendFrames(ns, "eth0", fs...); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			for _, s := range shots {
				has := func(b []byte) bool { return bytes.Contains(b, s.nonce) }
				seen := sn.Saw(has)
				switch from, c := s.from.ID(), s.c; {
				case seen && c.verdict == never:
					t.Errorf("%s -> x/a %s: a frame arrived, and no policy allows this", from, c.name)
				case seen && c.verdict == invalid:
					t.Errorf("%s -> x/a %s: a frame arrived, and no connection can begin with it", from, c.name)
				case seen && c.verdict == byModel && !s.want:
					t.Errorf("%s -> x/a %s: a frame arrived, and the model denies it", from, c.name)
				case seen && s.deny:
					t.Errorf("%s -> x/a %s: a frame arrived, and the policy denies %s everything", from, c.name, from)
				case port82.saw(has):
					t.Errorf("%s -> x/a %s: reached port 82, which the policy closes", from, c.name)
				case s.want && !seen:
					t.Errorf("%s -> x/a %s: did not arrive, and the model allows it", from, c.name)
				case s.want && c.proto == "UDP" && !port81.saw(has):
					t.Errorf("%s -> x/a %s: arrived but did not reach port 81, and the model allows it", from, c.name)
				}
			}
		})
	}
}

// lastAddr is the last address of a prefix: an IPv4 subnet's broadcast.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) | (1<<(32-p.Bits()) - 1)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a)
}

// udpListener records the datagrams a UDP port of a namespace receives.
type udpListener struct {
	mu  sync.Mutex
	got [][]byte
}

func listenUDP(t *testing.T, ns string, port int) *udpListener {
	t.Helper()
	return listenUDPOn(t, ns, "udp4", netip.AddrPortFrom(netip.Addr{}, uint16(port)))
}

// listenUDPOn is listenUDP on network ("udp4" or "udp6") and an address
// (any address when addr's is invalid).
func listenUDPOn(t *testing.T, ns, network string, addr netip.AddrPort) *udpListener {
	t.Helper()
	laddr := fmt.Sprintf(":%d", addr.Port())
	if addr.Addr().IsValid() {
		laddr = addr.String()
	}
	var pc net.PacketConn
	if err := netns.Do(ns, func() error {
		var err error
		pc, err = net.ListenPacket(network, laddr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	l := &udpListener{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.got = append(l.got, bytes.Clone(buf[:n]))
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return l
}

func (l *udpListener) saw(match func([]byte) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.got {
		if match(b) {
			return true
		}
	}
	return false
}
