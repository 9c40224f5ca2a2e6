package ebpf

// The service proxy over IPv6 on the programs (from_ep6, to_ep6,
// from_wire6), with BPF_PROG_TEST_RUN: translation both ways with valid
// checksums, policy on the backend, a local backend and a hairpin,
// rejects, node ports (masquerade, the answer from the wire) and ICMPv6
// errors.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
)

var (
	svcNet6  = netip.MustParsePrefix("fd00:96::/112")
	vip6     = netip.MustParseAddr("fd00:96::10")
	masq6    = netip.MustParseAddr("fd00:0:192::ffff:ffff:ffff:fffe")
	addrR26  = netip.MustParseAddr("fd00:0:193::2")
	nodeAddr = netip.MustParseAddr("fd00:0:193::1") // another host's address (R's)
)

// setServices6 turns IPv6 translation on and writes frontends (as
// setServices; masq: node ports masqueraded to masq6).
func (h *harness) setServices6(fronts ...testFrontend) {
	h.tb.Helper()
	var m [16]byte
	for i := range svcNet6.Bits() {
		m[i/8] |= 0x80 >> (i % 8)
	}
	cfg := cnlabSvc6Config{Flags: uint32(cnlabSvcConfigFlagSVC_ON), Hairpin: ip6(addrGw6), Net: ip6(svcNet6.Addr()),
		Mask: ip6(netip.AddrFrom16(m)), Masq: ip6(masq6)}
	for _, f := range fronts {
		if !svcNet6.Contains(f.vip.Addr()) {
			cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_NODEPORTS)
		}
	}
	h.must(h.objs.CnlabSvc6Config.Put(uint32(0), cfg))
	for i, f := range fronts {
		e := &svcEntry{ID: uint32(i + 1), Backends: f.backends, Count: uint16(len(f.backends)), Drop: f.drop, Affinity: f.affinity,
			Masq: !svcNet6.Contains(f.vip.Addr())}
		k := cnlabSvc6Key{Vip: ip6(f.vip.Addr()), Port: htons(f.vip.Port()), Proto: f.proto}
		h.must(switchFrontend6(&svcMaps{svc6: h.objs.CnlabSvc6, backends6: h.objs.CnlabBackends6}, k, e, nil))
	}
}

// l4Pkt6 is an IPv6 TCP or UDP packet with a correct checksum.
func l4Pkt6(src, dst netip.Addr, proto uint8, sport, dport uint16, flags uint8) []byte {
	seg := udpHdr(sport, dport, []byte("hello"))
	off := 6
	if proto == protoTCP {
		seg, off = tcpHdr(sport, dport, flags), 16
	}
	binary.BigEndian.PutUint16(seg[off:], l4csum6(src, dst, proto, seg))
	return frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: proto}.bytes(seg))
}

func l4csum6(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	s, d := src.As16(), dst.As16()
	ph := append(append([]byte{}, s[:]...), d[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(seg)))
	ph = append(ph, 0, 0, 0, proto)
	return csum(append(ph, seg...))
}

// parseOut6 reads an IPv6 output frame (no extension headers), its
// TCP/UDP/ICMPv6 checksum verified.
func parseOut6(t *testing.T, out []byte) parsed {
	t.Helper()
	ip := out[14:]
	if ip[0]>>4 != 6 {
		t.Fatalf("not IPv6: % x", ip[:8])
	}
	n := int(binary.BigEndian.Uint16(ip[4:]))
	p := parsed{src: netip.AddrFrom16([16]byte(ip[8:24])), dst: netip.AddrFrom16([16]byte(ip[24:40])), proto: ip[6], l4: ip[40 : 40+n]}
	if l4csum6(p.src, p.dst, p.proto, p.l4) != 0 {
		t.Fatalf("%d checksum wrong (%s -> %s)", p.proto, p.src, p.dst)
	}
	if p.proto == protoTCP || p.proto == protoUDP {
		p.sport, p.dport = binary.BigEndian.Uint16(p.l4[0:]), binary.BigEndian.Uint16(p.l4[2:])
	}
	return p
}

// icmp6Error is an ICMPv6 error of type/code from src to dst quoting
// (the first 48 bytes of) an IPv6 packet, with its checksum.
func icmp6Error(src, dst netip.Addr, typ, code uint8, quoted []byte) []byte {
	quoted = quoted[:min(len(quoted), 48)]
	msg := append([]byte{typ, code, 0, 0, 0, 0, 0, 0}, quoted...)
	binary.BigEndian.PutUint16(msg[2:], icmp6Sum(src, dst, msg))
	return frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: protoICMP6}.bytes(msg))
}

// TestService6Translation: a connection from A to an IPv6 frontend is
// judged on its backend and rewritten to it with a valid checksum; the
// backend's reply is rewritten back at A's to_ep6; policy allowing the
// frontend's port but not the backend's denies it, leaving no entry.
func TestService6Translation(t *testing.T) {
	for _, proto := range []uint8{protoTCP, protoUDP} {
		t.Run(fmt.Sprint(proto), func(t *testing.T) {
			h, a, _ := harness6(t, kind.HostRoutingBPF)
			h.setServices6(testFrontend{vip: ap(vip6, 80), proto: proto, backends: []netip.AddrPort{ap(addrR6, 8080)}})
			r := h.fromEp(t, "to the frontend", l4Pkt6(addrA6, vip6, proto, 40000, 80, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
			if got := parseOut6(t, r.out); got.dst != addrR6 || got.dport != 8080 || got.src != addrA6 || got.sport != 40000 {
				t.Errorf("forward rewritten to %s, want %s:40000 -> %s:8080", got, addrA6, addrR6)
			}
			r = h.fromEp(t, "again", l4Pkt6(addrA6, vip6, proto, 40000, 80, tcpACK), actOK, egress(a, cnlabReasonR_ALLOW_CT))
			if got := parseOut6(t, r.out); got.dst != addrR6 || got.dport != 8080 {
				t.Errorf("later packet rewritten to %s", got)
			}
			r = h.toEp(t, "reply", l4Pkt6(addrR6, addrA6, proto, 8080, 40000, tcpSYN|tcpACK), actOK, ingress(a, cnlabReasonR_ALLOW_CT))
			if got := parseOut6(t, r.out); got.src != vip6 || got.sport != 80 || got.dst != addrA6 || got.dport != 40000 {
				t.Errorf("reply rewritten to %s, want %s:80 -> %s:40000", got, vip6, addrA6)
			}
			// An IPv4 frontend's maps are not IPv6's: the IPv4 packet
			// to the same port passes untranslated.
			h.setPolicy(0, a, cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, proto, 80))
			h.fromEp(t, "policy on the frontend's port", l4Pkt6(addrA6, vip6, proto, 41000, 80, tcpSYN), actShot, egress(a, cnlabReasonR_DROP_DEFAULT))
			var v cnlabNat6Val
			if h.objs.CnlabNat6.Lookup(cnlabNat6Key{Saddr: ip6(addrA6), Daddr: ip6(vip6), Sport: htons(41000), Dport: htons(80), Proto: proto}, &v) == nil {
				t.Error("a denied connection left a translation entry")
			}
			h.setPolicy(0, a, cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, proto, 8080))
			h.fromEp(t, "policy on the backend's port", l4Pkt6(addrA6, vip6, proto, 41001, 80, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_POLICY))
		})
	}
}

// TestService6LocalAndHairpin: a local backend is reached by redirect,
// both sides judged, and its reply translated in its own from_ep6; a
// client reaching itself gets the hairpin source (the host's IPv6 bridge
// address). Under either host routing.
func TestService6LocalAndHairpin(t *testing.T) {
	for _, routing := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(routing, func(t *testing.T) {
			h, a, b := harness6(t, routing)
			h.setServices6(testFrontend{vip: ap(vip6, 80), proto: protoTCP, backends: []netip.AddrPort{ap(addrB6, 8080)}},
				testFrontend{vip: ap(vip6, 81), proto: protoTCP, backends: []netip.AddrPort{ap(addrA6, 8080)}})
			if routing == kind.HostRoutingBPF {
				h.setPolicy(0, b, cnlabIsolationISO_INGRESS, allow(policy.Ingress, a.identity, protoTCP, 8080))
				r := h.fromEp(t, "to a local backend", l4Pkt6(addrA6, vip6, protoTCP, 40000, 80, tcpSYN), actRedirect,
					egress(a, cnlabReasonR_ALLOW_UNENFORCED), ingress(b, cnlabReasonR_ALLOW_POLICY))
				if got := parseOut6(t, r.out); got.dst != addrB6 || got.dport != 8080 || got.src != addrA6 {
					t.Errorf("local backend: %s", got)
				}
				h.runAs(b)
				r = h.fromEp(t, "local backend's reply", l4Pkt6(addrB6, addrA6, protoTCP, 8080, 40000, tcpSYN|tcpACK), actRedirect,
					egress(b, cnlabReasonR_ALLOW_CT), ingress(a, cnlabReasonR_ALLOW_CT))
				if got := parseOut6(t, r.out); got.src != vip6 || got.sport != 80 || got.dst != addrA6 {
					t.Errorf("local reply: %s", got)
				}
				h.runAs(a)
			}
			r := h.fromEp(t, "hairpin", l4Pkt6(addrA6, vip6, protoTCP, 40002, 81, tcpSYN), actRedirect,
				egress(a, cnlabReasonR_ALLOW_UNENFORCED), ingress(a, cnlabReasonR_ALLOW_UNENFORCED))
			if got := parseOut6(t, r.out); got.src != addrGw6 || got.dst != addrA6 || got.dport != 8080 || got.sport != 40002 {
				t.Errorf("hairpin: %s, want %s:40002 -> %s:8080", got, addrGw6, addrA6)
			}
			r = h.fromEp(t, "hairpin reply", l4Pkt6(addrA6, addrGw6, protoTCP, 8080, 40002, tcpSYN|tcpACK), actRedirect,
				egress(a, cnlabReasonR_ALLOW_CT), ingress(a, cnlabReasonR_ALLOW_CT))
			if got := parseOut6(t, r.out); got.src != vip6 || got.sport != 81 || got.dst != addrA6 || got.dport != 40002 {
				t.Errorf("hairpin reply: %s, want %s:81 -> %s:40002", got, vip6, addrA6)
			}
		})
	}
}

// TestService6NoBackend: a frontend without backends answers with an
// ICMPv6 port unreachable from its address quoting the packet; one with
// backends on other hosts only (internalTrafficPolicy Local) drops.
func TestService6NoBackend(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.setServices6(testFrontend{vip: ap(vip6, 80), proto: protoTCP}, testFrontend{vip: ap(vip6, 81), proto: protoUDP, drop: true})
	syn := l4Pkt6(addrA6, vip6, protoTCP, 40000, 80, tcpSYN)
	r := h.fromEp(t, "no backend", syn, actRedirect, egress(a, cnlabReasonR_DROP_SVC_REJECT))
	got := parseOut6(t, r.out)
	if got.proto != protoICMP6 || got.src != vip6 || got.dst != addrA6 || got.l4[0] != 1 || got.l4[1] != 4 {
		t.Fatalf("reject: %s type %d code %d, want ICMPv6 1/4 %s -> %s", got, got.l4[0], got.l4[1], vip6, addrA6)
	}
	if q := got.l4[8:]; string(q) != string(syn[14:14+48]) {
		t.Errorf("quoted % x, want the SYN's header and 8 bytes", q)
	}
	if [6]byte(r.out[0:6]) != a.mac || [6]byte(r.out[6:12]) != a.lxc {
		t.Errorf("reject addressed %x from %x", r.out[0:6], r.out[6:12])
	}
	h.fromEp(t, "no local backend", l4Pkt6(addrA6, vip6, protoUDP, 40000, 81, 0), actShot, egress(a, cnlabReasonR_DROP_SVC_NO_LOCAL))
	r = h.fromEp(t, "other port", l4Pkt6(addrA6, vip6, protoTCP, 40000, 82, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut6(t, r.out); got.dst != vip6 || got.dport != 82 {
		t.Errorf("not a frontend, rewritten: %s", got)
	}
}

// TestService6NodePort: an IPv6 node port under externalTrafficPolicy
// Cluster is masqueraded to the host's IPv6 masquerade address, a second
// client on the same source port gets another port, and the backend's
// answers from the wire are translated back and handed to their clients;
// other IPv6 traffic on the wire passes untouched.
func TestService6NodePort(t *testing.T) {
	h, a, b := harness6(t, kind.HostRoutingBPF)
	h.setServices6(testFrontend{vip: ap(nodeAddr, 30080), proto: protoTCP, backends: []netip.AddrPort{ap(addrR26, 8080)}})
	r := h.fromEp(t, "A to the node port", l4Pkt6(addrA6, nodeAddr, protoTCP, 40000, 30080, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	got := parseOut6(t, r.out)
	if got.src != masq6 || got.sport != 40000 || got.dst != addrR26 || got.dport != 8080 {
		t.Fatalf("A's connection: %s, want %s:40000 -> %s:8080", got, masq6, addrR26)
	}
	h.runAs(b)
	r = h.fromEp(t, "B on the same port", l4Pkt6(addrB6, nodeAddr, protoTCP, 40000, 30080, tcpSYN), actOK, egress(b, cnlabReasonR_ALLOW_UNENFORCED))
	gotB := parseOut6(t, r.out)
	if gotB.src != masq6 || gotB.sport == 40000 {
		t.Fatalf("B's connection: %s, want %s on another port than A's", gotB, masq6)
	}
	r = h.expect(t, "answer to A", h.objs.CnlabFromWire, l4Pkt6(addrR26, masq6, protoTCP, 8080, 40000, tcpSYN|tcpACK), actRedirect, ingress(a, cnlabReasonR_ALLOW_CT))
	if got := parseOut6(t, r.out); got.src != nodeAddr || got.sport != 30080 || got.dst != addrA6 || got.dport != 40000 {
		t.Errorf("answer to A: %s, want %s:30080 -> %s:40000", got, nodeAddr, addrA6)
	}
	if [6]byte(r.out[0:6]) != a.mac {
		t.Errorf("answer to A addressed to %x", r.out[0:6])
	}
	r = h.expect(t, "answer to B", h.objs.CnlabFromWire, l4Pkt6(addrR26, masq6, protoTCP, 8080, gotB.sport, tcpSYN|tcpACK), actRedirect, ingress(b, cnlabReasonR_ALLOW_CT))
	if got := parseOut6(t, r.out); got.dst != addrB6 || got.dport != 40000 {
		t.Errorf("answer to B: %s, want -> %s:40000", got, addrB6)
	}
	// An ICMPv6 error about A's masqueraded flow, to the masquerade
	// address: for A, quoting what A sent (to the node port).
	sent := l4Pkt6(masq6, addrR26, protoTCP, 40000, 8080, tcpACK)[14:]
	r = h.expect(t, "error about A's flow", h.objs.CnlabFromWire, icmp6Error(addrR26, masq6, 1, 4, sent), actRedirect, ingress(a, cnlabReasonR_ALLOW_RELATED))
	got = parseOut6(t, r.out)
	q := got.l4[8:]
	if got.dst != addrA6 || netip.AddrFrom16([16]byte(q[8:24])) != addrA6 || netip.AddrFrom16([16]byte(q[24:40])) != nodeAddr ||
		binary.BigEndian.Uint16(q[40:]) != 40000 || binary.BigEndian.Uint16(q[42:]) != 30080 {
		t.Errorf("error to %s quoting % x, want to %s quoting %s:40000 -> %s:30080", got.dst, q[8:44], addrA6, addrA6, nodeAddr)
	}
	other := l4Pkt6(addrR26, addrA6, protoTCP, 8080, 40000, tcpSYN|tcpACK)
	r = h.expect(t, "other traffic", h.objs.CnlabFromWire, other, actOK)
	if string(r.out) != string(other) {
		t.Error("cnlab_from_wire changed an IPv6 packet that is no node port's answer")
	}
	h.runAs(a)
	r = h.fromEp(t, "not a node port", l4Pkt6(addrA6, nodeAddr, protoTCP, 40001, 8080, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut6(t, r.out); got.dst != nodeAddr {
		t.Errorf("port 8080 of a host translated: %s", got)
	}
}

// TestService6ICMPError: a port unreachable a backend sends about a
// translated UDP flow reaches the client quoting what the client sent
// and from the Service's address, with a valid ICMPv6 checksum; an error
// about an untranslated flow is left alone.
func TestService6ICMPError(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.setServices6(testFrontend{vip: ap(vip6, 53), proto: protoUDP, backends: []netip.AddrPort{ap(addrR6, 5353)}})
	r := h.fromEp(t, "datagram", l4Pkt6(addrA6, vip6, protoUDP, 40000, 53, 0), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	sent := r.out[14:]
	r = h.toEp(t, "port unreachable", icmp6Error(addrR6, addrA6, 1, 4, sent), actOK, ingress(a, cnlabReasonR_ALLOW_RELATED))
	got := parseOut6(t, r.out)
	if got.src != vip6 || got.dst != addrA6 {
		t.Errorf("error from %s to %s, want from %s", got.src, got.dst, vip6)
	}
	q := got.l4[8:]
	if dst, dport := netip.AddrFrom16([16]byte(q[24:40])), binary.BigEndian.Uint16(q[42:]); dst != vip6 || dport != 53 {
		t.Errorf("quotes a datagram to %s:%d, want %s:53", dst, dport, vip6)
	}
	direct := l4Pkt6(addrA6, addrR6, protoUDP, 40001, 5353, 0)
	h.fromEp(t, "direct datagram", direct, actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	other := icmp6Error(addrR6, addrA6, 1, 4, direct[14:])
	r = h.toEp(t, "its port unreachable", other, actOK, ingress(a, cnlabReasonR_ALLOW_RELATED))
	if string(r.out) != string(other) {
		t.Error("an error about an untranslated flow was rewritten")
	}
}

// TestService6Affinity: with ClientIP affinity a client keeps its backend
// over new connections (two backends, twenty connections).
func TestService6Affinity(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.setServices6(testFrontend{vip: ap(vip6, 80), proto: protoTCP, affinity: 60,
		backends: []netip.AddrPort{ap(addrR6, 8080), ap(addrR26, 8080)}})
	var first netip.Addr
	for i := range 20 {
		r := h.fromEp(t, "connection", l4Pkt6(addrA6, vip6, protoTCP, uint16(40000+i), 80, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
		got := parseOut6(t, r.out)
		if i == 0 {
			first = got.dst
		} else if got.dst != first {
			t.Fatalf("connection %d went to %s, the first to %s", i, got.dst, first)
		}
	}
}

// TestService6FromWireVerdicts: at cnlab_from_wire, an ICMPv6 error a
// router (world or CIDR identity, not the backend) sends about a
// masqueraded node-port flow is translated and handed to the flow's
// client, as IPv4's; an answer that reaches policy as a new flow (its
// conntrack entry gone) is judged at the client's ingress: dropped and
// counted (and reported) when denied, translated and delivered when
// allowed.
func TestService6FromWireVerdicts(t *testing.T) {
	h, a, _ := harness6(t, kind.HostRoutingBPF)
	h.setServices6(testFrontend{vip: ap(nodeAddr, 30080), proto: protoTCP, backends: []netip.AddrPort{ap(addrR26, 8080)}})
	r := h.fromEp(t, "A to the node port", l4Pkt6(addrA6, nodeAddr, protoTCP, 40000, 30080, tcpSYN), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	if got := parseOut6(t, r.out); got.src != masq6 || got.sport != 40000 || got.dst != addrR26 {
		t.Fatalf("A's connection: %s, want %s:40000 -> %s:8080", got, masq6, addrR26)
	}
	sent := r.out[14:]
	for _, c := range []struct {
		what      string
		from      netip.Addr
		typ, code uint8
	}{
		{"time exceeded from a world router", addrX6, 3, 0},
		{"packet too big from a world router", addrX6, 2, 0},
		{"unreachable from a router in a CIDR", addrW6, 1, 0},
	} {
		r = h.expect(t, c.what, h.objs.CnlabFromWire, icmp6Error(c.from, masq6, c.typ, c.code, sent), actRedirect, ingress(a, cnlabReasonR_ALLOW_RELATED))
		if r.ret != actRedirect {
			continue
		}
		got := parseOut6(t, r.out)
		q := got.l4[8:]
		if got.src != c.from || got.dst != addrA6 || got.l4[0] != c.typ ||
			netip.AddrFrom16([16]byte(q[8:24])) != addrA6 || netip.AddrFrom16([16]byte(q[24:40])) != nodeAddr ||
			binary.BigEndian.Uint16(q[40:]) != 40000 || binary.BigEndian.Uint16(q[42:]) != 30080 {
			t.Errorf("%s: %s -> %s quoting % x, want %s -> %s quoting %s:40000 -> %s:30080", c.what, got.src, got.dst, q[8:44],
				c.from, addrA6, addrA6, nodeAddr)
		}
		if [6]byte(r.out[0:6]) != a.mac {
			t.Errorf("%s: addressed to %x", c.what, r.out[0:6])
		}
	}
	// The answer's conntrack entry at A goes (as when evicted), the
	// translation stays: a TCP SYN-ACK is then invalid, a UDP
	// one a new flow to A, judged by A's ingress policy. Each drop is
	// counted and reported.
	h.must(h.objs.CnlabCt6.Delete(cnlabCt6Key{Saddr: ip6(addrA6), Daddr: ip6(addrR26), Sport: 40000, Dport: 8080, Proto: protoTCP,
		Scope: 1 + dirOut, Ep: uint16(a.index)}))
	h.lease(MonitorDrops)
	h.expect(t, "a SYN-ACK without its entry", h.objs.CnlabFromWire, l4Pkt6(addrR26, masq6, protoTCP, 8080, 40000, tcpSYN|tcpACK), actShot,
		ingress(a, cnlabReasonR_DROP_INVALID))
	h.setServices6(testFrontend{vip: ap(nodeAddr, 30080), proto: protoTCP, backends: []netip.AddrPort{ap(addrR26, 8080)}},
		testFrontend{vip: ap(nodeAddr, 30053), proto: protoUDP, backends: []netip.AddrPort{ap(addrR26, 5353)}})
	r = h.fromEp(t, "A to the UDP node port", l4Pkt6(addrA6, nodeAddr, protoUDP, 40001, 30053, 0), actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
	out := parseOut6(t, r.out)
	if out.src != masq6 || out.dst != addrR26 || out.dport != 5353 {
		t.Fatalf("A's datagram: %s, want from %s to %s:5353", out, masq6, addrR26)
	}
	h.must(h.objs.CnlabCt6.Delete(cnlabCt6Key{Saddr: ip6(addrA6), Daddr: ip6(addrR26), Sport: 40001, Dport: 5353, Proto: protoUDP,
		Scope: 1 + dirOut, Ep: uint16(a.index)}))
	answer := l4Pkt6(addrR26, masq6, protoUDP, 5353, out.sport, 0)
	h.setPolicy(0, a, cnlabIsolationISO_INGRESS)
	h.expect(t, "an answer A's policy denies", h.objs.CnlabFromWire, answer, actShot, ingress(a, cnlabReasonR_DROP_DEFAULT))
	if got := eventReasons(h.drain(t)); fmt.Sprint(got) != "[invalid:8080 policy-default-deny:5353]" {
		t.Errorf("events %v, want the two drops'", got)
	}
	h.setPolicy(0, a, 0)
	r = h.expect(t, "an answer A's policy allows", h.objs.CnlabFromWire, answer, actRedirect, ingress(a, cnlabReasonR_ALLOW_UNENFORCED))
	if r.ret == actRedirect {
		if got := parseOut6(t, r.out); got.src != nodeAddr || got.sport != 30053 || got.dst != addrA6 || got.dport != 40001 {
			t.Errorf("answer: %s, want %s:30053 -> %s:40001", got, nodeAddr, addrA6)
		}
	}
}

// frag6 is a Fragment header: next header nxt, byte offset off (a
// multiple of 8), more fragments, id.
func frag6(nxt uint8, off uint16, more bool, id uint32) []byte {
	b := []byte{nxt, 0, 0, 0, 0, 0, 0, 0}
	v := off
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[2:], v)
	binary.BigEndian.PutUint32(b[4:], id)
	return b
}

// fragUDP6 is a UDP datagram (its checksum over the whole) from src to
// dst in two fragments with id, the first carrying pre (extension headers
// after the Fragment header: destination options) and the UDP header and
// 16 bytes, the later the rest. It returns the fragments and the offset
// of the UDP header in the first.
func fragUDP6(src, dst netip.Addr, sport, dport uint16, id uint32, pre []byte) (first, later []byte, l4 int) {
	seg := udpHdr(sport, dport, make([]byte, 32))
	binary.BigEndian.PutUint16(seg[6:], l4csum6(src, dst, protoUDP, seg))
	part := append(append([]byte{}, pre...), seg[:24]...)
	nxt := uint8(protoUDP)
	if len(pre) > 0 {
		nxt = nhDest
	}
	off := uint16(len(part))
	first = frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: nhFrag, ext: frag6(nxt, 0, true, id)}.bytes(part))
	later = frame(ethIPv6, ip6Hdr{src: src, dst: dst, nxt: nhFrag, ext: frag6(nxt, off, false, id)}.bytes(seg[24:]))
	return first, later, 14 + 40 + 8 + len(pre)
}

// reassembled checks two output fragments' addresses, and returns their
// UDP datagram with its checksum verified under them.
func reassembled(t *testing.T, first, later []byte, l4 int, src, dst netip.Addr) []byte {
	t.Helper()
	for i, f := range [][]byte{first, later} {
		if s, d := netip.AddrFrom16([16]byte(f[22:38])), netip.AddrFrom16([16]byte(f[38:54])); s != src || d != dst {
			t.Errorf("fragment %d: %s -> %s, want %s -> %s", i, s, d, src, dst)
		}
	}
	end := func(f []byte) int { return 14 + 40 + int(binary.BigEndian.Uint16(f[18:])) }
	seg := append(append([]byte{}, first[l4:end(first)]...), later[14+48:end(later)]...)
	if l4csum6(src, dst, protoUDP, seg) != 0 {
		t.Errorf("UDP checksum wrong over the reassembled datagram %s -> %s", src, dst)
	}
	return seg
}

// TestService6Fragments: a UDP datagram to an IPv6 frontend in
// fragments, with or without destination options after the Fragment
// header: every fragment goes to the backend (the later ones by the first
// one's cnlab_svc_frag6 entry, keyed on the Fragment header's next
// header, as the policy's), and the reply's fragments come back from the
// frontend.
func TestService6Fragments(t *testing.T) {
	dopt := []byte{protoUDP, 0, 1, 4, 0, 0, 0, 0} // destination options, a PadN option
	for i, pre := range [][]byte{nil, dopt} {
		name := "plain"
		if pre != nil {
			name = "destination options"
		}
		t.Run(name, func(t *testing.T) {
			h, a, _ := harness6(t, kind.HostRoutingBPF)
			h.setServices6(testFrontend{vip: ap(vip6, 53), proto: protoUDP, backends: []netip.AddrPort{ap(addrR6, 5353)}})
			sport := uint16(40000 + i)
			first, later, l4 := fragUDP6(addrA6, vip6, sport, 53, 77, pre)
			r1 := h.fromEp(t, "first fragment", first, actOK, egress(a, cnlabReasonR_ALLOW_UNENFORCED))
			r2 := h.fromEp(t, "later fragment", later, actOK, egress(a, cnlabReasonR_ALLOW_FRAG))
			seg := reassembled(t, r1.out, r2.out, l4, addrA6, addrR6)
			if sp, dp := binary.BigEndian.Uint16(seg[0:]), binary.BigEndian.Uint16(seg[2:]); sp != sport || dp != 5353 {
				t.Errorf("datagram's ports %d -> %d, want %d -> 5353", sp, dp, sport)
			}
			first, later, l4 = fragUDP6(addrR6, addrA6, 5353, sport, 78, pre)
			r1 = h.toEp(t, "reply's first fragment", first, actOK, ingress(a, cnlabReasonR_ALLOW_CT))
			r2 = h.toEp(t, "reply's later fragment", later, actOK, ingress(a, cnlabReasonR_ALLOW_FRAG))
			seg = reassembled(t, r1.out, r2.out, l4, vip6, addrA6)
			if sp, dp := binary.BigEndian.Uint16(seg[0:]), binary.BigEndian.Uint16(seg[2:]); sp != 53 || dp != sport {
				t.Errorf("reply's ports %d -> %d, want 53 -> %d", sp, dp, sport)
			}
		})
	}
}
