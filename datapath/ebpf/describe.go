package ebpf

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Describe implements datapath.Datapath: per host, the active generation,
// and per endpoint its slot, isolation, policy entries and counters.
func (d *Datapath) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for _, h := range lab.Hosts {
		m, err := openHost(lab.Name, h.Name)
		if err != nil {
			return nil, err
		}
		text, err := describeHost(lab, &h, m)
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		out[h.Name] = text
	}
	return out, nil
}

func describeHost(lab *topology.Spec, h *topology.Host, m *hostMaps) (string, error) {
	cfg, err := m.readConfig()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	routing := kind.HostRoutingLegacy
	if cfg.Flags&uint32(cnlabConfigFlagFLAG_HOST_ROUTING_BPF) != 0 {
		routing = kind.HostRoutingBPF
	}
	l7 := ""
	if cfg.Flags&uint32(cnlabConfigFlagFLAG_L7) != 0 {
		l7 = ", L7 ports handed to the L7 proxy"
	}
	fmt.Fprintf(&b, "pins %s, host routing %s, active generation %d%s\n", m.dir, routing, cfg.Gen, l7)
	counters, err := readCounters(m, cfg.MaxEp)
	if err != nil {
		return "", err
	}
	for slot, ep := range change.LocalEndpoints(lab, h.Name) {
		s := cfg.Gen*cfg.MaxEp + uint32(slot)
		var enf cnlabIsolation
		_ = m.enforce.Lookup(s, &enf)
		n, proxied, tiered := 0, 0, 0
		for _, outer := range []*ebpf.Map{m.policy, m.exact} {
			var id uint32
			if outer.Lookup(s, &id) != nil {
				continue
			}
			if pm, err := ebpf.NewMapFromID(ebpf.MapID(id)); err == nil {
				var k cnlabPolicyKey
				var v cnlabPolicyVal
				it := pm.Iterate()
				for it.Next(&k, &v) {
					n++
					if v.Act == uint8(cnlabPolicyActACT_PROXY) || v.BelowAct == uint8(cnlabPolicyActACT_PROXY) {
						proxied++
					}
					if v.Prec < precNPDeny || (v.Prec >= precBaseline && v.Prec < precDefault) {
						tiered++
					}
				}
				pm.Close()
			}
		}
		iso := []string{}
		if enf&cnlabIsolationISO_INGRESS != 0 {
			iso = append(iso, "ingress")
		}
		if enf&cnlabIsolationISO_EGRESS != 0 {
			iso = append(iso, "egress")
		}
		if len(iso) == 0 {
			iso = append(iso, "none")
		}
		toProxy := ""
		if proxied > 0 {
			toProxy = fmt.Sprintf(" (%d to the L7 proxy)", proxied)
		}
		if tiered > 0 {
			toProxy += fmt.Sprintf(" (%d decided by a cluster tier)", tiered)
		}
		fmt.Fprintf(&b, "endpoint %s slot %d dev %s: isolated %s, %d policy entries%s\n", ep.ID(), slot, ep.HostVeth, strings.Join(iso, "+"), n, toProxy)
		for _, c := range counters[uint32(slot)] {
			fmt.Fprintf(&b, "  %-7s %-20s %d packets %d bytes\n", policy.Dir(c.dir), reasonName(c.reason), c.packets, c.bytes)
		}
	}
	return b.String(), nil
}

type counterLine struct {
	dir            uint8
	reason         cnlabReason
	packets, bytes uint64
}

// counterSlot splits a key of cnlab_counters, (slot*2 + dir)*R_MAX +
// reason as the programs count.
func counterSlot(k uint32) (slot uint32, dir uint8, reason cnlabReason) {
	rmax := uint32(cnlabReasonR_MAX)
	return k / (2 * rmax), uint8(k / rmax % 2), cnlabReason(k % rmax)
}

// readCounters sums the per-CPU counters of every endpoint slot.
func readCounters(m *hostMaps, maxEp uint32) (map[uint32][]counterLine, error) {
	out := map[uint32][]counterLine{}
	var k uint32
	var per []cnlabCounter
	it := m.counters.Iterate()
	for it.Next(&k, &per) {
		var c counterLine
		for _, p := range per {
			c.packets += p.Packets
			c.bytes += p.Bytes
		}
		if c.packets == 0 {
			continue
		}
		slot, dir, reason := counterSlot(k)
		c.dir, c.reason = dir, reason
		out[slot] = append(out[slot], c)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for _, cs := range out {
		sort.Slice(cs, func(i, j int) bool {
			if cs[i].dir != cs[j].dir {
				return cs[i].dir < cs[j].dir
			}
			return cs[i].reason < cs[j].reason
		})
	}
	return out, nil
}
