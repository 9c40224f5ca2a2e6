package ebpf

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cnlab/cnlab/topology"
)

// ForgetFlows deletes the conntrack entries of flows from the given source
// addresses and ports (both directions), for the probe: a later probe that
// reuses a source port must meet the policy, not an old entry.
func (d *Datapath) ForgetFlows(ctx context.Context, lab *topology.Spec, proto uint8, srcs []netip.AddrPort) error {
	want := map[[2]uint32]bool{}
	for _, s := range srcs {
		if s.IsValid() {
			want[[2]uint32{ip4(s.Addr()), uint32(s.Port())}] = true
		}
	}
	if len(want) == 0 {
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
		m.Close()
		if err != nil {
			return fmt.Errorf("host %s: conntrack: %w", h.Name, err)
		}
	}
	return nil
}
