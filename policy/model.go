package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/labels"
	"github.com/cnlab/cnlab/topology"
)

// FirstIdentity is the first numeric identity given to a label set, as in
// Cilium (lower numbers are reserved).
const FirstIdentity = 256

// FirstCIDRIdentity is the first identity of a CIDR (Cilium's local
// identity scope).
const FirstCIDRIdentity = 1 << 24

// Identity is a distinct label set: an endpoint's labels together with its
// namespace. Every endpoint with the same set shares it, on every host.
type Identity struct {
	ID        uint32            `json:"id"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
	// Cilium are the identity labels Cilium would give: the pod's labels,
	// io.kubernetes.pod.namespace and io.cilium.k8s.namespace.labels.*.
	Cilium    map[string]string `json:"-"`
	Endpoints []string          `json:"endpoints"`
}

// Model is a lab's endpoints and policies: it answers what is allowed, on
// its own, from the policies' meaning. It is the oracle the datapaths are
// tested against, and the input of Compile.
type Model struct {
	Lab        *topology.Spec
	Policies   []*Policy
	Identities []*Identity
	byEndpoint map[string]*Identity
	byIP       map[netip.Addr]*topology.Endpoint
	byID       map[string]*topology.Endpoint
	// internal are the lab's own addresses (LabPrefixes), which the CIDR
	// selectors of a CiliumNetworkPolicy never select.
	internal []netip.Prefix
	// admin and baseline are the cluster tiers' policies, in TierOrder.
	admin, baseline []*Policy
}

// LabPrefixes are the addresses of a lab's hosts and pods: every host's
// pod CIDR (its endpoints, its bridge's address, the eBPF datapath's
// masquerade address) and, with links between hosts, the transit range
// (the wires' and overlays' addresses). A CiliumNetworkPolicy's CIDR
// selectors (fromCIDR, fromCIDRSet, toCIDR, toCIDRSet) select only
// addresses outside them, as Cilium's never select the cluster's pods or
// nodes (those are the endpoints and the host and remote-node entities).
// A NetworkPolicy's ipBlock keeps selecting any address it covers, lab
// endpoints and hosts included (Kubernetes leaves ipBlock for
// cluster-internal traffic to the implementation; kube-proxy's
// masqueraded node-port traffic is matched by it).
//
// A lab with IPv6 has them in both families: every pod CIDR of each host,
// and with links the IPv6 transit range (topology.TransitCIDR6) too.
func LabPrefixes(lab *topology.Spec) []netip.Prefix {
	var out []netip.Prefix
	for _, h := range lab.Hosts {
		cidrs := h.PodCIDRs
		if len(cidrs) == 0 {
			cidrs = []netip.Prefix{h.PodCIDR}
		}
		for _, p := range cidrs {
			if p.IsValid() {
				out = append(out, p.Masked())
			}
		}
	}
	if len(lab.Links) > 0 && lab.TransitCIDR.IsValid() {
		out = append(out, lab.TransitCIDR.Masked())
	}
	if len(lab.Links) > 0 && lab.HasFamily(6) {
		out = append(out, topology.TransitCIDR6)
	}
	return out
}

// cidrExcept is what a CIDR peer of policy p leaves out: its own except
// list and, for a CiliumNetworkPolicy, the lab's own addresses.
func (m *Model) cidrExcept(p *Policy, pe Peer) []netip.Prefix {
	if p.Kind != KindCNP {
		return pe.Except
	}
	return append(slices.Clone(pe.Except), m.internal...)
}

// NewModel checks the policies against the lab (their namespaces must
// exist) and assigns identities.
func NewModel(lab *topology.Spec, pols []*Policy) (*Model, error) {
	m := &Model{Lab: lab, byEndpoint: map[string]*Identity{}, byIP: map[netip.Addr]*topology.Endpoint{},
		byID: map[string]*topology.Endpoint{}, internal: LabPrefixes(lab)}
	for _, p := range pols {
		if p.Cluster() {
			continue
		}
		if _, ok := lab.Namespaces[p.Namespace]; !ok {
			return nil, p.errorAt("metadata.namespace",
				fmt.Sprintf("namespace %q does not exist in lab %s (namespaces: %s)", p.Namespace, lab.Name, strings.Join(nsNames(lab), ", ")))
		}
	}
	m.Policies = append([]*Policy(nil), pols...)
	sort.SliceStable(m.Policies, func(i, j int) bool { return m.Policies[i].Ref() < m.Policies[j].Ref() })
	m.admin, m.baseline = TierOrder(m.Policies, TierAdmin), TierOrder(m.Policies, TierBaseline)
	byKey := map[string]*Identity{}
	var keys []string
	for i := range lab.Endpoints {
		ep := &lab.Endpoints[i]
		for _, a := range ep.Addrs() { // every family's: selectors apply to all of a pod's addresses
			m.byIP[a] = ep
		}
		m.byID[ep.ID()] = ep
		key := ep.Namespace + "\x00" + labels.String(ep.Labels)
		id, ok := byKey[key]
		if !ok {
			id = &Identity{Namespace: ep.Namespace, Labels: ep.Labels, Cilium: ciliumLabels(lab, ep)}
			byKey[key] = id
			keys = append(keys, key)
		}
		id.Endpoints = append(id.Endpoints, ep.ID())
		m.byEndpoint[ep.ID()] = id
	}
	sort.Strings(keys)
	for i, k := range keys {
		id := byKey[k]
		id.ID = uint32(FirstIdentity + i)
		sort.Strings(id.Endpoints)
		m.Identities = append(m.Identities, id)
	}
	return m, nil
}

func nsNames(lab *topology.Spec) []string {
	var out []string
	for n := range lab.Namespaces {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func ciliumLabels(lab *topology.Spec, ep *topology.Endpoint) map[string]string {
	out := map[string]string{PodNamespaceLabel: ep.Namespace}
	for k, v := range lab.Namespaces[ep.Namespace].Labels {
		out[NamespaceLabelPrefix+k] = v
	}
	for k, v := range ep.Labels {
		out[k] = v
	}
	return out
}

// IdentityOf returns the identity of an endpoint ("ns/name").
func (m *Model) IdentityOf(ep string) *Identity { return m.byEndpoint[ep] }

// selects reports whether a spec of policy p selects endpoint ep.
func (m *Model) selects(p *Policy, s *Spec, ep *topology.Endpoint) bool {
	if p.Cluster() {
		return s.SubjectNamespaces != nil && s.SubjectNamespaces.Matches(m.Lab.Namespaces[ep.Namespace].Labels) &&
			s.Subject.Matches(ep.Labels)
	}
	if ep.Namespace != p.Namespace {
		return false
	}
	if p.Kind == KindCNP {
		return s.Subject.Matches(m.byEndpoint[ep.ID()].Cilium)
	}
	return s.Subject.Matches(ep.Labels)
}

// peerMatches reports whether a peer of policy p matches the remote side
// of a connection: an endpoint (ep non-nil) or a bare address.
func (m *Model) peerMatches(p *Policy, pe Peer, ep *topology.Endpoint, ip netip.Addr) bool {
	if pe.Endpoints != nil {
		return ep != nil && m.endpointSelMatches(pe.Endpoints, ep)
	}
	if pe.Nodes != nil {
		return slices.Contains(m.NodeAddrs(*pe.Nodes), ip)
	}
	if !pe.CIDR.Contains(ip) {
		return false
	}
	for _, x := range m.cidrExcept(p, pe) {
		if x.Contains(ip) {
			return false
		}
	}
	return true
}

func (m *Model) endpointSelMatches(es *EndpointSel, ep *topology.Endpoint) bool {
	if es.Namespace != "" && ep.Namespace != es.Namespace {
		return false
	}
	if es.Namespaces != nil && !es.Namespaces.Matches(m.Lab.Namespaces[ep.Namespace].Labels) {
		return false
	}
	if es.CiliumKeys {
		return es.Pods.Matches(m.byEndpoint[ep.ID()].Cilium)
	}
	return es.Pods.Matches(ep.Labels)
}

// portMatches reports whether a port rule matches proto/port on the
// destination endpoint dst (needed for named ports; nil when the
// destination is not an endpoint).
func portMatches(pr Port, proto string, port int, dst *topology.Endpoint) bool {
	if pr.Protocol != ANY && pr.Protocol != proto {
		return false
	}
	if pr.Protocol == ANY && proto != TCP && proto != UDP && proto != SCTP {
		return false
	}
	switch {
	case pr.Name != "":
		if dst == nil {
			return false
		}
		for _, cp := range dst.Ports {
			if cp.Name == pr.Name && cp.Port == port && cp.Protocol == proto {
				return true
			}
		}
		return false
	case pr.Port == 0:
		return true
	case pr.EndPort > 0:
		return port >= pr.Port && port <= pr.EndPort
	}
	return port == pr.Port
}

// ruleMatches reports whether a rule matches the remote side and the
// destination port.
func (m *Model) ruleMatches(p *Policy, r Rule, remote *topology.Endpoint, remoteIP netip.Addr, proto string, port int, dst *topology.Endpoint) bool {
	if !m.peersMatch(p, r, remote, remoteIP) {
		return false
	}
	if len(r.Ports) == 0 {
		return true
	}
	for _, pr := range r.Ports {
		if portMatches(pr, proto, port, dst) {
			return true
		}
	}
	return false
}

// peersMatch reports whether the peers of a rule of policy p include the
// remote side.
func (m *Model) peersMatch(p *Policy, r Rule, remote *topology.Endpoint, remoteIP netip.Addr) bool {
	if r.AnyPeer {
		return true
	}
	for _, pe := range r.Peers {
		if m.peerMatches(p, pe, remote, remoteIP) {
			return true
		}
	}
	return false
}

// unresolvedNames returns the named ports of a rule that the destination
// endpoint dst does not declare for proto: for dst they resolve to nothing.
func unresolvedNames(r Rule, proto string, dst *topology.Endpoint) []string {
	var names []string
	for _, pr := range r.Ports {
		if pr.Name == "" || (pr.Protocol != ANY && pr.Protocol != proto) {
			continue
		}
		declared := false
		for _, cp := range dst.Ports {
			declared = declared || cp.Name == pr.Name && cp.Protocol == proto
		}
		if !declared {
			names = append(names, pr.Name)
		}
	}
	return names
}

// exceptNotes explains why an allow rule of policy p whose ports match
// did not match the remote address: one of its CIDR peers covers the
// address but leaves it out, by its except list or (a
// CiliumNetworkPolicy) because it is one of the lab's own addresses.
func (m *Model) exceptNotes(p *Policy, r Rule, remoteIP netip.Addr, proto string, port int, dst *topology.Endpoint, egress bool) []string {
	if r.AnyPeer || !remoteIP.IsValid() {
		return nil
	}
	portsMatch := len(r.Ports) == 0
	for _, pr := range r.Ports {
		portsMatch = portsMatch || portMatches(pr, proto, port, dst)
	}
	if !portsMatch {
		return nil
	}
	var notes []string
	for j, pe := range r.Peers {
		if pe.Endpoints != nil || pe.Nodes != nil || !pe.CIDR.IsValid() || !pe.CIDR.Contains(remoteIP) {
			continue
		}
		// A NetworkPolicy has one peer per from/to entry, so the peer's
		// own path is known; a CiliumNetworkPolicy's peers mix its
		// selector lists, so its CIDR is named by value.
		what := fmt.Sprintf("%s %s: CIDR %s", p.Ref(), r.Path, pe.CIDR)
		if p.Kind == KindNetworkPolicy {
			field := "from"
			if egress {
				field = "to"
			}
			what = fmt.Sprintf("%s %s.%s[%d].ipBlock: cidr %s", p.Ref(), r.Path, field, j, pe.CIDR)
		}
		excluded := false
		for _, x := range pe.Except {
			if x.Contains(remoteIP) {
				notes = append(notes, fmt.Sprintf("%s matches %s, but its except entry %s leaves it out", what, remoteIP, x))
				excluded = true
				break
			}
		}
		if excluded || p.Kind != KindCNP {
			continue
		}
		for _, x := range m.internal {
			if x.Contains(remoteIP) {
				notes = append(notes, fmt.Sprintf("%s matches %s, but a CiliumNetworkPolicy's CIDR never selects the lab's own addresses (%s): select endpoints by labels", what, remoteIP, x))
				break
			}
		}
	}
	return notes
}

// Side is the verdict of one end of a connection: the source's egress or
// the destination's ingress.
type Side struct {
	Endpoint   string   `json:"endpoint,omitempty"`
	Selected   bool     `json:"selected"`             // isolated in this direction
	SelectedBy []string `json:"selectedBy,omitempty"` // policies isolating it
	Allowed    bool     `json:"allowed"`
	Reason     string   `json:"reason"`
	Rule       string   `json:"rule,omitempty"` // the rule that decided, if any
	// Notes explain a denial further: the allow rules whose peers match
	// but whose named port resolves to nothing on the destination, and
	// those whose ports match and whose CIDR covers the remote address
	// but leaves it out (an ipBlock's except, a CiliumNetworkPolicy's
	// lab addresses).
	Notes []string `json:"notes,omitempty"`
	// Tier is the tier whose rule decided ("Admin", "Baseline"; "" for
	// the NetworkPolicy tier or no rule), and Passed the Admin-tier Pass
	// rule that handed the decision down, if one did.
	Tier   string `json:"tier,omitempty"`
	Passed string `json:"passed,omitempty"`
}

// Verdict says whether a connection is allowed, and why.
type Verdict struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
	// PortName is the destination's port name the port was given by
	// (policy trace --port NAME), if it was.
	PortName string `json:"portName,omitempty"`
	// Family is the address family the verdict is over (4 or 6), when
	// it was asked for one (VerdictFamily); 0: the endpoints' primary
	// addresses (Verdict) or the parties' (VerdictOf).
	Family  int  `json:"family,omitempty"`
	Allowed bool `json:"allowed"`
	Egress  Side `json:"egress"`
	Ingress Side `json:"ingress"`
}

// Verdict decides a new connection from endpoint src to endpoint dst on
// proto/port: it needs the source's egress and the destination's ingress
// to allow it. Replies of an allowed connection always pass.
func (m *Model) Verdict(src, dst *topology.Endpoint, proto string, port int) Verdict {
	return m.VerdictOf(EndpointParty(src), EndpointParty(dst), proto, port)
}

// Party is one end of a connection as a datapath judges it: a lab
// endpoint (Endpoint set, Addr its address), or an address that is no
// endpoint's (a host's, a masquerade address, the world).
type Party struct {
	Endpoint *topology.Endpoint
	Addr     netip.Addr
}

// EndpointParty is an endpoint as a party, by its primary address
// (topology.Endpoint.IP).
func EndpointParty(ep *topology.Endpoint) Party { return Party{Endpoint: ep, Addr: ep.IP} }

// EndpointPartyOf is an endpoint as a party by its address of family fam
// (4 or 6); ok is false if the endpoint has none (the lab lacks the
// family).
func EndpointPartyOf(ep *topology.Endpoint, fam int) (p Party, ok bool) {
	a, ok := ep.Addr(fam)
	return Party{Endpoint: ep, Addr: a}, ok
}

// VerdictFamily is Verdict over the endpoints' addresses of family fam
// (4 or 6): a connection is always within one family, and CIDR rules
// (ipBlock, toCIDR, networks) match the addresses of their own family
// only, while selectors match every address of a pod. ok is false if
// either endpoint has no address of that family.
func (m *Model) VerdictFamily(src, dst *topology.Endpoint, fam int, proto string, port int) (v Verdict, ok bool) {
	s, ok1 := EndpointPartyOf(src, fam)
	d, ok2 := EndpointPartyOf(dst, fam)
	if !ok1 || !ok2 {
		return Verdict{}, false
	}
	v = m.VerdictOf(s, d, proto, port)
	v.Family = fam
	return v, true
}

// AddrParty is an address as a party: the endpoint that has it, if any.
func (m *Model) AddrParty(a netip.Addr) Party { return Party{Endpoint: m.byIP[a], Addr: a} }

// ID names a party: its endpoint, or its address.
func (p Party) ID() string {
	if p.Endpoint != nil {
		return p.Endpoint.ID()
	}
	return p.Addr.String()
}

// VerdictOf decides a new connection between two parties as the
// datapaths judge the packets they see, which after a Service's
// translation or masquerade need not be the client and the backend: the
// source's egress (an address that is no endpoint has none) and the
// destination's ingress (likewise).
func (m *Model) VerdictOf(src, dst Party, proto string, port int) Verdict {
	proto = strings.ToUpper(proto)
	v := Verdict{From: src.ID(), To: dst.ID(), Protocol: proto, Port: port}
	if src.Endpoint != nil {
		v.Egress = m.side(src.Endpoint, dst.Endpoint, dst.Addr, proto, port, dst.Endpoint, true)
	} else {
		v.Egress = Side{Allowed: true, Reason: fmt.Sprintf("%s is no endpoint: no egress policy", src.Addr)}
	}
	if dst.Endpoint != nil {
		v.Ingress = m.side(dst.Endpoint, src.Endpoint, src.Addr, proto, port, dst.Endpoint, false)
	} else {
		v.Ingress = Side{Allowed: true, Reason: fmt.Sprintf("%s is no endpoint: no ingress policy", dst.Addr)}
	}
	v.Allowed = v.Egress.Allowed && v.Ingress.Allowed
	return v
}

func (m *Model) side(subject, remote *topology.Endpoint, remoteIP netip.Addr, proto string, port int, dst *topology.Endpoint, egress bool) Side {
	if len(m.admin)+len(m.baseline) > 0 {
		return m.tieredSide(subject, remote, remoteIP, proto, port, dst, egress)
	}
	s, _ := m.npSide(subject, remote, remoteIP, proto, port, dst, egress)
	return s
}

// npSide decides one side by the NetworkPolicy tier alone: NetworkPolicy
// and CiliumNetworkPolicy. decided says whether the tier decided: the
// subject is isolated, or one of its rules matched (a CiliumNetworkPolicy
// without default deny decides what its rules match and nothing else).
func (m *Model) npSide(subject, remote *topology.Endpoint, remoteIP netip.Addr, proto string, port int, dst *topology.Endpoint, egress bool) (s Side, decided bool) {
	dirName := "ingress"
	if egress {
		dirName = "egress"
	}
	s = Side{Endpoint: subject.ID()}
	var allowRule string
	var notes []string
	for _, p := range m.Policies {
		if p.Cluster() {
			continue
		}
		for _, sp := range p.Specs {
			if !m.selects(p, &sp, subject) {
				continue
			}
			d := sp.Ingress
			if egress {
				d = sp.Egress
			}
			for _, r := range d.Deny {
				if m.ruleMatches(p, r, remote, remoteIP, proto, port, dst) {
					s.Allowed = false
					s.Reason = fmt.Sprintf("denied by %s %s", p.Ref(), r.Path)
					s.Rule = p.Ref() + " " + r.Path
					s.Selected = s.Selected || d.Enforce
					return s, true
				}
			}
			if d.Enforce {
				s.Selected = true
				if !slices.Contains(s.SelectedBy, p.Ref()) {
					s.SelectedBy = append(s.SelectedBy, p.Ref())
				}
			}
			for _, r := range d.Allow {
				if allowRule != "" {
					break
				}
				if m.ruleMatches(p, r, remote, remoteIP, proto, port, dst) {
					allowRule = p.Ref() + " " + r.Path
					break
				}
				if dst != nil && m.peersMatch(p, r, remote, remoteIP) {
					for _, name := range unresolvedNames(r, proto, dst) {
						notes = append(notes, fmt.Sprintf("%s %s: named port %q resolves to nothing for %s (not in its ports:)", p.Ref(), r.Path, name, dst.ID()))
					}
				}
				notes = append(notes, m.exceptNotes(p, r, remoteIP, proto, port, dst, egress)...)
			}
		}
	}
	decided = s.Selected || allowRule != ""
	switch {
	case !s.Selected:
		s.Allowed = true
		s.Reason = fmt.Sprintf("no policy isolates %s for %s", subject.ID(), dirName)
	case allowRule != "":
		s.Allowed = true
		s.Rule = allowRule
		s.Reason = "allowed by " + allowRule
	default:
		s.Reason = fmt.Sprintf("no rule allows it: %s is isolated for %s by %s", subject.ID(), dirName, strings.Join(s.SelectedBy, ", "))
		s.Notes = notes
	}
	return s, decided
}
