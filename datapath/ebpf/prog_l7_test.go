package ebpf

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/policy"
)

// TestProxyEntries: for every peer with ingress entries, and the wildcard
// peer, the allow that longest-prefix match picks for an L7 port carries
// the proxy bit (an exact entry of the port); denies stay denies; a
// direction that is not isolated proxies what it allows for want of a
// policy.
func TestProxyEntries(t *testing.T) {
	const peerA, peerB, peerX = 1001, 1002, 1003
	noRule := uint32(cnlabRuleRefNO_RULE)
	exact := func(peer uint32, port uint16, deny, proxy bool, rule uint32) polEntry {
		return polEntry{Peer: peer, Dir: uint8(policy.Ingress), Proto: protoTCP, Port: port, Plen: keyBitsAll,
			Deny: deny, Proxy: proxy, Rule: rule}
	}
	for _, c := range []struct {
		name     string
		rules    []policy.Entry
		isolated bool
		want     []polEntry // the entries of port 80 (and what decides it) after
	}{
		{"an exact allow gets the bit", []policy.Entry{allow(policy.Ingress, peerA, protoTCP, 80)}, true,
			[]polEntry{exact(peerA, 80, false, true, 0)}},
		{"a range gets an exact entry of the port", []policy.Entry{{Dir: policy.Ingress, PeerID: peerA, Proto: protoTCP, PortLo: 64, PortHi: 127}}, true,
			[]polEntry{exact(peerA, 80, false, true, 0)}},
		{"any protocol too", []policy.Entry{{Dir: policy.Ingress, PeerID: peerB, Proto: policy.ProtoAny}}, true,
			[]polEntry{exact(peerB, 80, false, true, 0)}},
		{"a deny stays a deny; the wildcard's allow is proxied", []policy.Entry{
			deny(policy.Ingress, peerX, protoTCP, 80), allow(policy.Ingress, 0, protoTCP, 80)}, true,
			[]polEntry{exact(0, 80, false, true, 1), exact(peerX, 80, true, false, 0)}},
		{"an allow nested in a deny is not proxied", []policy.Entry{
			{Dir: policy.Ingress, PeerID: peerX, Proto: protoTCP, PortLo: 0, PortHi: 1023, Deny: true}, allow(policy.Ingress, peerX, protoTCP, 80)}, true,
			[]polEntry{exact(peerX, 80, true, false, 0)}},
		{"UDP on the port decides nothing", []policy.Entry{allow(policy.Ingress, peerA, protoUDP, 80)}, true, nil},
		{"not isolated: the wildcard is proxied", nil, false, []polEntry{exact(0, 80, false, true, noRule)}},
		{"isolated with no allow: nothing to proxy", nil, true, nil},
		{"egress entries are left alone", []policy.Entry{allow(policy.Egress, peerA, protoTCP, 80)}, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := render(c.rules...)
			got := proxyEntries(before, []uint16{80}, c.isolated)
			var at80 []polEntry
			for _, e := range got {
				if e.Plen == keyBitsAll && e.Proto == protoTCP && e.Port == 80 && e.Dir == uint8(policy.Ingress) {
					at80 = append(at80, e)
				}
			}
			if !slices.Equal(at80, c.want) {
				t.Errorf("entries of TCP 80:\n got %+v\nwant %+v", at80, c.want)
			}
			// Nothing else changes but the proxy bit and added entries.
			for _, e := range before {
				plain := func(x polEntry) polEntry { x.Proxy = false; return x }
				if !slices.ContainsFunc(got, func(g polEntry) bool { return plain(g) == plain(e) }) {
					t.Errorf("entry %+v lost", e)
				}
			}
		})
	}
}

// TestSharedL7Numbers: the proxy's port and mark are the programs'.
func TestSharedL7Numbers(t *testing.T) {
	if l7proxy.Port != int(cnlabL7L7PROXY_PORT) || l7proxy.Mark != int(cnlabL7MARK_FROM_PROXY) {
		t.Errorf("the proxy listens on %d and marks %#x, the programs expect %d and %#x",
			l7proxy.Port, l7proxy.Mark, cnlabL7L7PROXY_PORT, cnlabL7MARK_FROM_PROXY)
	}
	if cnlabL7MARK_TO_PROXY&cnlabL7MARK_MASK == cnlabL7MARK_FROM_PROXY&cnlabL7MARK_MASK {
		t.Error("the mark to the proxy and the proxy's own are the same under the mask")
	}
}

// TestProgL7: a connection to an L7 port goes to the proxy, judged first
// at L3/L4 (BPF_PROG_TEST_RUN does not run at tc ingress, where
// bpf_sk_assign works, so the hand-over itself fails here and is counted
// as such: the lab tests send real requests through it); its conntrack
// entry keeps its later packets for the proxy; what the proxy sends (its
// mark) reaches the endpoint, and nothing else unmarked does.
func TestProgL7(t *testing.T) {
	for _, routing := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		t.Run(routing, func(t *testing.T) {
			h := newHarness(t, harnessOpts{hostRouting: routing})
			var c cnlabConfig
			h.must(h.objs.CnlabConfig.Lookup(uint32(0), &c))
			c.Flags |= uint32(cnlabConfigFlagFLAG_L7)
			h.must(h.objs.CnlabConfig.Put(uint32(0), c))
			es := proxyEntries(render(allow(policy.Ingress, epA.identity, protoTCP, 80), allow(policy.Ingress, epA.identity, protoTCP, 22),
				allow(policy.Ingress, idR, protoTCP, 80)), []uint16{80}, true)
			h.setEntries(0, epB, cnlabIsolationISO_INGRESS, es)

			// Same host: both sides judged by A's program.
			h.fromEp(t, "SYN A to B:80", tcpPkt(epA.ip, epB.ip, 1000, 80, tcpSYN), actShot,
				egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_PROXY), ingress(epB, cnlabReasonR_DROP_NO_PROXY))
			if f, ok := h.ctFlags(epA.ip, epB.ip, 1000, 80, protoTCP, 0, 0); !ok || f&4 == 0 {
				t.Errorf("conntrack entry of A to B:80: flags %#x (found %v), want CT_PROXY", f, ok)
			}
			h.fromEp(t, "ACK A to B:80", tcpPkt(epA.ip, epB.ip, 1000, 80, tcpACK), actShot,
				egress(epA, cnlabReasonR_ALLOW_CT), ingress(epB, cnlabReasonR_ALLOW_CT), ingress(epB, cnlabReasonR_DROP_NO_PROXY))
			if routing == kind.HostRoutingBPF {
				h.fromEp(t, "SYN A to B:22 (no L7 port)", tcpPkt(epA.ip, epB.ip, 1001, 22, tcpSYN), actRedirect,
					egress(epA, cnlabReasonR_ALLOW_UNENFORCED), ingress(epB, cnlabReasonR_ALLOW_POLICY))
			} else {
				h.fromEp(t, "SYN A to B:22 (no L7 port): to the bridge", tcpPkt(epA.ip, epB.ip, 1001, 22, tcpSYN), actOK,
					egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
			}

			// From another host: the wire's program judges B's ingress.
			h.expect(t, "SYN R to B:80 from the wire", h.objs.CnlabFromWire, tcpPkt(addrR, epB.ip, 2000, 80, tcpSYN), actShot,
				ingress(epB, cnlabReasonR_ALLOW_PROXY), ingress(epB, cnlabReasonR_DROP_NO_PROXY))
			if f, ok := h.ctFlags(addrR, epB.ip, 2000, 80, protoTCP, 1+dirIn, epB.index); !ok || f&4 == 0 {
				t.Errorf("conntrack entry of R to B:80: flags %#x (found %v), want CT_PROXY", f, ok)
			}
			h.expect(t, "SYN R2 to B:80 (denied): left to B's program", h.objs.CnlabFromWire, tcpPkt(addrR2, epB.ip, 2001, 80, tcpSYN), actOK)
			h.expect(t, "ACK R to B:22 (no proxied flow): passed", h.objs.CnlabFromWire, tcpPkt(addrR, epB.ip, 2002, 22, tcpACK), actOK)

			// What reaches B's veth for its L7 port without the mark came
			// around the proxy: a new connection the verdict sends there,
			// or a packet of a flow the proxy speaks for.
			h.runAs(epB)
			h.toEp(t, "SYN R to B:80, unmarked", tcpPkt(addrR, epB.ip, 2003, 80, tcpSYN), actShot, ingress(epB, cnlabReasonR_DROP_NOT_PROXIED))
			h.toEp(t, "ACK R to B:80 of a proxied flow, unmarked", tcpPkt(addrR, epB.ip, 2000, 80, tcpACK), actShot, ingress(epB, cnlabReasonR_DROP_NOT_PROXIED))
			if h.ctHas(addrR, epB.ip, 2003, 80, protoTCP, 1+dirIn, epB.index) {
				t.Error("a conntrack entry for the connection that came around the proxy")
			}
			// B itself cannot answer into a proxied flow: the reverse
			// of its entry is the proxy's to use.
			if routing == kind.HostRoutingBPF {
				h.fromEp(t, "ACK B:80 to A:1000 (A's proxied flow)", tcpPkt(epB.ip, epA.ip, 80, 1000, tcpACK), actRedirect,
					egress(epB, cnlabReasonR_ALLOW_UNENFORCED), ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
			}
			// The proxy's packets to an endpoint pass by their mark.
			h.toEp(t, "SYN world to B:80, unmarked", tcpPkt(addrW, epB.ip, 3000, 80, tcpSYN), actShot, ingress(epB, cnlabReasonR_DROP_DEFAULT))
			h.mark = uint32(cnlabL7MARK_FROM_PROXY)
			h.toEp(t, "SYN proxy to B:80", tcpPkt(addrW, epB.ip, 3000, 80, tcpSYN), actOK, ingress(epB, cnlabReasonR_ALLOW_FROM_PROXY))
			h.mark = 0
			h.fromEp(t, "SYN-ACK B:80 to the proxy", tcpPkt(epB.ip, addrW, 80, 3000, tcpSYN|tcpACK), actOK, egress(epB, cnlabReasonR_ALLOW_CT))
			// Its answer to a client (from the server's address) passes
			// and leaves no entry: the client's own carries the rest.
			h.runAs(epA)
			h.mark = uint32(cnlabL7MARK_FROM_PROXY)
			h.toEp(t, "SYN-ACK proxy (as B:80) to A", tcpPkt(epB.ip, epA.ip, 80, 1000, tcpSYN|tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_FROM_PROXY))
			h.mark = 0
			if h.ctHas(epB.ip, epA.ip, 80, 1000, protoTCP, 1+dirIn, epA.index) {
				t.Error("a conntrack entry for the proxy's answer to a client")
			}
		})
	}
}

func (h *harness) ctFlags(src, dst netip.Addr, sport, dport uint16, proto, scope uint8, ep uint32) (uint32, bool) {
	k := cnlabCtKey{Saddr: ip4(src), Daddr: ip4(dst), Sport: sport, Dport: dport, Proto: proto, Scope: scope, Ep: uint16(ep)}
	var v cnlabCtVal
	if h.objs.CnlabCt.Lookup(k, &v) != nil {
		return 0, false
	}
	return v.Flags, true
}
