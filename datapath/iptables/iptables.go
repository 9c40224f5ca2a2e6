// Package iptables is the classic Docker-host datapath: rules in the
// FORWARD chain of each host, seen by traffic crossing the host's bridge
// (br_netfilter) or routed to another host, matched top-down. Established
// and related traffic is accepted first; then each local endpoint with
// policy gets a chain of its own for egress and one for ingress, with one
// rule per (peer address, protocol, port range), denies before allows —
// or, with peers: ipsets, one rule per peer term as written matching an
// ipset of its addresses, as Calico's felix does (ipsets.go). Cluster
// policies add an Admin-tier chain before an endpoint's chain and a
// Baseline-tier chain after it (endpointChains). Changes go
// through iptables-restore --noflush, one atomic commit per host,
// rewriting only the chains that changed; sets are written before it and
// destroyed after it. With observe drops or all, an NFLOG rule precedes
// each verdict point the level logs (observe.go); iptables' own counters
// per rule are read back per policy rule (counters.go). It never touches
// the root network namespace.
package iptables

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Chains cnlab owns in the filter table.
const (
	fwdChain = "CNLAB-FWD"
	comment  = "cnlab policy"
)

type iptables struct{}

// New returns the iptables datapath.
func New() datapath.Datapath { return iptables{} }

// Descriptor binds the iptables kind to this implementation.
var Descriptor = datapath.Descriptor{Kind: kind.IPTables, New: New}

func tools(lab *topology.Spec) (restore, save, bin string) { return lab.IPTables.Tools() }

// Setup turns br_netfilter on in every host, creates CNLAB-FWD with no
// policy (filler and the established-accept rule) and hooks it into
// FORWARD once, and binds each endpoint's bridge port to its addresses
// (datapath.BindPorts: an nftables bridge table, since iptables matches
// neither MACs against sets nor ARP).
func (d iptables) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	if hasIPv6(lab) {
		for _, tool := range ipv6Tools(lab) {
			if _, err := exec.LookPath(tool); err != nil {
				return fmt.Errorf("%s is not installed (Debian package iptables): a lab with IPv6 needs it", tool)
			}
		}
	}
	for _, h := range lab.Hosts {
		if err := change.EnableBridgeNetfilter(h.Netns); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if hasIPv6(lab) {
			if err := netns.Do(h.Netns, func() error { return netns.SetSysctl("net/bridge/bridge-nf-call-ip6tables", "1") }); err != nil {
				return fmt.Errorf("host %s: %w", h.Name, err)
			}
		}
		for _, fam := range families(lab) {
			_, _, bin := familyTools(lab, fam)
			if _, err := netns.Run(ctx, h.Netns, nil, bin, "-w", "-N", fwdChain); err != nil && !strings.Contains(err.Error(), "Chain already exists") {
				return fmt.Errorf("host %s: %w", h.Name, err)
			}
			if _, err := netns.Run(ctx, h.Netns, nil, bin, "-w", "-C", "FORWARD", "-m", "comment", "--comment", comment, "-j", fwdChain); err != nil {
				if _, err := netns.Run(ctx, h.Netns, nil, bin, "-w", "-I", "FORWARD", "1", "-m", "comment", "--comment", comment, "-j", fwdChain); err != nil {
					return fmt.Errorf("host %s: %w", h.Name, err)
				}
			}
		}
	}
	return datapath.BindPorts(ctx, lab)
}

// hostState is what was last applied on a host: the rules of each chain,
// and with peers: ipsets the sets they match.
type hostState struct {
	Chains map[string][]string `json:"chains"`
	Sets   map[string]ipset    `json:"sets,omitempty"`
	// NAT are the rules of CNLAB-L7 in the nat table (l7.go); the chain
	// and its jump exist once a host has had an L7 port.
	NAT []string `json:"nat,omitempty"`
	// NAT6 are the rules of CNLAB-L7 in the IPv6 nat table (ip6tables),
	// in a lab with IPv6.
	NAT6 []string `json:"nat6,omitempty"`
	// Chains6 are the chains of the IPv6 filter table (ip6tables), the
	// same chains rendered for the endpoints' IPv6 addresses, in a lab
	// with IPv6 (family.go); Chains are the IPv4 table's.
	Chains6 map[string][]string `json:"chains6,omitempty"`
}

// Apply writes each host's chains, rewriting only those that changed and
// removing those no longer needed, in one iptables-restore commit. A host
// whose recorded state cannot be trusted is rebuilt from what
// iptables-save shows: every wanted chain rewritten, every other cnlab
// chain removed, in one commit too. With peers: ipsets, the sets that
// changed are written before the commit and those no rule names any more
// destroyed after it (a rebuild writes every wanted set and destroys
// every other cnlab set of the host).
func (d iptables) Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error {
	_, _, bin := tools(lab)
	_, _, bin6 := familyTools(lab, 6)
	ipsets := lab.IPTables.IPSets()
	rebuild := func(ctx context.Context, h *topology.Host, want *hostState) error {
		var existing []string
		if ipsets {
			var err error
			if existing, err = listSets(ctx, h.Netns); err != nil {
				return err
			}
			// A temporary set left by a crash (no rule names one) might
			// not take the new members' parameters: remove it first.
			var tmps []string
			existing = slices.DeleteFunc(existing, func(n string) bool {
				if strings.HasSuffix(n, tmpSuffix) {
					tmps = append(tmps, n)
					return true
				}
				return false
			})
			existing = append(existing, destroySets(ctx, h.Netns, tmps)...)
			if err := writeSets(ctx, h.Netns, nil, want.Sets, func(n string) bool { return slices.Contains(existing, n) }); err != nil {
				return err
			}
			if err := fault.At(fault.IPSetsWritten, h.Name); err != nil {
				return err
			}
		}
		for _, fam := range families(lab) {
			restore, save, _ := familyTools(lab, fam)
			listing, err := netns.Run(ctx, h.Netns, nil, save, "-t", "filter")
			if err != nil {
				return err
			}
			script := rebuildScript(ownChains(string(listing)), want.chainsOf(fam))
			if !hasJump(string(listing)) {
				script = strings.TrimSuffix(script, "COMMIT\n") + jumpRule + "\nCOMMIT\n"
			}
			if fam == 4 {
				if jumped := natJumped(ctx, h, bin); len(want.NAT) > 0 || jumped {
					script = natScript(nil, want.NAT, true, !jumped) + script
				}
			} else if jumped := natJumped(ctx, h, bin6); len(want.NAT6) > 0 || jumped {
				script = natScript(nil, want.NAT6, true, !jumped) + script
			}
			if err := change.Load(ctx, h, script, restore, "-w", "--noflush"); err != nil {
				return err
			}
		}
		var gone []string
		for _, n := range existing {
			if _, ok := want.Sets[n]; !ok {
				gone = append(gone, n)
			}
		}
		keepSets(want, destroySets(ctx, h.Netns, gone), nil)
		return nil
	}
	return change.ApplyHosts(ctx, lab, kind.IPTables, c.Set,
		func(host string) hostState { return Render(lab, host, c) },
		func(ctx context.Context, h *topology.Host, have, want *hostState) error {
			// Without the jump from FORWARD (removed by hand) no
			// chain of cnlab's is seen: put it back with the rest.
			if have == nil {
				return rebuild(ctx, h, want)
			}
			for _, fam := range families(lab) {
				_, _, bin := familyTools(lab, fam)
				if _, jumpErr := netns.Run(ctx, h.Netns, nil, bin, "-w", "-C", "FORWARD", "-m", "comment", "--comment", comment, "-j", fwdChain); jumpErr != nil {
					return rebuild(ctx, h, want)
				}
			}
			inHave := func(n string) bool { _, ok := have.Sets[n]; return ok }
			if err := writeSets(ctx, h.Netns, have.Sets, want.Sets, inHave); err != nil {
				// The kernel may not hold the sets the state file
				// says: rebuild from what it holds.
				return rebuild(ctx, h, want)
			}
			if ipsets {
				if err := fault.At(fault.IPSetsWritten, h.Name); err != nil {
					return err
				}
			}
			// With L7 ports, three commits (l7.go, natSteps): the
			// redirects of both sets, the filter chains, the new
			// redirects alone.
			var steps []string
			if len(want.NAT) > 0 || len(have.NAT) > 0 {
				steps = natSteps(have.NAT, want.NAT, diffScript(have.Chains, want.Chains), !natJumped(ctx, h, bin))
			} else {
				steps = []string{diffScript(have.Chains, want.Chains)}
			}
			restore, _, _ := tools(lab)
			type load struct{ script, restore string }
			var loads []load
			for _, script := range steps {
				loads = append(loads, load{script, restore})
			}
			if hasIPv6(lab) { // then IPv6's chains, in commits of their own, ordered as IPv4's
				restore6, _, _ := familyTools(lab, 6)
				steps6 := []string{diffScript(have.Chains6, want.Chains6)}
				if len(want.NAT6) > 0 || len(have.NAT6) > 0 {
					steps6 = natSteps(have.NAT6, want.NAT6, steps6[0], !natJumped(ctx, h, bin6))
				}
				for _, script := range steps6 {
					loads = append(loads, load{script, restore6})
				}
			}
			for _, l := range loads {
				if l.script == "" {
					continue
				}
				if err := change.Load(ctx, h, l.script, l.restore, "-w", "--noflush"); err != nil {
					// The kernel may not hold what the state file says (a
					// hand edit): rebuild from what it holds.
					return rebuild(ctx, h, want)
				}
			}
			keepSets(want, destroySets(ctx, h.Netns, goneSets(have.Sets, want.Sets)), have.Sets)
			return nil
		})
}

// keepSets records in want the sets the kernel would not destroy (from
// have when known), so that the next apply tries again.
func keepSets(want *hostState, kept []string, have map[string]ipset) {
	for _, n := range kept {
		if want.Sets == nil {
			want.Sets = map[string]ipset{}
		}
		want.Sets[n] = have[n]
	}
}

// jumpRule hooks CNLAB-FWD into FORWARD, first, in a restore script.
var jumpRule = fmt.Sprintf("-I FORWARD 1 -m comment --comment %q -j %s", comment, fwdChain)

// hasJump reports whether an iptables-save listing has FORWARD's jump to
// CNLAB-FWD.
func hasJump(listing string) bool {
	for _, line := range strings.Split(listing, "\n") {
		if strings.HasPrefix(line, "-A FORWARD ") && strings.HasSuffix(line, " -j "+fwdChain) {
			return true
		}
	}
	return false
}

// ownChains returns the cnlab chains in an iptables-save listing.
func ownChains(listing string) []string {
	var out []string
	for _, line := range strings.Split(listing, "\n") {
		if name, ok := strings.CutPrefix(line, ":CNLAB-"); ok {
			out = append(out, "CNLAB-"+strings.Fields(name)[0])
		}
	}
	return out
}

// diffScript returns an iptables-restore script that turns the chains in
// have into those in want ("" when nothing changes).
func diffScript(have, want map[string][]string) string {
	var changed, gone []string
	for name, rules := range want {
		if old, ok := have[name]; !ok || strings.Join(old, "\n") != strings.Join(rules, "\n") {
			changed = append(changed, name)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	return restoreScript(changed, gone, want)
}

// rebuildScript rewrites every wanted chain and removes every other chain
// of existing (the cnlab chains the kernel has).
func rebuildScript(existing []string, want map[string][]string) string {
	var changed, gone []string
	for name := range want {
		changed = append(changed, name)
	}
	for _, name := range existing {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	return restoreScript(changed, gone, want)
}

// restoreScript rewrites the changed chains and removes the gone ones.
// Declaring a chain flushes it; chains no longer wanted are flushed and
// deleted after the chains that jumped to them have been rewritten.
func restoreScript(changed, gone []string, want map[string][]string) string {
	if len(changed) == 0 && len(gone) == 0 {
		return ""
	}
	sort.Strings(changed)
	sort.Strings(gone)
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, name := range changed {
		fmt.Fprintf(&b, ":%s - [0:0]\n", name)
	}
	for _, name := range gone {
		fmt.Fprintf(&b, ":%s - [0:0]\n", name)
	}
	for _, name := range changed {
		for _, r := range want[name] {
			fmt.Fprintf(&b, "-A %s %s\n", name, r)
		}
	}
	for _, name := range gone {
		fmt.Fprintf(&b, "-X %s\n", name)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// chainName names an endpoint's chain: CNLAB-E- (egress) or CNLAB-I-
// (ingress) and 8 hex digits of a hash of the endpoint's ID.
func chainName(dir policy.Dir, ep *topology.Endpoint) string { return tierChainName("", dir, ep) }

// tierChainName names an endpoint's chain of a cluster tier: CNLAB-AE-,
// CNLAB-AI- (Admin) or CNLAB-BE-, CNLAB-BI- (Baseline), the hash as in
// chainName; tier "" is the NetworkPolicy tier's chain, chainName.
func tierChainName(tier string, dir policy.Dir, ep *topology.Endpoint) string {
	h := fnv.New32a()
	h.Write([]byte(ep.ID()))
	d := "I"
	if dir == policy.Egress {
		d = "E"
	}
	return fmt.Sprintf("CNLAB-%s%s-%08x", tier, d, h.Sum32())
}

// Render computes the chains of one host for a compiled policy: CNLAB-FWD
// and one chain per local endpoint and direction that has rules or is
// isolated, with the cluster tiers' chains around it (endpointChains). It
// is pure, so it is tested without root.
func Render(lab *topology.Spec, host string, c *policy.Compiled) hostState {
	st := hostState{}
	o := observer{lab.ObserveLevel()}
	var sets map[string]ipset
	if lab.IPTables.IPSets() {
		sets = map[string]ipset{}
	}
	st.Chains = renderChains(lab, host, c, newFamView(lab, 4), sets, o)
	if hasIPv6(lab) {
		st.Chains6 = renderChains(lab, host, c, newFamView(lab, 6), sets, o)
	}
	if len(sets) > 0 {
		st.Sets = sets
	}
	st.NAT = renderL7(lab, host, c, 4, o)
	st.NAT6 = renderL7(lab, host, c, 6, o)
	return st
}

// renderChains renders the chains of one family's filter table (4:
// iptables, 6: ip6tables) for the endpoints that have an address of
// that family. With peers: ipsets, the sets the rules match are added to
// sets (those of IPv6 are sets of their own, setName6).
func renderChains(lab *topology.Spec, host string, c *policy.Compiled, v famView, sets map[string]ipset, o observer) map[string][]string {
	chains := map[string][]string{}
	var fwd []string
	filler := topology.FillerRulesOf(lab.IPTables.Filler, v.fam) // shared with the chain firewall
	if lab.IPTables.FillerMode == kind.FillerNoMatch {
		fwd = append(fwd, filler...)
	}
	fwd = append(fwd, "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
	if lab.IPTables.FillerMode == kind.FillerTopOfChain {
		fwd = append(fwd, filler...)
	}
	fwd = append(fwd, v.ndp()...)
	fwd = append(fwd, o.before("-m conntrack --ctstate INVALID", observe.Dropped, 0, false, "invalid")...)
	fwd = append(fwd, "-m conntrack --ctstate INVALID -j DROP")
	var jumpsIn []string
	for _, ep := range change.LocalEndpoints(lab, host) {
		addr, ok := ep.Addr(v.fam)
		if !ok {
			continue
		}
		self := netip.PrefixFrom(addr, addr.BitLen())
		id := c.IdentityOfIP(ep.IP)
		enf := c.Enforced[id]
		for _, dir := range []policy.Dir{policy.Egress, policy.Ingress} {
			rules := c.RulesFor(id, dir)
			enforced := enf.Ingress
			if dir == policy.Egress {
				enforced = enf.Egress
			}
			if len(rules) == 0 && !enforced {
				continue
			}
			var lines tierLines
			if sets != nil {
				lines = termLines(c, dir, c.TermsFor(id, dir), sets, v)
			} else {
				lines = entryLines(c, dir, rules, v)
			}
			var l7 []string
			if dir == policy.Ingress {
				l7 = l7Drops(c, id, o)
			}
			entry := endpointChains(chains, dir, ep, lines, l7, enforced, o)
			if dir == policy.Egress {
				fwd = append(fwd, fmt.Sprintf("-s %s -j %s", self, entry))
			} else {
				jumpsIn = append(jumpsIn, fmt.Sprintf("-d %s -j %s", self, entry))
			}
		}
	}
	// Every egress check comes before every ingress check: a packet
	// between two endpoints of this host needs both.
	chains[fwdChain] = append(append(fwd, jumpsIn...), o.end(lab, host, v.fam)...)
	return chains
}

// A rule line of an endpoint chain waits for its verdict until the chains
// of the tiers are named: Admin-tier Pass rules go on to the chain that
// follows the Admin tier's.
type line struct {
	match string // everything before the verdict
	r     policy.Entry
}

// tierLines are an endpoint's rules of one direction, per tier, each tier
// in the order it is walked (RulesFor, TermsFor).
type tierLines struct{ admin, np, base []line }

func (t *tierLines) add(m []string, r policy.Entry) {
	l := line{match: strings.Join(append(m, protoMatch(r)...), " "), r: r}
	switch r.Tier {
	case policy.TierAdmin:
		t.admin = append(t.admin, l)
	case policy.TierBaseline:
		t.base = append(t.base, l)
	default:
		t.np = append(t.np, l)
	}
}

// endpointChains adds an endpoint's chains of one direction to chains
// and returns the one CNLAB-FWD jumps to. Without cluster tiers that is
// the NetworkPolicy chain (chainName) alone, as it always was: denies,
// allows, then a drop when the endpoint is isolated, else a return. With
// them, the evaluation is the IR's (policy.Compiled.Allows), one chain per
// tier:
//
//   - the Admin chain (CNLAB-AE-/CNLAB-AI-) comes first: its rules in
//     priority order, the first that matches decides; an allow returns
//     (egress: on to the destination's ingress check) or accepts
//     (ingress), a deny drops, a Pass goes to the NetworkPolicy chain
//     (-g: skipping the Admin chain's later rules, and the NetworkPolicy
//     chain's return goes back to CNLAB-FWD), as does a packet no Admin
//     rule matched;
//   - the NetworkPolicy chain as without tiers, except that where it would
//     return (the endpoint is not isolated: the only case the IR has
//     Baseline entries for) it goes to the Baseline chain;
//   - the Baseline chain (CNLAB-BE-/CNLAB-BI-): its rules in priority
//     order, first match decides; nothing matched returns.
//
// The NetworkPolicy chain starts with first (the ingress chain's drops of
// new connections to L7 ports, l7Drops): an Admin allow, before them, is
// final and reaches the endpoint without the proxy. A NetworkPolicy chain that would hold
// nothing but its end is left out, the Admin chain ending as it would.
func endpointChains(chains map[string][]string, dir policy.Dir, ep *topology.Endpoint, t tierLines, first []string, enforced bool, o observer) string {
	allow := "-j RETURN"
	if dir == policy.Ingress {
		allow = "-j ACCEPT"
	}
	// The default drop of an isolated endpoint, with its log rule.
	drop := append(o.before("", observe.Dropped, dir, true, "-"), chainEnd(true))
	render := func(lines []line, pass string) []string {
		out := make([]string, 0, len(lines)+1)
		for _, l := range lines {
			v, logged, id := allow, observe.Forwarded, ""
			switch {
			case l.r.Deny:
				v, logged = "-j DROP", observe.Dropped
			case l.r.Pass && pass == chainEnd(true):
				v, logged, id = pass, observe.Dropped, "-" // on to the default drop
			case l.r.Pass:
				v, logged = pass, ""
			}
			if logged != "" && datapath.Logs(o.level, logged) {
				if id == "" {
					id = observe.RuleID(l.r.Origin)
				}
				out = append(out, rule(l.match, l.r, o.target(logged, dir, true, id)))
			}
			out = append(out, rule(l.match, l.r, v))
		}
		return out
	}
	name := chainName(dir, ep)
	end := []string{chainEnd(enforced)}
	if enforced {
		end = drop
	}
	if len(t.base) > 0 {
		base := tierChainName("B", dir, ep)
		chains[base] = append(render(t.base, ""), "-j RETURN")
		if !enforced {
			end = []string{"-g " + base}
		}
	}
	np := append(append(first, render(t.np, "")...), end...)
	if len(t.admin) == 0 {
		chains[name] = np
		return name
	}
	next := []string{"-g " + name}
	if len(np) == len(end) {
		next = end
	} else {
		chains[name] = np
	}
	admin := tierChainName("A", dir, ep)
	chains[admin] = append(render(t.admin, next[len(next)-1]), next...)
	return admin
}

// entryLines are the rules of an endpoint and direction, one per peer
// prefix of each IR entry.
func entryLines(c *policy.Compiled, dir policy.Dir, rules []policy.Entry, v famView) tierLines {
	var out tierLines
	peerFlag := "-d"
	if dir == policy.Ingress {
		peerFlag = "-s"
	}
	for _, r := range rules { // in walking order (RulesFor)
		for _, pfx := range v.peerPrefixes(c, r) {
			var m []string
			if pfx.Bits() > 0 {
				m = append(m, peerFlag, pfx.String())
			}
			out.add(m, r)
		}
	}
	return out
}

// termLines is entryLines with peers: ipsets: a rule per term, its peers
// in a set (added to sets) unless it allows any peer.
func termLines(c *policy.Compiled, dir policy.Dir, terms []policy.Term, sets map[string]ipset, v famView) tierLines {
	var out tierLines
	for _, t := range terms { // in walking order (TermsFor)
		var m []string
		if t.Set != "" {
			ps := c.PeerSets[t.Set]
			s := v.renderSet(ps)
			if ps.Net && len(ps.Members) > 0 && len(s.Members) == 0 {
				continue // a CIDR term of the other family
			}
			name := v.setName(ps)
			sets[name] = s
			m = setMatch(name, dir)
		}
		out.add(m, t.Entry())
	}
	return out
}

// rule completes a rule of an endpoint chain: its match (peers, protocol
// and ports), the origin as a comment, and the verdict.
func rule(match string, r policy.Entry, verdict string) string {
	m := strings.TrimSpace(match + " -m comment --comment " + quote(r.Origin))
	return m + " " + verdict
}

// chainEnd is the last rule of an endpoint chain: drop what no rule
// allowed when the endpoint is isolated, else back to CNLAB-FWD.
func chainEnd(enforced bool) string {
	if enforced {
		return "-j DROP"
	}
	return "-j RETURN"
}

func protoMatch(r policy.Entry) []string {
	if r.Proto == policy.ProtoAny {
		return nil
	}
	name := policy.ProtoName(r.Proto)
	m := []string{"-p", name}
	if r.PortLo != 0 {
		port := fmt.Sprint(r.PortLo)
		if r.PortHi > r.PortLo {
			port = fmt.Sprintf("%d:%d", r.PortLo, r.PortHi)
		}
		m = append(m, "-m", name, "--dport", port)
	}
	return m
}

// quote makes a comment safe for iptables-restore (at most 256 bytes, no
// double quotes).
func quote(s string) string {
	s = strings.ReplaceAll(s, `"`, "'")
	if len(s) > 250 {
		s = s[:250]
	}
	return `"` + s + `"`
}

// Describe returns iptables-save of each host's filter table, with
// peers: ipsets its ipset save, then its port table.
func (d iptables) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	_, save, _ := tools(lab)
	out := map[string]string{}
	for _, h := range lab.Hosts {
		text, err := netns.Run(ctx, h.Netns, nil, save, "-t", "filter")
		if err != nil {
			return nil, err
		}
		if hasIPv6(lab) {
			_, save6, _ := familyTools(lab, 6)
			text6, err := netns.Run(ctx, h.Netns, nil, save6, "-t", "filter")
			if err != nil {
				return nil, err
			}
			text = append(text, text6...)
		}
		if nat, err := netns.Run(ctx, h.Netns, nil, save, "-t", "nat"); err == nil && strings.Contains(string(nat), ":"+l7Chain+" ") {
			text = append(text, nat...)
		}
		if hasIPv6(lab) {
			_, save6, _ := familyTools(lab, 6)
			if nat, err := netns.Run(ctx, h.Netns, nil, save6, "-t", "nat"); err == nil && strings.Contains(string(nat), ":"+l7Chain+" ") {
				text = append(text, nat...)
			}
		}
		if lab.IPTables.IPSets() {
			sets, err := netns.Run(ctx, h.Netns, nil, "ipset", "save")
			if err != nil {
				return nil, err
			}
			text = append(text, sets...)
		}
		ports, err := datapath.DescribePorts(ctx, h.Netns)
		if err != nil {
			return nil, err
		}
		out[h.Name] = string(text) + ports
	}
	return out, nil
}
