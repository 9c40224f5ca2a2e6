package ebpf

import (
	"cmp"
	"fmt"
	"hash/fnv"
	bits32 "math/bits"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// WorldIdentity is the peer of addresses the ipcache does not know.
const WorldIdentity = uint32(cnlabIdentityWORLD_IDENTITY)

// firstSplitKey numbers the peer keys of endpoint addresses whose identity
// some CIDR rule covers only in part (see peerClasses).
const firstSplitKey = 1 << 28

// Policy keys are an LPM trie over 64 bits: peer (32), direction (8),
// protocol (8), port (16). The peer and direction are always exact.
const (
	keyBitsExact = 40
	keyBitsProto = 48
	keyBitsAll   = 64
)

// polEntry is one flattened policy map entry: its key (peer, direction,
// protocol and port prefix) and its decision, that of the entry of lowest
// precedence among those of its peer and direction whose prefix contains
// its own (docs/ebpf.md, "Policy tiers"). The fields after Rule are zero
// for a decision of the NetworkPolicy tier (the only one before cluster
// policies).
type polEntry struct {
	Peer  uint32
	Dir   uint8
	Proto uint8
	Port  uint16 // first port of the prefix
	Plen  uint8  // 40..64
	Deny  bool
	Proxy bool   // an allow of an L7 port: new connections go to the L7 proxy
	Rule  uint32 // RuleRef of the rule it comes from (for events); NO_RULE: the default allow
	// The decision's tier (0: NetworkPolicy), whether it is an Admin
	// Pass, and its rank in its tier (policy.Entry's Prec).
	Tier policy.Tier
	Pass bool
	Prec uint32
	// With an Admin-tier decision, the first decision not of the Admin
	// tier (what decides after a Pass); Set false: none. Zero otherwise
	// (the decision is its own).
	Below polBelow
}

// polBelow is a polEntry's decision after an Admin Pass.
type polBelow struct {
	Set   bool
	Tier  policy.Tier // 0 (NetworkPolicy) or TierBaseline
	Deny  bool
	Proxy bool
	Prec  uint32
	Rule  uint32
}

// decision is one entry's verdict and its place in the order of
// precedence: what a policy map value holds twice (policy_val).
type decision struct {
	tier              policy.Tier
	deny, pass, proxy bool
	prec              uint32 // rank in the tier
	rule              uint32
}

// Precedences (enum policy_prec of bpf/cnlab.c): every decision of one
// subject and direction gets a number, lower first, so that the first
// entry that matches in policy.Compiled's walking order is the one of
// lowest number.
const (
	precNPDeny   = uint32(cnlabPolicyPrecPREC_NP_DENY)
	precNPAllow  = uint32(cnlabPolicyPrecPREC_NP_ALLOW)
	precBaseline = uint32(cnlabPolicyPrecPREC_BASELINE)
	precDefault  = uint32(cnlabPolicyPrecPREC_DEFAULT)
	precNone     = uint32(cnlabPolicyPrecPREC_NONE)
	noRule       = uint32(cnlabRuleRefNO_RULE)
	// maxTierRank is the largest rank a cluster tier's entry may have:
	// the Admin tier's must stay below the NetworkPolicy tier's, the
	// Baseline tier's below the default.
	maxTierRank = precNPDeny - 1
)

// global is the decision's precedence: an Admin entry its rank, then the
// NetworkPolicy tier's denies, its allows, the Baseline tier by rank, and
// last the default allow of a direction not isolated (an allow no rule
// made: proxyEntries adds one for the L7 ports of such a direction).
func (d decision) global() uint32 {
	switch d.tier {
	case policy.TierAdmin:
		return d.prec
	case policy.TierBaseline:
		return precBaseline + d.prec
	}
	switch {
	case d.deny:
		return precNPDeny
	case d.rule == noRule:
		return precDefault
	}
	return precNPAllow
}

// act is the decision as the programs read it (enum policy_act).
func (d decision) act() uint8 {
	switch {
	case d.deny:
		return uint8(cnlabPolicyActACT_DENY)
	case d.pass:
		return uint8(cnlabPolicyActACT_PASS)
	case d.proxy:
		return uint8(cnlabPolicyActACT_PROXY)
	}
	return uint8(cnlabPolicyActACT_ALLOW)
}

// before orders two decisions: d strictly before o.
func (d decision) before(o decision) bool { return d.global() < o.global() }

// first is the entry's decision.
func (e *polEntry) first() decision {
	return decision{tier: e.Tier, deny: e.Deny, pass: e.Pass, proxy: e.Proxy, prec: e.Prec, rule: e.Rule}
}

// below is the entry's first decision not of the Admin tier, if any.
func (e *polEntry) below() (decision, bool) {
	if e.Tier != policy.TierAdmin {
		return e.first(), true
	}
	b := e.Below
	return decision{tier: b.Tier, deny: b.Deny, proxy: b.Proxy, prec: b.Prec, rule: b.Rule}, b.Set
}

// setDecisions gives the entry its decision and, with an Admin one, the
// decision below it.
func (e *polEntry) setDecisions(f decision, b decision, hasBelow bool) {
	e.Deny, e.Pass, e.Proxy, e.Tier, e.Prec, e.Rule = f.deny, f.pass, f.proxy, f.tier, f.prec, f.rule
	e.Below = polBelow{}
	if f.tier == policy.TierAdmin && hasBelow {
		e.Below = polBelow{Set: true, Tier: b.tier, Deny: b.deny, Proxy: b.proxy, Prec: b.prec, Rule: b.rule}
	}
}

// ipEntry is one ipcache entry.
type ipEntry struct {
	Prefix   netip.Prefix
	Key      uint32
	Identity uint32
}

// hostPlan is what one host's maps hold for a compiled policy.
type hostPlan struct {
	IPCache   []ipEntry
	Endpoints []epPlan // the host's endpoints, in slot order
	L7        bool     // some endpoint has an L7 port (FLAG_L7)
}

type epPlan struct {
	ID       string
	Slot     uint32
	Identity uint32
	Enforce  cnlabIsolation // isolated directions, and those with wildcard-peer entries
	Entries  []polEntry
}

// peerClasses gives every endpoint address its peer key. Endpoints are
// grouped by identity and by the set of CIDR rule prefixes containing
// their address: a group is what a policy entry can name. When all the
// endpoints of an identity fall in one group (the usual case) the key is
// the identity itself; otherwise the extra groups get keys from
// firstSplitKey, so a CIDR rule matches exactly the addresses it covers
// and never the rest of an identity.
func peerClasses(lab *topology.Spec, c *policy.Compiled) (keyOf map[netip.Addr]uint32, keysOfIdentity map[uint32][]uint32, containing map[uint32][]netip.Prefix) {
	var cidrs []netip.Prefix
	for p := range c.CIDRIdentities {
		if p.Addr().Is4() { // the maps are IPv4's: an IPv6 CIDR covers nothing here
			cidrs = append(cidrs, p)
		}
	}
	sort.Slice(cidrs, func(i, j int) bool { return cidrs[i].String() < cidrs[j].String() })
	keyOf = map[netip.Addr]uint32{}
	keysOfIdentity = map[uint32][]uint32{}
	containing = map[uint32][]netip.Prefix{}
	group := map[string]uint32{}
	next := uint32(firstSplitKey)
	for _, ep := range lab.Endpoints {
		id := c.IdentityOfIP(ep.IP)
		var in []netip.Prefix
		var b strings.Builder
		fmt.Fprint(&b, id)
		for _, p := range cidrs {
			if p.Contains(ep.IP) {
				in = append(in, p)
				b.WriteString(" " + p.String())
			}
		}
		k, ok := group[b.String()]
		if !ok {
			k = id
			if len(keysOfIdentity[id]) > 0 {
				k = next
				next++
			}
			group[b.String()] = k
			keysOfIdentity[id] = append(keysOfIdentity[id], k)
			containing[k] = in
		}
		keyOf[ep.IP] = k
	}
	return keyOf, keysOfIdentity, containing
}

// planner holds what a plan derives from the lab and the compiled
// policies before any entry: the peer classes and the ipcache.
type planner struct {
	lab            *topology.Spec
	c              *policy.Compiled
	keysOfIdentity map[uint32][]uint32
	containing     map[uint32][]netip.Prefix
	cidrs          []netip.Prefix // the rules' CIDR prefixes, sorted
	epAddr         map[netip.Prefix]bool
	ipc            []ipEntry // endpoint addresses, then the CIDR prefixes of the rules
}

func newPlanner(lab *topology.Spec, c *policy.Compiled) *planner {
	if c == nil {
		c = &policy.Compiled{}
	}
	p := &planner{lab: lab, c: c, epAddr: map[netip.Prefix]bool{}}
	var keyOf map[netip.Addr]uint32
	keyOf, p.keysOfIdentity, p.containing = peerClasses(lab, c)
	for _, ep := range lab.Endpoints {
		pfx := netip.PrefixFrom(ep.IP, 32)
		p.epAddr[pfx] = true
		p.ipc = append(p.ipc, ipEntry{Prefix: pfx, Key: keyOf[ep.IP], Identity: c.IdentityOfIP(ep.IP)})
	}
	for q := range c.CIDRIdentities {
		if q.Addr().Is4() { // as in peerClasses
			p.cidrs = append(p.cidrs, q)
		}
	}
	sort.Slice(p.cidrs, func(i, j int) bool { return p.cidrs[i].String() < p.cidrs[j].String() })
	for _, q := range p.cidrs {
		if !p.epAddr[q] {
			id := c.CIDRIdentities[q]
			p.ipc = append(p.ipc, ipEntry{Prefix: q, Key: id, Identity: id})
		}
	}
	return p
}

// peers expands an IR entry's peer into policy keys.
func (p *planner) peers(r policy.Entry) []uint32 {
	switch {
	case r.PeerCIDR.IsValid():
		var out []uint32
		for k, in := range p.containing {
			if slices.Contains(in, r.PeerCIDR) {
				out = append(out, k)
			}
		}
		for _, q := range p.cidrs {
			if !p.epAddr[q] && q.Bits() >= r.PeerCIDR.Bits() && r.PeerCIDR.Contains(q.Addr()) {
				out = append(out, p.c.CIDRIdentities[q])
			}
		}
		slices.Sort(out)
		return out
	case r.PeerID != 0:
		return p.keysOfIdentity[r.PeerID]
	}
	return []uint32{0}
}

// raw appends the unflattened entries of one IR rule.
func (p *planner) raw(out []polEntry, r policy.Entry, ref uint32) []polEntry {
	pps := portPrefixes(r)
	for _, pk := range p.peers(r) {
		for _, pp := range pps {
			out = append(out, rawEntry(r, pk, pp, ref))
		}
	}
	return out
}

// rawEntry is the map entry of IR rule r for peer key peer and one of its
// port prefixes, before flattening: the rule's own decision.
func rawEntry(r policy.Entry, peer uint32, pp portPrefix, ref uint32) polEntry {
	e := polEntry{Peer: peer, Dir: uint8(r.Dir), Proto: r.Proto, Port: pp.port, Plen: pp.plen, Deny: r.Deny, Rule: ref}
	if r.Tier == policy.TierAdmin || r.Tier == policy.TierBaseline {
		e.Tier, e.Pass, e.Prec = r.Tier, r.Pass && r.Tier == policy.TierAdmin, min(r.Prec, maxTierRank)
	}
	return e
}

// plan renders the maps of every host for a compiled policy (nil: no
// policy). Errors name the endpoint and the numbers when a policy map
// would overflow.
func plan(lab *topology.Spec, c *policy.Compiled) (map[string]*hostPlan, error) {
	p := newPlanner(lab, c)
	c = p.c
	raw := map[uint32][]polEntry{} // per subject identity, before flattening
	for _, r := range c.Rules {
		raw[r.Subject] = p.raw(raw[r.Subject], r, RuleRef(r.Origin))
	}
	bySubject := map[uint32][]polEntry{} // flattened per identity
	for id, es := range raw {
		bySubject[id] = flatten(es)
	}
	l7Done := map[uint32]bool{}
	for _, ep := range lab.Endpoints {
		id := c.IdentityOfIP(ep.IP)
		if ports := c.L7Ports(id); len(ports) > 0 && !l7Done[id] {
			l7Done[id] = true
			bySubject[id] = proxyEntries(bySubject[id], ports, c.Enforced[id].Ingress)
		}
	}
	return p.hosts(bySubject)
}

// hosts lays each identity's entries out on the hosts' endpoint slots.
func (p *planner) hosts(bySubject map[uint32][]polEntry) (map[string]*hostPlan, error) {
	lab, c := p.lab, p.c
	out := map[string]*hostPlan{}
	for _, h := range lab.Hosts {
		hp := &hostPlan{IPCache: p.ipc}
		for slot, ep := range change.LocalEndpoints(lab, h.Name) {
			id := c.IdentityOfIP(ep.IP)
			enf := c.Enforced[id]
			var bits cnlabIsolation
			if enf.Ingress {
				bits |= cnlabIsolationISO_INGRESS
			}
			if enf.Egress {
				bits |= cnlabIsolationISO_EGRESS
			}
			e := epPlan{ID: ep.ID(), Slot: uint32(slot), Identity: id, Enforce: bits | wildcardBits(bySubject[id]), Entries: bySubject[id]}
			if len(c.L7Ports(id)) > 0 {
				hp.L7 = true
			}
			if n := len(e.Entries); n > lab.EBPF.PolicyMapSize {
				return nil, fmt.Errorf("endpoint %s needs %d policy map entries, but its policy map holds %d (raise ebpf.policyMapSize in the topology, at most %d, and bring the lab up again)",
					ep.ID(), n, lab.EBPF.PolicyMapSize, kind.MaxPolicyMapSize)
			}
			hp.Endpoints = append(hp.Endpoints, e)
		}
		out[h.Name] = hp
	}
	return out, nil
}

// wildcardBits says in which directions entries name any peer (key 0):
// the programs look the wildcard peer up only there.
func wildcardBits(es []polEntry) cnlabIsolation {
	var bits cnlabIsolation
	for _, e := range es {
		if e.Peer != 0 {
			continue
		}
		if e.Dir == uint8(policy.Egress) {
			bits |= cnlabIsolationWILD_EGRESS
		} else {
			bits |= cnlabIsolationWILD_INGRESS
		}
	}
	return bits
}

// proxyEntries marks the ingress allows that decide a connection to an
// L7 port so that it goes to the L7 proxy (ACT_PROXY): for every peer key
// with ingress entries, and the wildcard peer, the entry that
// longest-prefix match picks for (peer, ingress, TCP, port) is looked up;
// where its decision, or the one below it (after an Admin Pass), is an
// allow not of the Admin tier, the port gets an exact entry with the
// proxy bit on that decision (the entry itself when it is exact). An
// Admin-tier Accept is final and not proxied (policy.HTTPVerdict).
// policy_verdict decides with the peer's entry or the wildcard's, so
// whichever allow wins carries the bit. Denies stay as they are: flatten
// gave every entry its covering prefixes' decision. With the ingress not
// isolated, what is allowed for want of a policy is proxied too: the
// wildcard peer gets the default allow of the port (rule NO_RULE,
// precedence after every rule) where it has no entry, and as the decision
// after a Pass where it has none.
func proxyEntries(es []polEntry, ports []uint16, isolated bool) []polEntry {
	ingress := uint8(policy.Ingress)
	// Each peer's ingress entries, by index: one pass, not one per port.
	peers := []uint32{0}
	byPeer := map[uint32][]int{0: nil}
	for i, e := range es {
		if e.Dir != ingress {
			continue
		}
		if _, ok := byPeer[e.Peer]; !ok {
			peers = append(peers, e.Peer)
		}
		byPeer[e.Peer] = append(byPeer[e.Peer], i)
	}
	out := slices.Clone(es)
	dflt := decision{proxy: true, rule: noRule}
	for _, peer := range peers {
		for _, port := range ports {
			best := -1
			for _, i := range byPeer[peer] {
				if covers(out[i], policy.ProtoTCP, port) && (best < 0 || out[i].Plen > out[best].Plen) {
					best = i
				}
			}
			if best < 0 {
				if peer == 0 && !isolated {
					e := polEntry{Peer: 0, Dir: ingress, Proto: policy.ProtoTCP, Port: port, Plen: keyBitsAll}
					e.setDecisions(dflt, dflt, true)
					out = append(out, e)
				}
				continue
			}
			e := out[best]
			f := e.first()
			b, hasBelow := e.below()
			if f.tier != policy.TierAdmin && !f.deny {
				f.proxy = true
			}
			if f.tier == policy.TierAdmin {
				switch {
				case hasBelow && !b.deny:
					b.proxy = true
				case !hasBelow && peer == 0 && !isolated:
					b, hasBelow = dflt, true
				}
			}
			e.setDecisions(f, b, hasBelow)
			switch {
			case e == out[best]:
			case e.Plen == keyBitsAll:
				out[best] = e
			default:
				e.Proto, e.Port, e.Plen = policy.ProtoTCP, port, keyBitsAll
				out = append(out, e)
			}
		}
	}
	sortEntries(out)
	return out
}

// covers reports whether an entry's prefix contains (proto, port).
func covers(e polEntry, proto uint8, port uint16) bool {
	if e.Plen <= keyBitsExact {
		return true
	}
	if e.Proto != proto {
		return false
	}
	n := int(e.Plen) - keyBitsProto // significant port bits
	if n <= 0 {
		return true
	}
	mask := uint16(0xffff) << (16 - n)
	return port&mask == e.Port&mask
}

// RuleRef names a policy rule in map values and events: a hash of its
// origin ("Kind ns/name path"), stable when unrelated rules come and go, so
// that an endpoint's map is rebuilt only when its own rules change.
func RuleRef(origin string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(origin))
	if v := h.Sum32(); v != uint32(cnlabRuleRefNO_RULE) {
		return v
	}
	return 0
}

type portPrefix struct {
	port uint16
	plen uint8
}

// portPrefixes turns an entry's protocol and port range into LPM prefixes
// over the protocol and port bits.
func portPrefixes(r policy.Entry) []portPrefix {
	switch {
	case r.Proto == policy.ProtoAny:
		return []portPrefix{{0, keyBitsExact}}
	case r.PortLo == 0:
		return []portPrefix{{0, keyBitsProto}}
	}
	hi := max(r.PortHi, r.PortLo)
	var out []portPrefix
	for lo := uint32(r.PortLo); lo <= uint32(hi); {
		// The largest aligned block starting at lo that fits in [lo, hi].
		size := uint32(1)
		for size < 1<<16 && lo%(size*2) == 0 && lo+size*2-1 <= uint32(hi) {
			size *= 2
		}
		bits := 0
		for s := size; s > 1; s >>= 1 {
			bits++
		}
		out = append(out, portPrefix{uint16(lo), uint8(keyBitsAll - bits)})
		lo += size
	}
	return out
}

// flatten makes longest-prefix match give the policy's answer: each
// entry gets the decision of lowest precedence among the entries of its
// peer and direction whose prefix contains its own (its own included),
// and the lowest not of the Admin tier below it. With the NetworkPolicy
// tier alone that is "deny wins": an allow nested inside a deny becomes
// a deny. Ties keep the longest prefix's decision, and at one prefix the
// lowest rule; duplicates collapse. It returns the entries sorted
// (sortEntries).
func flatten(raw []polEntry) []polEntry {
	for i := range raw {
		if raw[i].Deny || raw[i].Tier != 0 {
			return flattenTiers(raw)
		}
	}
	// Allows only: every entry keeps its own decision. Each entry as two
	// words that sort as wanted: by key (peer, direction, protocol, port,
	// then prefix length), and for one key the lowest rule. The first of
	// each key is kept.
	type sortKey struct{ hi, lo uint64 }
	keys := make([]sortKey, len(raw))
	for i, e := range raw {
		keys[i] = sortKey{hi: entryKey(e), lo: uint64(e.Plen)<<40 | uint64(e.Rule)}
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		return cmp.Compare(a.lo, b.lo)
	})
	out := make([]polEntry, 0, len(keys))
	for i, k := range keys {
		if i > 0 && k.hi == keys[i-1].hi && k.lo>>40 == keys[i-1].lo>>40 {
			continue
		}
		out = append(out, polEntry{Peer: uint32(k.hi >> 32), Dir: uint8(k.hi >> 24), Proto: uint8(k.hi >> 16),
			Port: uint16(k.hi), Plen: uint8(k.lo >> 40), Rule: uint32(k.lo)})
	}
	return out
}

// flattenTiers is flatten with denies or cluster tiers among the entries.
func flattenTiers(raw []polEntry) []polEntry {
	type key struct {
		peer       uint32
		dir, proto uint8
		port       uint16
		plen       uint8
	}
	// One node per prefix: the decisions of the entries at it, then of
	// those covering it.
	type node struct {
		at          polEntry // the key
		first, bel  decision
		hasBelow    bool
		ownF, ownB  decision
		ownHasBelow bool
	}
	better := func(d, o decision) bool { // d replaces o at one prefix
		return d.before(o) || (d.global() == o.global() && d.rule < o.rule)
	}
	index := make(map[key]int, len(raw))
	var nodes []node
	for _, e := range raw {
		k := key{e.Peer, e.Dir, e.Proto, e.Port, e.Plen}
		f := e.first()
		b, hb := e.below()
		i, ok := index[k]
		if !ok {
			index[k] = len(nodes)
			nodes = append(nodes, node{at: polEntry{Peer: e.Peer, Dir: e.Dir, Proto: e.Proto, Port: e.Port, Plen: e.Plen},
				ownF: f, ownB: b, ownHasBelow: hb})
			continue
		}
		n := &nodes[i]
		if better(f, n.ownF) {
			n.ownF = f
		}
		if hb && (!n.ownHasBelow || better(b, n.ownB)) {
			n.ownB, n.ownHasBelow = b, true
		}
	}
	// The prefix lengths each peer and direction has entries of: most
	// have single ports only (/64), and nothing covers them but
	// themselves.
	plens := map[uint64]uint32{}
	for i := range nodes {
		e := &nodes[i].at
		plens[uint64(e.Peer)<<8|uint64(e.Dir)] |= 1 << (e.Plen - keyBitsExact)
	}
	out := make([]polEntry, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		f, b, hb := n.ownF, n.ownB, n.ownHasBelow
		e := n.at
		bits := uint32(e.Proto)<<16 | uint32(e.Port)
		shorter := plens[uint64(e.Peer)<<8|uint64(e.Dir)] & (1<<(e.Plen-keyBitsExact) - 1)
		for shorter != 0 {
			plen := keyBitsExact + 31 - bits32.LeadingZeros32(shorter)
			shorter &^= 1 << (plen - keyBitsExact)
			nb := plen - keyBitsExact // significant bits of the 24
			var mask uint32
			if nb > 0 {
				mask = ^uint32(0) << (24 - nb) & 0xffffff
			}
			v := bits & mask
			j, ok := index[key{e.Peer, e.Dir, uint8(v >> 16), uint16(v), uint8(plen)}]
			if !ok {
				continue
			}
			c := &nodes[j]
			if c.ownF.before(f) {
				f = c.ownF
			}
			if c.ownHasBelow && (!hb || c.ownB.before(b)) {
				b, hb = c.ownB, true
			}
		}
		e.setDecisions(f, b, hb)
		out = append(out, e)
	}
	sortEntries(out)
	return out
}

// entryKey packs an entry's peer, direction, protocol and port into one
// word that orders as entryCmp does.
func entryKey(e polEntry) uint64 {
	return uint64(e.Peer)<<32 | uint64(e.Dir)<<24 | uint64(e.Proto)<<16 | uint64(e.Port)
}

// sortEntries orders entries by key, as user space lists them.
func sortEntries(out []polEntry) { slices.SortFunc(out, entryCmp) }

// entryCmp orders entries by key: peer, direction, protocol, port,
// prefix length.
func entryCmp(a, b polEntry) int {
	if c := cmp.Compare(entryKey(a), entryKey(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.Plen, b.Plen)
}
