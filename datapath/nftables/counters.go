package nftables

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

var _ datapath.RuleCounterer = nft{}

// RuleCounters lists each host's table (nft -n list table inet cnlab)
// and reads its counters.
//
// With observe drops or all, the allow, deny and isolation sets and the
// tier maps count per element (their "counter" flag: a few bytes per
// element, updated only when the element matches), and each element is
// one RuleCounter: the endpoint its first field is, the direction of its
// set, and the IR entry it counts for (hostState.Origins: the first
// entry, in the order the IR walks them, covering the element's first
// flow; an element that merges several entries' ports counts for the
// first), or datapath.DefaultDenyRule for an isolated endpoint's element
// of *_enf; elements of one entry add up.
//
// With observe off the table is as it always was: no per-element
// counters, only the counter of each rule, which covers a whole verdict
// class of a direction (all endpoints of the host, all entries of the
// class). Then one RuleCounter per class and direction is returned,
// without an endpoint, with Rule "" for the allow and deny classes and
// datapath.DefaultDenyRule for the isolation drop; the tiers' maps are
// not counted. The counters cost nothing until read either way.
func (nft) RuleCounters(ctx context.Context, lab *topology.Spec) ([]datapath.RuleCounter, error) {
	var out []datapath.RuleCounter
	for _, h := range lab.Hosts {
		var st hostState
		if err := change.LoadState(change.StatePath(lab.Name, kind.NFTables, h.Name), &st); err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		listing, err := netns.Run(ctx, h.Netns, nil, "nft", "-n", "list", "table", table)
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		out = append(out, countRules(lab, h.Name, &st, string(listing))...)
	}
	return out, nil
}

// counted matches a counter in a listing.
var counted = regexp.MustCompile(`counter packets (\d+) bytes (\d+)`)

// countRules reads the counters of a host's listing: per element with
// st.Observe, else per rule (RuleCounters).
func countRules(lab *topology.Spec, host string, st *hostState, listing string) []datapath.RuleCounter {
	var sums datapath.RuleCounts
	add := func(rc datapath.RuleCounter, m []string) {
		packets, _ := strconv.ParseUint(m[1], 10, 64)
		bytes, _ := strconv.ParseUint(m[2], 10, 64)
		sums.Add(rc, packets, bytes)
	}
	suffix := fmt.Sprintf("_g%d", st.Gen)
	if st.Observe == "" {
		for _, line := range strings.Split(listing, "\n") {
			m := counted.FindStringSubmatch(line)
			_, set, ok := strings.Cut(line, " @")
			if m == nil || !ok {
				continue
			}
			set, _, _ = strings.Cut(set, " ")
			set, ok = strings.CutSuffix(set, suffix)
			if class, dir := classOf(set); ok && class != "" && class != "tier" {
				rc := datapath.RuleCounter{Host: host, Direction: dir, Verdict: class}
				if class == "default-deny" {
					rc.Rule = datapath.DefaultDenyRule
				}
				add(rc, m)
			}
		}
		return sums.List()
	}
	byIP := map[string]string{}
	for _, ep := range change.LocalEndpoints(lab, host) {
		for _, a := range ep.Addrs() {
			byIP[a.String()] = ep.ID()
		}
	}
	for set, elems := range setElements(listing) {
		set, ok := strings.CutSuffix(set, suffix)
		class, dir := classOf(set)
		if !ok || class == "" {
			continue
		}
		for _, e := range elems {
			e = strings.TrimSpace(e)
			loc := counted.FindStringSubmatchIndex(e)
			if loc == nil {
				continue
			}
			key, verdict := strings.TrimSpace(e[:loc[0]]), strings.TrimSpace(strings.TrimPrefix(e[loc[1]:], " :"))
			local, _, _ := strings.Cut(key, " ")
			rc := datapath.RuleCounter{Host: host, Endpoint: byIP[local], Direction: dir, Rule: st.Origins[originKey(set, key)], Verdict: class}
			if class == "tier" {
				rc.Verdict = "allow"
				if verdict == "drop" || strings.HasSuffix(verdict, "_drop") {
					rc.Verdict = "deny"
				}
			}
			if class == "default-deny" {
				rc.Rule = datapath.DefaultDenyRule
			}
			add(rc, []string{"", e[loc[2]:loc[3]], e[loc[4]:loc[5]]})
		}
	}
	out := sums.List()
	slices.SortFunc(out, func(a, b datapath.RuleCounter) int {
		return cmp.Or(cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Verdict, b.Verdict))
	})
	return out
}

// classOf is the verdict class of a set or map of a generation (allow,
// deny, default-deny, tier; "" for the others) and its direction.
func classOf(set string) (class, dir string) {
	set = unfam(set)
	dir = "ingress"
	if strings.HasPrefix(set, "eg_") {
		dir = "egress"
	}
	switch {
	case strings.HasSuffix(set, "_enf"):
		return "default-deny", dir
	case strings.Contains(set, "_deny"):
		return "deny", dir
	case strings.Contains(set, "_allow"):
		return "allow", dir
	case isTierMap(set):
		return "tier", dir
	}
	return "", dir
}

// setElements returns the elements of each set and map of a listing, as
// nft lists them ("key counter packets N bytes M", then " : verdict" in a
// map).
func setElements(listing string) map[string][]string {
	out := map[string][]string{}
	name, inElems := "", false
	for _, line := range strings.Split(listing, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "set ") || strings.HasPrefix(line, "map "):
			name, inElems = strings.Fields(line)[1], false
		case name != "" && strings.HasPrefix(line, "elements = {"):
			inElems, line = true, strings.TrimPrefix(line, "elements = {")
		case line == "}":
			name, inElems = "", false
		}
		if !inElems {
			continue
		}
		last := strings.HasSuffix(line, "}")
		for _, e := range strings.Split(strings.TrimSuffix(line, "}"), ",") {
			if e = strings.TrimSpace(e); e != "" {
				out[name] = append(out[name], e)
			}
		}
		if last {
			name, inElems = "", false
		}
	}
	return out
}
