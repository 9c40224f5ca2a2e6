package ebpf

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/topology"
)

// ForgetFlows deletes the conntrack entries of flows from the given source
// addresses and ports (both directions), for the probe: a later probe that
// reuses a source port must meet the policy, not an old entry.
func (d *Datapath) ForgetFlows(ctx context.Context, lab *topology.Spec, proto uint8, srcs []netip.AddrPort) error {
	want := map[[2]uint32]bool{}
	want6 := map[netip.AddrPort]bool{}
	for _, s := range srcs {
		if !s.IsValid() {
			continue
		}
		if a := s.Addr().Unmap(); a.Is4() {
			want[[2]uint32{ip4(a), uint32(s.Port())}] = true
		} else {
			want6[s] = true
		}
	}
	if len(want) == 0 && len(want6) == 0 {
		return nil
	}
	for _, h := range lab.Hosts {
		m, err := openHost(lab.Name, h.Name)
		if err != nil {
			return err
		}
		var k cnlabCtKey
		var v cnlabCtVal
		var del []cnlabCtKey
		it := m.ct.Iterate()
		for it.Next(&k, &v) {
			if k.Proto == proto && (want[[2]uint32{k.Saddr, uint32(k.Sport)}] || want[[2]uint32{k.Daddr, uint32(k.Dport)}]) {
				del = append(del, k)
			}
		}
		for _, k := range del {
			_ = m.ct.Delete(k)
		}
		err = it.Err()
		if err == nil && len(want6) > 0 {
			err = forgetFlows6(m.ct6, proto, want6)
		}
		m.Close()
		if err != nil {
			return fmt.Errorf("host %s: conntrack: %w", h.Name, err)
		}
	}
	return nil
}

// forgetFlows6 is ForgetFlows's work on the IPv6 conntrack map.
func forgetFlows6(ct *ebpf.Map, proto uint8, want map[netip.AddrPort]bool) error {
	var k cnlabCt6Key
	var v cnlabCtVal
	var del []cnlabCt6Key
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if k.Proto == proto && (want[netip.AddrPortFrom(addrOf6(k.Saddr), k.Sport)] || want[netip.AddrPortFrom(addrOf6(k.Daddr), k.Dport)]) {
			del = append(del, k)
		}
	}
	for _, k := range del {
		_ = ct.Delete(k)
	}
	return it.Err()
}
