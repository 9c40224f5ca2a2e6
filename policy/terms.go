package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// PeerSet is the addresses one peer term of a rule covers, as the rule
// wrote it: a selector (an entry of fromEndpoints, of a NetworkPolicy's
// from/to) or a CIDR with its excepts. Two terms that write the same
// selector share one PeerSet, as Calico shares an ipset between rules with
// the same selector. A selector that selects nobody is a PeerSet with no
// members: Compiled.Rules leave such a term out, Terms keep it.
type PeerSet struct {
	// Key is the term, canonical: it names the set, and equal keys have
	// equal members (a lab's endpoints and labels are fixed at up).
	Key string `json:"key"`
	// Net says the members are prefixes from a CIDR term; otherwise they
	// are endpoint addresses (/32, and /128 in a lab with IPv6: a set has
	// the members of every family, sorted IPv4 first).
	Net     bool           `json:"net,omitempty"`
	Members []netip.Prefix `json:"members"`
}

// Term is one peer term of one rule, compiled for one subject identity and
// direction with one protocol and port range: the form of the IR for
// datapaths that match peers by set, one set per selector, as Calico's
// felix does (iptables with peers: ipsets). Terms allow and deny exactly
// what Rules do (a unit test checks every scenario); they differ in
// keeping every term as written, even one that selects nobody.
type Term struct {
	Subject uint32 `json:"subject"`
	Dir     Dir    `json:"dir"`
	Deny    bool   `json:"deny,omitempty"`
	Set     string `json:"set,omitempty"` // a key of Compiled.PeerSets; "" for any peer
	Proto   uint8  `json:"proto"`         // 0: any protocol (then any port)
	PortLo  uint16 `json:"portLo,omitempty"`
	PortHi  uint16 `json:"portHi,omitempty"`
	Origin  string `json:"origin"`
	// Tier, Pass and Prec as in Entry.
	Tier Tier   `json:"tier,omitempty"`
	Pass bool   `json:"pass,omitempty"`
	Prec uint32 `json:"prec,omitempty"`
}

func (t Term) key() string {
	return fmt.Sprintf("%d/%d/%v/%s/%d/%d-%d/%d/%v/%d", t.Subject, t.Dir, t.Deny, t.Set, t.Proto, t.PortLo, t.PortHi, t.Tier, t.Pass, t.Prec)
}

// Entry returns the term as an IR entry with any peer, for what only
// looks at the protocol and ports (Entry.PortString, a datapath's port
// match).
func (t Term) Entry() Entry {
	return Entry{Subject: t.Subject, Dir: t.Dir, Deny: t.Deny, Proto: t.Proto, PortLo: t.PortLo, PortHi: t.PortHi, Origin: t.Origin,
		Tier: t.Tier, Pass: t.Pass, Prec: t.Prec}
}

// TermsFor returns the terms of one subject and direction, denies first,
// in the order the policies wrote them.
func (c *Compiled) TermsFor(subject uint32, dir Dir) []Term {
	return c.termsBySubject[subjectDir{subject, dir}]
}

// key is an endpoint selector, canonical (matchLabels sorted).
func (es *EndpointSel) key() string {
	var b strings.Builder
	if es.CiliumKeys {
		b.WriteString("cilium ")
	}
	fmt.Fprintf(&b, "pods{%s}", es.Pods)
	if es.Namespaces != nil {
		fmt.Fprintf(&b, " namespaces{%s}", *es.Namespaces)
	} else {
		fmt.Fprintf(&b, " namespace=%s", es.Namespace)
	}
	return b.String()
}

// peerTerm is one peer term of a rule being compiled.
type peerTerm struct {
	any     bool // the rule allows any peer: no set
	key     string
	net     bool
	members []netip.Prefix
}

// termPort indexes the entries a named port resolved to, per term and
// port of the rule.
type termPort struct{ term, port int }

// addTerms records the terms of a compiled rule: for each peer term and
// port, one Term. A numbered port (or none) gives the term's whole set; a
// named port resolves per destination, so for egress the peers of one
// term can resolve it to different numbers: each number then gets a set
// of the peers that resolve to it (what Calico does with named-port sets).
func (c *Compiled) addTerms(base Entry, r Rule, terms []peerTerm, named map[termPort][]Entry) {
	for ti, pt := range terms {
		t := Term{Subject: base.Subject, Dir: base.Dir, Deny: base.Deny, Origin: base.Origin, Tier: base.Tier, Pass: base.Pass, Prec: base.Prec}
		if !pt.any {
			t.Set = c.peerSet(pt.key, pt.net, pt.members)
		}
		if len(r.Ports) == 0 {
			c.addTerm(t)
			continue
		}
		for pi, port := range r.Ports {
			if port.Name == "" {
				for _, proto := range protosOf(port.Protocol) {
					tt := t
					tt.Proto, tt.PortLo, tt.PortHi = proto, uint16(port.Port), uint16(max(port.Port, port.EndPort))
					c.addTerm(tt)
				}
				continue
			}
			type num struct {
				proto  uint8
				lo, hi uint16
			}
			var order []num
			peers := map[num][]netip.Prefix{}
			anyPeer := map[num]bool{}
			for _, e := range named[termPort{ti, pi}] {
				n := num{e.Proto, e.PortLo, e.PortHi}
				if _, ok := peers[n]; !ok {
					order = append(order, n)
					peers[n] = nil
				}
				if e.PeerID == 0 && !e.PeerCIDR.IsValid() {
					anyPeer[n] = true
					continue
				}
				peers[n] = append(peers[n], c.PeerPrefixes(e)...)
			}
			for _, n := range order {
				tt := t
				tt.Proto, tt.PortLo, tt.PortHi = n.proto, n.lo, n.hi
				members := sortedPrefixes(peers[n])
				switch {
				case anyPeer[n]:
					tt.Set = ""
				case pt.any || !slices.Equal(members, c.PeerSets[t.Set].Members):
					key := fmt.Sprintf("%s port %s=%s/%d", pt.key, port.Name, ProtoName(n.proto), n.lo)
					if pt.any {
						key = fmt.Sprintf("any port %s=%s/%d", port.Name, ProtoName(n.proto), n.lo)
					}
					tt.Set = c.peerSet(key, pt.net, members)
				}
				c.addTerm(tt)
			}
		}
	}
}

// peerSet records a set of peers under its key and returns the key.
func (c *Compiled) peerSet(key string, net bool, members []netip.Prefix) string {
	if c.PeerSets == nil {
		c.PeerSets = map[string]*PeerSet{}
	}
	if _, ok := c.PeerSets[key]; !ok {
		c.PeerSets[key] = &PeerSet{Key: key, Net: net, Members: sortedPrefixes(members)}
	}
	return key
}

func (c *Compiled) addTerm(t Term) {
	if c.termSeen == nil {
		c.termSeen = map[string]bool{}
	}
	if k := t.key(); !c.termSeen[k] {
		c.termSeen[k] = true
		c.Terms = append(c.Terms, t)
	}
}

// sortedPrefixes returns the prefixes sorted by address and length,
// without duplicates.
func sortedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}
