package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/l7"
	"github.com/cnlab/cnlab/topology"
)

// HTTPEntry is the IR of one L7 allow: the HTTP rules a peer (an
// identity, a CIDR, or any peer) gets on a TCP port of the subject's
// ingress. Rules of several entries for one peer add up (Cilium: a peer
// gets the union of the rules that select it on that port).
type HTTPEntry struct {
	Subject  uint32       `json:"subject"`
	PeerID   uint32       `json:"peerIdentity,omitempty"`
	PeerCIDR netip.Prefix `json:"peerCIDR,omitzero"`
	Port     uint16       `json:"port"`
	Rules    []l7.Rule    `json:"rules"`
	Origin   string       `json:"origin"`
}

func (c *Compiled) addHTTP(e Entry, rules []l7.Rule) {
	c.HTTP = append(c.HTTP, HTTPEntry{Subject: e.Subject, PeerID: e.PeerID, PeerCIDR: e.PeerCIDR, Port: e.PortLo, Rules: rules, Origin: e.Origin})
}

// L7Ports returns the TCP ports of a subject identity's ingress that go
// through the proxy, sorted.
func (c *Compiled) L7Ports(subject uint32) []uint16 { return c.l7Ports[subject] }

// l7PortIndex indexes the L7 entries' ports by subject, each list sorted.
func l7PortIndex(hs []HTTPEntry) map[uint32][]uint16 {
	out := map[uint32][]uint16{}
	for _, h := range hs {
		if !slices.Contains(out[h.Subject], h.Port) {
			out[h.Subject] = append(out[h.Subject], h.Port)
		}
	}
	for _, ports := range out {
		slices.Sort(ports)
	}
	return out
}

// HTTPRulesFor returns the HTTP rules that a connection from src to an
// L7 port of the subject identity is judged by: the union of the rules of
// the L7 entries whose peer covers src, plus an empty rule (every request)
// when an L3/L4 allow without rules covers src on that port (Cilium makes
// such a peer allow-all, still proxied). It does not judge L3/L4: a
// connection gets here only if the datapath allowed it.
func (c *Compiled) HTTPRulesFor(subject uint32, port uint16, src netip.Addr) []l7.Rule {
	var out []l7.Rule
	for _, h := range c.HTTP {
		if h.Subject == subject && h.Port == port && c.peerCovers(h.PeerID, h.PeerCIDR, src) {
			out = append(out, h.Rules...)
		}
	}
	for _, r := range c.RulesFor(subject, Ingress) {
		// The NetworkPolicy tier's allows only: the proxy sees a
		// connection an Admin allow accepted never, and an Admin Pass or
		// a Baseline allow adds no rule (the model's httpRules).
		if !r.Deny && !r.L7 && r.Tier.order() == TierPolicy && c.ruleMatches(r, src, ProtoTCP, port) {
			out = append(out, l7.Rule{})
			break
		}
	}
	return out
}

func (c *Compiled) peerCovers(id uint32, cidr netip.Prefix, src netip.Addr) bool {
	switch {
	case cidr.IsValid():
		return cidr.Contains(src)
	case id != 0:
		return c.identityOfIP[src] == id
	}
	return true
}

// SideAllows evaluates one side of a new connection in the IR: the
// subject identity's egress (remote is the destination) or ingress
// (remote is the source). Datapaths that redirect a flow past the chain
// that would have judged it use it to carry that chain's decision.
func (c *Compiled) SideAllows(subject uint32, dir Dir, remote netip.Addr, proto uint8, port uint16) bool {
	return c.sideAllows(subject, dir, remote, proto, port)
}

// Request is what the model sees of one HTTP request.
type Request struct {
	Method string
	Path   string // request-target as sent, query included
	Host   string
	Header map[string][]string
}

// HTTPVerdict is the model's outcome for one HTTP request on a new
// connection: Status 0 (no connection: denied at L3/L4), 403 (denied by
// the L7 rules: the proxy answers "Access denied"), or 200 (passed to the
// server, which the probe's servers answer 200).
type HTTPVerdict struct {
	Verdict
	Proxied bool   `json:"proxied"`
	Status  int    `json:"status"`
	L7      string `json:"l7,omitempty"` // why the proxy allows or denies it
}

// HTTPVerdict decides one HTTP request from src to dst:port, over their
// primary addresses.
func (m *Model) HTTPVerdict(src, dst *topology.Endpoint, port int, req Request) HTTPVerdict {
	return m.httpVerdict(EndpointParty(src), EndpointParty(dst), port, req)
}

// HTTPVerdictFamily is HTTPVerdict over the endpoints' addresses of
// family fam (4 or 6); ok is false if either has none.
func (m *Model) HTTPVerdictFamily(src, dst *topology.Endpoint, fam, port int, req Request) (v HTTPVerdict, ok bool) {
	s, ok1 := EndpointPartyOf(src, fam)
	d, ok2 := EndpointPartyOf(dst, fam)
	if !ok1 || !ok2 {
		return HTTPVerdict{}, false
	}
	v = m.httpVerdict(s, d, port, req)
	v.Family = fam
	return v, true
}

func (m *Model) httpVerdict(srcP, dstP Party, port int, req Request) HTTPVerdict {
	src, dst := srcP.Endpoint, dstP.Endpoint
	v := HTTPVerdict{Verdict: m.VerdictOf(srcP, dstP, TCP, port)}
	if !v.Allowed {
		v.L7 = "no connection: denied at L3/L4"
		return v
	}
	if v.Ingress.Tier == TierAdmin.String() {
		// An Admin-tier Accept is final: no NetworkPolicy-tier rule,
		// L7 rules included, sees the connection.
		v.Status = 200
		v.L7 = "not proxied: accepted by the Admin tier (" + v.Ingress.Reason + ")"
		return v
	}
	rules, origins, proxied := m.httpRules(src, srcP.Addr, dst, port)
	v.Proxied = proxied
	if !proxied {
		v.Status = 200
		v.L7 = fmt.Sprintf("not proxied: no L7 rule on %s port %d", dst.ID(), port)
		return v
	}
	// The rules judge the header the proxy forwards (l7.ForwardHeader),
	// as the proxy does.
	hdr := make(http.Header, len(req.Header)+3)
	for k, vs := range req.Header {
		hdr[k] = slices.Clone(vs)
	}
	l7.ForwardHeader(hdr, req.Host, srcP.Addr)
	mt, err := l7.Compile(rules)
	if err == nil && mt.Allows(l7.Request{Method: req.Method, Path: req.Path, Host: req.Host, Header: hdr}) {
		v.Status = 200
		v.L7 = "allowed by the L7 rules of " + strings.Join(origins, ", ")
		return v
	}
	v.Status = 403
	v.L7 = "403: no http rule of " + strings.Join(origins, ", ") + " matches the request"
	return v
}

// httpRules returns the HTTP rules src gets on dst's ingress port, the
// rules they come from, and whether that port goes through the proxy.
func (m *Model) httpRules(src *topology.Endpoint, srcIP netip.Addr, dst *topology.Endpoint, port int) ([]l7.Rule, []string, bool) {
	var rules []l7.Rule
	var origins []string
	proxied, l4 := false, ""
	for _, p := range m.Policies {
		if p.Cluster() {
			continue
		}
		for si := range p.Specs {
			sp := &p.Specs[si]
			if !m.selects(p, sp, dst) {
				continue
			}
			for _, r := range sp.Ingress.Allow {
				for _, pr := range r.Ports {
					if !pr.L7 || !portMatches(pr, TCP, port, dst) || !m.selectsSome(r) {
						continue
					}
					proxied = true
					if m.peersMatch(p, r, src, srcIP) {
						rules = append(rules, pr.HTTP...)
						origins = append(origins, p.Ref()+" "+r.Path)
					}
				}
				if l4 == "" && m.peersMatch(p, r, src, srcIP) && l4Allows(r, port, dst) {
					l4 = p.Ref() + " " + r.Path
				}
			}
		}
	}
	if proxied && l4 != "" {
		rules = append(rules, l7.Rule{})
		origins = append(origins, l4+" (L3/L4 allow: every request)")
	}
	return rules, origins, proxied
}

// l4Allows reports whether a rule allows TCP port on dst at L3/L4 without
// L7 rules for it.
func l4Allows(r Rule, port int, dst *topology.Endpoint) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, pr := range r.Ports {
		if !pr.L7 && portMatches(pr, TCP, port, dst) {
			return true
		}
	}
	return false
}

// Covers reports whether the entry's protocol and ports cover proto/port.
func (r Entry) Covers(proto uint8, port uint16) bool {
	if r.Proto == ProtoAny {
		return true
	}
	return r.Proto == proto && (r.PortLo == 0 || (port >= r.PortLo && port <= max(r.PortLo, r.PortHi)))
}

// selectsSome reports whether a rule's peers cover anything: any peer, a
// CIDR, or an endpoint of the lab. An L7 rule whose peers select no
// endpoint makes no port an L7 port (the IR has no entry for it).
func (m *Model) selectsSome(r Rule) bool {
	if r.AnyPeer {
		return true
	}
	for _, pe := range r.Peers {
		if pe.Endpoints == nil {
			return true
		}
		for i := range m.Lab.Endpoints {
			if m.endpointSelMatches(pe.Endpoints, &m.Lab.Endpoints[i]) {
				return true
			}
		}
	}
	return false
}
