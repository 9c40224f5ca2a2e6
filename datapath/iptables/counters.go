package iptables

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// RuleCounters reads the counters iptables keeps for every rule (what
// iptables -v shows; they cost nothing until read) with iptables-save -c
// in each host's namespace, and sums them per endpoint chain's rule: the
// chains of an endpoint (chainName and the cluster tiers'
// tierChainName) are found by the hash of its ID, their rules by the
// origin each carries as its comment. A rule of the IR is one iptables
// rule per peer prefix (or, with ipsets, per peer term): their counters
// add up. The verdict is the rule's target: DROP deny, ACCEPT or RETURN
// allow, a goto pass; an endpoint chain's last DROP, which carries no
// comment, is the endpoint's default deny (datapath.DefaultDenyRule). The
// log rules of observe, the drops of new connections to L7 ports and the
// redirects of CNLAB-L7 are not counted (an L7 port's allowed connections
// are decided in the nat table and never reach the endpoint's chain).
// An Admin Pass whose next step is the default drop is counted as a deny
// of the Pass rule's origin: its target is the drop itself.
func (d iptables) RuleCounters(ctx context.Context, lab *topology.Spec) ([]datapath.RuleCounter, error) {
	var out []datapath.RuleCounter
	for _, h := range lab.Hosts {
		// Both families' tables, summed: a rule counts IPv4 and IPv6.
		var listing []byte
		for _, fam := range families(lab) {
			_, save, _ := familyTools(lab, fam)
			text, err := netns.Run(ctx, h.Netns, nil, save, "-c", "-t", "filter")
			if err != nil {
				return nil, fmt.Errorf("host %s: %w", h.Name, err)
			}
			listing = append(listing, text...)
		}
		out = append(out, countRules(lab, h.Name, string(listing))...)
	}
	return out, nil
}

// countRules sums the counters of an iptables-save -c listing of a host
// per endpoint, direction and rule, in the order the listing has them.
func countRules(lab *topology.Spec, host, listing string) []datapath.RuleCounter {
	type owner struct {
		ep  string
		dir policy.Dir
	}
	chains := map[string]owner{}
	for _, ep := range change.LocalEndpoints(lab, host) {
		for _, dir := range []policy.Dir{policy.Egress, policy.Ingress} {
			for _, tier := range []string{"", "A", "B"} {
				chains[tierChainName(tier, dir, ep)] = owner{ep.ID(), dir}
			}
		}
	}
	var sums datapath.RuleCounts
	for _, line := range strings.Split(listing, "\n") {
		counts, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "] -A ")
		if !ok || !strings.HasPrefix(line, "[") {
			continue
		}
		chain, r, _ := strings.Cut(rest, " ")
		o, ok := chains[chain]
		if !ok {
			continue
		}
		pk, by, _ := strings.Cut(counts, ":")
		packets, err1 := strconv.ParseUint(pk, 10, 64)
		bytes, err2 := strconv.ParseUint(by, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		w := tokens(r)
		comment := ""
		if i := slices.Index(w, "--comment"); i >= 0 && i+1 < len(w) {
			comment = w[i+1]
		}
		target, isGoto := "", false
		for i := len(w) - 2; i >= 0; i-- {
			if w[i] == "-j" || w[i] == "-g" {
				target, isGoto = w[i+1], w[i] == "-g"
				break
			}
		}
		rc := datapath.RuleCounter{Host: host, Endpoint: o.ep, Direction: o.dir.String(), Rule: comment}
		switch {
		case target == "NFLOG" || comment == l7DropComment:
			continue
		case comment == "" && target == "DROP":
			rc.Rule, rc.Verdict = datapath.DefaultDenyRule, "default-deny"
		case comment == "":
			continue // a chain's end that returns or goes on
		case target == "DROP":
			rc.Verdict = "deny"
		case isGoto:
			rc.Verdict = "pass"
		case target == "ACCEPT" || target == "RETURN":
			rc.Verdict = "allow"
		default:
			continue
		}
		sums.Add(rc, packets, bytes)
	}
	return sums.List()
}

// tokens splits a rule into words, a double-quoted string being one.
func tokens(rule string) []string {
	var out []string
	for rule = strings.TrimSpace(rule); rule != ""; rule = strings.TrimSpace(rule) {
		if rule[0] == '"' {
			end := strings.IndexByte(rule[1:], '"') + 1
			if end == 0 {
				end = len(rule)
				out = append(out, rule[1:])
				break
			}
			out = append(out, rule[1:end])
			rule = rule[end+1:]
			continue
		}
		w, rest, _ := strings.Cut(rule, " ")
		out = append(out, w)
		rule = rest
	}
	return out
}

var _ datapath.RuleCounterer = iptables{}
