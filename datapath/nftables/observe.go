package nftables

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
)

// With observe: drops or all (topology.Spec.ObserveLevel), the rules at
// the verdict points the level logs carry a log statement before their
// verdict, in the same rule: "log group observe.NFLOGGroup snaplen 128
// prefix ..." (the headers only; the NFLOG instance's queue threshold,
// 1, sends each packet at once), with a prefix observe.ParsePrefix reads.
// Verdict points are reached only by packets that are neither established
// nor related (the forward chain accepts those first; l7fwd's rules match
// ct state new; nat prerouting sees only a connection's first packet), so
// a flow is logged at its first packet:
//
//   - drops: conntrack's invalid drop ("cnlab D - invalid"), the deny
//     sets' rules and the isolated endpoints' drop (*_enf) of each
//     direction ("cnlab D E -", "cnlab D I -"), the Admin and Baseline
//     tiers' drops (their maps' elements go to log_eg_drop or
//     log_in_drop, which log and drop), l7fwd's drops of new connections
//     to L7 ports that came around the proxy ("cnlab D I l7");
//   - all: those, the allow sets' rules and the tiers' allows
//     (log_eg_fwd, log_in_fwd: "cnlab F E -", "cnlab F I -"), the l7
//     chain's redirects to the proxy ("cnlab R I <RuleID>", "-" for an
//     endpoint whose ingress is not isolated), and at the end of the
//     forward chain every new flow no chain accepted or dropped (prefix
//     "cnlab F - -") but those to other hosts' endpoints
//     (hostState.Remote: the destination's host logs them, where its
//     ingress is decided), so every new flow is logged at least once.
//
// One rule (or one log chain) serves a whole verdict class of a
// direction: the elements of its set or map stand for many IR entries,
// so the prefix's id is "-" there, and the recorder resolves which entry
// decided from the compiled policy (the flow's addresses, protocol and
// port looked up as policy.Compiled does); the l7 chain's rules are per
// entry and carry its observe.RuleID. The sets and maps then also count
// per element (their "counter" flag), which RuleCounters reads.
//
// With observe off nothing is added: the table is as it always was. A
// change of level is a change of layout: a new generation (update).
type layout struct {
	tiers   []string // the tier maps looked up
	observe string   // the observe level when it logs, else ""
	remote  []string // with observe all, the prefixes of other hosts' endpoints
}

// log is the log statement of a verdict point giving verdict ("" when
// the level does not log it), followed by a space.
func (l layout) log(verdict string, ingress, dirKnown bool, id string) string {
	if !datapath.Logs(l.observe, verdict) {
		return ""
	}
	return logStmt(verdict, ingress, dirKnown, id)
}

// logStmt is a log statement, followed by a space.
func logStmt(verdict string, ingress, dirKnown bool, id string) string {
	return fmt.Sprintf("log group %d snaplen %d prefix %q ", observe.NFLOGGroup, datapath.LogSnapLen, observe.LogPrefix(verdict, ingress, dirKnown, id))
}

// logNP returns the NetworkPolicy tier's rules of a direction (egressNP,
// ingressNP) with the log statements of the level before their verdicts.
func (l layout) logNP(rules []string, ingress bool) []string {
	if l.observe == "" {
		return rules
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		k := strings.LastIndexByte(r, ' ') + 1
		verdict := observe.Forwarded
		if r[k:] == "drop" {
			verdict = observe.Dropped
		}
		out[i] = r[:k] + l.log(verdict, ingress, true, "-") + r[k:]
	}
	return out
}

// logChain names the chain a tier map's element goes to when its verdict
// is logged: log_eg_drop, log_eg_fwd, log_in_drop, log_in_fwd.
func logChain(dir policy.Dir, verdict string) string {
	d := "in"
	if dir == policy.Egress {
		d = "eg"
	}
	v := "fwd"
	if verdict == observe.Dropped {
		v = "drop"
	}
	return "log_" + d + "_" + v
}

// logChains declares the log chains of the level (none when off),
// outside the generations: the elements that go to them are the same in
// every generation. Each logs, then gives the tier's verdict: drop,
// return (egress: on to the destination's ingress) or accept.
func (l layout) logChains() string {
	var b strings.Builder
	for _, dir := range []policy.Dir{policy.Egress, policy.Ingress} {
		for _, verdict := range []string{observe.Dropped, observe.Forwarded} {
			if !datapath.Logs(l.observe, verdict) {
				continue
			}
			name := logChain(dir, verdict)
			v := "drop"
			switch {
			case verdict == observe.Dropped:
			case dir == policy.Egress:
				v = "return"
			default:
				v = "accept"
			}
			stmt := logStmt(verdict, dir == policy.Ingress, true, "-")
			fmt.Fprintf(&b, "add chain %s %s\nflush chain %s %s\nadd rule %s %s %s%s\n", table, name, table, name, table, name, stmt, v)
		}
	}
	return b.String()
}

// dropLogChains deletes the log chains of level from that level to
// does not have, once no element goes to them (the generation of from
// deleted before).
func dropLogChains(from, to string) string {
	var b strings.Builder
	for _, dir := range []policy.Dir{policy.Egress, policy.Ingress} {
		for _, verdict := range []string{observe.Dropped, observe.Forwarded} {
			if datapath.Logs(from, verdict) && !datapath.Logs(to, verdict) {
				fmt.Fprintf(&b, "delete chain %s %s\n", table, logChain(dir, verdict))
			}
		}
	}
	return b.String()
}

// originKey is the key of Origins for an element of a set: the set and
// the element's key (a map's without its verdict), /32 prefixes written
// as addresses, as nft lists them.
func originKey(set, element string) string {
	key, _, _ := strings.Cut(element, " : ")
	return set + " " + strings.ReplaceAll(key, "/32", "")
}

// origin records what an element counts for (with observe).
func (s *hostState) origin(set, element, origin string) {
	if s.Origins != nil {
		s.Origins[originKey(set, element)] = origin
	}
}

// originOf records (with observe) the origin of the first entry of rules
// that covers the first flow of box b, the element of local in set: the
// entry that decides that flow (rules in the order the IR walks them).
// An element that merges several entries' ports counts for the first.
func (s *hostState) originOf(c *policy.Compiled, set string, local netip.Addr, b Box, rules []policy.Entry) {
	if s.Origins == nil {
		return
	}
	for _, r := range rules {
		if r.Proto != policy.ProtoAny && (r.Proto != b.ProtoLo || (r.PortLo != 0 && (b.PortLo < r.PortLo || b.PortLo > max(r.PortLo, r.PortHi)))) {
			continue
		}
		for _, p := range c.PeerPrefixesOf(r, 4) {
			if p.Contains(b.Peer.Addr()) && p.Bits() <= b.Peer.Bits() {
				s.origin(set, b.element(local), r.Origin)
				return
			}
		}
	}
}
