package datapath

import (
	"net/netip"
	"strings"

	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/topology"
)

// LogSnapLen is how much of a packet the netfilter datapaths' log rules
// copy to their NFLOG group: the headers (IPv4, TCP or UDP), not the
// payload.
const LogSnapLen = 128

// Logs reports whether a lab's observe level (topology.ObserveOff,
// ObserveDrops, ObserveAll) has a log rule at a verdict point that gives
// verdict (observe.Dropped, Forwarded, Redirected): drops logs only
// drops, all every verdict, off none.
func Logs(level, verdict string) bool {
	switch level {
	case topology.ObserveDrops:
		return verdict == observe.Dropped
	case topology.ObserveAll:
		return true
	}
	return false
}

// RuleID is the log prefix id of what decided an L7 match: the RuleID of
// the IR entry's origin when one did, "-" when the endpoint's ingress is
// not isolated (no rule decided).
func (m L7Match) RuleID() string {
	if strings.HasPrefix(m.Why, notIsolated) {
		return "-"
	}
	return observe.RuleID(m.Why)
}

// notIsolated starts the Why of the L7 match that redirects what reaches
// an endpoint whose ingress is not isolated.
const notIsolated = "ingress of "

// RuleCounts sums the counts of RuleCounters that differ only in them,
// in the order they are first added.
type RuleCounts struct {
	list  []RuleCounter
	index map[RuleCounter]int
}

// Add adds packets and bytes to the sum of rc (whose own counts are
// zero).
func (s *RuleCounts) Add(rc RuleCounter, packets, bytes uint64) {
	if s.index == nil {
		s.index = map[RuleCounter]int{}
	}
	i, ok := s.index[rc]
	if !ok {
		i = len(s.list)
		s.index[rc] = i
		s.list = append(s.list, rc)
	}
	s.list[i].Packets += packets
	s.list[i].Bytes += bytes
}

// List returns the sums.
func (s *RuleCounts) List() []RuleCounter { return s.list }

// RemotePrefixes are where the endpoints of the lab's other hosts are:
// their pod CIDRs, and the address of any endpoint outside its host's.
// With observe all, the end of a host's forward chain logs the new flows
// no chain decided except those to them: the destination's host logs
// those, where its ingress is decided.
func RemotePrefixes(lab *topology.Spec, host string) []netip.Prefix {
	var out []netip.Prefix
	cidr := map[string]netip.Prefix{}
	for _, h := range lab.Hosts {
		cidr[h.Name] = h.PodCIDR
		if h.Name != host && h.PodCIDR.IsValid() {
			out = append(out, h.PodCIDR)
		}
	}
	for _, ep := range lab.Endpoints {
		if ep.Host != host && !cidr[ep.Host].Contains(ep.IP) {
			out = append(out, netip.PrefixFrom(ep.IP, ep.IP.BitLen()))
		}
	}
	return out
}
