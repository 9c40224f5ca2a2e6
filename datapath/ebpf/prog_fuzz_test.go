package ebpf

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
)

// FuzzProgram runs sequences of arbitrary frames through cnlab_from_ep and
// cnlab_to_ep (BPF_PROG_TEST_RUN), in both host-routing modes, against a
// fixed policy, and checks what must hold whatever the bytes:
//
//   - A is isolated both ways with nothing allowed: no frame it sends
//     passes but its own checked ARP, and no counter of A's ever records an
//     allow other than ARP (nothing reaches A, nothing leaves it, whatever
//     the fuzzer built up in conntrack and the fragment map before);
//   - whatever B (not isolated on egress) sends and the program passes is
//     IPv4 from B's address and MAC, or ARP naming B as its sender;
//   - a frame redirected from B to a host-local endpoint is never put on
//     A's veth;
//   - the action is one tc knows, every counter moved names a known
//     reason, and the packet's own counter agrees with the action.
//
// An input is a sequence of records: a selector byte (bit 0: legacy host
// routing; bits 1-2: which endpoint and program), a length byte, and that
// many bytes of frame. Conntrack and the fragment map start empty for each
// input, so an input's verdicts depend on its own records only.
func FuzzProgram(f *testing.F) {
	harnesses := map[string]*harness{}
	for _, mode := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		h := newHarness(f, harnessOpts{hostRouting: mode})
		h.setPolicy(0, epA, cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS)
		h.setPolicy(0, epB, cnlabIsolationISO_INGRESS,
			allow(policy.Ingress, idR, protoUDP, 53), allow(policy.Ingress, idR, protoTCP, 80))
		harnesses[mode] = h
	}
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, h := range harnesses {
			h.tb = t
			h.clearFlows(t)
		}
		for len(in) >= 2 {
			sel, n := in[0], int(in[1])
			in = in[2:]
			n = min(n, len(in))
			pkt := in[:n]
			in = in[n:]
			if len(pkt) < 14 {
				continue // BPF_PROG_TEST_RUN refuses less than an Ethernet header
			}
			mode := kind.HostRoutingBPF
			if sel&1 != 0 {
				mode = kind.HostRoutingLegacy
			}
			checkRecord(t, harnesses[mode], mode, sel>>1&3, pkt)
		}
	})
}

// checkRecord runs one frame and checks the invariants of FuzzProgram.
func checkRecord(t *testing.T, h *harness, mode string, role byte, pkt []byte) {
	t.Helper()
	as, prog := epA, h.objs.CnlabFromEp
	switch role {
	case 1:
		prog = h.objs.CnlabToEp
	case 2:
		as = epB
	case 3:
		as, prog = epB, h.objs.CnlabToEp
	}
	h.runAs(as)
	before := h.counters(t)
	opts := ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+256), Context: skbCtx{Ifindex: testIfindex}}
	ret, err := prog.Run(&opts)
	if errors.Is(err, unix.EINVAL) && shortL3(pkt) {
		return // the kernel will not build an skb for it (nor will a NIC)
	}
	if err != nil {
		t.Fatalf("%s %s as %s on %x: %v", mode, prog, as.name, pkt, err)
	}
	out := opts.DataOut
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s %s as %s, %s, on %x: "+format, append([]any{mode, prog, as.name, actName(ret), pkt}, args...)...)
	}
	if ret != actOK && ret != actShot && ret != actRedirect {
		fail("unknown action")
	}
	var moved []hit
	for k, n := range h.counters(t) {
		if n == before[k] {
			continue
		}
		if n-before[k] != 1 {
			fail("counter %s moved by %d", k, n-before[k])
		}
		if _, ok := reasonNames[k.reason]; !ok {
			fail("counter with unknown reason %d", k.reason)
		}
		if k.ep == epA.index && !isDrop(k.reason) && k.reason != cnlabReasonR_ARP_PASSED && k.reason != cnlabReasonR_ARP_REPLIED {
			fail("A, isolated both ways with nothing allowed, counted %s", k)
		}
		moved = append(moved, k)
	}
	// Every frame is counted, and a drop only where it is dropped (a
	// passed host-local packet also counts the sender's egress allow).
	drops := 0
	for _, k := range moved {
		if isDrop(k.reason) {
			drops++
		}
	}
	switch {
	case len(moved) == 0:
		fail("no counter moved")
	case (ret == actShot) != (drops > 0):
		fail("counters %v disagree with the action", moved)
	}
	if ret == actShot || prog != h.objs.CnlabFromEp {
		return
	}
	eth := binary.BigEndian.Uint16(pkt[12:14])
	switch {
	case eth == ethARP:
		if len(pkt) < 14+28 {
			fail("a truncated ARP passed")
		}
		if [6]byte(pkt[6:12]) != as.mac || [6]byte(pkt[22:28]) != as.mac {
			fail("ARP with another sender MAC passed")
		}
		if sip := netip.AddrFrom4([4]byte(pkt[28:32])); sip != as.ip && !sip.IsUnspecified() {
			fail("ARP with sender IP %s passed", sip)
		}
	case as == epA:
		fail("A, egress-isolated with nothing allowed, sent a non-ARP frame")
	case eth != ethIPv4 || len(pkt) < 34:
		fail("a frame that is not IPv4 passed")
	case [6]byte(pkt[6:12]) != as.mac:
		fail("a frame with source MAC %x passed", pkt[6:12])
	case netip.AddrFrom4([4]byte(pkt[26:30])) != as.ip:
		fail("a packet from %s passed", netip.AddrFrom4([4]byte(pkt[26:30])))
	}
	if ret == actRedirect && eth == ethIPv4 && [6]byte(out[0:6]) == epA.mac {
		fail("redirected to A, isolated with nothing allowed")
	}
}

// shortL3 reports whether a frame's ethertype promises an IPv4 or IPv6
// header that it is too short to hold: BPF_PROG_TEST_RUN refuses those.
func shortL3(pkt []byte) bool {
	switch binary.BigEndian.Uint16(pkt[12:14]) {
	case ethIPv4:
		return len(pkt) < 14+20
	case ethIPv6:
		return len(pkt) < 14+40
	}
	return false
}

// clearFlows empties conntrack and the fragment map.
func (h *harness) clearFlows(t testing.TB) {
	t.Helper()
	for _, m := range []*ebpf.Map{h.objs.CnlabCt, h.objs.CnlabFrag} {
		var keys [][]byte
		k := make([]byte, m.KeySize())
		it := m.Iterate()
		var v []byte
		for it.Next(&k, &v) {
			keys = append(keys, append([]byte(nil), k...))
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				t.Fatal(err)
			}
		}
	}
}

// fuzzSeeds are sequences the packet tests send: flows, replies, ICMP
// errors quoting them, fragments, options, ARP, other ethertypes.
func fuzzSeeds() [][]byte {
	rec := func(sel byte, pkt []byte) []byte {
		if len(pkt) > 255 {
			pkt = pkt[:255]
		}
		return append([]byte{sel, byte(len(pkt))}, pkt...)
	}
	as := func(e *tep, pkt []byte) []byte {
		pkt = append([]byte(nil), pkt...)
		copy(pkt[6:12], e.mac[:])
		return pkt
	}
	seq := func(recs ...[]byte) []byte {
		var b []byte
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	const fromA, toA, fromB, toB = 0 << 1, 1 << 1, 2 << 1, 3 << 1
	var seeds [][]byte
	for _, legacy := range []byte{0, 1} {
		synBR := as(epB, tcpPkt(epB.ip, addrR, 4000, 80, tcpSYN))
		udpBA := as(epB, udpPkt(epB.ip, epA.ip, 4001, 53))
		udpRB := udpPkt(addrR, epB.ip, 4002, 53)
		quoted := ipHdr{src: epB.ip, dst: addrR, proto: protoTCP, id: 1}.bytes(tcpHdr(4000, 80, tcpSYN))
		errAB := as(epA, frame(ethIPv4, ipHdr{src: epA.ip, dst: epB.ip, proto: protoICMP, id: 2}.bytes(icmpError(3, 3, quoted, 8))))
		errRB := frame(ethIPv4, ipHdr{src: addrRtr, dst: epB.ip, proto: protoICMP, id: 3}.bytes(icmpError(11, 0, quoted, 8)))
		first, later := fragments(ipHdr{src: epB.ip, dst: epA.ip, proto: protoUDP, id: 9}, udpHdr(4003, 53, make([]byte, 32)), 16)
		opts := frame(ethIPv4, ipHdr{src: epA.ip, dst: epB.ip, proto: protoUDP, id: 4, opts: []byte{1, 1, 1, 0}}.bytes(udpHdr(4004, 53, nil)))
		vlan := append(append(append([]byte(nil), udpBA[:12]...), 0x81, 0, 0, 5), udpBA[12:]...)
		seeds = append(seeds,
			seq(rec(legacy|fromB, synBR), rec(legacy|toB, tcpPkt(addrR, epB.ip, 80, 4000, tcpSYN|tcpACK)), rec(legacy|fromA, errAB), rec(legacy|toB, errRB)),
			seq(rec(legacy|fromB, udpBA), rec(legacy|fromA, as(epA, udpPkt(epA.ip, epB.ip, 53, 4001))), rec(legacy|toA, udpBA)),
			seq(rec(legacy|toB, udpRB), rec(legacy|fromB, as(epB, udpPkt(epB.ip, addrR, 53, 4002)))),
			seq(rec(legacy|fromB, as(epB, first)), rec(legacy|fromB, as(epB, later)), rec(legacy|fromA, as(epA, later))),
			seq(rec(legacy|fromA, opts), rec(legacy|fromB, vlan), rec(legacy|toA, echoPkt(addrR, epA.ip, 8, 7))),
			seq(rec(legacy|fromA, arpPkt(1, epA.mac, epA.ip, [6]byte{}, epB.ip)), rec(legacy|fromB, arpPkt(2, epB.mac, epA.ip, epA.mac, epA.ip))),
			seq(rec(legacy|fromB, as(epB, echoPkt(epB.ip, epA.ip, 8, 7))), rec(legacy|fromA, as(epA, echoPkt(epA.ip, epB.ip, 0, 7)))),
			seq(rec(legacy|fromA, frame(ethIPv6, make([]byte, 40))), rec(legacy|fromB, udpBA[:20])),
		)
	}
	return seeds
}
