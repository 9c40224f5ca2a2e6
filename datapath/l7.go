package datapath

import (
	"net/netip"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// L7Match is one rule of a host's L7 redirect list: new TCP connections
// from Src (every source when not valid) to Dst:Port go to the host's L7
// proxy (Redirect) or continue to the datapath's chains (which drop them:
// the port is an L7 port).
type L7Match struct {
	Src      netip.Prefix
	Dst      netip.Addr
	Port     uint16
	Redirect bool
	Why      string // origin of the decision, for comments
}

// L7Redirects returns a host's L7 redirect list, first match wins. A
// redirected connection skips the chains that would have judged it, so
// the list carries the whole L3/L4 decision: for each L7 port of a local
// endpoint, first the local sources whose egress denies it, then the
// endpoint's ingress entries covering the port, denies first, then (when
// its ingress is not isolated) everything else. Nil when no local
// endpoint has an L7 port.
func L7Redirects(lab *topology.Spec, host string, c *policy.Compiled) []L7Match {
	var out []L7Match
	locals := change.LocalEndpoints(lab, host)
	for _, d := range locals {
		id := c.IdentityOfIP(d.IP)
		for _, port := range c.L7Ports(id) {
			for _, s := range locals {
				if s.IP != d.IP && !c.SideAllows(c.IdentityOfIP(s.IP), policy.Egress, d.IP, policy.ProtoTCP, port) {
					out = append(out, L7Match{Src: netip.PrefixFrom(s.IP, 32), Dst: d.IP, Port: port, Why: "egress of " + s.ID()})
				}
			}
			for _, r := range c.RulesFor(id, policy.Ingress) { // denies first
				if !r.Covers(policy.ProtoTCP, port) {
					continue
				}
				for _, pfx := range c.PeerPrefixes(r) {
					m := L7Match{Dst: d.IP, Port: port, Redirect: !r.Deny, Why: r.Origin}
					if pfx.Bits() > 0 {
						m.Src = pfx
					}
					out = append(out, m)
				}
			}
			if !c.Enforced[id].Ingress {
				out = append(out, L7Match{Dst: d.IP, Port: port, Redirect: true, Why: "ingress of " + d.ID() + " not isolated"})
			}
		}
	}
	return out
}
