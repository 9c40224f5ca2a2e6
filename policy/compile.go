package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/topology"
)

// Dir is a direction of enforcement, seen from the subject endpoint.
type Dir uint8

// Directions.
const (
	Ingress Dir = iota
	Egress
)

func (d Dir) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// IP protocol numbers used in the IR; 0 means any protocol.
const (
	ProtoAny  uint8 = 0
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// ICMP's protocol numbers. No rule names them: cnlab has no ICMP rules
// (CiliumNetworkPolicy icmps and protocol ICMP are refused), so ICMP and
// ICMPv6 are covered by the entries of any protocol (ProtoAny) only, in
// either family. Tests and probes send them as protocols of their own.
const (
	ProtoICMP   uint8 = 1
	ProtoICMPv6 uint8 = 58
)

// ProtoICMPOf is ICMP's protocol number in address family fam (4 or 6).
func ProtoICMPOf(fam int) uint8 {
	if fam == 6 {
		return ProtoICMPv6
	}
	return ProtoICMP
}

// ProtoNumber maps TCP/UDP/SCTP to their IP protocol numbers.
func ProtoNumber(p string) uint8 {
	switch strings.ToUpper(p) {
	case TCP:
		return ProtoTCP
	case UDP:
		return ProtoUDP
	case SCTP:
		return ProtoSCTP
	}
	return ProtoAny
}

// ProtoName is the inverse of ProtoNumber ("any" for 0).
func ProtoName(n uint8) string {
	switch n {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoSCTP:
		return "sctp"
	case ProtoAny:
		return "any"
	}
	return fmt.Sprint(n)
}

// Entry is one entry of the intermediate form every datapath consumes:
// subject identity, direction, peer (an identity, a CIDR, or any), protocol
// and destination port range, allow or deny.
type Entry struct {
	Subject  uint32       `json:"subject"`
	Dir      Dir          `json:"dir"`
	Deny     bool         `json:"deny,omitempty"`
	PeerID   uint32       `json:"peerIdentity,omitempty"` // 0 with no PeerCIDR: any peer
	PeerCIDR netip.Prefix `json:"peerCIDR,omitzero"`
	Proto    uint8        `json:"proto"`            // 0: any protocol (then any port)
	PortLo   uint16       `json:"portLo,omitempty"` // 0: any port
	PortHi   uint16       `json:"portHi,omitempty"`
	Origin   string       `json:"origin"` // policy and rule path it comes from
	// L7 marks an allow whose connections go through the L7 proxy: its
	// HTTP rules are in Compiled.HTTP. It allows at L3/L4 like any allow.
	L7 bool `json:"l7,omitempty"`
	// Tier, Pass and Prec place an entry of a cluster policy (TierAdmin,
	// TierBaseline; 0 is the NetworkPolicy tier, where denies win over
	// allows as before). Within its subject, direction and tier, the
	// entry of the lowest Prec that matches decides: Deny drops, Pass
	// (Admin tier only) hands the connection to the NetworkPolicy tier,
	// anything else allows. Entries of one rule share its Prec, and no
	// two rules of a subject's tier do (TierOrder).
	Tier Tier   `json:"tier,omitempty"`
	Pass bool   `json:"pass,omitempty"`
	Prec uint32 `json:"prec,omitempty"`
}

func (r Entry) key() string {
	return fmt.Sprintf("%d/%d/%v/%d/%s/%d/%d-%d/%v/%d/%v/%d", r.Subject, r.Dir, r.Deny, r.PeerID, r.PeerCIDR, r.Proto, r.PortLo, r.PortHi, r.L7, r.Tier, r.Pass, r.Prec)
}

// Action names what an entry does when it decides: "allow", "deny" or "pass".
func (r Entry) Action() string {
	switch {
	case r.Deny:
		return "deny"
	case r.Pass:
		return "pass"
	}
	return "allow"
}

// PortString renders the rule's protocol and ports ("tcp/80", "udp/1000-2000", "any").
func (r Entry) PortString() string {
	if r.Proto == ProtoAny && r.PortLo == 0 {
		return "any"
	}
	s := ProtoName(r.Proto)
	switch {
	case r.PortLo == 0:
		return s + "/any"
	case r.PortHi > r.PortLo:
		return fmt.Sprintf("%s/%d-%d", s, r.PortLo, r.PortHi)
	}
	return fmt.Sprintf("%s/%d", s, r.PortLo)
}

// Enforcement says whether an identity is isolated in each direction
// (traffic not allowed by a rule is dropped).
type Enforcement struct {
	Ingress bool `json:"ingress"`
	Egress  bool `json:"egress"`
}

// Compiled is the intermediate form of a lab's policies.
type Compiled struct {
	Identities     []*Identity             `json:"identities"`
	CIDRIdentities map[netip.Prefix]uint32 `json:"cidrIdentities"`
	Enforced       map[uint32]Enforcement  `json:"enforced"`
	Rules          []Entry                 `json:"rules"`
	// Set is the Digest of the policies compiled: what the datapaths
	// record as the set a host enforces.
	Set string `json:"set"`
	// Warnings are rules accepted although they match nothing: a named
	// port that none of the endpoints it is looked up on declares.
	Warnings []Warning `json:"warnings,omitempty"`
	// Terms are the rules again, one per peer term as written rather than
	// per peer identity, with the sets of peers they name (terms.go): for
	// datapaths that match peers by set, as Calico does.
	Terms []Term `json:"terms,omitempty"`
	// HTTP are the L7 rules of the L7 entries (l7.go), in the order
	// compiled.
	HTTP           []HTTPEntry            `json:"http,omitempty"`
	PeerSets       map[string]*PeerSet    `json:"peerSets,omitempty"`
	named          map[namedRef]*namedUse // named ports met while compiling, for Warnings
	endpointIPs    map[uint32][]netip.Addr
	identityOfIP   map[netip.Addr]uint32
	bySubject      map[subjectDir][]Entry // Rules, indexed for RulesFor
	termsBySubject map[subjectDir][]Term  // Terms, indexed for TermsFor
	termSeen       map[string]bool        // while compiling: terms already added
	l7Ports        map[uint32][]uint16    // HTTP's ports per subject, for L7Ports
}

type subjectDir struct {
	subject uint32
	dir     Dir
}

// Compile turns the model's policies into IR rules, sorted and without
// duplicates. Named ports are resolved on the destination endpoints; an
// identity whose endpoints declare one name with different numbers is an
// error (the IR is per identity).
func (m *Model) Compile() (*Compiled, error) {
	c := &Compiled{Set: Digest(m.Policies), Identities: m.Identities, CIDRIdentities: map[netip.Prefix]uint32{}, Enforced: map[uint32]Enforcement{},
		named: map[namedRef]*namedUse{}, endpointIPs: map[uint32][]netip.Addr{}, identityOfIP: map[netip.Addr]uint32{}}
	for _, ep := range m.Lab.Endpoints {
		id := m.byEndpoint[ep.ID()].ID
		for _, a := range ep.Addrs() { // every family's
			c.endpointIPs[id] = append(c.endpointIPs[id], a)
			c.identityOfIP[a] = id
		}
	}
	seen := map[string]bool{}
	add := func(r Entry) {
		if k := r.key(); !seen[k] {
			seen[k] = true
			c.Rules = append(c.Rules, r)
		}
	}
	for _, id := range m.Identities {
		rep := m.endpoint(id.Endpoints[0])
		var enf Enforcement
		for _, p := range m.Policies {
			if p.Cluster() {
				continue
			}
			for si := range p.Specs {
				sp := &p.Specs[si]
				if !m.selects(p, sp, rep) {
					continue
				}
				enf.Ingress = enf.Ingress || sp.Ingress.Enforce
				enf.Egress = enf.Egress || sp.Egress.Enforce
				for _, dir := range []Dir{Ingress, Egress} {
					d := sp.Ingress
					if dir == Egress {
						d = sp.Egress
					}
					for _, r := range d.Deny {
						if err := m.compileRule(c, p, id, dir, true, r, add); err != nil {
							return nil, err
						}
					}
					for _, r := range d.Allow {
						if err := m.compileRule(c, p, id, dir, false, r, add); err != nil {
							return nil, err
						}
					}
				}
			}
		}
		if enf.Ingress || enf.Egress {
			c.Enforced[id.ID] = enf
		}
		if err := m.compileTiers(c, id, enf, add); err != nil {
			return nil, err
		}
	}
	c.bySubject = sortBySubject(c.Rules, func(r Entry) walkKey { return walkKey{r.Subject, r.Dir, r.Tier, r.Deny, r.Prec} })
	c.termsBySubject = sortBySubject(c.Terms, func(t Term) walkKey { return walkKey{t.Subject, t.Dir, t.Tier, t.Deny, t.Prec} })
	c.termSeen = nil
	var cidrs []netip.Prefix
	for _, r := range c.Rules {
		if r.PeerCIDR.IsValid() {
			if _, ok := c.CIDRIdentities[r.PeerCIDR]; !ok {
				c.CIDRIdentities[r.PeerCIDR] = 0
				cidrs = append(cidrs, r.PeerCIDR)
			}
		}
	}
	sort.Slice(cidrs, func(i, j int) bool { return cidrs[i].String() < cidrs[j].String() })
	for i, p := range cidrs {
		c.CIDRIdentities[p] = uint32(FirstCIDRIdentity + i)
	}
	c.l7Ports = l7PortIndex(c.HTTP)
	c.Warnings = append(c.namedWarnings(), m.overlapWarnings()...)
	return c, nil
}

// walkKey is what orders the entries of the IR as datapaths walk them.
type walkKey struct {
	subject uint32
	dir     Dir
	tier    Tier
	deny    bool
	prec    uint32
}

// rank orders entries of one subject and direction: the Admin tier by
// Prec, then the NetworkPolicy tier's denies, then its allows, then the
// Baseline tier by Prec.
func (k walkKey) less(o walkKey) int {
	if k.subject != o.subject {
		return cmpInt(int64(k.subject), int64(o.subject))
	}
	if k.dir != o.dir {
		return cmpInt(int64(k.dir), int64(o.dir))
	}
	if a, b := k.tier.order(), o.tier.order(); a != b {
		return cmpInt(int64(a), int64(b))
	}
	if k.tier.order() == TierPolicy {
		switch {
		case k.deny && !o.deny:
			return -1
		case o.deny && !k.deny:
			return 1
		}
		return 0
	}
	return cmpInt(int64(k.prec), int64(o.prec))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sortBySubject sorts entries of the IR (Rules, Terms) as datapaths walk
// them — by subject, then direction, then the Admin tier in order, the
// NetworkPolicy tier's denies, its allows, the Baseline tier in order;
// otherwise in the order compiled — and indexes them by subject and
// direction.
func sortBySubject[T any](xs []T, key func(T) walkKey) map[subjectDir][]T {
	sort.SliceStable(xs, func(i, j int) bool { return key(xs[i]).less(key(xs[j])) < 0 })
	index := map[subjectDir][]T{}
	for _, x := range xs {
		k := key(x)
		index[subjectDir{k.subject, k.dir}] = append(index[subjectDir{k.subject, k.dir}], x)
	}
	return index
}

func (m *Model) endpoint(id string) *topology.Endpoint { return m.byID[id] }

// irPeer is a peer of an IR rule before ports are attached.
type irPeer struct {
	id   uint32
	cidr netip.Prefix
	ips  []netip.Addr // the addresses the peer covers among endpoints (for named ports)
	ids  []*Identity  // the identities it covers (for named ports)
	term int          // the peer term of the rule it comes from (Terms)
}

func (m *Model) compileRule(c *Compiled, p *Policy, subj *Identity, dir Dir, deny bool, r Rule, add func(Entry)) error {
	return m.compileTierRule(c, p, Entry{Subject: subj.ID, Dir: dir, Deny: deny}, subj, r, add)
}

// compileTierRule compiles rule r of policy p into entries like base
// (its subject, direction, verdict and place in a tier).
func (m *Model) compileTierRule(c *Compiled, p *Policy, base Entry, subj *Identity, r Rule, add func(Entry)) error {
	dir, deny := base.Dir, base.Deny
	origin := p.Ref() + " " + r.Path
	var peers []irPeer
	var terms []peerTerm
	if r.AnyPeer {
		peers = append(peers, irPeer{ids: m.Identities})
		terms = append(terms, peerTerm{any: true})
	}
	for _, pe := range r.Peers {
		t := len(terms)
		if pe.Endpoints != nil {
			pt := peerTerm{key: "endpoints " + pe.Endpoints.key()}
			for _, id := range m.Identities {
				if m.endpointSelMatches(pe.Endpoints, m.endpoint(id.Endpoints[0])) {
					peers = append(peers, irPeer{id: id.ID, ids: []*Identity{id}, term: t})
					for _, ip := range c.endpointIPs[id.ID] {
						pt.members = append(pt.members, netip.PrefixFrom(ip, ip.BitLen()))
					}
				}
			}
			terms = append(terms, pt)
			continue
		}
		if pe.Nodes != nil {
			pt := peerTerm{key: fmt.Sprintf("nodes{%s}", *pe.Nodes), net: true}
			for _, a := range m.NodeAddrs(*pe.Nodes) {
				pr := netip.PrefixFrom(a, a.BitLen())
				peers = append(peers, irPeer{cidr: pr, term: t})
				pt.members = append(pt.members, pr)
			}
			terms = append(terms, pt)
			continue
		}
		pt := peerTerm{key: fmt.Sprintf("cidr %s except %v", pe.CIDR, pe.Except), net: true}
		if p.Kind == KindCNP {
			pt.key += " outside the lab" // other members than an ipBlock's of the same CIDR
		}
		for _, pr := range Subtract(pe.CIDR, m.cidrExcept(p, pe)) {
			ip := irPeer{cidr: pr, term: t}
			for _, ep := range m.Lab.Endpoints {
				for _, a := range ep.Addrs() {
					if pr.Contains(a) {
						ip.ips = append(ip.ips, a)
					}
				}
			}
			peers = append(peers, ip)
			pt.members = append(pt.members, pr)
		}
		terms = append(terms, pt)
	}
	base.Origin = origin
	named := map[termPort][]Entry{}
	for _, pe := range peers {
		if len(r.Ports) == 0 {
			rr := base
			rr.PeerID, rr.PeerCIDR = pe.id, pe.cidr
			add(rr)
			continue
		}
		for pi, port := range r.Ports {
			if port.Name == "" {
				for _, proto := range protosOf(port.Protocol) {
					rr := base
					rr.PeerID, rr.PeerCIDR, rr.Proto = pe.id, pe.cidr, proto
					rr.PortLo, rr.PortHi = uint16(port.Port), uint16(max(port.Port, port.EndPort))
					if port.L7 && !deny {
						rr.L7 = true
						c.addHTTP(rr, port.HTTP)
					}
					add(rr)
				}
				continue
			}
			use := c.namedUse(p, r, dir, deny, port)
			use.selected = append(use.selected, subj.Endpoints...)
			tp := termPort{pe.term, pi}
			addNamed := func(e Entry) {
				if port.L7 && !deny && e.Proto == ProtoTCP {
					e.L7 = true
					c.addHTTP(e, port.HTTP)
				}
				add(e)
				named[tp] = append(named[tp], e)
			}
			if err := m.namedPort(subj, dir, pe, port, base, use, addNamed); err != nil {
				return p.errorAt(r.Path, err.Error())
			}
		}
	}
	c.addTerms(base, r, terms, named)
	return nil
}

func protosOf(p string) []uint8 {
	if p == ANY {
		return []uint8{ProtoTCP, ProtoUDP, ProtoSCTP}
	}
	return []uint8{ProtoNumber(p)}
}

// namedPort resolves a named port on the destination: the subject for
// ingress, the peer for egress. It records in use where it looked and
// whether it found the name.
func (m *Model) namedPort(subj *Identity, dir Dir, pe irPeer, port Port, base Entry, use *namedUse, add func(Entry)) error {
	emit := func(peerID uint32, cidr netip.Prefix, dst *Identity) error {
		nums, err := m.resolveName(dst, port)
		if err != nil {
			return err
		}
		use.lookedUp = append(use.lookedUp, dst.Endpoints...)
		use.resolved = use.resolved || len(nums) > 0
		for _, n := range nums {
			rr := base
			rr.PeerID, rr.PeerCIDR = peerID, cidr
			rr.Proto, rr.PortLo, rr.PortHi = ProtoNumber(n.Protocol), uint16(n.Port), uint16(n.Port)
			add(rr)
		}
		return nil
	}
	if dir == Ingress {
		return emit(pe.id, pe.cidr, subj)
	}
	switch {
	case pe.id != 0:
		return emit(pe.id, netip.Prefix{}, pe.ids[0])
	case pe.cidr.IsValid():
		// The named port exists only on endpoints inside the CIDR.
		for _, ip := range pe.ips {
			id := m.byEndpoint[m.byIP[ip].ID()]
			if err := emit(0, netip.PrefixFrom(ip, ip.BitLen()), id); err != nil {
				return err
			}
		}
		return nil
	}
	for _, id := range pe.ids { // any peer: every identity declaring it
		if err := emit(id.ID, netip.Prefix{}, id); err != nil {
			return err
		}
	}
	return nil
}

// resolveName returns the container ports of an identity's endpoints that
// carry the name (and protocol), checking the endpoints agree.
func (m *Model) resolveName(id *Identity, port Port) ([]topology.Port, error) {
	var first []topology.Port
	for i, epID := range id.Endpoints {
		var got []topology.Port
		for _, cp := range m.endpoint(epID).Ports {
			if cp.Name == port.Name && (port.Protocol == ANY || cp.Protocol == port.Protocol) {
				got = append(got, cp)
			}
		}
		if i == 0 {
			first = got
		} else if fmt.Sprint(got) != fmt.Sprint(first) {
			return nil, fmt.Errorf("named port %q: endpoints %s and %s share identity %d but declare it differently; give them different labels or the same ports",
				port.Name, id.Endpoints[0], epID, id.ID)
		}
	}
	return first, nil
}

// IdentityOfIP returns the identity of an endpoint address (0 if none).
func (c *Compiled) IdentityOfIP(ip netip.Addr) uint32 { return c.identityOfIP[ip] }

// PeerPrefixes returns the address prefixes a rule's peer covers, of
// every family: the /32s and /128s of its identity's endpoints (each
// endpoint's address of each family the lab has), its CIDR (of one
// family), or for any peer both 0.0.0.0/0 and ::/0. A datapath that
// renders one family at a time wants PeerPrefixesOf.
func (c *Compiled) PeerPrefixes(r Entry) []netip.Prefix {
	return c.PeerPrefixesOf(r, 0)
}

// Any peer, per family.
var (
	anyPeer4 = netip.MustParsePrefix("0.0.0.0/0")
	anyPeer6 = netip.MustParsePrefix("::/0")
)

// PeerPrefixesOf is PeerPrefixes of one family: fam 4 gives the IPv4
// prefixes only (what PeerPrefixes gave before labs had IPv6: /32s, an
// IPv4 CIDR, 0.0.0.0/0), fam 6 the IPv6 ones (/128s, an IPv6 CIDR, ::/0),
// fam 0 both. A rule whose CIDR is of the other family covers nothing of
// fam: the result is empty, and the rule is left out of that family's
// rules (as a rule whose selector selects nobody).
func (c *Compiled) PeerPrefixesOf(r Entry, fam int) []netip.Prefix {
	var out []netip.Prefix
	add := func(p netip.Prefix) {
		if fam == 0 || family(p) == fam {
			out = append(out, p)
		}
	}
	switch {
	case r.PeerCIDR.IsValid():
		add(r.PeerCIDR)
	case r.PeerID != 0:
		for _, ip := range c.endpointIPs[r.PeerID] {
			add(netip.PrefixFrom(ip, ip.BitLen()))
		}
	default:
		add(anyPeer4)
		add(anyPeer6)
	}
	return out
}

// Allows evaluates the IR for a new connection between two endpoint
// addresses (of one family, either), the way a datapath does. Tests
// compare it with the model.
func (c *Compiled) Allows(src, dst netip.Addr, proto uint8, port uint16) bool {
	return c.sideAllows(c.identityOfIP[src], Egress, dst, proto, port) &&
		c.sideAllows(c.identityOfIP[dst], Ingress, src, proto, port)
}

func (c *Compiled) sideAllows(subject uint32, dir Dir, remote netip.Addr, proto uint8, port uint16) bool {
	enf := c.Enforced[subject]
	enforced := enf.Ingress
	if dir == Egress {
		enforced = enf.Egress
	}
	return DecideSide(c.RulesFor(subject, dir), func(r Entry) Entry { return r },
		func(r Entry) bool { return c.ruleMatches(r, remote, proto, port) }, enforced)
}

// DecideSide is the verdict of one side (a subject and direction) of a
// new connection: xs are its entries (Rules or Terms) in walking order
// (RulesFor, TermsFor), entry gives each one's verdict and place, matches
// says whether it covers the connection, enforced whether the
// NetworkPolicy tier isolates the subject in this direction. The Admin
// tier's first match decides (a Pass skips to the NetworkPolicy tier);
// then a NetworkPolicy-tier deny drops and an allow accepts; an isolated
// subject's other connections drop; otherwise the Baseline tier's first
// match decides; nothing matching allows.
func DecideSide[T any](xs []T, entry func(T) Entry, matches func(T) bool, enforced bool) bool {
	allowed, passed := false, false
	for _, x := range xs {
		r := entry(x)
		tier := r.Tier.order()
		if tier == TierAdmin && passed {
			continue
		}
		if tier == TierBaseline && (allowed || enforced) {
			break
		}
		if !matches(x) {
			continue
		}
		switch tier {
		case TierAdmin:
			if r.Pass {
				passed = true
				continue
			}
			return !r.Deny
		case TierPolicy:
			if r.Deny {
				return false
			}
			allowed = true
		case TierBaseline:
			return !r.Deny
		}
	}
	return allowed || !enforced
}

func (c *Compiled) ruleMatches(r Entry, remote netip.Addr, proto uint8, port uint16) bool {
	switch {
	case r.PeerCIDR.IsValid():
		if !r.PeerCIDR.Contains(remote) {
			return false
		}
	case r.PeerID != 0:
		if c.identityOfIP[remote] != r.PeerID {
			return false
		}
	}
	if r.Proto == ProtoAny {
		return true
	}
	if r.Proto != proto {
		return false
	}
	return r.PortLo == 0 || (port >= r.PortLo && port <= r.PortHi)
}

// RulesFor returns the rules of one subject and direction, denies first.
func (c *Compiled) RulesFor(subject uint32, dir Dir) []Entry {
	return c.bySubject[subjectDir{subject, dir}]
}

// Identity returns the identity with that number, or nil.
func (c *Compiled) Identity(id uint32) *Identity {
	for _, x := range c.Identities {
		if x.ID == id {
			return x
		}
	}
	return nil
}
