package nftables

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/policy"
)

// FuzzDisjoint: whatever rules of one subject and direction (peer CIDRs,
// protocols, port ranges, any), the set elements Disjoint renders do not
// overlap (the kernel refuses overlapping interval elements) and match
// exactly the flows the rules match, checked at the rules' corners and at
// points the fuzzer picks.
func FuzzDisjoint(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0, 8, 6, 0, 80, 0, 80, 10, 0, 1, 0, 24, 6, 0, 0, 0, 0}, []byte{10, 0, 1, 5, 6, 0, 80})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 168, 1, 1, 32, 17, 0, 53, 0, 60}, []byte{192, 168, 1, 1, 17, 0, 55})
	f.Add([]byte{10, 0, 0, 0, 16, 6, 1, 0, 2, 0, 10, 0, 0, 0, 16, 6, 1, 128, 3, 0, 10, 0, 0, 0, 17, 132, 0, 0, 0, 0}, []byte{10, 0, 128, 1, 6, 1, 200})
	f.Fuzz(func(t *testing.T, ruleBytes, probeBytes []byte) {
		var rules []policy.Entry
		for len(ruleBytes) >= 10 && len(rules) < 12 {
			b := ruleBytes[:10]
			ruleBytes = ruleBytes[10:]
			bits := int(b[4]) % 33
			pfx, err := netip.AddrFrom4([4]byte(b[0:4])).Prefix(bits)
			if err != nil {
				continue
			}
			r := policy.Entry{PeerCIDR: pfx, Proto: []uint8{policy.ProtoAny, 6, 17, 132}[b[5]%4]}
			lo, hi := binary.BigEndian.Uint16(b[6:8]), binary.BigEndian.Uint16(b[8:10])
			if r.Proto != policy.ProtoAny && lo != 0 {
				r.PortLo, r.PortHi = lo, max(lo, hi)
			}
			rules = append(rules, r)
		}
		c := &policy.Compiled{}
		boxes := Disjoint(c, rules)
		for i, a := range boxes {
			if a.PortLo > a.PortHi || a.ProtoLo > a.ProtoHi {
				t.Fatalf("box %+v is empty", a)
			}
			for _, b := range boxes[i+1:] {
				if a.Peer.Overlaps(b.Peer) && a.ProtoLo <= b.ProtoHi && b.ProtoLo <= a.ProtoHi && a.PortLo <= b.PortHi && b.PortLo <= a.PortHi {
					t.Fatalf("boxes overlap: %+v and %+v", a, b)
				}
			}
		}
		type flow struct {
			ip    netip.Addr
			proto uint8
			port  uint16
		}
		var flows []flow
		for _, r := range rules { // the corners of every rule
			last := r.PeerCIDR.Masked().Addr().As4()
			host := uint32(1)<<(32-r.PeerCIDR.Bits()) - 1
			binary.BigEndian.PutUint32(last[:], binary.BigEndian.Uint32(last[:])|host)
			for _, ip := range []netip.Addr{r.PeerCIDR.Masked().Addr(), netip.AddrFrom4(last)} {
				for _, p := range []uint16{r.PortLo, r.PortHi, r.PortLo - 1, r.PortHi + 1} {
					flows = append(flows, flow{ip, 6, p}, flow{ip, 17, p}, flow{ip, r.Proto, p})
				}
			}
		}
		for len(probeBytes) >= 7 {
			b := probeBytes[:7]
			probeBytes = probeBytes[7:]
			flows = append(flows, flow{netip.AddrFrom4([4]byte(b[0:4])), b[4], binary.BigEndian.Uint16(b[5:7])})
		}
		for _, fl := range flows {
			want := false
			for _, r := range rules {
				if r.PeerCIDR.Contains(fl.ip) && (r.Proto == policy.ProtoAny ||
					r.Proto == fl.proto && (r.PortLo == 0 || fl.port >= r.PortLo && fl.port <= r.PortHi)) {
					want = true
				}
			}
			got := 0
			for _, b := range boxes {
				if b.Peer.Contains(fl.ip) && fl.proto >= b.ProtoLo && fl.proto <= b.ProtoHi && fl.port >= b.PortLo && fl.port <= b.PortHi {
					got++
				}
			}
			if got > 1 || want != (got == 1) {
				t.Fatalf("flow %v proto %d port %d: rules match %v, %d boxes do\nrules %+v\nboxes %+v", fl.ip, fl.proto, fl.port, want, got, rules, boxes)
			}
		}
	})
}
