package nftables

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// traceDir is the direction of the endpoint whose chain a traced rule is
// in ("" for the forward chain).
func traceDir(traced string) string {
	chain, _, _ := strings.Cut(traced, ": ")
	switch {
	case strings.HasPrefix(chain, "in"), strings.HasPrefix(chain, "log_in"), strings.HasPrefix(chain, "l7"):
		return "ingress"
	case strings.HasPrefix(chain, "eg"), strings.HasPrefix(chain, "log_eg"):
		return "egress"
	}
	return ""
}

// checkLogs runs every new connection between endpoints through the
// interpreter at each observe level: the outcome must be the one with
// observe off; with drops, a dropped connection meets exactly one log
// statement, in the rule that drops it, a D of the right direction, and
// no other connection meets one; with all, every connection meets at
// least one. Ids: "-" for the set-based points, "l7" for l7fwd's drops,
// the RuleID of the entry that decided an l7 redirect (the rule's
// comment), or "-" for an endpoint whose ingress is not isolated.
func checkLogs(t *testing.T, lab *topology.Spec, c *policy.Compiled, label string) {
	t.Helper()
	render := func(l *topology.Spec, host string) hostState {
		st := Render(l, host, c)
		if st.Observe != "" {
			checkOrigins(t, l, c, st, label)
		}
		return st
	}
	policytest.ObserveCrossings(t, lab, label, render,
		func(hosts []hostState, src, dst *topology.Endpoint, tg policytest.Target) (outcome, string) {
			return crossing(t, hosts, packet{src.IP, dst.IP, tg.Proto, tg.Port})
		},
		func(what, level string, got outcome, lines []string) {
			trace := strings.Join(lines, "\n")
			logs := 0
			for i, l := range lines {
				_, prefix := unlog(t, l)
				if prefix == "" {
					continue
				}
				logs++
				pfx, _ := observe.ParsePrefix(prefix)
				if level == topology.ObserveDrops && (pfx.Verdict != observe.Dropped || got != dropped || i != len(lines)-1) {
					t.Fatalf("%s: log %+v\n%s", what, pfx, trace)
				}
				id := "-"
				switch {
				case strings.HasPrefix(l, "l7fwd: "):
					id = "l7"
				case strings.HasPrefix(l, "l7: "):
					_, why, _ := strings.Cut(l, " comment ")
					why = strings.Trim(why, `"`)
					if !strings.HasPrefix(why, "ingress of ") {
						id = observe.RuleID(why)
					}
				}
				if pfx.Direction != traceDir(l) || pfx.ID != id {
					t.Fatalf("%s: log %+v in %q, want direction %q id %q\n%s", what, pfx, l, traceDir(l), id, trace)
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

// checkOrigins: every element of the allow, deny and tier sets has an
// origin, the origin of an entry of its verdict that covers the
// element's first flow; every element of *_enf counts for the default
// deny.
func checkOrigins(t *testing.T, lab *topology.Spec, c *policy.Compiled, st hostState, label string) {
	t.Helper()
	pp := newPeers(lab, c)
	byOrigin := map[string][]policy.Entry{}
	for _, e := range c.Rules {
		byOrigin[e.Origin] = append(byOrigin[e.Origin], e)
	}
	for set, elems := range st.Sets {
		if strings.HasSuffix(unfam(set), "_subj") || strings.HasSuffix(unfam(set), "_np") {
			continue
		}
		for _, e := range elems {
			origin, ok := st.Origins[originKey(set, e)]
			if !ok {
				t.Fatalf("%s: %s element %q has no origin", label, set, e)
			}
			if strings.HasSuffix(unfam(set), "_enf") {
				if origin != datapath.DefaultDenyRule {
					t.Fatalf("%s: %s element %q counts for %q", label, set, e, origin)
				}
				continue
			}
			key, verdict, _ := strings.Cut(e, " : ")
			deny := strings.Contains(set, "deny") || verdict == "drop" || strings.HasSuffix(verdict, "_drop")
			parts := strings.Split(key, " . ")
			peer, err := netip.ParseAddr(parts[1])
			if err != nil {
				peer = netip.MustParsePrefix(parts[1]).Addr()
			}
			lo := func(s string) uint64 {
				var n uint64
				fmt.Sscan(strings.Split(s, "-")[0], &n)
				return n
			}
			proto, port := uint8(lo(parts[2])), uint16(0)
			if len(parts) == 4 {
				port = uint16(lo(parts[3]))
			}
			covered := false
			for _, r := range byOrigin[origin] {
				covered = covered || (r.Deny == deny && !r.Pass && ruleHasWith(pp.prefixes, r, peer, proto, port))
			}
			if !covered {
				t.Fatalf("%s: %s element %q: its origin %q has no entry of verdict deny=%v covering it", label, set, e, origin, deny)
			}
		}
	}
}

// TestObserveScenarios checks the log statements of every scenario, the
// cluster tiers' and the L7 ones (checkLogs).
func TestObserveScenarios(t *testing.T) {
	all := append(append([]scenarios.Scenario{}, scenarios.All...), scenarios.Tiers...)
	for _, sc := range scenarios.L7 {
		all = append(all, scenarios.Scenario{Name: sc.Name, Policies: sc.Policies})
	}
	all = append(all, scenarios.Scenario{Name: "tiered", Policies: policytest.TieredYAML + policytest.TieredNP},
		scenarios.Scenario{Name: "l7 beneath the Admin tier", Policies: scenarios.L7[0].Policies + "---\n" + policytest.L7PassYAML})
	for _, sc := range all {
		lab, _, c := policytest.CompilePolicies(t, policytest.Parse(t, sc.Policies), topology.Overrides{})
		checkLogs(t, lab, c, sc.Name)
	}
}

// TestObserveOffRendersAsBefore: with observe off (or unset) the table
// has no log statement and no counter flag, its generation's declarations
// are those of before; drops and all only add log statements, counters
// and the tier maps' log chains.
func TestObserveOffRendersAsBefore(t *testing.T) {
	lab, _, c := policytest.CompilePolicies(t, policytest.Parse(t, policytest.TieredYAML+policytest.TieredNP+"---\n"+scenarios.L7[0].Policies), topology.Overrides{})
	for _, h := range lab.Hosts {
		unset := Render(policytest.AtLevel(lab, ""), h.Name, c)
		off := Render(policytest.AtLevel(lab, topology.ObserveOff), h.Name, c)
		script := skeletonFor(off.layout()) + fill(0, off.Sets) + l7Script(&hostState{}, &off, true)
		if fmt.Sprint(unset) != fmt.Sprint(off) || off.Observe != "" || off.Origins != nil ||
			strings.Contains(script, "log") || strings.Contains(script, "counter;") {
			t.Fatalf("%s: observe off differs from unset or logs:\n%s", h.Name, script)
		}
		for _, level := range []string{topology.ObserveDrops, topology.ObserveAll} {
			st := Render(policytest.AtLevel(lab, level), h.Name, c)
			obs := skeletonFor(st.layout()) + fill(0, st.Sets) + l7Script(&hostState{}, &st, true)
			if !strings.Contains(obs, "log group") || !strings.Contains(obs, "counter;") {
				t.Errorf("%s %s: no log statement or counter:\n%s", h.Name, level, obs)
			}
			var stripped []string
			for _, line := range strings.Split(obs, "\n") {
				if strings.Contains(line, " log_") && !strings.Contains(line, "element") {
					continue // the log chains
				}
				line, _ = unlog(t, line)
				line = strings.ReplaceAll(line, " counter;", "")
				for _, v := range []string{"drop", "fwd"} {
					for _, d := range []string{"eg", "in"} {
						to := map[string]string{"drop": "drop", "fwdeg": "return", "fwdin": "accept"}[v+map[bool]string{true: d}[v == "fwd"]]
						line = strings.ReplaceAll(line, "goto log_"+d+"_"+v, to)
					}
				}
				stripped = append(stripped, line)
			}
			// The end of the forward chain logs only.
			want := strings.Split(script, "\n")
			got := strings.Join(stripped, "\n")
			if i := strings.Index(got, "add rule inet cnlab forward ct state new "); i >= 0 { // the end of the forward chain
				j := strings.Index(got[i:], "\n")
				got = got[:i] + got[i+j+1:]
			}
			if got != strings.Join(want, "\n") {
				t.Errorf("%s %s: without its logs and counters\n%s\nwant\n%s", h.Name, level, got, script)
			}
		}
	}
}

// TestLevelChangeRebuilds: a change of observe level is a new generation
// whose script declares the log chains the new level has and deletes,
// after the old generation, those it no longer has.
func TestLevelChangeRebuilds(t *testing.T) {
	off, drops, all := layout{}, layout{observe: topology.ObserveDrops}, layout{observe: topology.ObserveAll}
	for _, tc := range []struct {
		from, to      layout
		want, without []string
	}{
		{off, drops, []string{"add chain inet cnlab log_in_drop", `prefix "cnlab D - invalid" drop`}, []string{"log_in_fwd", "delete chain inet cnlab log_"}},
		{drops, all, []string{"add chain inet cnlab log_in_fwd", `ct state new counter log group 7420 snaplen 128 prefix "cnlab F - -"`}, []string{"delete chain inet cnlab log_"}},
		{all, drops, []string{"delete chain inet cnlab log_eg_fwd", "delete chain inet cnlab log_in_fwd"}, []string{"delete chain inet cnlab log_in_drop", "add chain inet cnlab log_in_fwd"}},
		{all, off, []string{"delete chain inet cnlab log_eg_fwd", "delete chain inet cnlab log_in_drop"}, []string{"add chain inet cnlab log_", "log group", "counter;"}},
	} {
		script := rebuildTiers(1, tc.from, 2, tc.to, nil)
		for _, w := range tc.want {
			if !strings.Contains(script, w) {
				t.Errorf("%q -> %q: lacks %q:\n%s", tc.from.observe, tc.to.observe, w, script)
			}
		}
		for _, w := range tc.without {
			if strings.Contains(script, w) {
				t.Errorf("%q -> %q: has %q:\n%s", tc.from.observe, tc.to.observe, w, script)
			}
		}
		if i, j := strings.Index(script, "delete chain inet cnlab ingress_g1"), strings.Index(script, "delete chain inet cnlab log_"); j >= 0 && j < i {
			t.Errorf("log chains deleted before the generation that goes to them:\n%s", script)
		}
	}
}
