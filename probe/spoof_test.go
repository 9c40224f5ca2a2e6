package probe

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/topology"
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
