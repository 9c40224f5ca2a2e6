package iptables

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// nflogPrefix returns the prefix of a traced NFLOG rule ("" for another
// rule).
func nflogPrefix(t *testing.T, traced string) (observe.Prefix, bool) {
	t.Helper()
	_, r, _ := strings.Cut(traced, ": ")
	w := tokens(r)
	i := slices.Index(w, "NFLOG")
	if i < 0 || w[i-1] != "-j" {
		return observe.Prefix{}, false
	}
	p, ok := observe.ParsePrefix(w[i+2])
	if !ok {
		t.Fatalf("NFLOG rule %q: prefix %q is not cnlab's", r, w[i+2])
	}
	if w[i+4] != fmt.Sprint(observe.NFLOGGroup) || w[i+6] != "128" || w[i+8] != "1" {
		t.Fatalf("NFLOG rule %q: group, size or threshold", r)
	}
	return p, true
}

// decidedBy is what a log rule of the verdict rule traced must carry:
// its direction (from the chain's name) and id (RuleID of the rule's
// origin, "-" for a default drop or a Pass on to it, "l7" for an L7
// port's drop), and the entry of that origin (nil for none).
func decidedBy(t *testing.T, c *policy.Compiled, traced string) (dir, id string, e *policy.Entry) {
	t.Helper()
	chain, r, _ := strings.Cut(traced, ": ")
	switch {
	case chain == "nat":
		dir = "ingress"
	case chain == fwdChain:
	case strings.Contains(chain, "I-"):
		dir = "ingress"
	default:
		dir = "egress"
	}
	w := tokens(r)
	i := slices.Index(w, "--comment")
	if i < 0 {
		return dir, "-", nil
	}
	comment := w[i+1]
	if comment == l7DropComment {
		return dir, "l7", nil
	}
	if e = entryOf(c, comment); e != nil {
		if e.Pass {
			return dir, "-", e
		}
		return dir, observe.RuleID(comment), e
	}
	if strings.HasPrefix(comment, "ingress of ") {
		return dir, "-", nil
	}
	t.Fatalf("rule %q: comment %q is no entry's origin", r, comment)
	return
}

// checkLogs runs every new connection between endpoints through the
// interpreter at each observe level: the outcome must be the one with
// observe off; with drops, a dropped connection meets exactly one log
// rule, just before its drop, a D whose direction and id name the rule
// that dropped it (observe.RuleID of a deny entry's origin), and no other
// connection meets one; with all, every connection meets at least one,
// each F or R log just before the rule that forwards or redirects it
// (an allow entry's origin), or the end of CNLAB-FWD's F - -.
func checkLogs(t *testing.T, lab *topology.Spec, c *policy.Compiled, label string) {
	t.Helper()
	policytest.ObserveCrossings(t, lab, label, func(l *topology.Spec, host string) hostState { return Render(l, host, c) },
		func(hosts []hostState, src, dst *topology.Endpoint, tg policytest.Target) (outcome, string) {
			return crossing(t, hosts, packet{src.IP, dst.IP, tg.Proto, tg.Port})
		},
		func(what, level string, got outcome, lines []string) {
			trace := strings.Join(lines, "\n")
			logs := 0
			for i, l := range lines {
				pfx, ok := nflogPrefix(t, l)
				if !ok {
					continue
				}
				logs++
				if level == topology.ObserveDrops && (pfx.Verdict != observe.Dropped || got != dropped || i != len(lines)-2) {
					t.Fatalf("%s: log %+v\n%s", what, pfx, trace)
				}
				if strings.HasPrefix(l, fwdChain+": -m conntrack --ctstate NEW ") { // the end of CNLAB-FWD
					if pfx.Verdict != observe.Forwarded || pfx.Direction != "" || pfx.ID != "-" {
						t.Fatalf("%s: last log %+v\n%s", what, pfx, trace)
					}
					continue
				}
				dir, id, e := decidedBy(t, c, lines[i+1])
				if pfx.Direction != dir || pfx.ID != id {
					t.Fatalf("%s: log %+v before %q, want direction %q id %q\n%s", what, pfx, lines[i+1], dir, id, trace)
				}
				if e != nil && id != "-" && e.Deny != (pfx.Verdict == observe.Dropped) {
					t.Fatalf("%s: log %+v of entry %+v", what, pfx, *e)
				}
			}
			switch {
			case level == topology.ObserveDrops && (logs == 1) != (got == dropped):
				t.Fatalf("%s: %d logs, %v\n%s", what, logs, got, trace)
			case strings.Count(trace, `"cnlab F - -"`) > 1:
				t.Fatalf("%s: the end of the forward chain logged on two hosts\n%s", what, trace)
			case level == topology.ObserveAll && logs == 0:
				t.Fatalf("%s: no log\n%s", what, trace)
			}
		})
}

// TestObserveScenarios checks the log rules of every scenario, the
// cluster tiers' and the L7 ones, with and without ipsets (checkLogs).
func TestObserveScenarios(t *testing.T) {
	all := append(append([]scenarios.Scenario{}, scenarios.All...), scenarios.Tiers...)
	for _, sc := range scenarios.L7 {
		all = append(all, scenarios.Scenario{Name: sc.Name, Policies: sc.Policies})
	}
	for _, sc := range all {
		for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
			lab, _, c := policytest.CompilePolicies(t, policytest.Parse(t, sc.Policies), ov)
			checkLogs(t, lab, c, sc.Name)
		}
	}
	pols := append(policytest.Parse(t, scenarios.L7[0].Policies), l7PassGo()...)
	lab, _, c := policytest.CompilePolicies(t, pols, topology.Overrides{})
	checkLogs(t, lab, c, "l7 beneath the Admin tier")
}

// TestObserveOffRendersAsBefore: with observe off (or unset) no rule
// names NFLOG, and drops and all only add log rules: taking out every
// NFLOG rule leaves the state off renders.
func TestObserveOffRendersAsBefore(t *testing.T) {
	pols := append(policytest.Parse(t, policytest.TieredYAML+policytest.TieredNP), policytest.Parse(t, scenarios.L7[0].Policies)...)
	for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
		lab, _, c := policytest.CompilePolicies(t, pols, ov)
		for _, h := range lab.Hosts {
			unset := Render(policytest.AtLevel(lab, ""), h.Name, c)
			off := Render(policytest.AtLevel(lab, topology.ObserveOff), h.Name, c)
			if fmt.Sprint(unset) != fmt.Sprint(off) || strings.Contains(fmt.Sprint(off), "NFLOG") {
				t.Fatalf("%s: observe off differs from unset or logs", h.Name)
			}
			for _, level := range []string{topology.ObserveDrops, topology.ObserveAll} {
				st := Render(policytest.AtLevel(lab, level), h.Name, c)
				if !strings.Contains(fmt.Sprint(st), "NFLOG") {
					t.Errorf("%s %s: no log rule", h.Name, level)
				}
				strip := func(rules []string) []string {
					return slices.DeleteFunc(slices.Clone(rules), func(r string) bool {
						// The log rules, and with all the returns of the flows to other hosts before the last.
						return strings.Contains(r, "-j NFLOG ") || (level == topology.ObserveAll && strings.HasPrefix(r, "-d ") && strings.HasSuffix(r, "/24 -j RETURN"))
					})
				}
				for name, rules := range st.Chains {
					st.Chains[name] = strip(rules)
				}
				st.NAT = strip(st.NAT)
				if fmt.Sprint(st) != fmt.Sprint(off) {
					t.Errorf("%s %s: without its log rules\n%v\nwant\n%v", h.Name, level, st, off)
				}
			}
		}
	}
}
