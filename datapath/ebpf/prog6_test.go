package ebpf

// IPv6 on the programs (from_ep6, to_ep6), with BPF_PROG_TEST_RUN: policy
// by identity and by CIDR, conntrack, related ICMPv6 errors, extension
// headers, fragments, anti-spoofing and neighbour discovery.

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
)

const (
	protoICMP6 = 58
	nhHop      = 0
	nhFrag     = 44
	nhDest     = 60
)

// The IPv6 world: A and B (dual-stack) on the host under test, R remote,
// W6 in a CIDR the policy names, X6 in the world.
var (
	addrA6   = netip.MustParseAddr("fd00:0:192::a")
	addrB6   = netip.MustParseAddr("fd00:0:192::b")
	addrR6   = netip.MustParseAddr("fd00:0:193::1")
	addrW6   = netip.MustParseAddr("fd00:99::5")
	addrX6   = netip.MustParseAddr("2001:db8::1")
	addrGw6  = netip.MustParseAddr("fd00:0:192::1")
	cidrW6   = netip.MustParsePrefix("fd00:99::/64")
	solNode1 = netip.MustParseAddr("ff02::1:ff00:1") // the gateway's solicited-node group
)

const idCIDR6 = uint32(cnlabIdentityFIRST_CIDR_IDENTITY) + 6

// harness6 is a harness whose A and B have IPv6 addresses too.
func harness6(t *testing.T, routing string) (*harness, *tep, *tep) {
	t.Helper()
	h := newHarness(t, harnessOpts{hostRouting: routing})
	a, b := *epA, *epB
	a.ip6, b.ip6 = addrA6, addrB6
	for _, e := range []*tep{&a, &b} {
		h.addLocal(e)
		h.must(h.objs.CnlabLocal6.Put(ipcacheKey6(netip.PrefixFrom(e.ip6, 128)), e.entry()))
	}
	ipc, err := buildIPCache6([]ipEntry{
		{Prefix: netip.PrefixFrom(addrA6, 128), Key: a.identity, Identity: a.identity},
		{Prefix: netip.PrefixFrom(addrB6, 128), Key: b.identity, Identity: b.identity},
		{Prefix: netip.PrefixFrom(addrR6, 128), Key: idR, Identity: idR},
		{Prefix: cidrW6, Key: idCIDR6, Identity: idCIDR6},
	})
	h.must(err)
	for gen := uint32(0); gen < 2; gen++ {
		h.must(h.objs.CnlabIpcache6.Put(gen, ipc))
	}
	ipc.Close()
	h.runAs(&a)
	return h, &a, &b
}

type ip6Hdr struct {
	src, dst netip.Addr
	nxt      uint8
	ext      []byte // extension headers, as on the wire (their own next headers set)
	hlim     uint8  // hop limit (0: 64)
}

func (h ip6Hdr) bytes(payload []byte) []byte {
	b := make([]byte, 40, 40+len(h.ext)+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(h.ext)+len(payload)))
	b[6] = h.nxt
	b[7] = 64
	if h.hlim != 0 {
		b[7] = h.hlim
	}
	s, d := h.src.As16(), h.dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	b = append(b, h.ext...)
	return append(b, payload...)
}

func tcp6(src, dst netip.Addr, sport, dport uint16, flags uint8) []byte {
	return frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: protoTCP}.bytes(tcpHdr(sport, dport, flags)))
}

func udp6(src, dst netip.Addr, sport, dport uint16) []byte {
	return frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: protoUDP}.bytes(udpHdr(sport, dport, []byte("hello"))))
}

// icmp6Sum is the ICMPv6 checksum of msg (its checksum field zero) from
// src to dst.
func icmp6Sum(src, dst netip.Addr, msg []byte) uint16 {
	s, d := src.As16(), dst.As16()
	ph := append(append([]byte{}, s[:]...), d[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(msg)))
	ph = append(ph, 0, 0, 0, protoICMP6)
	return csum(append(ph, msg...))
}

// icmp6 is an ICMPv6 message at the hop limit its type is sent with on
// a link (neighbour discovery 255, MLD 1, others 64).
func icmp6(src, dst netip.Addr, typ uint8, body []byte) []byte {
	hlim := uint8(64)
	switch {
	case typ >= 133 && typ <= 137:
		hlim = 255
	case typ >= 130 && typ <= 132 || typ == 143:
		hlim = 1
	}
	return icmp6Hlim(src, dst, typ, body, hlim)
}

func icmp6Hlim(src, dst netip.Addr, typ uint8, body []byte, hlim uint8) []byte {
	msg := append([]byte{typ, 0, 0, 0}, body...)
	binary.BigEndian.PutUint16(msg[2:], icmp6Sum(src, dst, msg))
	return frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: protoICMP6, hlim: hlim}.bytes(msg))
}

// nd is a neighbour solicitation (135) or advertisement (136) for target
// with a link-layer address option (1: source, 2: target) of mac.
func nd(typ uint8, src, dst, target netip.Addr, opt uint8, mac [6]byte) []byte {
	body := make([]byte, 4, 4+16+8)
	if typ == 136 {
		body[0] = 0x60 // solicited, override
	}
	t := target.As16()
	body = append(body, t[:]...)
	body = append(body, opt, 1)
	body = append(body, mac[:]...)
	return icmp6(src, dst, typ, body)
}

func TestIPv6Policy(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.setPolicy(0, a, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS,
		allow(policy.Egress, idR, protoTCP, 80),
		policy.Entry{Dir: policy.Egress, PeerID: idCIDR6, Proto: protoUDP, PortLo: 53},
		deny(policy.Egress, idR, protoTCP, 81))
	h.fromEp(t, "A to R:80 by identity", tcp6(addrA6, addrR6, 40000, 80, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
	if !h.ct6Has(addrA6, addrR6, 40000, 80, protoTCP, 1+dirOut, a.index) {
		t.Error("no IPv6 conntrack entry for A to R:80")
	}
	h.toEp(t, "the answer of R:80", tcp6(addrR6, addrA6, 80, 40000, tcpSYN|tcpACK), actOK, ingress(a, cnlabReasonR_ALLOW_CT))
	h.fromEp(t, "A to R:81 (denied)", tcp6(addrA6, addrR6, 40001, 81, tcpSYN), actShot, egress(a, cnlabReasonR_DROP_DENY))
	h.fromEp(t, "A to R:82 (no entry)", tcp6(addrA6, addrR6, 40002, 82, tcpSYN), actShot, egress(a, cnlabReasonR_DROP_DEFAULT))
	h.fromEp(t, "A to W6:53 by CIDR", udp6(addrA6, addrW6, 5353, 53), actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
	h.fromEp(t, "A to X6:53 (world)", udp6(addrA6, addrX6, 5353, 53), actShot, egress(a, cnlabReasonR_DROP_DEFAULT))
	h.toEp(t, "R to A:80 (ingress isolated)", tcp6(addrR6, addrA6, 40000, 80, tcpSYN), actShot, ingress(a, cnlabReasonR_DROP_DEFAULT))
	h.toEp(t, "to another address", tcp6(addrR6, addrB6, 40000, 80, tcpSYN), actShot, ingress(a, cnlabReasonR_DROP_UNKNOWN))
	// An IPv4 packet is judged as before, by the IPv4 maps.
	h.fromEp(t, "A to R:80 over IPv4", tcpPkt(epA.ip, addrR, 40000, 80, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_POLICY))

	// A router's ICMPv6 error about the allowed flow is related; one
	// about no flow is judged by policy (and dropped).
	syn := ip6Hdr{src: addrA6, dst: addrR6, nxt: protoTCP}.bytes(tcpHdr(40000, 80, tcpSYN))
	rtr := netip.MustParseAddr("2001:db8::fe")
	h.toEp(t, "unreachable about A to R:80", icmp6(rtr, addrA6, 1, append([]byte{0, 0, 0, 0}, syn...)), actOK,
		ingress(a, cnlabReasonR_ALLOW_RELATED))
	other := ip6Hdr{src: addrA6, dst: addrR6, nxt: protoTCP}.bytes(tcpHdr(40009, 80, tcpSYN))
	h.toEp(t, "unreachable about no flow", icmp6(rtr, addrA6, 1, append([]byte{0, 0, 0, 0}, other...)), actShot,
		ingress(a, cnlabReasonR_DROP_DEFAULT))
	// Echo: a request opens a flow, its reply passes.
	echo := func(src, dst netip.Addr, typ uint8) []byte { return icmp6(src, dst, typ, []byte{0, 7, 0, 1}) }
	h.setPolicy(0, a, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS, policy.Entry{Dir: policy.Egress, PeerID: idR, Proto: protoICMP6})
	h.fromEp(t, "echo request to R", echo(addrA6, addrR6, 128), actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "its reply", echo(addrR6, addrA6, 129), actOK, ingress(a, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "a request from R", echo(addrR6, addrA6, 128), actShot, ingress(a, cnlabReasonR_DROP_DEFAULT))
}

func TestIPv6HostLocal(t *testing.T) {
	h, a, b := harness6(t, kind.HostRoutingBPF)
	h.setPolicy(0, b, cnlabIsolationISO_INGRESS, allow(policy.Ingress, a.identity, protoTCP, 80))
	r := h.fromEp(t, "A to B:80", tcp6(addrA6, addrB6, 40000, 80, tcpSYN), actRedirect,
		egress(a, cnlabReasonR_ALLOW_UNENFORCED), ingress(b, cnlabReasonR_ALLOW_POLICY))
	if [6]byte(r.out[0:6]) != b.mac || [6]byte(r.out[6:12]) != b.lxc || binary.BigEndian.Uint16(r.out[12:]) != ethIPv6 {
		t.Errorf("delivered with Ethernet header % x", r.out[:14])
	}
	h.fromEp(t, "A to B:81", tcp6(addrA6, addrB6, 40001, 81, tcpSYN), actShot,
		egress(a, cnlabReasonR_ALLOW_UNENFORCED), ingress(b, cnlabReasonR_DROP_DEFAULT))
	h.runAs(b)
	h.fromEp(t, "B answers A", tcp6(addrB6, addrA6, 80, 40000, tcpSYN|tcpACK), actRedirect,
		egress(b, cnlabReasonR_ALLOW_CT), ingress(a, cnlabReasonR_ALLOW_CT))
}

func TestIPv6ExtensionHeadersAndFragments(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.setPolicy(0, a, cnlabIsolationISO_EGRESS, policy.Entry{Dir: policy.Egress, PeerID: idR, Proto: protoUDP, PortLo: 53})
	hop := []byte{protoUDP, 0, 1, 4, 0, 0, 0, 0} // hop-by-hop, a PadN option
	pkt := frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhHop, ext: hop}.bytes(udpHdr(5353, 53, []byte("x"))))
	h.fromEp(t, "UDP after a hop-by-hop header", pkt, actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
	pkt = frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhHop, ext: hop}.bytes(udpHdr(5353, 54, []byte("x"))))
	h.fromEp(t, "to port 54 after a hop-by-hop header", pkt, actShot, egress(a, cnlabReasonR_DROP_DEFAULT))
	// Five hop-by-hop headers: more than the program reads.
	var ext []byte
	for i := 0; i < 5; i++ {
		nxt := byte(nhHop)
		if i == 4 {
			nxt = protoUDP
		}
		ext = append(ext, nxt, 0, 1, 4, 0, 0, 0, 0)
	}
	pkt = frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhHop, ext: ext}.bytes(udpHdr(5353, 53, []byte("x"))))
	h.fromEp(t, "five extension headers", pkt, actShot, egress(a, cnlabReasonR_DROP_IPV6))
	// A fragmented datagram: the first fragment decides, the later follows.
	fragHdr := func(off uint16, more bool, id uint32) []byte {
		b := []byte{protoUDP, 0, 0, 0, 0, 0, 0, 0}
		v := off
		if more {
			v |= 1
		}
		binary.BigEndian.PutUint16(b[2:], v)
		binary.BigEndian.PutUint32(b[4:], id)
		return b
	}
	udp := udpHdr(5354, 53, make([]byte, 32))
	first := frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhFrag, ext: fragHdr(0, true, 77)}.bytes(udp[:24]))
	later := frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhFrag, ext: fragHdr(24, false, 77)}.bytes(udp[24:]))
	stray := frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhFrag, ext: fragHdr(24, false, 78)}.bytes(udp[24:]))
	h.fromEp(t, "first fragment", first, actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
	h.fromEp(t, "later fragment", later, actOK, egress(a, cnlabReasonR_ALLOW_FRAG))
	h.fromEp(t, "later fragment without a first", stray, actShot, egress(a, cnlabReasonR_DROP_FRAG))
	// Destination options after the fragment header, in the fragmentable
	// part: the later fragment's header names them as its next header,
	// the first fragment's upper layer is UDP; the two are one datagram.
	dopt := append([]byte{protoUDP, 0, 1, 4, 0, 0, 0, 0}, udpHdr(5355, 53, make([]byte, 32))...)
	fragDst := func(off uint16, more bool) []byte {
		b := fragHdr(off, more, 79)
		b[0] = nhDest
		return b
	}
	first = frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhFrag, ext: fragDst(0, true)}.bytes(dopt[:24]))
	later = frame(ethIPv6, ip6Hdr{src: addrA6, dst: addrR6, nxt: nhFrag, ext: fragDst(24, false)}.bytes(dopt[24:]))
	h.fromEp(t, "first fragment, destination options after the fragment header", first, actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
	h.fromEp(t, "its later fragment", later, actOK, egress(a, cnlabReasonR_ALLOW_FRAG))
}

func TestIPv6Spoofing(t *testing.T) {
	for _, routing := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(routing, func(t *testing.T) {
			h, a, _ := harness6(t, routing)
			h.fromEp(t, "B's source", tcp6(addrB6, addrR6, 40000, 80, tcpSYN), actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			h.fromEp(t, "another source", udp6(addrX6, addrR6, 1, 53), actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			pkt := tcp6(addrA6, addrR6, 40000, 80, tcpSYN)
			copy(pkt[6:12], epB.mac[:]) // fromEp keeps a MAC that is not macOther
			h.fromEp(t, "B's MAC", pkt, actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			h.fromEp(t, "NA for B's address", nd(136, addrA6, addrGw6, addrB6, 2, a.mac), actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			h.fromEp(t, "NA for A's address from B's", nd(136, addrB6, addrGw6, addrB6, 2, a.mac), actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			h.fromEp(t, "NA with B's MAC", nd(136, addrA6, addrGw6, addrA6, 2, b6mac()), actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			h.fromEp(t, "NS with B's MAC", nd(135, addrA6, solNode1, addrGw6, 1, b6mac()), actShot, egress(a, cnlabReasonR_DROP_SPOOF))
			h.fromEp(t, "router advertisement", icmp6(addrA6, netip.MustParseAddr("ff02::1"), 134, make([]byte, 12)), actShot,
				egress(a, cnlabReasonR_DROP_SPOOF))
			// An endpoint without an IPv6 address sends none.
			h.runAs(epB)
			h.fromEp(t, "IPv6 from an IPv4-only endpoint", tcp6(addrB6, addrR6, 40000, 80, tcpSYN), actShot,
				egress(epB, cnlabReasonR_DROP_IPV6))
		})
	}
}

func b6mac() [6]byte { return epB.mac }

func TestIPv6NeighbourDiscovery(t *testing.T) {
	for _, routing := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(routing, func(t *testing.T) {
			h, a, _ := harness6(t, routing)
			// Default deny both ways: NDP is not policy's.
			h.setPolicy(0, a, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS)
			ns := nd(135, addrA6, solNode1, addrGw6, 1, a.mac)
			if routing == kind.HostRoutingBPF {
				r := h.fromEp(t, "NS for the gateway", ns, actRedirect, egress(a, cnlabReasonR_ARP_REPLIED))
				checkNA(t, r.out, a, addrGw6)
			} else {
				h.fromEp(t, "NS for the gateway", ns, actOK, egress(a, cnlabReasonR_ARP_PASSED))
			}
			h.fromEp(t, "NA for itself", nd(136, addrA6, addrGw6, addrA6, 2, a.mac), actOK, egress(a, cnlabReasonR_ARP_PASSED))
			h.fromEp(t, "NA to the host's link-local address", nd(136, addrA6, netip.MustParseAddr("fe80::1"), addrA6, 2, a.mac), actOK,
				egress(a, cnlabReasonR_ARP_PASSED))
			h.fromEp(t, "NA to all nodes", nd(136, addrA6, netip.MustParseAddr("ff02::1"), addrA6, 2, a.mac), actOK,
				egress(a, cnlabReasonR_ARP_PASSED))
			h.fromEp(t, "router solicitation", icmp6(addrA6, netip.MustParseAddr("ff02::2"), 133, make([]byte, 4)), actOK,
				egress(a, cnlabReasonR_ARP_PASSED))
			h.toEp(t, "NS from the host", nd(135, addrGw6, netip.MustParseAddr("ff02::1:ff00:a"), addrA6, 1, a.lxc), actOK,
				ingress(a, cnlabReasonR_ARP_PASSED))
			h.toEp(t, "NA from the host", nd(136, addrGw6, addrA6, addrGw6, 2, a.lxc), actOK, ingress(a, cnlabReasonR_ARP_PASSED))
			h.toEp(t, "but not TCP", tcp6(addrR6, addrA6, 1, 80, tcpSYN), actShot, ingress(a, cnlabReasonR_DROP_DEFAULT))
			// Neighbour discovery only on its link, at its hop limit:
			// anything else meets the policy (a routed NS has 254; an
			// NS to a remote address is no neighbour's; MLD has 1).
			routed := nd(135, addrR6, addrA6, addrA6, 1, a.lxc)
			routed[14+7] = 254 // the IPv6 header's hop limit, after Ethernet's 14 bytes
			h.toEp(t, "routed NS", routed, actShot, ingress(a, cnlabReasonR_DROP_DEFAULT))
			h.fromEp(t, "NS to a remote address", nd(135, addrA6, addrR6, addrR6, 1, a.mac), actShot, egress(a, cnlabReasonR_DROP_DEFAULT))
			h.fromEp(t, "MLD report at hop limit 255", icmp6Hlim(addrA6, netip.MustParseAddr("ff02::16"), 143, make([]byte, 4), 255), actShot,
				egress(a, cnlabReasonR_DROP_DEFAULT))
			h.fromEp(t, "router solicitation to a remote address", icmp6(addrA6, addrR6, 133, make([]byte, 4)), actShot,
				egress(a, cnlabReasonR_DROP_DEFAULT))
		})
	}
}

// checkNA checks the program's answer to a's solicitation for target.
func checkNA(t *testing.T, out []byte, a *tep, target netip.Addr) {
	t.Helper()
	if len(out) < 14+40+32 {
		t.Fatalf("answer of %d bytes", len(out))
	}
	out = out[:14+40+32]
	ip := out[14:]
	src, _ := netip.AddrFromSlice(ip[8:24])
	dst, _ := netip.AddrFromSlice(ip[24:40])
	msg := ip[40:]
	tgt, _ := netip.AddrFromSlice(msg[8:24])
	if [6]byte(out[0:6]) != a.mac || [6]byte(out[6:12]) != a.lxc || ip[7] != 255 || ip[6] != protoICMP6 ||
		src != target || dst != addrA6 || msg[0] != 136 || tgt != target || msg[24] != 2 || [6]byte(msg[26:32]) != a.lxc {
		t.Errorf("answer % x", out)
	}
	sum := binary.BigEndian.Uint16(msg[2:])
	m := append([]byte{}, msg...)
	m[2], m[3] = 0, 0
	if want := icmp6Sum(src, dst, m); sum != want {
		t.Errorf("answer's checksum %#x, want %#x", sum, want)
	}
}

// ct6Has reports whether cnlab_ct6 holds a flow's entry.
func (h *harness) ct6Has(src, dst netip.Addr, sport, dport uint16, proto, scope uint8, ep uint32) bool {
	k := cnlabCt6Key{Saddr: ip6(src), Daddr: ip6(dst), Sport: sport, Dport: dport, Proto: proto, Scope: scope, Ep: uint16(ep)}
	var v cnlabCtVal
	return h.objs.CnlabCt6.Lookup(k, &v) == nil
}

// TestIPv6ForgetFlows: the probe's ForgetFlows deletes IPv6 conntrack
// entries of the given sources, and only those.
func TestIPv6ForgetFlows(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.fromEp(t, "A to R:80", tcp6(addrA6, addrR6, 40000, 80, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	h.fromEp(t, "A to R:81", tcp6(addrA6, addrR6, 40001, 81, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	lab := pinHarness(t, h)
	if err := (&Datapath{}).ForgetFlows(context.Background(), lab, protoTCP, []netip.AddrPort{netip.AddrPortFrom(addrA6, 40000)}); err != nil {
		t.Fatal(err)
	}
	if h.ct6Has(addrA6, addrR6, 40000, 80, protoTCP, 1+dirOut, a.index) {
		t.Error("the flow from A:40000 is still tracked")
	}
	if !h.ct6Has(addrA6, addrR6, 40001, 81, protoTCP, 1+dirOut, a.index) {
		t.Error("the flow from A:40001 was forgotten too")
	}
}
