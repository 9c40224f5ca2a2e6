package iptables

import (
	"fmt"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// With observe: drops or all (topology.Spec.ObserveLevel), each verdict
// point the level logs is preceded by an NFLOG rule with the same match,
// to observe.NFLOGGroup with a prefix observe.ParsePrefix reads (NFLOG is
// not terminal: the verdict rule that follows decides). Verdict points
// are reached only by packets that are not ESTABLISHED or RELATED
// (CNLAB-FWD accepts those first, the nat table sees only a connection's
// first packet), so a flow is logged at its first packet (and at each
// retransmission of a dropped one), not at every packet:
//
//   - drops: the INVALID drop of CNLAB-FWD ("cnlab D - invalid"), every
//     deny rule of an endpoint's chains ("cnlab D I|E <RuleID(origin)>"),
//     an isolated endpoint's chain-end drop ("cnlab D I|E -"), the drops
//     of new connections to L7 ports that came around the proxy ("cnlab
//     D I l7");
//   - all: those, every allow rule ("cnlab F I|E <RuleID(origin)>"), the
//     redirects of CNLAB-L7 to the proxy ("cnlab R I <RuleID>", "-"
//     for an endpoint whose ingress is not isolated), and at the end of
//     CNLAB-FWD every new flow no chain accepted or dropped ("cnlab F - -")
//     but those to the endpoints of other hosts, which return first (the
//     destination's host logs them: its ingress decides), so every new
//     flow is logged at least once.
//
// With observe off nothing is added: the chains are as they always were.
type observer struct{ level string }

// target is the NFLOG target of a verdict point giving verdict, "" when
// the level does not log it. dir is the endpoint chain's direction;
// dirKnown false for the points of CNLAB-FWD itself.
func (o observer) target(verdict string, dir policy.Dir, dirKnown bool, id string) string {
	if !datapath.Logs(o.level, verdict) {
		return ""
	}
	prefix := observe.LogPrefix(verdict, dir == policy.Ingress, dirKnown, id)
	return fmt.Sprintf("-j NFLOG --nflog-prefix %q --nflog-group %d --nflog-size %d --nflog-threshold 1", prefix, observe.NFLOGGroup, datapath.LogSnapLen)
}

// before returns the log rule of a verdict point whose rule is match and
// then the verdict (nil when the level does not log it).
func (o observer) before(match, verdict string, dir policy.Dir, dirKnown bool, id string) []string {
	t := o.target(verdict, dir, dirKnown, id)
	if t == "" {
		return nil
	}
	if match == "" {
		return []string{t}
	}
	return []string{match + " " + t}
}

// end is the end of CNLAB-FWD: with observe all, the flows to other
// hosts' endpoints return, every other new flow is logged.
func (o observer) end(lab *topology.Spec, host string, fam int) []string {
	log := o.before("-m conntrack --ctstate NEW", observe.Forwarded, 0, false, "-")
	if log == nil {
		return nil
	}
	var out []string
	for _, p := range remotePrefixes(lab, host, fam) {
		out = append(out, "-d "+p.String()+" -j RETURN")
	}
	return append(out, log...)
}
