package ebpf

// Unit tests of cnlab_from_ep and cnlab_to_ep with BPF_PROG_TEST_RUN: each
// packet is built here, run through a program loaded with unpinned maps,
// and both the tc action and the per-endpoint counter (the verdict reason)
// are checked. A runs on the test run's interface; B is a second endpoint
// of the same host; R and R2 are endpoints of another host; W and the
// router are outside the lab.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// TestSpecUnpinned checks what the harness relies on: the generated spec
// pins nothing (only collectionSpec asks for pins), and collectionSpec
// sizes the policy inner-map template as buildPolicy sizes the maps.
func TestSpecUnpinned(t *testing.T) {
	cs, err := loadCnlab()
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range cs.Maps {
		if m.Pinning != ebpf.PinNone {
			t.Errorf("map %s of the generated spec is pinned (%v)", name, m.Pinning)
		}
	}
	lab := &topology.Spec{Options: kind.Options{EBPF: kind.EBPFOptions{PolicyMapSize: 12345, CTMapSize: 4096, MaxEndpoints: 8}}}
	cs, err = collectionSpec(lab)
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.Maps["cnlab_policy"].InnerMap.MaxEntries; n != 12345 {
		t.Errorf("policy inner map template holds %d entries, want 12345", n)
	}
	if n := cs.Maps["cnlab_ipcache"].InnerMap.MaxEntries; n != ipcacheSize {
		t.Errorf("ipcache inner map template holds %d entries, want %d", n, ipcacheSize)
	}
}

// TestProgSkbIfindex checks the premise of the harness: a test run's skb
// is on the loopback device (ifindex 1), with or without a context, so the
// endpoint entry under that index is the one the programs find.
func TestProgSkbIfindex(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	pkt := tcpPkt(addrR, epA.ip, 1000, 80, tcpSYN)
	h.toEp(t, "with a context", pkt, actOK, ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	ret, _, err := h.objs.CnlabToEp.Test(pkt)
	if err != nil || ret != actOK {
		t.Errorf("without a context: %s, %v; want TC_ACT_OK", actName(ret), err)
	}
	h.must(h.objs.CnlabLxc.Delete(uint32(testIfindex)))
	h.toEp(t, "no endpoint on the interface", pkt, actShot)
	h.fromEp(t, "no endpoint on the interface", tcpPkt(epA.ip, addrR, 1000, 80, tcpSYN), actShot)
}

// TestProgMalformed: truncated or invalid headers are dropped as malformed
// in both directions, never taken for a policy decision (A is not
// isolated, so a packet parsed as valid would pass as not-isolated).
func TestProgMalformed(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ipOf := func(src, dst netip.Addr, proto uint8, l4 []byte) []byte {
		return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: proto, id: 7}.bytes(l4))
	}
	setIP := func(pkt []byte, off int, v byte) []byte { pkt[14+off] = v; return pkt }
	cases := []struct {
		name string
		pkt  func(src, dst netip.Addr) []byte
	}{
		{"Ethernet header only", func(src, dst netip.Addr) []byte { return frame(ethIPv4, nil) }},
		{"IPv4 header cut short", func(src, dst netip.Addr) []byte {
			return ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN))[:14+12]
		}},
		{"TCP header cut short", func(src, dst netip.Addr) []byte {
			return ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN)[:8])
		}},
		{"UDP header cut short", func(src, dst netip.Addr) []byte {
			return ipOf(src, dst, protoUDP, udpHdr(1000, 53, nil)[:3])
		}},
		{"ICMP header cut short", func(src, dst netip.Addr) []byte {
			return ipOf(src, dst, protoICMP, icmpEcho(8, 1, 1)[:4])
		}},
		{"ihl 4", func(src, dst netip.Addr) []byte {
			return setIP(ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN)), 0, 0x44)
		}},
		{"ihl 0", func(src, dst netip.Addr) []byte {
			return setIP(ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN)), 0, 0x40)
		}},
		{"version 6 under the IPv4 ethertype", func(src, dst netip.Addr) []byte {
			return setIP(ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN)), 0, 0x65)
		}},
		{"version 0", func(src, dst netip.Addr) []byte {
			return setIP(ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN)), 0, 0x05)
		}},
		{"total length below the header length", func(src, dst netip.Addr) []byte {
			p := ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN))
			binary.BigEndian.PutUint16(p[14+2:], 16)
			return p
		}},
		{"IP options cut short", func(src, dst netip.Addr) []byte {
			p := frame(ethIPv4, ipHdr{src: src, dst: dst, proto: protoTCP, id: 7, opts: ipOptions(4, 80)}.bytes(tcpHdr(1000, 80, tcpSYN)))
			return p[:14+22]
		}},
		{"ihl 15 past the end of the packet", func(src, dst netip.Addr) []byte {
			return setIP(ipOf(src, dst, protoTCP, tcpHdr(1000, 80, tcpSYN)), 0, 0x4f)
		}},
		{"TCP data offset 4", func(src, dst netip.Addr) []byte {
			tcp := tcpHdr(1000, 80, tcpSYN)
			tcp[12] = 4 << 4
			return ipOf(src, dst, protoTCP, tcp)
		}},
		{"first fragment too short for the TCP header", func(src, dst netip.Addr) []byte {
			first, _ := fragments(ipHdr{src: src, dst: dst, proto: protoTCP, id: 9}, append(tcpHdr(1000, 80, tcpSYN), make([]byte, 16)...), 8)
			return first
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if pkt := c.pkt(addrR, epA.ip); len(pkt) < 14+20 {
				// Recent kernels refuse to test-run an IPv4 frame
				// shorter than an IPv4 header (EINVAL before the
				// program runs), though tcx ingress can meet one.
				if _, err := h.objs.CnlabToEp.Run(&ebpf.RunOptions{Data: pkt}); errors.Is(err, unix.EINVAL) {
					t.Skipf("the kernel refuses to test-run a %d-byte IPv4 frame: %v", len(pkt), err)
				}
			}
			h.toEp(t, "to A", c.pkt(addrR, epA.ip), actShot, ingress(epA, cnlabReasonR_DROP_MALFORMED))
			h.fromEp(t, "from A", c.pkt(epA.ip, addrR), actShot, egress(epA, cnlabReasonR_DROP_MALFORMED))
		})
	}
	// The same packets, well formed, pass: the cases above fail on the
	// defect, not on the packet builder.
	h.toEp(t, "well-formed TCP", ipOf(addrR, epA.ip, protoTCP, tcpHdr(1000, 80, tcpSYN)), actOK, ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	h.fromEp(t, "well-formed UDP", ipOf(epA.ip, addrR, protoUDP, udpHdr(1000, 53, nil)), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	h.fromEp(t, "well-formed ICMP", ipOf(epA.ip, addrR, protoICMP, icmpEcho(8, 1, 1)), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
}

// TestProgL3: IPv6 and other ethertypes are dropped with their own reasons.
func TestProgL3(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	v6 := make([]byte, 40+20)
	v6[0] = 0x60
	binary.BigEndian.PutUint16(v6[4:], 20)
	v6[6] = 6 // TCP
	v6[7] = 64
	copy(v6[8:], netip.MustParseAddr("fd00::1").AsSlice())
	copy(v6[24:], netip.MustParseAddr("fd00::2").AsSlice())
	copy(v6[40:], tcpHdr(1000, 80, tcpSYN))
	cases := []struct {
		name   string
		pkt    []byte
		reason cnlabReason
	}{
		{"IPv6", frame(ethIPv6, v6), cnlabReasonR_DROP_IPV6},
		{"local experimental ethertype", frame(0x88b5, make([]byte, 46)), cnlabReasonR_DROP_L3},
		{"VLAN tag", frame(0x8100, append([]byte{0, 10, 0x08, 0}, ipHdr{src: addrR, dst: epA.ip, proto: protoTCP}.bytes(tcpHdr(1, 80, tcpSYN))...)), cnlabReasonR_DROP_L3},
		{"802.3 length field", frame(46, make([]byte, 46)), cnlabReasonR_DROP_L3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.toEp(t, "to A", c.pkt, actShot, ingress(epA, c.reason))
			h.fromEp(t, "from A", c.pkt, actShot, egress(epA, c.reason))
		})
	}
}

// TestProgARP: with bpf host routing the program answers the endpoint's
// ARP requests itself; in legacy mode the bridge carries ARP.
func TestProgARP(t *testing.T) {
	gw := netip.MustParseAddr("10.0.0.254")
	var zero [6]byte
	t.Run("bpf", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingBPF})
		req := arpPkt(1, epA.mac, epA.ip, zero, gw)
		r := h.fromEp(t, "request for the gateway", req, actRedirect, egress(epA, cnlabReasonR_ARP_REPLIED))
		want := arpPkt(2, epA.lxc, gw, epA.mac, epA.ip)
		copy(want[0:6], epA.mac[:])
		if !bytes.Equal(r.out, want) {
			t.Errorf("ARP reply:\n got %x\nwant %x", r.out, want)
		}
		// Whatever the address: every destination is behind the host.
		r = h.fromEp(t, "request for a remote endpoint", arpPkt(1, epA.mac, epA.ip, zero, addrR), actRedirect, egress(epA, cnlabReasonR_ARP_REPLIED))
		if len(r.out) < 42 || !bytes.Equal(r.out[22:28], epA.lxc[:]) || !bytes.Equal(r.out[28:32], addrR.AsSlice()) {
			t.Errorf("ARP reply for %s: sender %x %x, want %x %s", addrR, r.out[22:28], r.out[28:32], epA.lxc, addrR)
		}
		h.fromEp(t, "request for its own address (duplicate address detection)", arpPkt(1, epA.mac, epA.ip, zero, epA.ip), actShot, egress(epA, cnlabReasonR_DROP_L3))
		h.fromEp(t, "probe for its own address", arpPkt(1, epA.mac, netip.IPv4Unspecified(), zero, epA.ip), actShot, egress(epA, cnlabReasonR_DROP_L3))
		h.fromEp(t, "reply to the host", arpPkt(2, epA.mac, epA.ip, epA.lxc, gw), actOK, egress(epA, cnlabReasonR_ARP_PASSED))
		rarp := arpPkt(1, epA.mac, epA.ip, zero, gw)
		binary.BigEndian.PutUint16(rarp[14+6:], 3)
		h.fromEp(t, "RARP request", rarp, actShot, egress(epA, cnlabReasonR_DROP_L3))
		notIP := arpPkt(1, epA.mac, epA.ip, zero, gw)
		binary.BigEndian.PutUint16(notIP[14+2:], ethIPv6)
		h.fromEp(t, "request for another protocol", notIP, actShot, egress(epA, cnlabReasonR_DROP_L3))
		h.fromEp(t, "truncated request", req[:14+10], actShot, egress(epA, cnlabReasonR_DROP_MALFORMED))
		h.toEp(t, "request from the host", arpPkt(1, epA.lxc, gw, zero, epA.ip), actOK, ingress(epA, cnlabReasonR_ARP_PASSED))
	})
	t.Run("legacy", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingLegacy})
		req := arpPkt(1, epA.mac, epA.ip, zero, gw)
		r := h.fromEp(t, "request for the gateway", req, actOK, egress(epA, cnlabReasonR_ARP_PASSED))
		if !bytes.Equal(r.out, req) {
			t.Errorf("legacy mode changed the ARP request:\n got %x\nwant %x", r.out, req)
		}
		h.fromEp(t, "request for its own address", arpPkt(1, epA.mac, epA.ip, zero, epA.ip), actOK, egress(epA, cnlabReasonR_ARP_PASSED))
		h.toEp(t, "request from a neighbour", arpPkt(1, epB.mac, epB.ip, zero, epA.ip), actOK, ingress(epA, cnlabReasonR_ARP_PASSED))
	})
}

// ipOptions is n bytes of IP options: NOPs, then end-of-list, laid out so
// that a parser taking the L4 header at offset 20 would read port naive as
// the destination port.
func ipOptions(n int, naive uint16) []byte {
	o := bytes.Repeat([]byte{1}, n)
	binary.BigEndian.PutUint16(o[2:], naive) // o[2] is 0: end of options
	return o
}

// TestProgIPOptions: with IP options the L4 header is found after them.
func TestProgIPOptions(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS,
		allow(policy.Ingress, idR, protoTCP, 80),
		allow(policy.Ingress, idR, protoUDP, 53),
		allow(policy.Egress, idR, protoTCP, 443))
	for _, n := range []int{4, 12, 40} {
		sport := uint16(1000 + n) // a new flow each round: UDP would meet conntrack
		withOpts := func(src, dst netip.Addr, proto uint8, naive uint16, l4 []byte) []byte {
			return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: proto, id: 3, opts: ipOptions(n, naive)}.bytes(l4))
		}
		h.toEp(t, "SYN to allowed 80 with options", withOpts(addrR, epA.ip, protoTCP, 81, tcpHdr(sport, 80, tcpSYN)),
			actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
		h.toEp(t, "SYN to denied 81 with options", withOpts(addrR, epA.ip, protoTCP, 80, tcpHdr(sport, 81, tcpSYN)),
			actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "UDP to allowed 53 with options", withOpts(addrR, epA.ip, protoUDP, 54, udpHdr(sport, 53, nil)),
			actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
		h.toEp(t, "UDP to denied 54 with options", withOpts(addrR, epA.ip, protoUDP, 53, udpHdr(sport, 54, nil)),
			actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
		h.fromEp(t, "SYN to allowed 443 with options", withOpts(epA.ip, addrR, protoTCP, 444, tcpHdr(sport, 443, tcpSYN)),
			actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "SYN to denied 444 with options", withOpts(epA.ip, addrR, protoTCP, 443, tcpHdr(sport, 444, tcpSYN)),
			actShot, egress(epA, cnlabReasonR_DROP_DEFAULT))
	}
}

// TestProgFragments: a later fragment (offset > 0, no L4 header) passes
// only where its first fragment passed, at the same enforcement point.
func TestProgFragments(t *testing.T) {
	t.Run("remote", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, anyPeer, protoUDP, 53))
		data := bytes.Repeat([]byte{0xab}, 32)
		// A later fragment whose payload looks like a UDP header to the
		// allowed port: only a parser reading L4 in later fragments
		// would let it through.
		lookalike := udpHdr(53, 53, data)

		first, later := fragments(ipHdr{src: addrR, dst: epA.ip, proto: protoUDP, id: 100}, udpHdr(5000, 53, data), 16)
		h.toEp(t, "first fragment, allowed port", first, actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
		h.toEp(t, "later fragment of it", later, actOK, ingress(epA, cnlabReasonR_ALLOW_FRAG))
		h.toEp(t, "later fragment again (retransmitted)", later, actOK, ingress(epA, cnlabReasonR_ALLOW_FRAG))

		_, orphan := fragments(ipHdr{src: addrR, dst: epA.ip, proto: protoUDP, id: 101}, append(make([]byte, 16), lookalike...), 16)
		h.toEp(t, "later fragment, first never seen", orphan, actShot, ingress(epA, cnlabReasonR_DROP_FRAG))

		_, other := fragments(ipHdr{src: addrR2, dst: epA.ip, proto: protoUDP, id: 100}, append(make([]byte, 16), lookalike...), 16)
		h.toEp(t, "later fragment, same id from another source", other, actShot, ingress(epA, cnlabReasonR_DROP_FRAG))

		first, later = fragments(ipHdr{src: addrR, dst: epA.ip, proto: protoUDP, id: 102}, udpHdr(5000, 54, data), 16)
		h.toEp(t, "first fragment, denied port", first, actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "later fragment of the denied datagram", later, actShot, ingress(epA, cnlabReasonR_DROP_FRAG))

		// A reply of an established flow, fragmented: the first fragment
		// passes on conntrack, and so must the rest of the datagram.
		h.fromEp(t, "query", udpPkt(epA.ip, addrW, 6000, 53), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
		first, later = fragments(ipHdr{src: addrW, dst: epA.ip, proto: protoUDP, id: 200}, udpHdr(53, 6000, bytes.Repeat(data, 4)), 64)
		h.toEp(t, "first fragment of the reply", first, actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
		h.toEp(t, "later fragment of the reply", later, actOK, ingress(epA, cnlabReasonR_ALLOW_FRAG))

		// Fragments of a big ping and of its reply.
		echo := icmpEcho(8, 4242, 1)
		echo = append(echo, bytes.Repeat([]byte{1}, 64)...)
		h.setPolicy(0, epA, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, policy.ProtoAny, 0))
		first, later = fragments(ipHdr{src: epA.ip, dst: addrR, proto: protoICMP, id: 300}, echo, 48)
		h.fromEp(t, "first fragment of an echo request", first, actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "later fragment of an echo request", later, actOK, egress(epA, cnlabReasonR_ALLOW_FRAG))
		reply := icmpEcho(0, 4242, 1)
		reply = append(reply, bytes.Repeat([]byte{1}, 64)...)
		first, later = fragments(ipHdr{src: addrR, dst: epA.ip, proto: protoICMP, id: 301}, reply, 48)
		h.toEp(t, "first fragment of the echo reply", first, actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
		h.toEp(t, "later fragment of the echo reply", later, actOK, ingress(epA, cnlabReasonR_ALLOW_FRAG))
	})
	t.Run("host-local", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingBPF})
		h.setPolicy(0, epB, cnlabIsolationISO_INGRESS, allow(policy.Ingress, epA.identity, protoUDP, 53))
		data := bytes.Repeat([]byte{0xcd}, 32)
		first, later := fragments(ipHdr{src: epA.ip, dst: epB.ip, proto: protoUDP, id: 400}, udpHdr(5000, 53, data), 16)
		h.fromEp(t, "first fragment A to B", first, actRedirect, egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "later fragment A to B", later, actRedirect, egress(epA, cnlabReasonR_ALLOW_FRAG), ingress(epB, cnlabReasonR_ALLOW_FRAG))
		_, orphan := fragments(ipHdr{src: epA.ip, dst: epB.ip, proto: protoUDP, id: 401}, udpHdr(5000, 53, data), 16)
		h.fromEp(t, "later fragment A to B, first never seen", orphan, actShot, egress(epA, cnlabReasonR_DROP_FRAG))
		first, later = fragments(ipHdr{src: epA.ip, dst: epB.ip, proto: protoUDP, id: 402}, udpHdr(5000, 54, data), 16)
		h.fromEp(t, "first fragment A to B, denied port", first, actShot, egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_DROP_DEFAULT))
		h.fromEp(t, "later fragment of it", later, actShot, egress(epA, cnlabReasonR_DROP_FRAG))

		// B's fragmented reply, established.
		h.runAs(epB)
		first, later = fragments(ipHdr{src: epB.ip, dst: epA.ip, proto: protoUDP, id: 403}, udpHdr(53, 5000, bytes.Repeat(data, 4)), 64)
		h.fromEp(t, "first fragment of B's reply", first, actRedirect, egress(epB, cnlabReasonR_ALLOW_CT), ingress(epA, cnlabReasonR_ALLOW_CT))
		h.fromEp(t, "later fragment of B's reply", later, actRedirect, egress(epB, cnlabReasonR_ALLOW_FRAG), ingress(epA, cnlabReasonR_ALLOW_FRAG))
	})
}

// TestProgICMP: echo is governed by any-protocol rules and conntrack;
// ICMP errors about a tracked flow are related, others go to policy.
func TestProgICMP(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, idR, protoTCP, 80))
	h.toEp(t, "echo request, TCP-only allow", echoPkt(addrR, epA.ip, 8, 1), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, idR, protoTCP, 80), allow(policy.Ingress, idR2, policy.ProtoAny, 0))
	h.toEp(t, "echo request, any-protocol allow", echoPkt(addrR2, epA.ip, 8, 2), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "echo request from the TCP-only peer", echoPkt(addrR, epA.ip, 8, 3), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))

	// A pings the world: the reply is established, another id is not.
	h.fromEp(t, "echo request A to W", echoPkt(epA.ip, addrW, 8, 77), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	h.toEp(t, "echo reply W to A", echoPkt(addrW, epA.ip, 0, 77), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "echo reply W to A, untracked id", echoPkt(addrW, epA.ip, 0, 78), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))

	// Errors about flows A opened, quoting 8 bytes of the L4 header (RFC
	// 792, what many routers send) or all of it (Linux).
	unreach := func(quoted []byte, l4 int) []byte {
		return frame(ethIPv4, ipHdr{src: addrRtr, dst: epA.ip, proto: protoICMP, id: 10}.bytes(icmpError(3, 1, quoted, l4)))
	}
	for _, l4 := range []int{8, 20} {
		t.Run(fmt.Sprintf("quoting %d bytes", l4), func(t *testing.T) {
			sport := uint16(40000 + l4)
			syn := ipHdr{src: epA.ip, dst: addrW, proto: protoTCP, id: 9}.bytes(tcpHdr(sport, 443, tcpSYN))
			h.fromEp(t, "SYN A to W:443", frame(ethIPv4, syn), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
			h.toEp(t, "unreachable about the tracked SYN", unreach(syn, l4), actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
			fragNeeded := frame(ethIPv4, ipHdr{src: addrRtr, dst: epA.ip, proto: protoICMP, id: 11}.bytes(icmpError(3, 4, syn, l4)))
			h.toEp(t, "fragmentation needed about the tracked SYN", fragNeeded, actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
			ttl := frame(ethIPv4, ipHdr{src: addrRtr, dst: epA.ip, proto: protoICMP, id: 11}.bytes(icmpError(11, 0, syn, l4)))
			h.toEp(t, "time exceeded about the tracked SYN", ttl, actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
			unknown := ipHdr{src: epA.ip, dst: addrW, proto: protoTCP, id: 12}.bytes(tcpHdr(sport, 444, tcpSYN))
			h.toEp(t, "unreachable about an unknown flow", unreach(unknown, l4), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))

			dns := ipHdr{src: epA.ip, dst: addrW, proto: protoUDP, id: 14}.bytes(udpHdr(sport, 53, []byte("query")))
			h.fromEp(t, "UDP A to W:53", frame(ethIPv4, dns), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
			h.toEp(t, "port unreachable about the UDP query", unreach(dns, l4), actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))

			ping := ipHdr{src: epA.ip, dst: addrW, proto: protoICMP, id: 15}.bytes(icmpEcho(8, sport, 1))
			h.fromEp(t, "echo request A to W", frame(ethIPv4, ping), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
			h.toEp(t, "host unreachable about the ping", unreach(ping, l4), actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
			otherPing := ipHdr{src: epA.ip, dst: addrW, proto: protoICMP, id: 16}.bytes(icmpEcho(8, sport+1, 1))
			h.toEp(t, "host unreachable about an untracked ping", unreach(otherPing, l4), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))

			// An error about A's reply in a flow R opened.
			h.toEp(t, "SYN R to A:80", tcpPkt(addrR, epA.ip, sport, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
			synack := ipHdr{src: epA.ip, dst: addrR, proto: protoTCP, id: 13}.bytes(tcpHdr(80, sport, tcpSYN|tcpACK))
			h.toEp(t, "unreachable about A's SYN-ACK", unreach(synack, l4), actOK, ingress(epA, cnlabReasonR_ALLOW_RELATED))
		})
	}
	// An error quoting less than the ports is no error about a flow: it
	// goes to policy like any other ICMP packet.
	syn := ipHdr{src: epA.ip, dst: addrW, proto: protoTCP, id: 9}.bytes(tcpHdr(40008, 443, tcpSYN))
	h.toEp(t, "unreachable quoting 2 bytes of the tracked SYN", unreach(syn, 2), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))

	// Unknown flows are policy's: with an allow for the world, the error
	// about the unknown flow passes as policy-allow.
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, WorldIdentity, policy.ProtoAny, 0))
	unknown := ipHdr{src: epA.ip, dst: addrW, proto: protoTCP, id: 12}.bytes(tcpHdr(40000, 444, tcpSYN))
	h.toEp(t, "unreachable about an unknown flow, world allowed", unreach(unknown, 8), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
}

// TestProgTCP: a SYN always meets policy, other segments meet conntrack
// first.
func TestProgTCP(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, anyPeer, protoTCP, 80))
	h.toEp(t, "SYN to 81", tcpPkt(addrR, epA.ip, 1234, 81, tcpSYN), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	if h.ctHas(addrR, epA.ip, 1234, 81, protoTCP, 1+dirIn, epA.index) {
		t.Errorf("a dropped SYN created a conntrack entry")
	}
	h.toEp(t, "SYN to 80", tcpPkt(addrR, epA.ip, 1234, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	if !h.ctHas(addrR, epA.ip, 1234, 80, protoTCP, 1+dirIn, epA.index) {
		t.Errorf("the allowed SYN created no conntrack entry")
	}
	h.fromEp(t, "SYN-ACK from 80", tcpPkt(epA.ip, addrR, 80, 1234, tcpSYN|tcpACK), actOK, egress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "ACK to 80", tcpPkt(addrR, epA.ip, 1234, 80, tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "bare ACK to 81, no conntrack", tcpPkt(addrR, epA.ip, 1235, 81, tcpACK), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	// No connection begins with a RST or a FIN: dropped before policy,
	// even on the allowed port (conntrack's "invalid").
	for _, port := range []uint16{80, 81} {
		p := fmt.Sprint(port)
		h.toEp(t, "RST to "+p+", no conntrack", tcpPkt(addrR, epA.ip, 1235, port, tcpRST), actShot, ingress(epA, cnlabReasonR_DROP_INVALID))
		h.toEp(t, "FIN-ACK to "+p+", no conntrack", tcpPkt(addrR, epA.ip, 1235, port, tcpFIN|tcpACK), actShot, ingress(epA, cnlabReasonR_DROP_INVALID))
		h.toEp(t, "SYN+FIN to "+p, tcpPkt(addrR, epA.ip, 1236, port, tcpSYN|tcpFIN), actShot, ingress(epA, cnlabReasonR_DROP_INVALID))
		h.toEp(t, "no flags to "+p, tcpPkt(addrR, epA.ip, 1237, port, 0), actShot, ingress(epA, cnlabReasonR_DROP_INVALID))
	}

	// A new SYN on the tracked tuple goes to policy, not conntrack.
	h.toEp(t, "SYN to 80 again", tcpPkt(addrR, epA.ip, 1234, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	// Generation 1 isolates A with no allow for 80: after the switch the
	// old entry lingers, yet a SYN on its tuple is dropped.
	h.setPolicy(1, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, anyPeer, protoTCP, 8080))
	h.setGen(1)
	if !h.ctHas(addrR, epA.ip, 1234, 80, protoTCP, 1+dirIn, epA.index) {
		t.Fatalf("the conntrack entry of the earlier SYN is gone")
	}
	h.toEp(t, "SYN to 80 after the policy change, stale conntrack", tcpPkt(addrR, epA.ip, 1234, 80, tcpSYN), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	h.toEp(t, "SYN to 8080 in generation 1", tcpPkt(addrR, epA.ip, 1236, 8080, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.setGen(0)
	h.toEp(t, "SYN to 8080 back in generation 0", tcpPkt(addrR, epA.ip, 1237, 8080, tcpSYN), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
}

// TestProgSpoof: an endpoint may only send from its own address and MAC.
func TestProgSpoof(t *testing.T) {
	for _, mode := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, harnessOpts{hostRouting: mode})
			for _, src := range []netip.Addr{netip.MustParseAddr("10.0.0.99"), epB.ip, addrR, netip.IPv4Unspecified()} {
				h.fromEp(t, "from "+src.String()+" to R", tcpPkt(src, addrR, 1000, 80, tcpSYN), actShot, egress(epA, cnlabReasonR_DROP_SPOOF))
				h.fromEp(t, "from "+src.String()+" to B", udpPkt(src, epB.ip, 1000, 53), actShot, egress(epA, cnlabReasonR_DROP_SPOOF))
			}
			h.fromEp(t, "from A's own address", tcpPkt(epA.ip, addrR, 1000, 80, tcpSYN), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
			// A forged Ethernet source would teach the bridge (legacy
			// host routing) that B's MAC is behind A's port.
			forged := tcpPkt(epA.ip, addrR, 1001, 80, tcpSYN)
			copy(forged[6:12], epB.mac[:])
			h.fromEp(t, "from A's address and B's MAC", forged, actShot, egress(epA, cnlabReasonR_DROP_SPOOF))
		})
	}
}

// TestProgIngressDestination: a packet handed to an endpoint must be
// addressed to it. With legacy host routing the bridge delivers by MAC, so
// a frame sent to A's MAC with B's address would otherwise be judged by
// A's ingress (here open to R) instead of B's (closed).
func TestProgIngressDestination(t *testing.T) {
	for _, mode := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, harnessOpts{hostRouting: mode})
			h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, idR, protoUDP, 53))
			h.setPolicy(0, epB, cnlabIsolationISO_INGRESS)
			h.toEp(t, "R to A", udpPkt(addrR, epA.ip, 1000, 53), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
			for _, dst := range []netip.Addr{epB.ip, netip.MustParseAddr("10.0.0.99"), netip.MustParseAddr("10.0.0.255"), netip.MustParseAddr("255.255.255.255")} {
				h.toEp(t, "R to "+dst.String()+" on A's port", udpPkt(addrR, dst, 1000, 53), actShot, ingress(epA, cnlabReasonR_DROP_UNKNOWN))
			}
		})
	}
}

// TestProgDenyWins: a deny entry beats any allow, whichever of the two
// lookups (peer or wildcard peer) finds it, isolated or not.
func TestProgDenyWins(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	type probe struct {
		from   netip.Addr
		port   uint16
		act    uint32
		reason cnlabReason
	}
	cases := []struct {
		name    string
		enforce cnlabIsolation
		rules   []policy.Entry
		probes  []probe
	}{
		{"peer allow tcp/80, peer deny tcp/any", cnlabIsolationISO_INGRESS,
			[]policy.Entry{allow(policy.Ingress, idR, protoTCP, 80), deny(policy.Ingress, idR, protoTCP, 0)},
			[]probe{{addrR, 80, actShot, cnlabReasonR_DROP_DENY}, {addrR2, 80, actShot, cnlabReasonR_DROP_DEFAULT}}},
		{"peer allow tcp/80, wildcard deny tcp/any", cnlabIsolationISO_INGRESS,
			[]policy.Entry{allow(policy.Ingress, idR, protoTCP, 80), deny(policy.Ingress, anyPeer, protoTCP, 0)},
			[]probe{{addrR, 80, actShot, cnlabReasonR_DROP_DENY}, {addrW, 80, actShot, cnlabReasonR_DROP_DENY}}},
		{"wildcard allow tcp/80, peer deny tcp/80", cnlabIsolationISO_INGRESS,
			[]policy.Entry{allow(policy.Ingress, anyPeer, protoTCP, 80), deny(policy.Ingress, idR, protoTCP, 80)},
			[]probe{{addrR, 80, actShot, cnlabReasonR_DROP_DENY}, {addrR2, 80, actOK, cnlabReasonR_ALLOW_POLICY}, {addrW, 80, actOK, cnlabReasonR_ALLOW_POLICY}}},
		{"peer allow tcp/80, peer deny any protocol", cnlabIsolationISO_INGRESS,
			[]policy.Entry{allow(policy.Ingress, idR, protoTCP, 80), deny(policy.Ingress, idR, policy.ProtoAny, 0)},
			[]probe{{addrR, 80, actShot, cnlabReasonR_DROP_DENY}}},
		{"peer allow tcp/80-90, peer deny tcp/85", cnlabIsolationISO_INGRESS,
			[]policy.Entry{{Dir: policy.Ingress, PeerID: idR, Proto: protoTCP, PortLo: 80, PortHi: 90}, deny(policy.Ingress, idR, protoTCP, 85)},
			[]probe{{addrR, 84, actOK, cnlabReasonR_ALLOW_POLICY}, {addrR, 85, actShot, cnlabReasonR_DROP_DENY}, {addrR, 86, actOK, cnlabReasonR_ALLOW_POLICY}, {addrR, 91, actShot, cnlabReasonR_DROP_DEFAULT}}},
		{"deny tcp/80 without isolation", 0,
			[]policy.Entry{deny(policy.Ingress, idR, protoTCP, 80)},
			[]probe{{addrR, 80, actShot, cnlabReasonR_DROP_DENY}, {addrR, 81, actOK, cnlabReasonR_ALLOW_UNENFORCED}, {addrR2, 80, actOK, cnlabReasonR_ALLOW_UNENFORCED}}},
		{"wildcard deny tcp/80 without isolation, peer allow", 0,
			[]policy.Entry{allow(policy.Ingress, idR, protoTCP, 80), deny(policy.Ingress, anyPeer, protoTCP, 80)},
			[]probe{{addrR, 80, actShot, cnlabReasonR_DROP_DENY}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.setPolicy(0, epA, c.enforce, c.rules...)
			for i, p := range c.probes {
				h.toEp(t, "SYN from "+p.from.String(), tcpPkt(p.from, epA.ip, uint16(3000+i), p.port, tcpSYN), p.act, ingress(epA, p.reason))
			}
		})
	}
	t.Run("egress", func(t *testing.T) {
		h.setPolicy(0, epA, cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, protoTCP, 443), deny(policy.Egress, anyPeer, protoTCP, 443))
		h.fromEp(t, "SYN to R:443", tcpPkt(epA.ip, addrR, 3000, 443, tcpSYN), actShot, egress(epA, cnlabReasonR_DROP_DENY))
		h.setPolicy(0, epA, cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, protoTCP, 443), deny(policy.Egress, idR2, protoTCP, 443))
		h.fromEp(t, "SYN to R:443, deny for R2 only", tcpPkt(epA.ip, addrR, 3001, 443, tcpSYN), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "SYN to R2:443", tcpPkt(epA.ip, addrR2, 3002, 443, tcpSYN), actShot, egress(epA, cnlabReasonR_DROP_DENY))
	})
}

// TestProgHostLocal: with bpf host routing the sender's program checks
// both sides and redirects into the destination; in legacy mode it checks
// the sender's egress only and the receiver's program the rest.
func TestProgHostLocal(t *testing.T) {
	t.Run("bpf", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingBPF})
		h.setPolicy(0, epB, cnlabIsolationISO_INGRESS, allow(policy.Ingress, epA.identity, protoTCP, 80))
		h.setPolicy(0, epA, 0, deny(policy.Egress, epB.identity, protoTCP, 82))
		r := h.fromEp(t, "SYN A to B:80", tcpPkt(epA.ip, epB.ip, 1000, 80, tcpSYN), actRedirect,
			egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_POLICY))
		if len(r.out) >= 14 && (!bytes.Equal(r.out[0:6], epB.mac[:]) || !bytes.Equal(r.out[6:12], epB.lxc[:])) {
			t.Errorf("redirected frame: dst %x src %x, want dst %x (B) src %x (B's veth)", r.out[0:6], r.out[6:12], epB.mac, epB.lxc)
		}
		if !h.ctHas(epA.ip, epB.ip, 1000, 80, protoTCP, 0, 0) {
			t.Errorf("no host-local conntrack entry for A to B:80")
		}
		h.fromEp(t, "SYN A to B:81", tcpPkt(epA.ip, epB.ip, 1001, 81, tcpSYN), actShot,
			egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_DROP_DEFAULT))
		h.fromEp(t, "SYN A to B:82, denied at A", tcpPkt(epA.ip, epB.ip, 1002, 82, tcpSYN), actShot,
			egress(epA, cnlabReasonR_DROP_DENY))
		h.runAs(epB)
		h.fromEp(t, "SYN-ACK B:80 to A", tcpPkt(epB.ip, epA.ip, 80, 1000, tcpSYN|tcpACK), actRedirect,
			egress(epB, cnlabReasonR_ALLOW_CT), ingress(epA, cnlabReasonR_ALLOW_CT))
		h.fromEp(t, "SYN B to A:22", tcpPkt(epB.ip, epA.ip, 2000, 22, tcpSYN), actRedirect,
			egress(epB, cnlabReasonR_ALLOW_UNENFORCED), ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	})
	t.Run("legacy", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingLegacy})
		h.setPolicy(0, epB, cnlabIsolationISO_INGRESS, allow(policy.Ingress, epA.identity, protoTCP, 80))
		h.fromEp(t, "SYN A to B:81", tcpPkt(epA.ip, epB.ip, 1001, 81, tcpSYN), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
		h.runAs(epB)
		h.toEp(t, "SYN A to B:81", tcpPkt(epA.ip, epB.ip, 1001, 81, tcpSYN), actShot, ingress(epB, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "SYN A to B:80", tcpPkt(epA.ip, epB.ip, 1001, 80, tcpSYN), actOK, ingress(epB, cnlabReasonR_ALLOW_POLICY))
	})
}

// TestProgICMPForgedError: an ICMP error is related to a flow only if it
// travels back along that flow: its outer destination is the quoted
// packet's source (as Linux conntrack checks), and its outer source is the
// quoted packet's destination or a router, never another endpoint. Else an
// endpoint could carry ICMP past policy by quoting a flow it has, or one
// of its victim's, to a peer that denies it. A may only reach B (host-local)
// and R (remote); C and R2 deny everything.
func TestProgICMPForgedError(t *testing.T) {
	udp := func(src, dst netip.Addr, sport, dport uint16) []byte {
		return ipHdr{src: src, dst: dst, proto: protoUDP, id: 21}.bytes(udpHdr(sport, dport, []byte("q")))
	}
	icmpErr := func(src, dst netip.Addr, quoted []byte) []byte {
		return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: protoICMP, id: 22}.bytes(icmpError(3, 3, quoted, 8)))
	}
	world := func(h *harness) {
		h.addLocal(epC)
		h.setPolicy(0, epA, cnlabIsolationISO_EGRESS,
			allow(policy.Egress, epB.identity, protoUDP, 53), allow(policy.Egress, idR, protoUDP, 53))
		h.setPolicy(0, epB, cnlabIsolationISO_INGRESS, allow(policy.Ingress, epA.identity, protoUDP, 53))
		h.setPolicy(0, epC, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS)
	}
	t.Run("bpf", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingBPF})
		world(h)
		h.fromEp(t, "UDP A to B:53", frame(ethIPv4, udp(epA.ip, epB.ip, 5000, 53)), actRedirect,
			egress(epA, cnlabReasonR_ALLOW_POLICY), ingress(epB, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "UDP A to R:53", frame(ethIPv4, udp(epA.ip, addrR, 5001, 53)), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))

		// Forged: A to C, quoting A's own flows either way.
		h.fromEp(t, "error A to C quoting A to B", icmpErr(epA.ip, epC.ip, udp(epA.ip, epB.ip, 5000, 53)), actShot,
			egress(epA, cnlabReasonR_DROP_DEFAULT))
		h.fromEp(t, "error A to C quoting B to A", icmpErr(epA.ip, epC.ip, udp(epB.ip, epA.ip, 53, 5000)), actShot,
			egress(epA, cnlabReasonR_DROP_DEFAULT))
		// Forged: A to R2, quoting the reply of its flow to R.
		h.fromEp(t, "error A to R2 quoting R to A", icmpErr(epA.ip, addrR2, udp(addrR, epA.ip, 53, 5001)), actShot,
			egress(epA, cnlabReasonR_DROP_DEFAULT))

		// Forged: A to C quoting C's own flow to B (the victim's entry).
		h.runAs(epC)
		h.setPolicy(0, epC, cnlabIsolationISO_INGRESS)
		h.fromEp(t, "UDP C to B:53", frame(ethIPv4, udp(epC.ip, epB.ip, 6000, 53)), actShot,
			egress(epC, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_DROP_DEFAULT))
		h.setPolicy(0, epB, cnlabIsolationISO_INGRESS, allow(policy.Ingress, anyPeer, protoUDP, 53))
		h.fromEp(t, "UDP C to B:53, allowed", frame(ethIPv4, udp(epC.ip, epB.ip, 6000, 53)), actRedirect,
			egress(epC, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_POLICY))
		h.runAs(epA)
		h.fromEp(t, "error A to C quoting C to B", icmpErr(epA.ip, epC.ip, udp(epC.ip, epB.ip, 6000, 53)), actShot,
			egress(epA, cnlabReasonR_DROP_DEFAULT))

		// Genuine: B's port unreachable back to A, and R's.
		h.runAs(epB)
		h.fromEp(t, "error B to A quoting A to B", icmpErr(epB.ip, epA.ip, udp(epA.ip, epB.ip, 5000, 53)), actRedirect,
			egress(epB, cnlabReasonR_ALLOW_RELATED), ingress(epA, cnlabReasonR_ALLOW_RELATED))
		h.runAs(epA)
		h.toEp(t, "error R to A quoting A to R", icmpErr(addrR, epA.ip, udp(epA.ip, addrR, 5001, 53)), actOK,
			ingress(epA, cnlabReasonR_ALLOW_RELATED))
		h.toEp(t, "error from a router to A quoting A to R", icmpErr(addrRtr, epA.ip, udp(epA.ip, addrR, 5001, 53)), actOK,
			ingress(epA, cnlabReasonR_ALLOW_RELATED))
		// But not from another endpoint, and not to anyone else.
		h.setPolicy(0, epA, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS, allow(policy.Egress, idR, protoUDP, 53))
		h.toEp(t, "error R2 to A quoting A to R", icmpErr(addrR2, epA.ip, udp(epA.ip, addrR, 5001, 53)), actShot,
			ingress(epA, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "error C to A quoting A to B", icmpErr(epC.ip, epA.ip, udp(epA.ip, epB.ip, 5000, 53)), actShot,
			ingress(epA, cnlabReasonR_DROP_DEFAULT))
	})
	t.Run("legacy", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingLegacy})
		world(h)
		h.fromEp(t, "UDP A to R:53", frame(ethIPv4, udp(epA.ip, addrR, 5001, 53)), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "error A to R2 quoting R to A", icmpErr(epA.ip, addrR2, udp(addrR, epA.ip, 53, 5001)), actShot,
			egress(epA, cnlabReasonR_DROP_DEFAULT))
		// C has a flow to R; A (on the bridge, past its own egress) sends
		// C an error quoting it.
		h.runAs(epC)
		h.setPolicy(0, epC, cnlabIsolationISO_INGRESS)
		h.fromEp(t, "UDP C to R:53", frame(ethIPv4, udp(epC.ip, addrR, 6000, 53)), actOK, egress(epC, cnlabReasonR_ALLOW_UNENFORCED))
		h.toEp(t, "error A to C quoting C to R", icmpErr(epA.ip, epC.ip, udp(epC.ip, addrR, 6000, 53)), actShot,
			ingress(epC, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "error R to C quoting C to R", icmpErr(addrR, epC.ip, udp(epC.ip, addrR, 6000, 53)), actOK,
			ingress(epC, cnlabReasonR_ALLOW_RELATED))
		// Genuine, host-local on the bridge: B answers A's flow with an error.
		h.runAs(epA)
		h.fromEp(t, "UDP A to B:53", frame(ethIPv4, udp(epA.ip, epB.ip, 5000, 53)), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
		h.runAs(epB)
		h.toEp(t, "UDP A to B:53", frame(ethIPv4, udp(epA.ip, epB.ip, 5000, 53)), actOK, ingress(epB, cnlabReasonR_ALLOW_POLICY))
		h.fromEp(t, "error B to A quoting A to B", icmpErr(epB.ip, epA.ip, udp(epA.ip, epB.ip, 5000, 53)), actOK,
			egress(epB, cnlabReasonR_ALLOW_RELATED))
		h.runAs(epA)
		h.toEp(t, "error B to A quoting A to B", icmpErr(epB.ip, epA.ip, udp(epA.ip, epB.ip, 5000, 53)), actOK,
			ingress(epA, cnlabReasonR_ALLOW_RELATED))
	})
}

// TestProgICMPEchoRoles: conntrack knows an echo's role, as Linux
// conntrack does (the reply tuple has the reply type): a request only
// ever opens a flow or repeats one opened the same way, a reply only
// answers a request, and no other ICMP message is tracked. Keyed by id
// alone, a peer that A pings could ping A back with the same id past A's
// ingress, and an unsolicited reply or error let in would open the way
// out for A's requests or errors.
func TestProgICMPEchoRoles(t *testing.T) {
	t.Run("remote", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.setPolicy(0, epA, cnlabIsolationISO_INGRESS)
		h.fromEp(t, "echo request A to R, id 77", echoPkt(epA.ip, addrR, 8, 77), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
		h.toEp(t, "echo request R to A, same id", echoPkt(addrR, epA.ip, 8, 77), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "echo reply R to A", echoPkt(addrR, epA.ip, 0, 77), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
		h.fromEp(t, "echo request A to R again", echoPkt(epA.ip, addrR, 8, 77), actOK, egress(epA, cnlabReasonR_ALLOW_CT))

		// Egress isolated, ingress open: what comes in opens nothing.
		h.setPolicy(0, epA, cnlabIsolationISO_EGRESS)
		h.toEp(t, "unsolicited echo reply R2 to A", echoPkt(addrR2, epA.ip, 0, 9), actOK, ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
		h.fromEp(t, "echo request A to R2, that id", echoPkt(epA.ip, addrR2, 8, 9), actShot, egress(epA, cnlabReasonR_DROP_DEFAULT))
		h.toEp(t, "echo request R2 to A", echoPkt(addrR2, epA.ip, 8, 10), actOK, ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
		h.fromEp(t, "echo reply A to R2", echoPkt(epA.ip, addrR2, 0, 10), actOK, egress(epA, cnlabReasonR_ALLOW_CT))
		h.fromEp(t, "echo request A to R2, the id R2 used", echoPkt(epA.ip, addrR2, 8, 10), actShot, egress(epA, cnlabReasonR_DROP_DEFAULT))
		unreach := frame(ethIPv4, ipHdr{src: addrR2, dst: epA.ip, proto: protoICMP, id: 5}.bytes(icmpError(3, 1,
			ipHdr{src: epA.ip, dst: addrR2, proto: protoUDP, id: 6}.bytes(udpHdr(1, 2, nil)), 8)))
		h.toEp(t, "unreachable R2 to A about no flow", unreach, actOK, ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
		back := frame(ethIPv4, ipHdr{src: epA.ip, dst: addrR2, proto: protoICMP, id: 7}.bytes(icmpError(3, 1,
			ipHdr{src: addrR2, dst: epA.ip, proto: protoUDP, id: 8}.bytes(udpHdr(2, 1, nil)), 8)))
		h.fromEp(t, "unreachable A to R2 about no flow", back, actShot, egress(epA, cnlabReasonR_DROP_DEFAULT))
	})
	t.Run("host-local", func(t *testing.T) {
		h := newHarness(t, harnessOpts{hostRouting: kind.HostRoutingBPF})
		h.setPolicy(0, epA, cnlabIsolationISO_INGRESS)
		h.fromEp(t, "echo request A to B, id 5", echoPkt(epA.ip, epB.ip, 8, 5), actRedirect,
			egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_UNENFORCED))
		h.runAs(epB)
		h.fromEp(t, "echo request B to A, same id", echoPkt(epB.ip, epA.ip, 8, 5), actShot,
			egress(epB, cnlabReasonR_ALLOW_UNENFORCED), ingress(epA, cnlabReasonR_DROP_DEFAULT))
		h.fromEp(t, "echo reply B to A", echoPkt(epB.ip, epA.ip, 0, 5), actRedirect,
			egress(epB, cnlabReasonR_ALLOW_CT), ingress(epA, cnlabReasonR_ALLOW_CT))
	})
}

// TestProgARPSpoof: an endpoint's ARP must name it as the sender: sender
// MAC and Ethernet source its MAC, sender IP its address (or 0.0.0.0, a
// probe). Else, on the bridge of legacy host routing, it could take over
// another endpoint's address in its neighbours' caches (and its MAC in
// the bridge's forwarding table), and with bpf host routing teach the
// host a forged neighbour with an ARP reply.
func TestProgARPSpoof(t *testing.T) {
	gw := netip.MustParseAddr("10.0.0.254")
	var zero [6]byte
	ethSrc := func(f []byte, mac [6]byte) []byte { copy(f[6:12], mac[:]); return f }
	forged := []struct {
		name string
		pkt  []byte
	}{
		{"request with B's address", arpPkt(1, epA.mac, epB.ip, zero, gw)},
		{"request with B's MAC", arpPkt(1, epB.mac, epA.ip, zero, gw)},
		{"request from B's MAC on the wire", ethSrc(arpPkt(1, epA.mac, epA.ip, zero, gw), epB.mac)},
		{"request with a remote address", arpPkt(1, epA.mac, addrR, zero, gw)},
		{"gratuitous ARP for B's address", arpPkt(1, epA.mac, epB.ip, zero, epB.ip)},
		{"reply with B's address", arpPkt(2, epA.mac, epB.ip, epA.lxc, gw)},
		{"reply with the gateway's address", arpPkt(2, epA.mac, gw, epA.lxc, epA.ip)},
		{"reply with another MAC", arpPkt(2, macOther, epA.ip, epA.lxc, gw)},
		{"probe from another MAC", arpPkt(1, macOther, netip.IPv4Unspecified(), zero, epB.ip)},
	}
	for _, mode := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, harnessOpts{hostRouting: mode})
			for _, f := range forged {
				h.fromEp(t, f.name, f.pkt, actShot, egress(epA, cnlabReasonR_DROP_SPOOF))
			}
			req, replied := arpPkt(1, epA.mac, epA.ip, zero, gw), cnlabReasonR_ARP_REPLIED
			act := uint32(actRedirect)
			if mode == kind.HostRoutingLegacy {
				act, replied = actOK, cnlabReasonR_ARP_PASSED
				h.fromEp(t, "probe for B's address", arpPkt(1, epA.mac, netip.IPv4Unspecified(), zero, epB.ip), actOK, egress(epA, cnlabReasonR_ARP_PASSED))
				h.fromEp(t, "gratuitous ARP for its own address", arpPkt(1, epA.mac, epA.ip, zero, epA.ip), actOK, egress(epA, cnlabReasonR_ARP_PASSED))
			}
			h.fromEp(t, "request for the gateway", req, act, egress(epA, replied))
			h.fromEp(t, "reply to the gateway", arpPkt(2, epA.mac, epA.ip, epA.lxc, gw), actOK, egress(epA, cnlabReasonR_ARP_PASSED))
		})
	}
}

// onOneCPU runs the rest of the test on CPU 0. The kernel's LRU hash
// keeps a few recently created entries (up to 128) on a list of the CPU
// that created them, out of reach of evictions made on other CPUs until
// that CPU creates entries again: a measurement whose runs hop between
// CPUs would depend on the scheduler. BPF_PROG_TEST_RUN runs a tc program
// on the calling thread's CPU.
func onOneCPU(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	})
}

// floodCT opens n flows from B to R through cnlab_from_ep (B not
// isolated: each opens a conntrack entry) with pkts UDP packets each (a
// second packet finds the entry, which the LRU marks as used), without the
// counter bookkeeping of run. Every `every` flows it calls touch as A. It
// returns the first flow after which gone reports true (0 if it never did).
func floodCT(t testing.TB, h *harness, n, pkts, every int, touch func(), gone func() bool) int {
	t.Helper()
	h.runAs(epB)
	defer h.runAs(epA)
	for i := 1; i <= n; i++ {
		pkt := udpPkt(epB.ip, addrR, uint16(i), uint16(1+i>>16))
		copy(pkt[6:12], epB.mac[:])
		for range pkts {
			ret, err := h.objs.CnlabFromEp.Run(&ebpf.RunOptions{Data: pkt, Context: skbCtx{Ifindex: testIfindex}})
			if err != nil || ret != actOK {
				t.Fatalf("flood packet %d: %s, %v", i, actName(ret), err)
			}
		}
		if every > 0 && i%every == 0 {
			h.runAs(epA)
			touch()
			h.runAs(epB)
		}
		if gone() {
			return i
		}
	}
	return 0
}

// TestProgCTEviction shows the documented limit (docs/limits.md): the
// conntrack map is one LRU per host, so an endpoint that opens many flows
// evicts the entries of every other endpoint of its host; and what
// happens then to an evicted flow: each packet is judged by policy again,
// so a packet in a direction policy allows passes (and opens the entry
// again), one in a direction it does not allow (a reply) is dropped.
func TestProgCTEviction(t *testing.T) {
	const size = 1024
	onOneCPU(t)
	h := newHarness(t, harnessOpts{ctMapSize: size})
	// A is a client of W (ingress isolated: W's replies ride on conntrack)
	// and a server for R (egress isolated: its replies ride on conntrack).
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS,
		allow(policy.Egress, WorldIdentity, protoUDP, 53), allow(policy.Ingress, idR, protoTCP, 80))
	h.fromEp(t, "query A to W", udpPkt(epA.ip, addrW, 5000, 53), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "SYN R to A:80", tcpPkt(addrR, epA.ip, 6000, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "answer W to A", udpPkt(addrW, epA.ip, 53, 5000), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.fromEp(t, "SYN-ACK A to R", tcpPkt(epA.ip, addrR, 80, 6000, tcpSYN|tcpACK), actOK, egress(epA, cnlabReasonR_ALLOW_CT))

	clientGone := func() bool { return !h.ctHas(epA.ip, addrW, 5000, 53, protoUDP, 1+dirOut, epA.index) }
	serverGone := func() bool { return !h.ctHas(addrR, epA.ip, 6000, 80, protoTCP, 1+dirIn, epA.index) }
	n := floodCT(t, h, 4*size, 2, 0, nil, func() bool { return clientGone() && serverGone() })
	if n == 0 {
		t.Fatalf("%d flows from B left A's entries in a %d-entry map (client's gone: %v, server's gone: %v)", 4*size, size, clientGone(), serverGone())
	}
	t.Logf("map of %d entries: B's %dth flow evicted the last of A's two established entries", size, n)

	h.toEp(t, "answer W to A, evicted", udpPkt(addrW, epA.ip, 53, 5000), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	h.fromEp(t, "data A to R, evicted", tcpPkt(epA.ip, addrR, 80, 6000, tcpACK), actShot, egress(epA, cnlabReasonR_DROP_DEFAULT))
	h.fromEp(t, "query A to W again: policy", udpPkt(epA.ip, addrW, 5000, 53), actOK, egress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "answer W to A after it", udpPkt(addrW, epA.ip, 53, 5000), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "ACK R to A: policy", tcpPkt(addrR, epA.ip, 6000, 80, tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.fromEp(t, "data A to R after it", tcpPkt(epA.ip, addrR, 80, 6000, tcpACK), actOK, egress(epA, cnlabReasonR_ALLOW_CT))
}

// BenchmarkCTEviction measures after how many new flows from one endpoint
// another endpoint's established entry (opened, answered once) is
// evicted, when the flood's flows have one packet or two, and when A's
// flow carries a packet every k flows; for the smallest and the default
// map size (BENCHMARKS.md). The metric is flows-to-evict (0: never, within
// 4 times the map); it runs once whatever b.N:
//
//	roottest -run '^$' -bench CTEviction -benchtime 1x ./datapath/ebpf/
func BenchmarkCTEviction(b *testing.B) {
	for _, size := range []int{1024, kind.DefaultCTMapSize} {
		for _, pkts := range []int{1, 2} {
			for _, every := range []int{0, size / 2, size, 2 * size} {
				b.Run(fmt.Sprintf("size=%d/pkts=%d/every=%d", size, pkts, every), func(b *testing.B) {
					onOneCPU(b) // each sub-benchmark runs on a goroutine of its own
					h := newHarness(b, harnessOpts{ctMapSize: size})
					touch := func() { h.run(b, h.objs.CnlabToEp, udpPkt(addrW, epA.ip, 53, 5000)) }
					h.run(b, h.objs.CnlabFromEp, udpPkt(epA.ip, addrW, 5000, 53))
					touch()
					n := floodCT(b, h, 4*size, pkts, every, touch, func() bool {
						return !h.ctHas(epA.ip, addrW, 5000, 53, protoUDP, 1+dirOut, epA.index)
					})
					b.ReportMetric(float64(n), "flows-to-evict")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}

// BenchmarkFragEviction measures after how many first fragments from one
// endpoint (B, to R, each of a datagram of its own) another endpoint's
// pending datagram (A's first fragment passed, the rest not yet) loses
// its entry in the fragment map, so that A's later fragments are dropped;
// with A's datagram untouched after its first fragment, and with one of
// its later fragments seen before the flood. The map is one LRU of 8,192
// entries per host. The metric is fragments-to-evict (0: never, within 4
// times the map); it runs once whatever b.N (BENCHMARKS.md):
//
//	roottest -run '^$' -bench FragEviction -benchtime 1x ./datapath/ebpf/
func BenchmarkFragEviction(b *testing.B) {
	size := int(compiledMapSize(b, "cnlab_frag"))
	for _, touched := range []bool{false, true} {
		b.Run(fmt.Sprintf("laterSeen=%v", touched), func(b *testing.B) {
			onOneCPU(b)
			h := newHarness(b, harnessOpts{})
			dgram := ipHdr{src: epA.ip, dst: addrW, proto: protoUDP, id: 77}
			first, later := fragments(dgram, udpHdr(5000, 53, make([]byte, 64)), 32)
			h.run(b, h.objs.CnlabFromEp, first)
			if touched {
				h.run(b, h.objs.CnlabFromEp, later)
			}
			key := cnlabFragKey{Saddr: ip4(epA.ip), Daddr: ip4(addrW), Id: 77, Proto: protoUDP, Scope: 1 + dirOut, Ep: uint16(epA.index)}
			var v cnlabFragVal
			if err := h.objs.CnlabFrag.Lookup(key, &v); err != nil {
				b.Fatalf("A's first fragment left no entry: %v", err)
			}
			h.runAs(epB)
			n := 0
			for i := 1; i <= 4*size; i++ {
				f, _ := fragments(ipHdr{src: epB.ip, dst: addrR, proto: protoUDP, id: uint16(i)}, udpHdr(uint16(1000+i>>16), 53, make([]byte, 64)), 32)
				copy(f[6:12], epB.mac[:])
				ret, err := h.objs.CnlabFromEp.Run(&ebpf.RunOptions{Data: f, Context: skbCtx{Ifindex: testIfindex}})
				if err != nil || ret != actOK {
					b.Fatalf("flood fragment %d: %s, %v", i, actName(ret), err)
				}
				if h.objs.CnlabFrag.Lookup(key, &v) != nil {
					n = i
					break
				}
			}
			h.runAs(epA)
			b.ReportMetric(float64(n), "fragments-to-evict")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// compiledMapSize is the size of one of the collection's maps as compiled.
func compiledMapSize(b *testing.B, name string) uint32 {
	spec, err := loadCnlab()
	if err != nil {
		b.Fatal(err)
	}
	return spec.Maps[name].MaxEntries
}
