package ebpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/policy"
)

// The service world of the program tests: frontends in 10.96.0.0/16, the
// host's bridge address as the hairpin source.
var (
	svcNet  = netip.MustParsePrefix("10.96.0.0/16")
	vip     = netip.MustParseAddr("10.96.0.10")
	hairpin = netip.MustParseAddr("10.0.0.254")
)

// setServices turns translation on and writes frontends: each VIP:port
// with its backends (none: rejected; drop: dropped), half 0.
func (h *harness) setServices(fronts ...testFrontend) {
	h.tb.Helper()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], ^uint32(0)<<(32-svcNet.Bits()))
	h.must(h.objs.CnlabSvcConfig.Put(uint32(0), cnlabSvcConfig{Flags: uint32(cnlabSvcConfigFlagSVC_ON),
		Hairpin: ip4(hairpin), Net: ip4(svcNet.Addr()), Mask: ip4(netip.AddrFrom4(b))}))
	for i, f := range fronts {
		e := &svcEntry{ID: uint32(i + 1), Backends: f.backends, Count: uint16(len(f.backends)), Drop: f.drop, Affinity: f.affinity}
		h.must(writeBackends(&svcMaps{backends: h.objs.CnlabBackends}, e))
		k := cnlabSvcKey{Vip: ip4(f.vip.Addr()), Port: htons(f.vip.Port()), Proto: f.proto}
		h.must(h.objs.CnlabSvc.Put(k, svcValue(e)))
	}
}

type testFrontend struct {
	vip      netip.AddrPort
	proto    uint8
	backends []netip.AddrPort
	drop     bool
	affinity uint32
}

// l4Pkt is a TCP or UDP packet with a correct L4 checksum (zero for UDP
// when zeroUDP), so that a rewrite's checksum update can be checked.
func l4Pkt(src, dst netip.Addr, proto uint8, sport, dport uint16, flags uint8, zeroUDP bool) []byte {
	var seg []byte
	if proto == protoTCP {
		seg = tcpHdr(sport, dport, flags)
	} else {
		seg = udpHdr(sport, dport, []byte("hello"))
	}
	if proto == protoTCP || !zeroUDP {
		off := 16
		if proto == protoUDP {
			off = 6
		}
		binary.BigEndian.PutUint16(seg[off:], l4csum(src, dst, proto, seg))
	}
	return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: proto, id: 1}.bytes(seg))
}

func l4csum(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	s, d := src.As4(), dst.As4()
	ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, proto, byte(len(seg)>>8), byte(len(seg)))
	return csum(append(ph, seg...))
}

// parsed is what a test reads back from an output frame, checksums
// verified.
type parsed struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	l4           []byte
}

func parseOut(t *testing.T, out []byte) parsed {
	t.Helper()
	ip := out[14:]
	hl := int(ip[0]&0xf) * 4
	if csum(ip[:hl]) != 0 {
		t.Fatalf("IPv4 header checksum wrong: % x", ip[:hl])
	}
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	p := parsed{src: netip.AddrFrom4([4]byte(ip[12:16])), dst: netip.AddrFrom4([4]byte(ip[16:20])), proto: ip[9], l4: ip[hl:tot]}
	switch p.proto {
	case protoTCP, protoUDP:
		p.sport, p.dport = binary.BigEndian.Uint16(p.l4[0:]), binary.BigEndian.Uint16(p.l4[2:])
		zero := p.proto == protoUDP && binary.BigEndian.Uint16(p.l4[6:]) == 0
		if !zero && l4csum(p.src, p.dst, p.proto, p.l4) != 0 {
			t.Fatalf("%d checksum wrong after rewrite", p.proto)
		}
	case protoICMP:
		if csum(p.l4) != 0 {
			t.Fatalf("ICMP checksum wrong: % x", p.l4)
		}
	}
	return p
}

func (p parsed) String() string {
	return fmt.Sprintf("%s:%d -> %s:%d/%d", p.src, p.sport, p.dst, p.dport, p.proto)
}

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// TestServiceTranslation: a connection from A to a frontend is judged on
// its backend and rewritten to it with valid checksums; the backend's
// reply is rewritten back at A's cnlab_to_ep; policy allowing the
// frontend's port but not the backend's denies it, leaving no entry.
func TestServiceTranslation(t *testing.T) {
	for _, proto := range []uint8{protoTCP, protoUDP} {
		t.Run(fmt.Sprint(proto), func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			h.setServices(testFrontend{vip: ap(vip, 80), proto: proto, backends: []netip.AddrPort{ap(addrR, 8080)}})
			for _, zero := range []bool{false, true} {
				if zero && proto == protoTCP {
					continue
				}
				sport := uint16(40000)
				if zero {
					sport = 40001
				}
				r := h.fromEp(t, "to the frontend", l4Pkt(epA.ip, vip, proto, sport, 80, tcpSYN, zero), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
				got := parseOut(t, r.out)
				if got.dst != addrR || got.dport != 8080 || got.src != epA.ip || got.sport != sport {
					t.Errorf("forward rewritten to %s, want %s:%d -> %s:8080", got, epA.ip, sport, addrR)
				}
				if zero && binary.BigEndian.Uint16(got.l4[6:]) != 0 {
					t.Error("a UDP checksum of 0 was filled in")
				}
				// Later packets follow the flow's entry.
				r = h.fromEp(t, "again", l4Pkt(epA.ip, vip, proto, sport, 80, tcpACK, zero), actOK, egress(epA, cnlabReasonR_ALLOW_CT))
				if got := parseOut(t, r.out); got.dst != addrR || got.dport != 8080 {
					t.Errorf("later packet rewritten to %s", got)
				}
				r = h.toEp(t, "reply", l4Pkt(addrR, epA.ip, proto, 8080, sport, tcpSYN|tcpACK, zero), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
				if got := parseOut(t, r.out); got.src != vip || got.sport != 80 || got.dst != epA.ip || got.dport != sport {
					t.Errorf("reply rewritten to %s, want %s:80 -> %s:%d", got, vip, epA.ip, sport)
				}
			}
			// Judged on the backend: an egress allowing port 80 to R
			// does not allow the frontend that maps 80 to 8080.
			h.setPolicy(0, epA, cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, proto, 80))
			h.fromEp(t, "policy on the frontend's port", l4Pkt(epA.ip, vip, proto, 41000, 80, tcpSYN, false), actShot, egress(epA, cnlabReasonR_DROP_DEFAULT))
			var v cnlabNatVal
			if h.objs.CnlabNat.Lookup(cnlabNatKey{Saddr: ip4(epA.ip), Daddr: ip4(vip), Sport: htons(41000), Dport: htons(80), Proto: proto}, &v) == nil {
				t.Error("a denied connection left a translation entry")
			}
			h.setPolicy(0, epA, cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, proto, 8080))
			h.fromEp(t, "policy on the backend's port", l4Pkt(epA.ip, vip, proto, 41001, 80, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
		})
	}
}

// TestServiceLocalAndHairpin: a backend on the same host is reached by
// redirect with both sides judged; a client reaching itself gets the
// hairpin source, and its own reply is translated back in cnlab_from_ep.
func TestServiceLocalAndHairpin(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setServices(testFrontend{vip: ap(vip, 80), proto: protoTCP, backends: []netip.AddrPort{ap(epB.ip, 8080)}},
		testFrontend{vip: ap(vip, 81), proto: protoTCP, backends: []netip.AddrPort{ap(epA.ip, 8080)}})
	h.setPolicy(0, epB, cnlabIsolationISO_INGRESS, allow(policy.Ingress, epA.identity, protoTCP, 8080))
	r := h.fromEp(t, "to a local backend", l4Pkt(epA.ip, vip, protoTCP, 40000, 80, tcpSYN, false), actRedirect,
		egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_POLICY))
	if got := parseOut(t, r.out); got.dst != epB.ip || got.dport != 8080 || got.src != epA.ip {
		t.Errorf("local backend: %s", got)
	}
	// B's reply, in B's cnlab_from_ep: translated there, straight to A.
	h.runAs(epB)
	r = h.fromEp(t, "local backend's reply", l4Pkt(epB.ip, epA.ip, protoTCP, 8080, 40000, tcpSYN|tcpACK, false), actRedirect,
		egress(epB, cnlabReasonR_ALLOW_CT), ingress(epA, cnlabReasonR_ALLOW_CT))
	if got := parseOut(t, r.out); got.src != vip || got.sport != 80 || got.dst != epA.ip {
		t.Errorf("local reply: %s", got)
	}
	h.runAs(epA)
	r = h.fromEp(t, "hairpin", l4Pkt(epA.ip, vip, protoTCP, 40002, 81, tcpSYN, false), actRedirect,
		egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut(t, r.out); got.src != hairpin || got.dst != epA.ip || got.dport != 8080 || got.sport != 40002 {
		t.Errorf("hairpin: %s, want %s:40002 -> %s:8080", got, hairpin, epA.ip)
	}
	r = h.fromEp(t, "hairpin reply", l4Pkt(epA.ip, hairpin, protoTCP, 8080, 40002, tcpSYN|tcpACK, false), actRedirect,
		egress(epA, cnlabReasonR_ALLOW_CT), ingress(epA, cnlabReasonR_ALLOW_CT))
	if got := parseOut(t, r.out); got.src != vip || got.sport != 81 || got.dst != epA.ip || got.dport != 40002 {
		t.Errorf("hairpin reply: %s, want %s:81 -> %s:40002", got, vip, epA.ip)
	}
}

// TestServiceNoBackend: a frontend without backends answers a new
// connection with an ICMP port unreachable from its address, quoting the
// packet, sent back to the client; one whose backends are all on other
// hosts (internalTrafficPolicy Local) drops it.
func TestServiceNoBackend(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setServices(testFrontend{vip: ap(vip, 80), proto: protoTCP},
		testFrontend{vip: ap(vip, 81), proto: protoUDP, drop: true})
	syn := l4Pkt(epA.ip, vip, protoTCP, 40000, 80, tcpSYN, false)
	r := h.fromEp(t, "no backend", syn, actRedirect, egress(epA, cnlabReasonR_DROP_SVC_REJECT))
	got := parseOut(t, r.out)
	if got.proto != protoICMP || got.src != vip || got.dst != epA.ip || got.l4[0] != 3 || got.l4[1] != 3 {
		t.Fatalf("reject: %s type %d code %d, want ICMP 3/3 %s -> %s", got, got.l4[0], got.l4[1], vip, epA.ip)
	}
	if q := got.l4[8:]; string(q) != string(syn[14:14+28]) {
		t.Errorf("quoted % x, want the SYN's header and 8 bytes % x", q, syn[14:14+28])
	}
	if [6]byte(r.out[0:6]) != epA.mac || [6]byte(r.out[6:12]) != epA.lxc {
		t.Errorf("reject addressed %x from %x", r.out[0:6], r.out[6:12])
	}
	h.fromEp(t, "no local backend", l4Pkt(epA.ip, vip, protoUDP, 40000, 81, 0, false), actShot, egress(epA, cnlabReasonR_DROP_SVC_NO_LOCAL))
	// A port of the address that is no frontend is left alone.
	r = h.fromEp(t, "other port", l4Pkt(epA.ip, vip, protoTCP, 40000, 82, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut(t, r.out); got.dst != vip || got.dport != 82 {
		t.Errorf("not a frontend, rewritten: %s", got)
	}
}

// TestServiceReconnect: a new SYN on a tuple whose connection was reset
// picks a backend again; one on a live connection keeps its backend.
func TestServiceReconnect(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setServices(testFrontend{vip: ap(vip, 80), proto: protoTCP, backends: []netip.AddrPort{ap(addrR, 8080)}})
	h.fromEp(t, "SYN", l4Pkt(epA.ip, vip, protoTCP, 40000, 80, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	// The frontend now balances to R2 only.
	h.setServices(testFrontend{vip: ap(vip, 80), proto: protoTCP, backends: []netip.AddrPort{ap(addrR2, 8080)}})
	r := h.fromEp(t, "SYN again", l4Pkt(epA.ip, vip, protoTCP, 40000, 80, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut(t, r.out); got.dst != addrR {
		t.Errorf("a retransmitted SYN moved to %s", got)
	}
	h.fromEp(t, "RST", l4Pkt(epA.ip, vip, protoTCP, 40000, 80, tcpRST, false), actOK, egress(epA, cnlabReasonR_ALLOW_CT))
	r = h.fromEp(t, "SYN after RST", l4Pkt(epA.ip, vip, protoTCP, 40000, 80, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut(t, r.out); got.dst != addrR2 {
		t.Errorf("a new connection on a reset tuple went to %s, want %s", got, addrR2)
	}
}

// TestServiceNodePort: a node port under externalTrafficPolicy Cluster is
// masqueraded to the host's masquerade address, a second client on the
// same source port gets another one, and the backend's answer arriving
// from the wire is translated back and handed to its client.
func TestServiceNodePort(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	node := netip.MustParseAddr("10.0.1.254") // another host's address
	masq := netip.MustParseAddr("10.0.0.250")
	h.setServices(testFrontend{vip: ap(node, 30080), proto: protoTCP, backends: []netip.AddrPort{ap(addrR, 8080)}})
	var c cnlabSvcConfig
	h.must(h.objs.CnlabSvcConfig.Lookup(uint32(0), &c))
	c.Flags |= uint32(cnlabSvcConfigFlagSVC_NODEPORTS)
	c.Masq = ip4(masq)
	h.must(h.objs.CnlabSvcConfig.Put(uint32(0), c))
	var v cnlabSvcVal
	k := cnlabSvcKey{Vip: ip4(node), Port: htons(30080), Proto: protoTCP}
	h.must(h.objs.CnlabSvc.Lookup(k, &v))
	v.Flags |= uint8(cnlabSvcFlagSVC_MASQ)
	h.must(h.objs.CnlabSvc.Put(k, v))

	r := h.fromEp(t, "A to the node port", l4Pkt(epA.ip, node, protoTCP, 40000, 30080, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	got := parseOut(t, r.out)
	if got.src != masq || got.sport != 40000 || got.dst != addrR || got.dport != 8080 {
		t.Fatalf("A's connection: %s, want %s:40000 -> %s:8080", got, masq, addrR)
	}
	h.runAs(epB)
	r = h.fromEp(t, "B on the same port", l4Pkt(epB.ip, node, protoTCP, 40000, 30080, tcpSYN, false), actOK, egress(epB, cnlabReasonR_ALLOW_UNENFORCED))
	gotB := parseOut(t, r.out)
	if gotB.src != masq || gotB.sport == 40000 {
		t.Fatalf("B's connection: %s, want %s on another port than A's", gotB, masq)
	}
	// The answers come back on the wire, to the masquerade address.
	r = h.expect(t, "answer to A", h.objs.CnlabFromWire, l4Pkt(addrR, masq, protoTCP, 8080, 40000, tcpSYN|tcpACK, false), actRedirect, ingress(epA, cnlabReasonR_ALLOW_CT))
	if got := parseOut(t, r.out); got.src != node || got.sport != 30080 || got.dst != epA.ip || got.dport != 40000 {
		t.Errorf("answer to A: %s, want %s:30080 -> %s:40000", got, node, epA.ip)
	}
	if [6]byte(r.out[0:6]) != epA.mac {
		t.Errorf("answer to A addressed to %x", r.out[0:6])
	}
	r = h.expect(t, "answer to B", h.objs.CnlabFromWire, l4Pkt(addrR, masq, protoTCP, 8080, gotB.sport, tcpSYN|tcpACK, false), actRedirect, ingress(epB, cnlabReasonR_ALLOW_CT))
	if got := parseOut(t, r.out); got.dst != epB.ip || got.dport != 40000 {
		t.Errorf("answer to B: %s, want -> %s:40000", got, epB.ip)
	}
	// Anything else on the wire passes untouched.
	other := l4Pkt(addrR, epA.ip, protoTCP, 8080, 40000, tcpSYN|tcpACK, false)
	r = h.expect(t, "other traffic", h.objs.CnlabFromWire, other, actOK)
	if string(r.out) != string(other) {
		t.Error("cnlab_from_wire changed a packet that is no node port's answer")
	}
	// A port outside the node port range of a host address is no frontend.
	h.runAs(epA)
	r = h.fromEp(t, "not a node port", l4Pkt(epA.ip, node, protoTCP, 40001, 8080, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut(t, r.out); got.dst != node {
		t.Errorf("port 8080 of a host translated: %s", got)
	}
}

// TestServiceICMPError: a port unreachable a backend sends about a
// translated UDP flow reaches the client quoting what the client sent (to
// the Service's address and port) and from the Service's address, with
// valid checksums, so that its socket sees it.
func TestServiceICMPError(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setServices(testFrontend{vip: ap(vip, 53), proto: protoUDP, backends: []netip.AddrPort{ap(addrR, 5353)}})
	r := h.fromEp(t, "datagram", l4Pkt(epA.ip, vip, protoUDP, 40000, 53, 0, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	sent := r.out[14:] // as it left: to R:5353
	msg := frame(ethIPv4, ipHdr{src: addrR, dst: epA.ip, proto: protoICMP, id: 7}.bytes(icmpError(3, 3, sent, 8)))
	r = h.toEp(t, "port unreachable", msg, actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
	got := parseOut(t, r.out) // outer and ICMP checksums
	if got.src != vip || got.dst != epA.ip {
		t.Errorf("error from %s to %s, want from %s", got.src, got.dst, vip)
	}
	inner := got.l4[8:]
	if csum(inner[:20]) != 0 {
		t.Errorf("quoted IPv4 header checksum wrong: % x", inner[:20])
	}
	if dst, dport := netip.AddrFrom4([4]byte(inner[16:20])), binary.BigEndian.Uint16(inner[22:]); dst != vip || dport != 53 {
		t.Errorf("quotes a datagram to %s:%d, want %s:53", dst, dport, vip)
	}
	// An error about a flow that was not translated is left alone.
	other := frame(ethIPv4, ipHdr{src: addrR, dst: epA.ip, proto: protoICMP, id: 8}.bytes(icmpError(3, 3, l4Pkt(epA.ip, addrR, protoUDP, 40001, 5353, 0, false)[14:], 8)))
	h.fromEp(t, "direct datagram", l4Pkt(epA.ip, addrR, protoUDP, 40001, 5353, 0, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	r = h.toEp(t, "its port unreachable", other, actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
	if string(r.out) != string(other) {
		t.Error("an error about an untranslated flow was rewritten")
	}
}
