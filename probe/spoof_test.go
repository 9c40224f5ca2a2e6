package probe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/topology"
	"golang.org/x/sys/unix"
)

func TestFrames(t *testing.T) {
	src, _ := net.ParseMAC("02:00:00:00:00:01")
	dst, _ := net.ParseMAC("02:00:00:00:00:02")
	f := UDPFrame(src, dst, netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.2:81"), []byte("nonce"))
	if len(f) != 60 || binary.BigEndian.Uint16(f[12:]) != EtherIPv4 {
		t.Fatalf("udp frame: %d bytes, type %#x", len(f), binary.BigEndian.Uint16(f[12:]))
	}
	if Checksum(f[14:34]) != 0 {
		t.Errorf("IPv4 header checksum does not verify: % x", f[14:34])
	}
	if got := netip.AddrFrom4([4]byte(f[26:30])); got != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("source %s", got)
	}
	a := ARPRequest(src, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), []byte("trailer"))
	if !isARPFrom(a, src, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")) {
		t.Errorf("ARP request not recognised: % x", a)
	}
	if isARPFrom(a, dst, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")) {
		t.Error("ARP request matched another sender MAC")
	}
	if v6 := IPv6UDPFrame(src, dst, []byte("n")); binary.BigEndian.Uint16(v6[12:]) != EtherIPv6 || v6[14]>>4 != 6 {
		t.Errorf("IPv6 frame: % x", v6[:20])
	}
}

func TestUnusedAndPick(t *testing.T) {
	lab := &topology.Spec{Endpoints: []topology.Endpoint{
		{Name: "a", Host: "h1", IP: netip.MustParseAddr("10.0.0.10"), Prefix: 24, Gateway: netip.MustParseAddr("10.0.0.1")},
		{Name: "b", Host: "h2", IP: netip.MustParseAddr("10.0.1.10"), Prefix: 24},
		{Name: "c", Host: "h1", IP: netip.MustParseAddr("10.0.0.254"), Prefix: 24},
		{Name: "d", Host: "h1", IP: netip.MustParseAddr("10.0.0.11"), Prefix: 24},
	}}
	if got := unusedAddr(lab, &lab.Endpoints[0]); got != netip.MustParseAddr("10.0.0.253") {
		t.Errorf("unused address %s, want 10.0.0.253", got)
	}
	a := &lab.Endpoints[0]
	to := pickOther(lab, a.Host, a)
	peer := pickOther(lab, a.Host, a, to)
	if to.Name != "c" || peer.Name != "d" {
		t.Errorf("picked %s and %s, want c and d (same host)", to.Name, peer.Name)
	}
}

// The IPv6 frames carry correct upper-layer checksums (the pseudo-header
// sum over a packet with its checksum verifies to 0), NDP goes out with
// hop limit 255 and names its target, and the nonce is in the frame.
func TestFrames6(t *testing.T) {
	src, _ := net.ParseMAC("02:00:00:00:00:01")
	dst, _ := net.ParseMAC("02:00:00:00:00:02")
	a, b, c := netip.MustParseAddr("fd00::a"), netip.MustParseAddr("fd00::b"), netip.MustParseAddr("fd00::c")
	nonce := []byte("0123456789abcdef")
	verify := func(name string, f []byte, next uint8) []byte {
		t.Helper()
		if binary.BigEndian.Uint16(f[12:]) != EtherIPv6 || f[14]>>4 != 6 || f[20] != next {
			t.Fatalf("%s: not IPv6/%d: % x", name, next, f[:40])
		}
		plen := int(binary.BigEndian.Uint16(f[18:]))
		pkt := f[54 : 54+plen]
		if sum := checksum6(netip.AddrFrom16([16]byte(f[22:38])), netip.AddrFrom16([16]byte(f[38:54])), next, pkt); sum != 0 {
			t.Errorf("%s: checksum does not verify (%#x)", name, sum)
		}
		if !bytes.Contains(f, nonce) {
			t.Errorf("%s: no nonce", name)
		}
		return pkt
	}
	verify("udp6", UDP6Frame(src, dst, netip.AddrPortFrom(a, 40000), netip.AddrPortFrom(b, 81), nonce), unix.IPPROTO_UDP)
	ns := NeighbourSolicitation(src, dst, a, b, b, nonce)
	if m := verify("ns", ns, unix.IPPROTO_ICMPV6); m[0] != icmp6NS || netip.AddrFrom16([16]byte(m[8:24])) != b || ns[21] != 255 {
		t.Errorf("ns: % x", m)
	}
	na := NeighbourAdvertisement(src, dst, a, b, c, nonce)
	if m := verify("na", na, unix.IPPROTO_ICMPV6); m[0] != icmp6NA || netip.AddrFrom16([16]byte(m[8:24])) != c || m[24] != ndOptTargetLL || !bytes.Equal(m[26:32], src) {
		t.Errorf("na: % x", m)
	}
	for _, ck := range SpoofChecks {
		if ck.Family() == 6 && ck.Forged() != (ck == Forged6Peer || ck == Forged6Outside || ck == Foreign6MAC || ck == NAForgedTarget) {
			t.Errorf("%s: forged=%v", ck, ck.Forged())
		}
	}
}
