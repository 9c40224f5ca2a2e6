// Package nftables is the modern netfilter datapath: one table per lab and
// host ("inet cnlab" in each host namespace) whose forward chain looks
// every new connection up in sets instead of walking rules. Concatenated
// interval sets keyed by (local endpoint, peer prefix, protocol, port
// range) hold the allowed and denied flows per direction; plain sets say
// which endpoints are isolated. An update is the difference between what
// is in the sets and what should be, sent as one nft transaction per host,
// so it is atomic and its cost follows the size of the change. With
// observe drops or all, the rules at the verdict points carry log
// statements and the sets count per element (observe.go, counters.go). It
// never touches the root network namespace.
package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Descriptor binds the nftables kind to this implementation.
var Descriptor = datapath.Descriptor{Kind: kind.NFTables, New: New}

const table = "inet cnlab"

// Sets of the table. The *_subj sets hold local endpoints with policy in
// that direction, *_enf those isolated (default drop), *_deny and *_allow
// the flows: the *_x sets are hash sets of exact flows (one peer address,
// one protocol, one port — the common case, added and found in constant
// time), the others interval sets for prefixes and ranges (the kernel's
// pipapo sets, whose updates cost more as they grow; see BENCHMARKS.md).
// The *_p sets hold the flows that cover every port, keyed without one:
// they are looked up without reading the transport header, so that they
// also match packets that have none or too short a one for "th dport"
// (which then matches nothing).
var setNames = []string{"eg_subj", "in_subj", "eg_enf", "in_enf",
	"eg_deny_x", "eg_deny", "eg_deny_p", "eg_allow_x", "eg_allow", "eg_allow_p",
	"in_deny_x", "in_deny", "in_deny_p", "in_allow_x", "in_allow", "in_allow_p"}

// intervalSets are the sets with flags interval.
var intervalSets = map[string]bool{"eg_deny": true, "eg_allow": true, "in_deny": true, "in_allow": true,
	"eg_deny_p": true, "eg_allow_p": true, "in_deny_p": true, "in_allow_p": true}

// The cluster tiers (policy.Tier) are verdict maps, looked up only on
// hosts whose endpoints have elements in them, and only those maps that
// have (hostState.Tiers: another chain layout, so a host without cluster
// policy pays nothing for them). Per direction, the Admin tier's *_adm
// maps come first, the Baseline tier's *_base maps last, after the
// NetworkPolicy tier's lookups and its isolation drop for the endpoints
// that have any (npSets, chainDeclsFor; the IR has Baseline entries only
// where a direction is not isolated). Their elements do not overlap:
// each holds the verdict of the entry that comes first in the tier's
// order (Ordered), so one lookup is the tier's first match, whatever the
// number of cluster policies. An allow returns (egress: on to the
// destination's ingress) or accepts (ingress), a deny drops; where a Pass
// comes first there is no element, and the chain goes on to the
// NetworkPolicy tier. The *_p maps are keyed without a port, as the *_p
// sets.
var tierMaps = []string{"eg_adm", "eg_adm_p", "in_adm", "in_adm_p", "eg_base", "eg_base_p", "in_base", "in_base_p"}

// The table holds one generation of sets and lookup chains at a time,
// named with a suffix _gN. Small changes edit the current generation's
// sets; a change that would delete many elements from an interval set
// builds generation N+1 complete, points the forward chain at it and
// deletes generation N, all in one transaction: deleting a whole set is
// cheap, deleting its elements one by one is not (see BENCHMARKS.md).

func setDecls(g int, l layout) string {
	var b strings.Builder
	for _, name := range setNames {
		typ := "ipv4_addr . ipv4_addr . inet_proto . inet_service"
		flags := ""
		switch {
		case strings.HasSuffix(name, "_subj"), strings.HasSuffix(name, "_enf"):
			typ = "ipv4_addr"
		case strings.HasSuffix(name, "_p"):
			typ, flags = "ipv4_addr . ipv4_addr . inet_proto", " flags interval;"
		case intervalSets[name]:
			flags = " flags interval;"
		}
		if l.observe != "" && !strings.HasSuffix(name, "_subj") {
			flags += " counter;"
		}
		fmt.Fprintf(&b, "add set %s %s_g%d { type %s;%s }\n", table, name, g, typ, flags)
	}
	return b.String()
}

// npSets hold, in a generation with tier maps, the local endpoints with
// NetworkPolicy-tier entries or isolation per direction: those whose
// chain looks the NetworkPolicy tier's sets up (chainDeclsFor).
var npSets = []string{"eg_np", "in_np"}

// tierDecls declares generation g's tier maps and npSets.
func tierDecls(g int, l layout) string {
	var b strings.Builder
	counter := ""
	if l.observe != "" {
		counter = " counter;"
	}
	for _, name := range tierMaps {
		typ := "ipv4_addr . ipv4_addr . inet_proto . inet_service"
		if strings.HasSuffix(name, "_p") {
			typ = "ipv4_addr . ipv4_addr . inet_proto"
		}
		fmt.Fprintf(&b, "add map %s %s_g%d { type %s : verdict; flags interval;%s }\n", table, name, g, typ, counter)
	}
	for _, name := range npSets {
		fmt.Fprintf(&b, "add set %s %s_g%d { type ipv4_addr; }\n", table, name, g)
	}
	return b.String()
}

// tierLookups are the rules of a direction's chain that look a tier up
// (dir "eg" or "in", tier "adm" or "base"), for the maps in tiers.
func tierLookups(g int, dir, tier string, tiers []string) []string {
	key := "ip saddr . ip daddr"
	if dir == "in" {
		key = "ip daddr . ip saddr"
	}
	var out []string
	if m := dir + "_" + tier; slices.Contains(tiers, m) {
		out = append(out, fmt.Sprintf("%s . meta l4proto . th dport vmap @%s_g%d", key, m, g))
	}
	if m := dir + "_" + tier + "_p"; slices.Contains(tiers, m) {
		out = append(out, fmt.Sprintf("%s . meta l4proto vmap @%s_g%d", key, m, g))
	}
	return out
}

func chainDecls(g int) string { return chainDeclsFor(g, layout{}) }

// The NetworkPolicy tier's rules of each direction's chain.
var (
	egressNP = []string{
		"ip saddr . ip daddr . meta l4proto . th dport @eg_deny_x_g%d counter drop",
		"ip saddr . ip daddr . meta l4proto . th dport @eg_deny_g%d counter drop",
		"ip saddr . ip daddr . meta l4proto @eg_deny_p_g%d counter drop",
		"ip saddr . ip daddr . meta l4proto . th dport @eg_allow_x_g%d counter return",
		"ip saddr . ip daddr . meta l4proto . th dport @eg_allow_g%d counter return",
		"ip saddr . ip daddr . meta l4proto @eg_allow_p_g%d counter return",
		"ip saddr @eg_enf_g%d counter drop",
	}
	ingressNP = []string{
		"ip daddr . ip saddr . meta l4proto . th dport @in_deny_x_g%d counter drop",
		"ip daddr . ip saddr . meta l4proto . th dport @in_deny_g%d counter drop",
		"ip daddr . ip saddr . meta l4proto @in_deny_p_g%d counter drop",
		"ip daddr . ip saddr . meta l4proto . th dport @in_allow_x_g%d counter accept",
		"ip daddr . ip saddr . meta l4proto . th dport @in_allow_g%d counter accept",
		"ip daddr . ip saddr . meta l4proto @in_allow_p_g%d counter accept",
		"ip daddr @in_enf_g%d counter drop",
	}
)

// chainDeclsFor declares generation g's chains, with lookups of the tier
// maps in tiers. Without tiers, each direction's chain is the
// NetworkPolicy tier's lookups. With them, it is the Admin tier's
// lookups; then an endpoint with NetworkPolicy-tier entries or isolation
// in that direction (*_np) goes to the direction's *_np chain (goto: an
// allow there returns to the forward chain), which is the NetworkPolicy
// tier's lookups followed by the Baseline tier's; any other endpoint goes
// on to the Baseline tier's lookups straight away, without looking the
// NetworkPolicy tier's sets up.
func chainDeclsFor(g int, l layout) string {
	tiers := l.tiers
	var b strings.Builder
	rule := func(chain, r string) { fmt.Fprintf(&b, "add rule %s %s_g%d %s\n", table, chain, g, r) }
	dirs := []struct {
		dir, chain, key string
		np              []string
	}{{"eg", "egress", "ip saddr", egressNP}, {"in", "ingress", "ip daddr", ingressNP}}
	if len(tiers) > 0 {
		for _, d := range dirs {
			fmt.Fprintf(&b, "add chain %s %s_np_g%d\n", table, d.chain, g)
		}
	}
	for _, d := range dirs {
		fmt.Fprintf(&b, "add chain %s %s_g%d\n", table, d.chain, g)
		np := l.logNP(d.np, d.dir == "in")
		if len(tiers) == 0 {
			for _, r := range np {
				rule(d.chain, fmt.Sprintf(r, g))
			}
			continue
		}
		for _, r := range tierLookups(g, d.dir, "adm", tiers) {
			rule(d.chain, r)
		}
		rule(d.chain, fmt.Sprintf("%s @%s_np_g%d goto %s_np_g%d", d.key, d.dir, g, d.chain, g))
		base := tierLookups(g, d.dir, "base", tiers)
		for _, r := range base {
			rule(d.chain, r)
		}
		for _, r := range np {
			rule(d.chain+"_np", fmt.Sprintf(r, g))
		}
		for _, r := range base {
			rule(d.chain+"_np", r)
		}
	}
	return b.String()
}

// forwardRules (re)writes the forward chain to use generation g.
func forwardRules(g int, l layout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "flush chain %s forward\n", table)
	rules := []string{
		"ct state established,related accept",
		"ct state invalid " + l.log(observe.Dropped, false, false, "invalid") + "drop",
		fmt.Sprintf("ip saddr @eg_subj_g%d jump egress_g%d", g, g),
		fmt.Sprintf("ip daddr @in_subj_g%d jump ingress_g%d", g, g),
	}
	if end := l.log(observe.Forwarded, false, false, "-"); end != "" {
		remote := ""
		if len(l.remote) > 0 {
			remote = "ip daddr != { " + strings.Join(l.remote, ", ") + " } "
		}
		rules = append(rules, "ct state new "+remote+"counter "+strings.TrimSpace(end))
	}
	for _, r := range rules {
		fmt.Fprintf(&b, "add rule %s forward %s\n", table, r)
	}
	return b.String()
}

func dropGeneration(g int) string { return dropGenerationFor(g, layout{}) }

// dropGenerationFor deletes generation g, with its tier maps if it has
// any lookup (l.tiers).
func dropGenerationFor(g int, l layout) string {
	tiers := l.tiers
	var b strings.Builder
	fmt.Fprintf(&b, "delete chain %s egress_g%d\ndelete chain %s ingress_g%d\n", table, g, table, g)
	if len(tiers) > 0 {
		fmt.Fprintf(&b, "delete chain %s egress_np_g%d\ndelete chain %s ingress_np_g%d\n", table, g, table, g)
	}
	for _, name := range setNames {
		fmt.Fprintf(&b, "delete set %s %s_g%d\n", table, name, g)
	}
	if len(tiers) > 0 {
		for _, name := range tierMaps {
			fmt.Fprintf(&b, "delete map %s %s_g%d\n", table, name, g)
		}
		for _, name := range npSets {
			fmt.Fprintf(&b, "delete set %s %s_g%d\n", table, name, g)
		}
	}
	return b.String()
}

// skeleton creates the table with generation 0, empty.
func skeleton() string { return skeletonFor(layout{}) }

// skeletonFor is skeleton with the layout l: the tier maps and lookups
// of l.tiers, the log statements and counters of l.observe.
func skeletonFor(l layout) string {
	return "add table " + table + "\ndelete table " + table + "\nadd table " + table + "\n" +
		"add chain " + table + " forward { type filter hook forward priority filter; policy accept; }\n" +
		generationDecls(0, l) + forwardRules(0, l)
}

// generationDecls declares generation g's sets and chains, and with
// l.tiers (the tier maps looked up) every tier map; with l.observe, the
// log chains the tier maps' elements go to (logChains).
func generationDecls(g int, l layout) string {
	decls := setDecls(g, l) + l.logChains()
	if len(l.tiers) == 0 {
		return decls + chainDeclsFor(g, l)
	}
	return decls + tierDecls(g, l) + chainDeclsFor(g, l)
}

type nft struct{}

// New returns the nftables datapath.
func New() datapath.Datapath { return nft{} }

// Setup creates the table in every host (replacing any left from before),
// turns br_netfilter on so that bridged traffic meets the forward chain,
// and binds each endpoint's bridge port to its addresses in a second
// table, "bridge cnlab" (datapath.BindPorts).
func (nft) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	script := skeleton()
	for _, h := range lab.Hosts {
		if err := change.EnableBridgeNetfilter(h.Netns); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if _, err := netns.Run(ctx, h.Netns, []byte(script), "nft", "-f", "-"); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		path := change.StatePath(lab.Name, kind.NFTables, h.Name)
		if err := change.SaveState(path, hostState{}); err != nil {
			return err
		}
		if err := change.ClearDirty(path); err != nil {
			return err
		}
	}
	return datapath.BindPorts(ctx, lab)
}

// hostState is the content of every set on a host, and the generation
// the forward chain uses.
type hostState struct {
	Gen  int                 `json:"gen"`
	Sets map[string][]string `json:"sets"`
	// L7 and L7Fwd are the rules of the L7 chains (l7.go).
	L7    []string `json:"l7,omitempty"`
	L7Fwd []string `json:"l7fwd,omitempty"`
	// Tiers are the tier maps with elements, which the generation's
	// chains look up (sorted; the generation has every tier map when
	// there is one).
	Tiers []string `json:"tiers,omitempty"`
	// Observe is the lab's observe level when it logs (drops, all; ""
	// when off): the generation's rules carry log statements, its sets
	// and maps per-element counters (observe.go).
	Observe string `json:"observe,omitempty"`
	// Origins, with Observe, is the IR entry's origin each element of
	// the allow, deny and tier sets counts for, by set and element key
	// (originKey): RuleCounters reads the elements' counters with it.
	Origins map[string]string `json:"origins,omitempty"`
	// Remote, with observe all, are the prefixes of the other hosts'
	// endpoints (datapath.RemotePrefixes), whose flows the end of the
	// forward chain does not log.
	Remote []string `json:"remote,omitempty"`
}

// layout is what a generation's declarations depend on besides the
// elements: the tier maps looked up and the observe level.
func (s *hostState) layout() layout {
	return layout{tiers: s.Tiers, observe: s.Observe, remote: s.Remote}
}

// Apply sends each host the difference between its sets and the wanted
// ones in one transaction. If the kernel refuses the incremental change,
// a new generation is built; if it refuses that too, or the host's
// recorded state cannot be trusted, the table is recreated.
func (d nft) Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error {
	return change.ApplyHosts(ctx, lab, kind.NFTables, c.Set,
		func(host string) hostState { return Render(lab, host, c) },
		update)
}

// update brings a host from have to want: in place when that deletes few
// elements from interval sets, else through a new generation (always when
// the observe level changes, recreating the table when it goes off). It records
// the generation used in want. With have nil (the state file cannot be
// trusted: the kernel may be on another generation than it says), or when
// the kernel refuses the new generation, it deletes and recreates the
// table with generation 0 holding want, in one transaction:
// established connections survive it (conntrack is not in the table).
func update(ctx context.Context, h *topology.Host, have, want *hostState) error {
	// Back to observe off, the table is made anew, as generation 0: as a
	// lab that never observed has it (the log chains go with it).
	if have == nil || (have.Observe != "" && want.Observe == "") {
		return recreate(ctx, h, want)
	}
	want.Gen = have.Gen
	l7 := l7Script(have, want, false)
	script, ok := diffScript(have.Gen, have.Sets, want.Sets)
	// Tier maps filling or emptying, or another observe level, change the
	// chains' layout: a new generation.
	if ok && slices.Equal(have.Tiers, want.Tiers) && have.Observe == want.Observe {
		script = l7 + script
		if script == "" {
			return nil
		}
		if err := change.Load(ctx, h, script, "nft", "-f", "-"); err == nil {
			return nil
		}
		// The kernel refused the edit (its sets may not be what the state
		// file says): rebuild instead.
	}
	want.Gen = have.Gen + 1
	if err := change.Load(ctx, h, l7+rebuildTiers(have.Gen, have.layout(), want.Gen, want.layout(), want.Sets), "nft", "-f", "-"); err == nil {
		return nil
	}
	// The kernel is not on the generation the state file says.
	return recreate(ctx, h, want)
}

// recreate replaces the host's table with one holding want as generation 0.
func recreate(ctx context.Context, h *topology.Host, want *hostState) error {
	want.Gen = 0
	return change.Load(ctx, h, skeletonFor(want.layout())+fill(0, want.Sets)+l7Script(&hostState{}, want, true), "nft", "-f", "-")
}

// fill adds the elements of sets to generation g's sets.
func fill(g int, sets map[string][]string) string {
	var b strings.Builder
	for _, set := range allSets {
		if len(sets[set]) > 0 {
			b.WriteString(elements("add", fmt.Sprintf("%s_g%d", set, g), sets[set]))
		}
	}
	return b.String()
}

// rebuildScript builds generation to with the given sets, switches the
// forward chain to it and deletes generation from, in one transaction.
func rebuildScript(from, to int, sets map[string][]string) string {
	return rebuildTiers(from, layout{}, to, layout{}, sets)
}

// rebuildTiers is rebuildScript from a generation of layout fl (the tier
// maps it looks up, the observe level) to one of layout tl. The log
// chains go once no generation's elements go to them.
func rebuildTiers(from int, fl layout, to int, tl layout, sets map[string][]string) string {
	var b strings.Builder
	b.WriteString(generationDecls(to, tl))
	b.WriteString(fill(to, sets))
	b.WriteString(forwardRules(to, tl))
	b.WriteString(dropGenerationFor(from, fl))
	b.WriteString(dropLogChains(fl.observe, tl.observe))
	return b.String()
}

// allSets are the sets and the tier maps, in the order scripts write them.
var allSets = append(append(append([]string(nil), setNames...), tierMaps...), npSets...)

func elements(op, set string, elems []string) string {
	var b strings.Builder
	for i := 0; i < len(elems); i += 500 {
		j := min(i+500, len(elems))
		fmt.Fprintf(&b, "%s element %s %s { %s }\n", op, table, set, strings.Join(elems[i:j], ", "))
	}
	return b.String()
}

// diffScript edits generation g's sets from have to want. ok is false when
// the edit would delete more than maxDeletes elements from one interval
// set, or more elements than it keeps: a new generation is cheaper then.
func diffScript(g int, have, want map[string][]string) (script string, ok bool) {
	var b strings.Builder
	dels, keep := 0, 0
	for _, set := range allSets {
		old := toSet(have[set])
		cur := toSet(want[set])
		var del, add []string
		for e := range old {
			if !cur[e] {
				del = append(del, e)
			}
		}
		for e := range cur {
			if !old[e] {
				add = append(add, e)
			}
		}
		if (intervalSets[set] || isTierMap(set)) && len(del) > maxDeletes {
			return "", false
		}
		dels += len(del)
		keep += len(cur)
		sort.Strings(del)
		sort.Strings(add)
		name := fmt.Sprintf("%s_g%d", set, g)
		if len(del) > 0 {
			if isTierMap(set) { // a map's element is deleted by its key
				for i, e := range del {
					del[i], _, _ = strings.Cut(e, " : ")
				}
			}
			b.WriteString(elements("delete", name, del))
		}
		if len(add) > 0 {
			b.WriteString(elements("add", name, add))
		}
	}
	// Deleting more than what stays (delete --all, say) costs more than
	// building the rest afresh.
	if dels > maxDeletes && dels > keep {
		return "", false
	}
	return b.String(), true
}

// isTierMap says a set of hostState is one of the tiers' maps.
func isTierMap(set string) bool {
	return strings.Contains(set, "_adm") || strings.Contains(set, "_base")
}

// maxDeletes is the number of deletions from one interval set above which
// a new generation is built instead (see diffScript and BENCHMARKS.md).
const maxDeletes = 32

func toSet(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// Render computes the content of every set on one host. It is pure, so
// it is tested without root.
func Render(lab *topology.Spec, host string, c *policy.Compiled) hostState {
	st := hostState{Sets: map[string][]string{}}
	if level := lab.ObserveLevel(); datapath.Logs(level, observe.Dropped) {
		st.Observe, st.Origins = level, map[string]string{}
	}
	if datapath.Logs(st.Observe, observe.Forwarded) {
		for _, p := range datapath.RemotePrefixes(lab, host) {
			st.Remote = append(st.Remote, p.String())
		}
	}
	np := map[string][]string{} // npSets, kept when the host has tier maps
	for _, ep := range change.LocalEndpoints(lab, host) {
		id := c.IdentityOfIP(ep.IP)
		enf := c.Enforced[id]
		for _, dir := range []policy.Dir{policy.Egress, policy.Ingress} {
			prefix := "in_"
			enforced := enf.Ingress
			if dir == policy.Egress {
				prefix, enforced = "eg_", enf.Egress
			}
			rules := c.RulesFor(id, dir)
			if len(rules) == 0 && !enforced {
				continue
			}
			st.Sets[prefix+"subj"] = append(st.Sets[prefix+"subj"], ep.IP.String())
			if enforced || slices.ContainsFunc(rules, func(r policy.Entry) bool { return r.Tier != policy.TierAdmin && r.Tier != policy.TierBaseline }) {
				np[prefix+"np"] = append(np[prefix+"np"], ep.IP.String())
			}
			if enforced {
				st.Sets[prefix+"enf"] = append(st.Sets[prefix+"enf"], ep.IP.String())
				st.origin(prefix+"enf", ep.IP.String(), datapath.DefaultDenyRule)
			}
			var allow, deny, admin, base []policy.Entry
			for _, r := range rules {
				switch {
				case r.Tier == policy.TierAdmin:
					admin = append(admin, r)
				case r.Tier == policy.TierBaseline:
					base = append(base, r)
				case r.Deny:
					deny = append(deny, r)
				default:
					allow = append(allow, r)
				}
			}
			for tier, rs := range map[string][]policy.Entry{"adm": admin, "base": base} {
				if len(rs) == 0 {
					continue
				}
				for _, b := range Ordered(c, rs) {
					set := prefix + tier
					if b.anyPort() {
						set += "_p"
					}
					st.Sets[set] = append(st.Sets[set], b.element(ep.IP)+" : "+tierVerdict(dir, b.Verdict, st.Observe))
					st.originOf(c, set, ep.IP, b.Box, rs)
				}
			}
			for kind, rs := range map[string][]policy.Entry{"allow": allow, "deny": deny} {
				for _, b := range Disjoint(c, rs) {
					for _, e := range b.split() {
						set := prefix + kind
						switch {
						case e.exact():
							set += "_x"
						case e.anyPort():
							set += "_p"
						}
						st.Sets[set] = append(st.Sets[set], e.element(ep.IP))
						st.originOf(c, set, ep.IP, e, rs)
					}
				}
			}
		}
	}
	for k := range st.Sets {
		sort.Strings(st.Sets[k])
		if isTierMap(k) {
			st.Tiers = append(st.Tiers, k)
		}
	}
	sort.Strings(st.Tiers)
	if len(st.Tiers) > 0 {
		for k, v := range np {
			st.Sets[k] = v // in the order of LocalEndpoints, as *_subj
			sort.Strings(st.Sets[k])
		}
	}
	st.L7, st.L7Fwd = renderL7(lab, host, c)
	return st
}

// tierVerdict is the verdict of a tier map's element; with an observe
// level that logs it, a goto to the log chain that logs and gives it
// (logChains).
func tierVerdict(dir policy.Dir, v Verdict, level string) string {
	verdict := observe.Forwarded
	if v == Deny {
		verdict = observe.Dropped
	}
	if datapath.Logs(level, verdict) {
		return "goto " + logChain(dir, verdict)
	}
	switch {
	case v == Deny:
		return "drop"
	case dir == policy.Egress:
		return "return" // on to the destination's ingress
	}
	return "accept"
}

// Verdict is what the first entry covering a box does.
type Verdict uint8

// Verdicts of Ordered's boxes (a Pass, or no entry, gives no box).
const (
	none Verdict = iota
	Allow
	Deny
)

// VBox is a box with the verdict of the entry that decides it.
type VBox struct {
	Box
	Verdict Verdict
}

// Ordered turns the entries of one cluster tier of a subject and
// direction, in the tier's order (RulesFor: by Prec), into boxes that do
// not overlap, each with the verdict of the first entry covering it: the
// tier's first match as one lookup. Where the first entry is a Pass, or
// none covers, there is no box. Per peer atom (as Disjoint), each
// protocol an entry names gets the port ranges between the entries'
// bounds, every other protocol the first entry of any protocol; runs of
// protocols with one verdict on every port are one box.
func Ordered(c *policy.Compiled, rules []policy.Entry) []VBox {
	verdict := func(r policy.Entry) Verdict {
		switch {
		case r.Pass:
			return none
		case r.Deny:
			return Deny
		}
		return Allow
	}
	var out []VBox
	for _, ac := range coveringAtoms(c, rules) {
		atom, rs := ac.atom, ac.rules
		named := map[uint8]bool{}
		for _, r := range rs {
			if r.Proto != policy.ProtoAny {
				named[r.Proto] = true
			}
		}
		// The protocols no entry names get the first entry of any
		// protocol.
		anyV := none
		for _, r := range rs {
			if r.Proto == policy.ProtoAny {
				anyV = verdict(r)
				break
			}
		}
		// ports returns the port ranges of a named protocol between the
		// bounds of its entries, each with the verdict of the first
		// entry covering it, adjacent ranges of one verdict merged:
		// each entry in order paints the ranges it covers that no entry
		// before it did (next skips those painted).
		ports := func(proto uint8) []VBox {
			cuts := []int{0, 65536}
			for _, r := range rs {
				if r.Proto == proto && r.PortLo != 0 {
					cuts = append(cuts, int(r.PortLo), int(max(r.PortLo, r.PortHi))+1)
				}
			}
			sort.Ints(cuts)
			cuts = slices.Compact(cuts)
			n := len(cuts) - 1
			vs := make([]Verdict, n)
			next := make([]int, n+1) // next[i]: the first range not painted at or after i (found, with path halving)
			for i := range next {
				next[i] = i
			}
			find := func(i int) int {
				for next[i] != i {
					next[i] = next[next[i]]
					i = next[i]
				}
				return i
			}
			left := n
			for _, r := range rs {
				a, b := 0, n
				switch {
				case r.Proto == policy.ProtoAny, r.Proto == proto && r.PortLo == 0:
				case r.Proto == proto:
					a, _ = slices.BinarySearch(cuts, int(r.PortLo))
					b, _ = slices.BinarySearch(cuts, int(max(r.PortLo, r.PortHi))+1)
				default:
					continue
				}
				for i := find(a); i < b; i = find(i) {
					vs[i] = verdict(r)
					next[i] = i + 1
					left--
				}
				if left == 0 {
					break
				}
			}
			var out []VBox
			for i, v := range vs {
				lo, hi := uint16(cuts[i]), uint16(cuts[i+1]-1)
				if k := len(out); k > 0 && out[k-1].Verdict == v {
					out[k-1].PortHi = hi
					continue
				}
				out = append(out, VBox{Box{Peer: atom, ProtoLo: proto, ProtoHi: proto, PortLo: lo, PortHi: hi}, v})
			}
			return out
		}
		// Walk the protocols: a run of protocols each with one verdict
		// on every port is one box; a named protocol with several is
		// its port ranges.
		var run *VBox
		flush := func() {
			if run != nil && run.Verdict != none {
				out = append(out, *run)
			}
			run = nil
		}
		for p := 0; p <= 255; p++ {
			proto := uint8(p)
			v := anyV
			if named[proto] {
				vs := ports(proto)
				if len(vs) > 1 {
					flush()
					for _, b := range vs {
						if b.Verdict != none {
							out = append(out, b)
						}
					}
					continue
				}
				v = vs[0].Verdict
			}
			if run != nil && run.Verdict == v {
				run.ProtoHi = proto
				continue
			}
			flush()
			run = &VBox{Box{Peer: atom, ProtoLo: proto, ProtoHi: proto, PortLo: 0, PortHi: 65535}, v}
		}
		flush()
	}
	return out
}

// Box is one set element: a peer prefix, a protocol range and a port
// range.
type Box struct {
	Peer             netip.Prefix
	ProtoLo, ProtoHi uint8
	PortLo, PortHi   uint16
}

// maxExpand is the widest port range of one peer address that goes into
// the hash sets as one element per port rather than into an interval set.
const maxExpand = 16

// split turns a narrow port range towards one address into exact flows:
// hash-set elements cost far less to add and remove than interval ones.
func (b Box) split() []Box {
	if b.Peer.Bits() != 32 || b.ProtoLo != b.ProtoHi || b.ProtoLo == 0 || int(b.PortHi)-int(b.PortLo) >= maxExpand {
		return []Box{b}
	}
	var out []Box
	for p := int(b.PortLo); p <= int(b.PortHi); p++ {
		e := b
		e.PortLo, e.PortHi = uint16(p), uint16(p)
		out = append(out, e)
	}
	return out
}

// exact reports whether the box is a single flow: one peer address, one
// protocol, one port. Exact boxes go to hash sets.
func (b Box) exact() bool {
	return b.Peer.Bits() == 32 && b.ProtoLo == b.ProtoHi && b.PortLo == b.PortHi
}

// anyPort reports whether the box covers every port: its set is keyed
// without one (the *_p sets).
func (b Box) anyPort() bool { return b.PortLo == 0 && b.PortHi == 65535 }

func (b Box) element(local netip.Addr) string {
	if b.exact() {
		return fmt.Sprintf("%s . %s . %d . %d", local, b.Peer.Addr(), b.ProtoLo, b.PortLo)
	}
	proto := fmt.Sprint(b.ProtoLo)
	if b.ProtoHi != b.ProtoLo {
		proto = fmt.Sprintf("%d-%d", b.ProtoLo, b.ProtoHi)
	}
	if b.anyPort() {
		return fmt.Sprintf("%s . %s . %s", local, b.Peer, proto)
	}
	port := fmt.Sprint(b.PortLo)
	if b.PortHi != b.PortLo {
		port = fmt.Sprintf("%d-%d", b.PortLo, b.PortHi)
	}
	return fmt.Sprintf("%s . %s . %s . %s", local, b.Peer, proto, port)
}

// atomCover is one disjoint peer atom and the rules covering it, in the
// rules' order.
type atomCover struct {
	atom  netip.Prefix
	rules []policy.Entry
}

// coveringAtoms splits the peers of rules into disjoint atoms (the
// kernel's interval sets refuse overlapping elements) and gives each the
// rules whose peer covers it.
func coveringAtoms(c *policy.Compiled, rules []policy.Entry) []atomCover {
	type cover struct {
		pfx netip.Prefix
		r   policy.Entry
	}
	var covers []cover
	seen := map[netip.Prefix]bool{}
	var prefixes []netip.Prefix
	for _, r := range rules {
		for _, p := range c.PeerPrefixesOf(r, 4) {
			covers = append(covers, cover{p, r})
			if !seen[p] {
				seen[p] = true
				prefixes = append(prefixes, p)
			}
		}
	}
	var out []atomCover
	for _, atom := range atoms(prefixes) {
		ac := atomCover{atom: atom}
		for _, cv := range covers {
			if cv.pfx.Contains(atom.Addr()) && cv.pfx.Bits() <= atom.Bits() {
				ac.rules = append(ac.rules, cv.r)
			}
		}
		out = append(out, ac)
	}
	return out
}

// Disjoint turns the rules of one subject and direction into set elements
// that do not overlap (the kernel's interval sets refuse overlapping
// elements). Peer prefixes are split into disjoint atoms; for each atom,
// the ports of every rule covering it are merged per protocol.
func Disjoint(c *policy.Compiled, rules []policy.Entry) []Box {
	var out []Box
	for _, ac := range coveringAtoms(c, rules) {
		atom := ac.atom
		all := false
		ports := map[uint8][][2]uint16{}
		for _, r := range ac.rules {
			if r.Proto == policy.ProtoAny {
				all = true
				break
			}
			lo, hi := r.PortLo, r.PortHi
			if lo == 0 {
				lo, hi = 0, 65535
			}
			ports[r.Proto] = append(ports[r.Proto], [2]uint16{lo, hi})
		}
		if all {
			out = append(out, Box{Peer: atom, ProtoLo: 0, ProtoHi: 255, PortLo: 0, PortHi: 65535})
			continue
		}
		var protos []int
		for p := range ports {
			protos = append(protos, int(p))
		}
		sort.Ints(protos)
		for _, p := range protos {
			for _, iv := range merge(ports[uint8(p)]) {
				out = append(out, Box{Peer: atom, ProtoLo: uint8(p), ProtoHi: uint8(p), PortLo: iv[0], PortHi: iv[1]})
			}
		}
	}
	return out
}

// atoms splits a set of prefixes into disjoint prefixes, each entirely
// inside or outside every input prefix.
func atoms(prefixes []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range prefixes {
		var inner []netip.Prefix
		for _, q := range prefixes {
			if q.Bits() > p.Bits() && p.Contains(q.Addr()) {
				inner = append(inner, q)
			}
		}
		out = append(out, policy.Subtract(p, inner)...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr() != out[j].Addr() {
			return out[i].Addr().Less(out[j].Addr())
		}
		return out[i].Bits() < out[j].Bits()
	})
	return out
}

// merge unions port intervals.
func merge(ivs [][2]uint16) [][2]uint16 {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i][0] < ivs[j][0] })
	var out [][2]uint16
	for _, iv := range ivs {
		if n := len(out); n > 0 && int(iv[0]) <= int(out[n-1][1])+1 {
			out[n-1][1] = max(out[n-1][1], iv[1])
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Describe lists the tables of every host: the policy table, then the
// port table.
func (nft) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for _, h := range lab.Hosts {
		text, err := netns.Run(ctx, h.Netns, nil, "nft", "list", "table", table)
		if err != nil {
			return nil, err
		}
		ports, err := datapath.DescribePorts(ctx, h.Netns)
		if err != nil {
			return nil, err
		}
		out[h.Name] = string(text) + ports
	}
	return out, nil
}
