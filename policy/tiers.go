package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/topology"
)

// The cluster-scoped tiers (docs/policy.md, "Cluster policy tiers").
//
// Within the Admin tier, policies are ordered by priority (lower first),
// then by kind and name: two policies of one priority that both match a
// connection have no defined order upstream, and cnlab's is this one
// (policy apply warns about such pairs). Rules follow in the order
// written; the first rule that matches decides. The Baseline tier is
// ordered the same way, a BaselineAdminNetworkPolicy after every
// Baseline ClusterNetworkPolicy.

// precRuleBits are the bits of an entry's Prec that number its rule within
// its policy and direction (the APIs allow at most 100 rules).
const precRuleBits = 10

// MaxTierRules is the most rules one direction of a cluster policy may
// have (AdminNetworkPolicy's limit; ClusterNetworkPolicy's is 25).
const MaxTierRules = 100

// tierSortKey orders the cluster policies of one tier.
func tierSortKey(p *Policy) (int, string, string) {
	prio := p.Priority
	if p.Kind == KindBaselineNP {
		prio = 1 << 20 // after every Baseline ClusterNetworkPolicy
	}
	return prio, p.Kind, p.Name
}

// TierOrder returns the cluster policies of tier t in the order the tier
// evaluates them.
func TierOrder(pols []*Policy, t Tier) []*Policy {
	var out []*Policy
	for _, p := range pols {
		if p.Tier == t {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b *Policy) int {
		ap, ak, an := tierSortKey(a)
		bp, bk, bn := tierSortKey(b)
		if ap != bp {
			return ap - bp
		}
		if c := strings.Compare(ak, bk); c != 0 {
			return c
		}
		return strings.Compare(an, bn)
	})
	return out
}

// tierPrec is the Prec of rule i of the policy of rank rank in its tier.
func tierPrec(rank, i int) uint32 { return uint32(rank)<<precRuleBits | uint32(i) }

// NodeAddrs returns the addresses of the lab's hosts whose labels the
// selector matches: each host's bridge address and its ends of the links
// (wire and overlay), as a node's addresses; in a lab with IPv6, the
// IPv6 ones too.
func (m *Model) NodeAddrs(sel Selector) []netip.Addr {
	var out []netip.Addr
	for _, h := range m.Lab.Hosts {
		if !sel.Matches(h.Labels) {
			continue
		}
		if h.Gateway.IsValid() {
			out = append(out, h.Gateway)
		}
		out = append(out, h.Gateways...) // every family's (the primary's again: compacted below)
		for _, l := range m.Lab.Links {
			for _, e := range l.Ends {
				if e.Host != h.Name {
					continue
				}
				for _, a := range []netip.Addr{e.WireAddr, e.OverAddr, e.WireAddr6, e.OverAddr6} {
					if a.IsValid() {
						out = append(out, a)
					}
				}
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// tierSide walks one tier's policies for one side of a connection: the
// first rule of a policy selecting the subject that matches decides. It
// returns the side and true when a rule decided (a Pass included: then
// s.Passed names it and s.Allowed is not set).
func (m *Model) tierSide(pols []*Policy, subject, remote *topology.Endpoint, remoteIP netip.Addr, proto string, port int, dst *topology.Endpoint, egress bool) (Side, bool) {
	for _, p := range pols {
		for si := range p.Specs {
			sp := &p.Specs[si]
			if !m.selects(p, sp, subject) {
				continue
			}
			d := sp.Ingress
			if egress {
				d = sp.Egress
			}
			for _, r := range d.Ordered {
				if !m.ruleMatches(p, r, remote, remoteIP, proto, port, dst) {
					continue
				}
				ref := fmt.Sprintf("%s %s %s", p.TierRef(), r.Path, r.Action)
				s := Side{Endpoint: subject.ID(), Tier: p.Tier.String(), Rule: p.Ref() + " " + r.Path}
				switch {
				case r.Action == ActionPass:
					s.Passed = ref
				case r.Allows():
					s.Allowed = true
					s.Reason = "allowed by " + ref
				default:
					s.Reason = "denied by " + ref
				}
				return s, true
			}
		}
	}
	return Side{}, false
}

// tieredSide decides one side with the cluster tiers around the
// NetworkPolicy tier (npSide): the Admin tier first; a Pass, or no Admin
// rule, hands the decision to the NetworkPolicy tier; where no
// NetworkPolicy or CiliumNetworkPolicy isolates the subject in this
// direction and none of their rules matched, the Baseline tier decides;
// what nothing decides is allowed.
func (m *Model) tieredSide(subject, remote *topology.Endpoint, remoteIP netip.Addr, proto string, port int, dst *topology.Endpoint, egress bool) Side {
	var passed string
	if len(m.admin) > 0 {
		s, ok := m.tierSide(m.admin, subject, remote, remoteIP, proto, port, dst, egress)
		if ok && s.Passed == "" {
			return s
		}
		passed = s.Passed
	}
	s, decided := m.npSide(subject, remote, remoteIP, proto, port, dst, egress)
	if passed != "" {
		s.Passed = passed
		s.Reason += " (after " + passed + ")"
	}
	if decided || len(m.baseline) == 0 {
		return s
	}
	if b, ok := m.tierSide(m.baseline, subject, remote, remoteIP, proto, port, dst, egress); ok {
		if b.Passed != "" { // a Baseline Pass: nothing below decides
			b.Allowed = true
			b.Reason = "passed by " + b.Passed + ": nothing below the Baseline tier denies it"
		}
		if passed != "" {
			b.Passed = passed
			b.Reason += " (after " + passed + ")"
		}
		return b
	}
	return s
}

// ClusterPolicies returns the Admin tier's and the Baseline tier's
// policies in the order they are evaluated.
func (m *Model) ClusterPolicies() (admin, baseline []*Policy) { return m.admin, m.baseline }

// compileTiers adds the cluster tiers' entries of one subject identity:
// every Admin-tier rule of a policy selecting it, and the Baseline tier's
// in the directions no NetworkPolicy isolates it in (where it is isolated
// the NetworkPolicy tier always decides, so Baseline entries could never
// match).
func (m *Model) compileTiers(c *Compiled, id *Identity, enf Enforcement, add func(Entry)) error {
	rep := m.endpoint(id.Endpoints[0])
	for _, tier := range []struct {
		t    Tier
		pols []*Policy
	}{{TierAdmin, m.admin}, {TierBaseline, m.baseline}} {
		for rank, p := range tier.pols {
			for si := range p.Specs {
				sp := &p.Specs[si]
				if !m.selects(p, sp, rep) {
					continue
				}
				for _, dir := range []Dir{Ingress, Egress} {
					d := sp.Ingress
					isolated := enf.Ingress
					if dir == Egress {
						d, isolated = sp.Egress, enf.Egress
					}
					if tier.t == TierBaseline && isolated {
						continue
					}
					for i, r := range d.Ordered {
						base := Entry{Subject: id.ID, Dir: dir, Tier: tier.t, Prec: tierPrec(rank, i),
							Deny: r.Action == ActionDeny, Pass: r.Action == ActionPass}
						if tier.t == TierBaseline && base.Pass {
							base.Pass = false // nothing below the Baseline tier: a Pass allows
						}
						if err := m.compileTierRule(c, p, base, id, r, add); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}
