package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// aFromZaPort81 lets x/a receive UDP on port 81 from z/a, and nothing else.
const aFromZaPort81 = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-za-81, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {ns: z}}
      podSelector: {matchLabels: {pod: a}}
    ports: [{protocol: UDP, port: 81}]
`

// oddCase is one sequence of frames a sender puts on its eth0, and whether
// the policy lets what it carries reach x/a from z/a.
type oddCase struct {
	name    string
	allowed bool // from z/a; from anyone else nothing may arrive
	frames  func(f oddFrames) [][]byte
}

// oddFrames builds a case's frames from the sender to x/a. Every fragment
// of at least 24 bytes at an offset that is a multiple of 8 holds the
// whole nonce, so the sniffer sees any such part that arrives.
type oddFrames struct {
	src, dst net.HardwareAddr
	ip       probe.IPv4
	nonce    []byte
}

// udp is a UDP datagram to port, whose payload is the nonce three times
// (48 bytes: fragments at 8-byte offsets each hold a copy's part).
func (f oddFrames) udp(port uint16) []byte {
	return probe.UDP(40000, port, bytes.Repeat(f.nonce, 3))
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

var oddCases = []oddCase{
	{"fragmented, port 81", true, func(f oddFrames) [][]byte {
		d := f.udp(81)
		return [][]byte{f.frag(d, 0, 24, true), f.frag(d, 24, len(d)-24, false)}
	}},
	{"fragmented, port 82", false, func(f oddFrames) [][]byte {
		d := f.udp(82)
		return [][]byte{f.frag(d, 0, 24, true), f.frag(d, 24, len(d)-24, false)}
	}},
	{"later fragment first, port 82", false, func(f oddFrames) [][]byte {
		d := f.udp(82)
		return [][]byte{f.frag(d, 24, len(d)-24, false), f.frag(d, 0, 24, true)}
	}},
	{"tiny first fragment (UDP header only), port 82", false, func(f oddFrames) [][]byte {
		d := f.udp(82)
		return [][]byte{f.frag(d, 0, 8, true), f.frag(d, 8, len(d)-8, false)}
	}},
	{"port 81 first, overlapping offset-0 fragment rewrites it to 82", false, func(f oddFrames) [][]byte {
		d81, d82 := f.udp(81), f.udp(82)
		return [][]byte{f.frag(d81, 0, 24, true), f.frag(d82, 0, 24, true), f.frag(d81, 24, len(d81)-24, false)}
	}},
	{"port 82 first, overlapping offset-0 fragment rewrites it to 81", false, func(f oddFrames) [][]byte {
		d81, d82 := f.udp(81), f.udp(82)
		return [][]byte{f.frag(d82, 0, 24, true), f.frag(d81, 0, 24, true), f.frag(d82, 24, len(d82)-24, false)}
	}},
	{"IP options (NOPs), port 81", true, func(f oddFrames) [][]byte {
		f.ip.Options = []byte{1, 1, 1, 0}
		return [][]byte{f.whole(f.udp(81))}
	}},
	{"IP options (NOPs), port 82", false, func(f oddFrames) [][]byte {
		f.ip.Options = []byte{1, 1, 1, 0}
		return [][]byte{f.whole(f.udp(82))}
	}},
	{"IP options (record route), port 82", false, func(f oddFrames) [][]byte {
		f.ip.Options = []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		return [][]byte{f.whole(f.udp(82))}
	}},
	// Endpoints speak untagged IPv4 and ARP only: tagged frames are
	// dropped whoever sends them.
	{"802.1Q-tagged, port 81", false, func(f oddFrames) [][]byte {
		return [][]byte{probe.VLANTagged(f.whole(f.udp(81)), 0x8100, 5)}
	}},
	{"QinQ-tagged, port 81", false, func(f oddFrames) [][]byte {
		return [][]byte{probe.VLANTagged(probe.VLANTagged(f.whole(f.udp(81)), 0x8100, 5), 0x88a8, 6)}
	}},
}

// TestOddPackets sends x/a, which receives only UDP/81 from z/a, fragments
// (in order, later first, a tiny first fragment, and offset-0 overlaps
// that rewrite the port either way), packets with IP options and
// VLAN-tagged frames, from z/a (same host), y/b (same host, denied) and
// y/a (the other host, denied). x/a listens on UDP 81 and 82 and sniffs
// its eth0. From y/b and y/a no frame may arrive at all. From z/a nothing
// may reach port 82, and what the policy allows must reach port 81: the
// control that this shape gets through when it should. Tagged frames
// arrive from no one. (An overlap may
// let z/a's port-81 fragment through; x/a's kernel then drops the
// datagram, as Linux drops any IPv4 datagram whose fragments overlap.)
func TestOddPackets(t *testing.T) {
	for _, dp := range datapaths() {
		t.Run(dp, func(t *testing.T) {
			spec := scenarioLab(t, "t-odd-"+shortName(dp), dp, "wire")
			ctx := context.Background()
			if _, err := Apply(ctx, spec.Name, mustParse(t, aFromZaPort81)); err != nil {
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
				allowedPeer := from.ID() == "z/a"
				for _, c := range oddCases {
					id++
					nonce := make([]byte, 16)
					_, _ = rand.Read(nonce)
					f := oddFrames{src: src, dst: dst, nonce: nonce,
						ip: probe.IPv4{Src: from.IP, Dst: xa.IP, Proto: unix.IPPROTO_UDP, ID: id}}
					has := func(b []byte) bool { return bytes.Contains(b, nonce) }
					want := c.allowed && allowedPeer
					seen, err := sn.Expect(from.Netns, func(b []byte) bool { return has(b) && (!want || port81.saw(has)) },
						300*time.Millisecond, c.frames(f)...)
					if err != nil {
						t.Fatalf("%s -> x/a %s: %v", from.ID(), c.name, err)
					}
					tagged := strings.Contains(c.name, "tagged")
					switch {
					case seen && tagged:
						t.Errorf("%s -> x/a %s: a tagged frame arrived", from.ID(), c.name)
					case seen && !allowedPeer:
						t.Errorf("%s -> x/a %s: a frame arrived, and the policy denies %s everything", from.ID(), c.name, from.ID())
					case port82.saw(has):
						t.Errorf("%s -> x/a %s: reached port 82, which the policy closes", from.ID(), c.name)
					case want && !port81.saw(has):
						t.Errorf("%s -> x/a %s: did not reach port 81, and the policy allows it", from.ID(), c.name)
					}
				}
			}
		})
	}
}

// udpListener records the datagrams a UDP port of a namespace receives.
type udpListener struct {
	mu  sync.Mutex
	got [][]byte
}

func listenUDP(t *testing.T, ns string, port int) *udpListener {
	t.Helper()
	var pc net.PacketConn
	if err := netns.Do(ns, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
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
