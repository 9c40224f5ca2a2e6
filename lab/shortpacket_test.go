package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/probe"
)

// denyFromY denies everything from namespace y into namespace x, without
// isolating x: only the deny stands between y and x.
const denyFromY = `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny-y, namespace: x}
spec:
  endpointSelector: {}
  enableDefaultDeny: {ingress: false}
  ingressDeny:
  - fromEndpoints:
    - matchLabels:
        k8s:io.kubernetes.pod.namespace: y
`

// shortPacket is an IPv4 packet whose transport header is missing or cut
// short, so that a match on its destination port cannot read one.
type shortPacket struct {
	name    string
	proto   uint8
	payload int
}

var shortPackets = []shortPacket{
	{"protocol 253, no payload", 253, 0},
	{"protocol 253, 2 bytes", 253, 2},
	{"protocol 253, 8 bytes", 253, 8},
	{"udp, 3 bytes", unix.IPPROTO_UDP, 3},
	{"tcp, 2 bytes", unix.IPPROTO_TCP, 2},
}

// TestDenyShortPackets sends packets without a full transport header (raw
// IPv4) from endpoints that a deny of any protocol covers, on the same
// host and across hosts, and sniffs the target: none may arrive. From an
// endpoint no policy denies, the protocol-253 ones must arrive (the
// target is not isolated), so the sniffer is known to see them. Truncated
// UDP and TCP never get that far: conntrack finds them invalid.
func TestDenyShortPackets(t *testing.T) {
	for _, dp := range datapaths() {
		t.Run(dp, func(t *testing.T) {
			spec := scenarioLab(t, "t-short-"+shortName(dp), dp, "wire")
			if _, err := Apply(context.Background(), spec.Name, mustParse(t, denyFromY)); err != nil {
				t.Fatal(err)
			}
			xa, _ := spec.Endpoint("x/a") // on flip
			type from struct {
				ep      string
				allowed bool
			}
			id := uint16(0x4000)
			for _, f := range []from{{"y/b", false}, {"y/a", false}, {"z/a", true}} { // flip, flap, flip
				src, _ := spec.Endpoint(f.ep)
				for _, p := range shortPackets {
					id++
					got, err := sendAndSniff(src.Netns, xa.Netns, src.IP, xa.IP, p.proto, p.payload, id)
					if err != nil {
						t.Fatalf("%s -> x/a %s: %v", f.ep, p.name, err)
					}
					switch {
					case got && !f.allowed:
						t.Errorf("%s -> x/a %s: arrived through a deny of any protocol", f.ep, p.name)
					case !got && f.allowed && p.proto == 253:
						t.Errorf("%s -> x/a %s: did not arrive, and nothing denies it", f.ep, p.name)
					}
				}
			}
		})
	}
}

// sendAndSniff sends one raw IPv4 packet with the given protocol, payload
// length and IP ID from srcNs, and reports whether it reached dstNs.
func sendAndSniff(srcNs, dstNs string, src, dst netip.Addr, proto uint8, payload int, id uint16) (bool, error) {
	var sniff int
	if err := netns.Do(dstNs, func() error {
		var err error
		sniff, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(probe.Htons(unix.ETH_P_IP)))
		return err
	}); err != nil {
		return false, fmt.Errorf("sniffer: %w", err)
	}
	defer unix.Close(sniff)
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(sniff, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return false, err
	}
	pkt := make([]byte, 20+payload)
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(pkt[4:], id)
	pkt[8] = 64
	pkt[9] = proto
	s4, d4 := src.As4(), dst.As4()
	copy(pkt[12:], s4[:])
	copy(pkt[16:], d4[:])
	binary.BigEndian.PutUint16(pkt[10:], probe.Checksum(pkt[:20]))
	if err := netns.Do(srcNs, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW) // IP_HDRINCL implied
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// Twice: the first may wait for the neighbour to be resolved.
		for range 2 {
			if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d4}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return false, fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(700 * time.Millisecond); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(sniff, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		if n >= 20 && buf[9] == proto && binary.BigEndian.Uint16(buf[4:]) == id &&
			netip.AddrFrom4([4]byte(buf[12:16])) == src {
			return true, nil
		}
	}
	return false, nil
}
