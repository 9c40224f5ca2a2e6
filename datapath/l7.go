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
	// Admin says an Admin-tier allow decided: the connection is not
	// redirected (an Admin allow is final, no L7 rule sees it) and the
	// datapath's chains accept it, so what drops new connections to L7
	// ports must let it through to them.
	Admin bool
	Why   string // origin of the decision, for comments
}

// L7Redirects returns a host's L7 redirect list, first match wins. A
// redirected connection skips the chains that would have judged it, so
// the list carries the whole L3/L4 decision: for each L7 port of a local
// endpoint, first the local sources whose egress denies it, then the
// endpoint's ingress entries covering the port in the order the IR walks
// them (policy.Compiled.RulesFor): the Admin tier's, which never redirect
// (a deny drops, an allow is final: Admin set, the chains accept it), an
// Admin Pass taking its sources out of the Admin entries after it; the
// NetworkPolicy tier's denies, then its allows; the Baseline tier's;
// then (when its ingress is not isolated) everything else. Nil when no
// local endpoint has an L7 port. It covers every family of the lab, each
// family's matches over its own addresses (L7RedirectsOf), IPv4's first.
func L7Redirects(lab *topology.Spec, host string, c *policy.Compiled) []L7Match {
	var out []L7Match
	for _, fam := range []int{4, 6} {
		if lab.HasFamily(fam) {
			out = append(out, L7RedirectsOf(lab, host, c, fam)...)
		}
	}
	return out
}

// L7RedirectsOf is L7Redirects over the addresses of family fam (4 or 6).
func L7RedirectsOf(lab *topology.Spec, host string, c *policy.Compiled, fam int) []L7Match {
	var out []L7Match
	locals := change.LocalEndpoints(lab, host)
	for _, d := range locals {
		dIP, ok := d.Addr(fam)
		if !ok {
			continue
		}
		id := c.IdentityOfIP(dIP)
		for _, port := range c.L7Ports(id) {
			for _, s := range locals {
				sIP, ok := s.Addr(fam)
				if ok && sIP != dIP && !c.SideAllows(c.IdentityOfIP(sIP), policy.Egress, dIP, policy.ProtoTCP, port) {
					out = append(out, L7Match{Src: netip.PrefixFrom(sIP, sIP.BitLen()), Dst: dIP, Port: port, Why: "egress of " + s.ID()})
				}
			}
			var passed []netip.Prefix                          // sources an Admin Pass handed down
			for _, r := range c.RulesFor(id, policy.Ingress) { // in walking order
				if !r.Covers(policy.ProtoTCP, port) {
					continue
				}
				pfxs := c.PeerPrefixesOf(r, fam)
				admin := r.Tier == policy.TierAdmin
				if admin {
					if r.Pass {
						passed = append(passed, pfxs...)
						continue
					}
					pfxs = subtractAll(pfxs, passed)
				}
				for _, pfx := range pfxs {
					m := L7Match{Dst: dIP, Port: port, Redirect: !r.Deny && !admin, Admin: admin && !r.Deny, Why: r.Origin}
					if pfx.Bits() > 0 {
						m.Src = pfx
					}
					out = append(out, m)
				}
			}
			if !c.Enforced[id].Ingress {
				out = append(out, L7Match{Dst: dIP, Port: port, Redirect: true, Why: notIsolated + d.ID() + " not isolated"})
			}
		}
	}
	return out
}

// subtractAll returns the parts of prefixes outside every prefix of minus.
func subtractAll(prefixes, minus []netip.Prefix) []netip.Prefix {
	if len(minus) == 0 {
		return prefixes
	}
	var out []netip.Prefix
	for _, p := range prefixes {
		out = append(out, policy.Subtract(p, minus)...)
	}
	return out
}
