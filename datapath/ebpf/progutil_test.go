package ebpf

// Helpers for running cnlab_from_ep and cnlab_to_ep with BPF_PROG_TEST_RUN
// on packets built here: a harness that loads the collection unpinned and
// fills its maps directly, and builders for Ethernet, IPv4, TCP, UDP, ICMP
// and ARP. Nothing here touches bpffs, links or namespaces.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// tc actions the programs return.
const (
	actOK       = 0 // TC_ACT_OK
	actShot     = 2 // TC_ACT_SHOT
	actRedirect = 7 // TC_ACT_REDIRECT
)

// Directions as the programs and their counters number them.
const (
	dirIn  = uint8(cnlabDirDIR_INGRESS)
	dirOut = uint8(cnlabDirDIR_EGRESS)
)

// testIfindex is skb->ifindex in a BPF_PROG_TEST_RUN of a tc program: the
// kernel runs the skb on the loopback device of the caller's namespace
// (a context may name another device, but only an existing one). The
// endpoint a test runs "as" is the cnlab_lxc entry under this index.
const testIfindex = 1

const testMaxEp = 4

// skbCtx is the head of struct __sk_buff, up to ifindex and tc_index: the
// kernel accepts a shorter context and zero-fills the rest.
type skbCtx struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto uint32
	Priority, IngressIfindex, Ifindex, TCIndex                                  uint32
}

// tep is a test endpoint.
type tep struct {
	name     string
	index    uint32
	identity uint32
	ip       netip.Addr
	ip6      netip.Addr // none: an IPv4-only endpoint
	mac, lxc [6]byte
	ifindex  uint32 // host-side veth in the endpoint map (fake for all but the one run as)
}

func (e *tep) entry() cnlabEndpoint {
	return cnlabEndpoint{Index: e.index, Identity: e.identity, Ip: ip4(e.ip), Ifindex: e.ifindex, Mac: e.mac, LxcMac: e.lxc,
		Ip6: ip6(e.ip6)}
}

// The test world: endpoints A and B on the host under test, R and R2
// endpoints of another host (known to the ipcache), W and the router in
// the world (unknown to the ipcache).
var (
	epA = &tep{name: "A", index: 0, identity: 1001, ip: netip.MustParseAddr("10.0.0.1"),
		mac: [6]byte{0x02, 0, 0, 0, 0, 0x0a}, lxc: [6]byte{0x02, 0, 0, 0, 1, 0x0a}, ifindex: 1001}
	epB = &tep{name: "B", index: 1, identity: 1002, ip: netip.MustParseAddr("10.0.0.2"),
		mac: [6]byte{0x02, 0, 0, 0, 0, 0x0b}, lxc: [6]byte{0x02, 0, 0, 0, 1, 0x0b}, ifindex: 1002}
	// C is a third endpoint of the host under test, installed only by the
	// tests that need it (addLocal).
	epC = &tep{name: "C", index: 2, identity: 1005, ip: netip.MustParseAddr("10.0.0.3"),
		mac: [6]byte{0x02, 0, 0, 0, 0, 0x0c}, lxc: [6]byte{0x02, 0, 0, 0, 1, 0x0c}, ifindex: 1005}
	addrR   = netip.MustParseAddr("10.0.1.1")
	addrR2  = netip.MustParseAddr("10.0.1.2")
	addrW   = netip.MustParseAddr("192.0.2.1")
	addrRtr = netip.MustParseAddr("192.0.2.254")
)

const (
	idR     = 1003
	idR2    = 1004
	anyPeer = 0
)

// harness is a loaded, unpinned collection with the test world in its maps.
type harness struct {
	tb      testing.TB
	objs    cnlabObjects
	polSize int
	as      *tep   // the endpoint whose veth the programs run on
	mark    uint32 // skb->mark of the packets run
}

type harnessOpts struct {
	hostRouting   string // kind.HostRoutingBPF or HostRoutingLegacy
	policyMapSize int    // default 1024
	ctMapSize     int    // default kind.DefaultCTMapSize
	ringSize      uint32 // bytes of cnlab_events (a power of 2, from the page size on), default the program's
}

func newHarness(tb testing.TB, o harnessOpts) *harness {
	tb.Helper()
	testutil.RequireRoot(tb)
	if o.policyMapSize == 0 {
		o.policyMapSize = 1024
	}
	if o.hostRouting == "" {
		o.hostRouting = kind.HostRoutingBPF
	}
	if o.ctMapSize == 0 {
		o.ctMapSize = kind.DefaultCTMapSize
	}
	lab := &topology.Spec{Name: "progtest", Options: kind.Options{EBPF: kind.EBPFOptions{HostRouting: o.hostRouting,
		PolicyMapSize: o.policyMapSize, CTMapSize: o.ctMapSize, MaxEndpoints: testMaxEp}}}
	cs, err := collectionSpec(lab)
	if err != nil {
		tb.Fatal(err)
	}
	// collectionSpec pins every cnlab_ map by name (the plain spec pins
	// nothing, see TestSpecUnpinned). Unpinned, the test's maps die with
	// its file descriptors.
	for _, m := range cs.Maps {
		m.Pinning = ebpf.PinNone
	}
	if o.ringSize != 0 {
		cs.Maps[mapEvents].MaxEntries = o.ringSize
	}
	h := &harness{tb: tb, polSize: o.policyMapSize}
	if err := cs.LoadAndAssign(&h.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			tb.Fatalf("load programs: %+v", ve)
		}
		tb.Fatalf("load programs: %v", err)
	}
	tb.Cleanup(func() { h.objs.Close() })
	// The config records the host routing as Setup does; the programs
	// have it as the constant collectionSpec set.
	var flags uint32
	if o.hostRouting == kind.HostRoutingBPF {
		flags = uint32(cnlabConfigFlagFLAG_HOST_ROUTING_BPF)
	}
	h.must(h.objs.CnlabConfig.Put(uint32(0), cnlabConfig{Gen: 0, Flags: flags, MaxEp: testMaxEp}))
	for _, e := range []*tep{epA, epB} {
		h.must(h.objs.CnlabLxc.Put(e.ifindex, e.entry()))
		h.must(h.objs.CnlabLocal.Put(ip4(e.ip), e.entry()))
	}
	ipc, err := buildIPCache([]ipEntry{
		{Prefix: netip.PrefixFrom(epA.ip, 32), Key: epA.identity, Identity: epA.identity},
		{Prefix: netip.PrefixFrom(epB.ip, 32), Key: epB.identity, Identity: epB.identity},
		{Prefix: netip.PrefixFrom(epC.ip, 32), Key: epC.identity, Identity: epC.identity},
		{Prefix: netip.PrefixFrom(addrR, 32), Key: idR, Identity: idR},
		{Prefix: netip.PrefixFrom(addrR2, 32), Key: idR2, Identity: idR2},
	})
	h.must(err)
	for gen := uint32(0); gen < 2; gen++ {
		h.must(h.objs.CnlabIpcache.Put(gen, ipc))
	}
	ipc.Close()
	h.runAs(epA)
	return h
}

func (h *harness) must(err error) {
	h.tb.Helper()
	if err != nil {
		h.tb.Fatal(err)
	}
}

// addLocal makes e an endpoint of the host under test (A and B are from
// the start).
func (h *harness) addLocal(e *tep) {
	h.tb.Helper()
	h.must(h.objs.CnlabLxc.Put(e.ifindex, e.entry()))
	h.must(h.objs.CnlabLocal.Put(ip4(e.ip), e.entry()))
}

// runAs makes the programs run on e's host-side veth: its endpoint entry
// goes under the test run's ifindex.
func (h *harness) runAs(e *tep) {
	h.tb.Helper()
	x := e.entry()
	x.Ifindex = testIfindex
	h.must(h.objs.CnlabLxc.Put(uint32(testIfindex), x))
	h.as = e
}

func (h *harness) setGen(gen uint32) {
	h.tb.Helper()
	var c cnlabConfig
	h.must(h.objs.CnlabConfig.Lookup(uint32(0), &c))
	c.Gen = gen
	h.must(h.objs.CnlabConfig.Put(uint32(0), c))
}

// setPolicy gives endpoint e, in generation gen, its isolation and a policy
// map holding rules, rendered as apply renders them (port ranges as
// prefixes, then flatten). Subject and peer identities are the peer keys.
func (h *harness) setPolicy(gen uint32, e *tep, enforce cnlabIsolation, rules ...policy.Entry) {
	h.tb.Helper()
	h.setEntries(gen, e, enforce, render(rules...))
}

func (h *harness) setEntries(gen uint32, e *tep, enforce cnlabIsolation, es []polEntry) {
	h.tb.Helper()
	slot := gen*testMaxEp + e.index
	h.must(h.objs.CnlabEnforce.Put(slot, enforce|wildcardBits(es)))
	exact, prefix := splitEntries(es)
	for _, p := range []struct {
		outer *ebpf.Map
		typ   ebpf.MapType
		es    []polEntry
	}{{h.objs.CnlabPolicy, ebpf.LPMTrie, prefix}, {h.objs.CnlabPolicyExact, ebpf.Hash, exact}} {
		if len(p.es) == 0 {
			if err := p.outer.Delete(slot); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				h.tb.Fatal(err)
			}
			continue
		}
		pm, err := buildPolicy(p.es, h.polSize, p.typ)
		h.must(err)
		h.must(p.outer.Put(slot, pm))
		pm.Close()
	}
}

// render flattens IR entries into policy map entries, as plan does.
func render(rules ...policy.Entry) []polEntry {
	var raw []polEntry
	for i, r := range rules {
		for _, pp := range portPrefixes(r) {
			raw = append(raw, rawEntry(r, r.PeerID, pp, uint32(i)))
		}
	}
	return flatten(raw)
}

func allow(dir policy.Dir, peer uint32, proto uint8, port uint16) policy.Entry {
	return policy.Entry{Dir: dir, PeerID: peer, Proto: proto, PortLo: port}
}

func deny(dir policy.Dir, peer uint32, proto uint8, port uint16) policy.Entry {
	return policy.Entry{Dir: dir, PeerID: peer, Proto: proto, PortLo: port, Deny: true}
}

// hit is one counter of cnlab_counters: endpoint slot, direction, reason.
type hit struct {
	ep     uint32
	dir    uint8
	reason cnlabReason
}

func (c hit) String() string {
	return fmt.Sprintf("ep%d/%s/%s", c.ep, policy.Dir(c.dir), reasonName(c.reason))
}

func ingress(e *tep, reason cnlabReason) hit { return hit{e.index, dirIn, reason} }
func egress(e *tep, reason cnlabReason) hit  { return hit{e.index, dirOut, reason} }

// counters sums cnlab_counters over CPUs: packets per counter.
func (h *harness) counters(t testing.TB) map[hit]uint64 {
	t.Helper()
	res := map[hit]uint64{}
	var k uint32
	var per []cnlabCounter
	it := h.objs.CnlabCounters.Iterate()
	for it.Next(&k, &per) {
		var n uint64
		for _, c := range per {
			n += c.Packets
		}
		if n != 0 {
			slot, dir, reason := counterSlot(k)
			res[hit{slot, dir, reason}] = n
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return res
}

type runResult struct {
	ret  uint32
	out  []byte // the packet as the program left it
	hits []hit  // counters the run incremented (once each)
}

// run runs prog on pkt as h.as and reports the tc action, the output packet
// and the counters it moved.
func (h *harness) run(t testing.TB, prog *ebpf.Program, pkt []byte) runResult {
	t.Helper()
	before := h.counters(t)
	if prog == h.objs.CnlabFromEp && len(pkt) >= 12 && [6]byte(pkt[6:12]) == macOther {
		// A frame from the endpoint has its MAC as the source.
		pkt = slices.Clone(pkt)
		copy(pkt[6:12], h.as.mac[:])
	}
	opts := ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+256), Context: skbCtx{Ifindex: testIfindex, Mark: h.mark}}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("run %s on %d bytes: %v", prog, len(pkt), err)
	}
	var r runResult
	r.ret, r.out = ret, opts.DataOut
	for k, n := range h.counters(t) {
		switch d := n - before[k]; d {
		case 0:
		case 1:
			r.hits = append(r.hits, k)
		default:
			t.Fatalf("counter %s moved by %d for one packet", k, d)
		}
	}
	slices.SortFunc(r.hits, func(a, b hit) int { return strings.Compare(a.String(), b.String()) })
	return r
}

func actName(a uint32) string {
	switch a {
	case actOK:
		return "TC_ACT_OK"
	case actShot:
		return "TC_ACT_SHOT"
	case actRedirect:
		return "TC_ACT_REDIRECT"
	}
	return fmt.Sprintf("action %d", a)
}

// expect runs pkt and checks the action and that exactly the counters want
// moved, one packet each.
func (h *harness) expect(t testing.TB, what string, prog *ebpf.Program, pkt []byte, act uint32, want ...hit) runResult {
	t.Helper()
	r := h.run(t, prog, pkt)
	slices.SortFunc(want, func(a, b hit) int { return strings.Compare(a.String(), b.String()) })
	if r.ret != act || !slices.Equal(r.hits, want) {
		t.Errorf("%s: got %s, counters %v; want %s, counters %v", what, actName(r.ret), r.hits, actName(act), want)
	}
	return r
}

// toEp and fromEp run the two programs.
func (h *harness) toEp(t testing.TB, what string, pkt []byte, act uint32, want ...hit) runResult {
	t.Helper()
	return h.expect(t, what+" (to_ep)", h.objs.CnlabToEp, pkt, act, want...)
}

func (h *harness) fromEp(t testing.TB, what string, pkt []byte, act uint32, want ...hit) runResult {
	t.Helper()
	return h.expect(t, what+" (from_ep)", h.objs.CnlabFromEp, pkt, act, want...)
}

// ctHas reports whether cnlab_ct holds the entry of a flow at an
// enforcement point (scope 0 host-local path, else 1 + direction at ep).
func (h *harness) ctHas(src, dst netip.Addr, sport, dport uint16, proto, scope uint8, ep uint32) bool {
	_, ok := h.ctFlags(src, dst, sport, dport, proto, scope, ep)
	return ok
}

// Packets.

const (
	ethIPv4 = 0x0800
	ethARP  = 0x0806
	ethIPv6 = 0x86dd

	protoICMP = 1
	protoTCP  = policy.ProtoTCP
	protoUDP  = policy.ProtoUDP

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10

	ipMF = 0x2000 // more fragments; the low 13 bits are the offset in 8-byte units
)

var macOther = [6]byte{0x02, 0, 0, 0, 9, 9}

// frame prepends an Ethernet header with macOther as both addresses; run
// from an endpoint (cnlab_from_ep), the source becomes the endpoint's MAC,
// as the programs check.
func frame(typ uint16, payload []byte) []byte {
	b := make([]byte, 14, 14+len(payload))
	copy(b[0:6], macOther[:])
	copy(b[6:12], macOther[:])
	binary.BigEndian.PutUint16(b[12:], typ)
	return append(b, payload...)
}

type ipHdr struct {
	src, dst netip.Addr
	proto    uint8
	id       uint16
	frag     uint16 // flags and fragment offset as on the wire
	opts     []byte // options, a multiple of 4 bytes
}

// bytes renders the IPv4 header and payload, with a correct checksum.
func (h ipHdr) bytes(payload []byte) []byte {
	hl := 20 + len(h.opts)
	b := make([]byte, hl, hl+len(payload))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hl+len(payload)))
	binary.BigEndian.PutUint16(b[4:], h.id)
	binary.BigEndian.PutUint16(b[6:], h.frag)
	b[8] = 64
	b[9] = h.proto
	s, d := h.src.As4(), h.dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	copy(b[20:], h.opts)
	binary.BigEndian.PutUint16(b[10:], csum(b))
	return append(b, payload...)
}

func csum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func tcpHdr(sport, dport uint16, flags uint8) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 1000)
	if flags&tcpACK != 0 {
		binary.BigEndian.PutUint32(b[8:], 2000)
	}
	b[12] = 5 << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	return b
}

func udpHdr(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

func icmpEcho(typ uint8, id, seq uint16) []byte {
	b := make([]byte, 8+16)
	b[0] = typ
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	binary.BigEndian.PutUint16(b[2:], csum(b))
	return b
}

// icmpError is an ICMP error quoting a packet: its IP header and the first
// l4 bytes of its payload (8 is the RFC 792 minimum, which many routers
// quote; Linux quotes as much as fits).
func icmpError(typ, code uint8, quoted []byte, l4 int) []byte {
	hl := int(quoted[0]&0xf) * 4
	quoted = quoted[:min(len(quoted), hl+l4)]
	b := make([]byte, 8, 8+len(quoted))
	b[0], b[1] = typ, code
	b = append(b, quoted...)
	binary.BigEndian.PutUint16(b[2:], csum(b))
	return b
}

func tcpPkt(src, dst netip.Addr, sport, dport uint16, flags uint8) []byte {
	return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: protoTCP, id: 1}.bytes(tcpHdr(sport, dport, flags)))
}

func udpPkt(src, dst netip.Addr, sport, dport uint16) []byte {
	return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: protoUDP, id: 1}.bytes(udpHdr(sport, dport, []byte("hello"))))
}

func echoPkt(src, dst netip.Addr, typ uint8, id uint16) []byte {
	return frame(ethIPv4, ipHdr{src: src, dst: dst, proto: protoICMP, id: 1}.bytes(icmpEcho(typ, id, 1)))
}

// fragments splits an IP datagram's payload at off (a multiple of 8) into
// a first fragment (MF set) and a later one.
func fragments(h ipHdr, payload []byte, off int) (first, later []byte) {
	f := h
	f.frag = ipMF
	first = frame(ethIPv4, f.bytes(payload[:off]))
	l := h
	l.frag = uint16(off / 8)
	later = frame(ethIPv4, l.bytes(payload[off:]))
	return first, later
}

func arpPkt(op uint16, sha [6]byte, sip netip.Addr, tha [6]byte, tip netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1) // Ethernet
	binary.BigEndian.PutUint16(b[2:], ethIPv4)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], op)
	s, t := sip.As4(), tip.As4()
	copy(b[8:], sha[:])
	copy(b[14:], s[:])
	copy(b[18:], tha[:])
	copy(b[24:], t[:])
	f := frame(ethARP, b)
	if op == 1 {
		copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	copy(f[6:12], sha[:])
	return f
}
