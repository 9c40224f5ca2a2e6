package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cnlab/cnlab/internal/k8sdoc"
	"github.com/cnlab/cnlab/labels"
)

// Parsing of the cluster-scoped tiers (sigs.k8s.io/network-policy-api):
// policy.networking.k8s.io/v1alpha2 ClusterNetworkPolicy and v1alpha1
// AdminNetworkPolicy and BaselineAdminNetworkPolicy, into the same Policy
// (Tier, Priority, one Spec with SubjectNamespaces and Ordered rules).
// Validation follows the upstream CRDs (v1alpha1 at v0.1.8, v1alpha2 at
// its main): the fields each kind has, exactly one field where the API
// says so, the enums, ranges and list limits. docs/policy.md, "Cluster
// policy tiers", is the user's account of it.

// tierAPI is what differs between the three kinds.
type tierAPI struct {
	kind    string
	actions []string // as written, in the order messages list them
	// Most rules per direction, peers per rule, ports (or protocols) per
	// rule.
	maxRules, maxPeers, maxPorts int
}

var (
	clusterNPAPI  = tierAPI{KindClusterNP, []string{ActionAccept, ActionDeny, ActionPass}, 25, 25, 25}
	adminNPAPI    = tierAPI{KindAdminNP, []string{ActionAllow, ActionDeny, ActionPass}, MaxTierRules, 100, 100}
	baselineNPAPI = tierAPI{KindBaselineNP, []string{ActionAllow, ActionDeny}, MaxTierRules, 100, 100}
)

// Limits both API versions share.
const (
	maxNetworks    = 25  // CIDRs in one networks peer
	maxRuleNameLen = 100 // characters in a rule's name
	maxPriority    = 1000
)

// BaselineName is the one name a BaselineAdminNetworkPolicy may have.
const BaselineName = "default"

// clusterHeader checks the metadata of a cluster-scoped document (a name,
// no namespace, valid labels), names the document "Kind name" and starts
// its Policy.
func clusterHeader(d *k8sdoc.Doc, obj *rawObject, tier Tier) (*parser, *Policy, error) {
	m := &obj.Metadata
	if m.Name == "" {
		return nil, nil, d.Errorf("metadata.name", "is required")
	}
	if err := labels.CheckDNSSubdomain(m.Name); err != nil {
		return nil, nil, d.Errorf("metadata.name", "%v", err)
	}
	d.Named(obj.Kind + " " + m.Name)
	if m.Namespace != "" {
		return nil, nil, d.Errorf("metadata.namespace", "a %s is cluster-scoped: it has no namespace (remove namespace: %s)", obj.Kind, m.Namespace)
	}
	if err := labels.CheckSet(m.Labels); err != nil {
		return nil, nil, d.Errorf("metadata.labels", "%v", err)
	}
	p := &parser{Doc: d, v1alpha1: obj.Kind != KindClusterNP}
	if isEmpty(&obj.Spec) {
		if !isEmpty(&obj.Specs) {
			return nil, nil, p.errf("specs", "a %s has spec:, not specs:", obj.Kind)
		}
		return nil, nil, p.errf("spec", "is required")
	}
	if !isEmpty(&obj.Specs) {
		return nil, nil, p.errf("specs", "a %s has spec:, not specs:", obj.Kind)
	}
	return p, &Policy{Kind: obj.Kind, Name: m.Name, Tier: tier}, nil
}

func decodeClusterNP(d *k8sdoc.Doc, obj *rawObject) (*Policy, error) {
	p, pol, err := clusterHeader(d, obj, 0)
	if err != nil {
		return nil, err
	}
	var r rawClusterNPSpec
	if err := p.Decode(&obj.Spec, &r, "spec"); err != nil {
		return nil, err
	}
	switch r.Tier {
	case "Admin":
		pol.Tier = TierAdmin
	case "Baseline":
		pol.Tier = TierBaseline
	case "":
		return nil, p.errf("spec.tier", "is required (Admin or Baseline)")
	default:
		return nil, p.errf("spec.tier", "%q is not a tier (Admin or Baseline)", r.Tier)
	}
	if pol.Priority, err = p.priority(r.Priority); err != nil {
		return nil, err
	}
	s, err := p.subject(r.Subject)
	if err != nil {
		return nil, err
	}
	api := &clusterNPAPI
	if err := p.ruleCount(api, "spec.ingress", len(r.Ingress)); err != nil {
		return nil, err
	}
	for i, in := range r.Ingress {
		path := fmt.Sprintf("spec.ingress[%d]", i)
		rule, err := p.tierRule(api, path, in.Name, in.Action, "from", ingressPeers(in.From), func() ([]Port, string, error) {
			return p.protocols(in.Protocols, path+".protocols")
		})
		if err != nil {
			return nil, err
		}
		s.Ingress.Ordered = append(s.Ingress.Ordered, rule)
	}
	if err := p.ruleCount(api, "spec.egress", len(r.Egress)); err != nil {
		return nil, err
	}
	for i, eg := range r.Egress {
		path := fmt.Sprintf("spec.egress[%d]", i)
		rule, err := p.tierRule(api, path, eg.Name, eg.Action, "to", eg.To, func() ([]Port, string, error) {
			return p.protocols(eg.Protocols, path+".protocols")
		})
		if err != nil {
			return nil, err
		}
		s.Egress.Ordered = append(s.Egress.Ordered, rule)
	}
	pol.Specs = []Spec{s}
	return pol, nil
}

func decodeAdminNP(d *k8sdoc.Doc, obj *rawObject) (*Policy, error) {
	p, pol, err := clusterHeader(d, obj, TierAdmin)
	if err != nil {
		return nil, err
	}
	var r rawANPSpec
	if err := p.Decode(&obj.Spec, &r, "spec"); err != nil {
		return nil, err
	}
	if pol.Priority, err = p.priority(r.Priority); err != nil {
		return nil, err
	}
	s, err := p.anpSpec(&adminNPAPI, r.Subject, r.Ingress, r.Egress)
	if err != nil {
		return nil, err
	}
	pol.Specs = []Spec{s}
	return pol, nil
}

func decodeBaselineNP(d *k8sdoc.Doc, obj *rawObject) (*Policy, error) {
	p, pol, err := clusterHeader(d, obj, TierBaseline)
	if err != nil {
		return nil, err
	}
	if pol.Name != BaselineName {
		return nil, p.errf("metadata.name", "a %s must be named %q (a cluster has one), not %q", KindBaselineNP, BaselineName, pol.Name)
	}
	var r rawBANPSpec
	if err := p.Decode(&obj.Spec, &r, "spec"); err != nil {
		return nil, err
	}
	if k8sdoc.Given(&r.Priority) {
		return nil, p.errf("spec.priority", "a %s has no priority: there is one, evaluated after every Baseline-tier ClusterNetworkPolicy", KindBaselineNP)
	}
	s, err := p.anpSpec(&baselineNPAPI, r.Subject, r.Ingress, r.Egress)
	if err != nil {
		return nil, err
	}
	pol.Specs = []Spec{s}
	return pol, nil
}

// anpSpec reads the subject and the rules of a v1alpha1 policy.
func (p *parser) anpSpec(api *tierAPI, subject *rawSubject, ingress []rawANPIngress, egress []rawANPEgress) (Spec, error) {
	s, err := p.subject(subject)
	if err != nil {
		return s, err
	}
	if err := p.ruleCount(api, "spec.ingress", len(ingress)); err != nil {
		return s, err
	}
	for i, in := range ingress {
		path := fmt.Sprintf("spec.ingress[%d]", i)
		rule, err := p.tierRule(api, path, in.Name, in.Action, "from", ingressPeers(in.From), func() ([]Port, string, error) {
			return p.anpPorts(in.Ports, path+".ports")
		})
		if err != nil {
			return s, err
		}
		s.Ingress.Ordered = append(s.Ingress.Ordered, rule)
	}
	if err := p.ruleCount(api, "spec.egress", len(egress)); err != nil {
		return s, err
	}
	for i, eg := range egress {
		path := fmt.Sprintf("spec.egress[%d]", i)
		rule, err := p.tierRule(api, path, eg.Name, eg.Action, "to", eg.To, func() ([]Port, string, error) {
			return p.anpPorts(eg.Ports, path+".ports")
		})
		if err != nil {
			return s, err
		}
		s.Egress.Ordered = append(s.Egress.Ordered, rule)
	}
	return s, nil
}

func (p *parser) priority(r *int) (int, error) {
	if r == nil {
		return 0, p.errf("spec.priority", "is required (0-%d, lower first)", maxPriority)
	}
	if *r < 0 || *r > maxPriority {
		return 0, p.errf("spec.priority", "%d is not between 0 and %d", *r, maxPriority)
	}
	return *r, nil
}

func (p *parser) ruleCount(api *tierAPI, path string, n int) error {
	if n > api.maxRules {
		return p.errf(path, "has %d rules: a %s has at most %d per direction", n, api.kind, api.maxRules)
	}
	return nil
}

// subject reads spec.subject: the namespaces selected by their labels, or
// pods by their namespace's labels and their own.
func (p *parser) subject(r *rawSubject) (Spec, error) {
	var s Spec
	const path = "spec.subject"
	if r == nil {
		return s, p.errf(path, "is required (namespaces or pods)")
	}
	if err := p.exactlyOne(path, "give exactly one", field{"namespaces", r.Namespaces != nil}, field{"pods", r.Pods != nil}); err != nil {
		return s, err
	}
	if r.Namespaces != nil {
		ns, err := p.selector(r.Namespaces, path+".namespaces", nil)
		if err != nil {
			return s, err
		}
		s.SubjectNamespaces = &ns
		return s, nil
	}
	es, err := p.namespacedPod(r.Pods, path+".pods")
	if err != nil {
		return s, err
	}
	s.Subject, s.SubjectNamespaces = es.Pods, es.Namespaces
	return s, nil
}

// namespacedPod reads pods: {namespaceSelector, podSelector}. An absent
// namespaceSelector, as an empty one, selects every namespace.
func (p *parser) namespacedPod(r *rawNamespacedPod, path string) (*EndpointSel, error) {
	if r.PodSelector == nil {
		return nil, p.errf(path+".podSelector", "is required (use {} for every pod of the selected namespaces)")
	}
	if r.NamespaceSelector == nil && p.v1alpha1 {
		return nil, p.errf(path+".namespaceSelector", "is required in v1alpha1 (use {} for every namespace)")
	}
	pods, err := p.selector(r.PodSelector, path+".podSelector", nil)
	if err != nil {
		return nil, err
	}
	ns, err := p.selector(r.NamespaceSelector, path+".namespaceSelector", nil)
	if err != nil {
		return nil, err
	}
	return &EndpointSel{Pods: pods, Namespaces: &ns}, nil
}

// ingressPeers gives ingress peers the shape of egress ones, which have
// every field an ingress peer has.
func ingressPeers(in *[]rawTierIngressPeer) *[]rawTierEgressPeer {
	if in == nil {
		return nil
	}
	out := make([]rawTierEgressPeer, len(*in))
	for i, r := range *in {
		out[i] = rawTierEgressPeer{Namespaces: r.Namespaces, Pods: r.Pods}
	}
	return &out
}

// tierRule reads one rule: its name, its action, its peers (from or to)
// and its ports (ports returns them and the path of the first named port).
func (p *parser) tierRule(api *tierAPI, path, name, action, peersField string, peers *[]rawTierEgressPeer,
	ports func() ([]Port, string, error)) (Rule, error) {
	rule := Rule{Path: path, Name: name, Action: action}
	if n := utf8.RuneCountInString(name); n > maxRuleNameLen {
		return rule, p.errf(path+".name", "is %d characters long, at most %d", n, maxRuleNameLen)
	}
	if err := p.action(api, action, path+".action"); err != nil {
		return rule, err
	}
	egress := peersField == "to"
	if peers == nil || len(*peers) == 0 {
		names := []string{"namespaces", "pods"}
		if egress {
			names = append(names, "nodes", "networks")
		}
		return rule, p.errf(path+"."+peersField, "is required: at least one peer (%s)", orList(names))
	}
	if n := len(*peers); n > api.maxPeers {
		return rule, p.errf(path+"."+peersField, "has %d peers: a %s rule has at most %d", n, api.kind, api.maxPeers)
	}
	var nodesAt string // the first peer that has no named ports
	for i := range *peers {
		pp := fmt.Sprintf("%s.%s[%d]", path, peersField, i)
		r := &(*peers)[i]
		got, err := p.tierPeer(r, pp, egress)
		if err != nil {
			return rule, err
		}
		if nodesAt == "" && (r.Nodes != nil || r.Networks != nil) {
			nodesAt = pp
		}
		rule.Peers = append(rule.Peers, got...)
	}
	var namedAt string
	var err error
	if rule.Ports, namedAt, err = ports(); err != nil {
		return rule, err
	}
	if namedAt != "" && nodesAt != "" {
		return rule, p.errf(path, "the named port of %s cannot be matched on the nodes or networks peer %s: only pods have named ports (give them separate rules)", namedAt, nodesAt)
	}
	return rule, nil
}

// peerFields are a peer's fields, with whether r sets them: ingress
// peers have namespaces and pods only.
func peerFields(r *rawTierEgressPeer, egress bool) []field {
	fs := []field{{"namespaces", r.Namespaces != nil}, {"pods", r.Pods != nil}}
	if egress {
		fs = append(fs, field{"nodes", r.Nodes != nil}, field{"networks", r.Networks != nil})
	}
	return fs
}

// field is one of the fields of an object that has exactly one.
type field struct {
	name string
	set  bool
}

// exactlyOne checks that one of fields is set, or says which are (and
// more, what to do instead).
func (p *parser) exactlyOne(path, more string, fields ...field) error {
	var names, set []string
	for _, f := range fields {
		names = append(names, f.name)
		if f.set {
			set = append(set, f.name)
		}
	}
	switch len(set) {
	case 0:
		return p.errf(path, "needs one of %s", orList(names))
	case 1:
		return nil
	}
	return p.errf(path, "has %s: %s", strings.Join(set, " and "), more)
}

// orList spells alternatives: "a or b", "a, b or c".
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

func (p *parser) action(api *tierAPI, action, path string) error {
	list := orList(api.actions)
	switch {
	case slices.Contains(api.actions, action):
		return nil
	case action == "":
		return p.errf(path, "is required (%s)", list)
	case api.kind == KindBaselineNP && action == ActionPass:
		return p.errf(path, "%q is not an action of a %s (%s): nothing is below the Baseline tier to pass to", action, api.kind, list)
	case action == ActionAllow || action == ActionAccept:
		return p.errf(path, "%q is not an action of a %s (%s): %s spells it %s", action, api.kind, list, api.kind, api.actions[0])
	}
	return p.errf(path, "%q is not an action of a %s (%s)", action, api.kind, list)
}

// tierPeer reads one peer, which has exactly one field. A networks peer
// is one Peer per CIDR.
func (p *parser) tierPeer(r *rawTierEgressPeer, path string, egress bool) ([]Peer, error) {
	if k8sdoc.Given(&r.DomainNames) {
		return nil, p.errf(path+".domainNames", "is not supported: a cnlab lab has no DNS, so there is no name resolution to learn the addresses of a domain from (use networks with its CIDRs)")
	}
	if err := p.exactlyOne(path, "a peer has exactly one (use one peer for each)", peerFields(r, egress)...); err != nil {
		return nil, err
	}
	switch {
	case r.Namespaces != nil:
		ns, err := p.selector(r.Namespaces, path+".namespaces", nil)
		if err != nil {
			return nil, err
		}
		return []Peer{{Endpoints: &EndpointSel{Namespaces: &ns}}}, nil
	case r.Pods != nil:
		es, err := p.namespacedPod(r.Pods, path+".pods")
		if err != nil {
			return nil, err
		}
		return []Peer{{Endpoints: es}}, nil
	case r.Nodes != nil:
		sel, err := p.selector(r.Nodes, path+".nodes", nil)
		if err != nil {
			return nil, err
		}
		return []Peer{{Nodes: &sel}}, nil
	}
	return p.networks(*r.Networks, path+".networks")
}

// networks reads a networks peer's CIDRs: each a CIDR with its prefix
// length (no bare address, as upstream's isCIDR), of either family, a
// Peer per CIDR. An IPv6 CIDR matches the IPv6 addresses of a lab that
// has them, and nothing in an IPv4-only lab (upstream's own examples pair
// 0.0.0.0/0 with ::/0).
func (p *parser) networks(cidrs []string, path string) ([]Peer, error) {
	if len(cidrs) == 0 {
		return nil, p.errf(path, "must not be empty")
	}
	if len(cidrs) > maxNetworks {
		return nil, p.errf(path, "has %d CIDRs, at most %d", len(cidrs), maxNetworks)
	}
	var out []Peer
	seen := map[netip.Prefix]bool{}
	for i, c := range cidrs {
		cp := fmt.Sprintf("%s[%d]", path, i)
		if c != "" && !strings.Contains(c, "/") {
			return nil, p.errf(cp, "%q needs a prefix length (e.g. %s/%d)", c, c, hostBitsOf(c))
		}
		pr, err := parseCIDR(c)
		if err != nil {
			return nil, p.errf(cp, "%v", err)
		}
		if seen[pr] { // a set upstream (listType=set)
			return nil, p.errf(cp, "%s is listed twice", pr)
		}
		seen[pr] = true
		out = append(out, Peer{CIDR: pr})
	}
	return out, nil
}

// port checks a port number at path.
func (p *parser) portNumber(n *int, path string) (int, error) {
	if n == nil {
		return 0, p.errf(path, "is required")
	}
	if *n < 1 || *n > 65535 {
		return 0, p.errf(path, "%d is not a port number (1-65535)", *n)
	}
	return *n, nil
}

// portRange checks start < end, both port numbers, at path.
func (p *parser) portRange(start, end *int, path string) (int, int, error) {
	s, err := p.portNumber(start, path+".start")
	if err != nil {
		return 0, 0, err
	}
	e, err := p.portNumber(end, path+".end")
	if err != nil {
		return 0, 0, err
	}
	if s >= e {
		return 0, 0, p.errf(path, "start %d must be less than end %d", s, e)
	}
	return s, e, nil
}

func (p *parser) namedPort(name, path string) (Port, error) {
	if err := labels.CheckPortName(name); err != nil {
		return Port{}, p.errf(path, "%v", err)
	}
	return Port{Protocol: ANY, Name: name}, nil
}

// portsList checks a ports or protocols list: absent matches every port
// (nil); given, it has 1 to max entries.
func (p *parser) portsList(n int, path string, max int) error {
	if n == 0 {
		return p.errf(path, "must not be empty (leave it out to match every port and protocol)")
	}
	if n > max {
		return p.errf(path, "has %d entries, at most %d", n, max)
	}
	return nil
}

// protocols reads a v1alpha2 protocols list; it returns the path of the
// first named port too.
func (p *parser) protocols(rs *[]rawProtocol, path string) ([]Port, string, error) {
	if rs == nil {
		return nil, "", nil
	}
	if err := p.portsList(len(*rs), path, clusterNPAPI.maxPorts); err != nil {
		return nil, "", err
	}
	var out []Port
	var namedAt string
	for i, r := range *rs {
		pp := fmt.Sprintf("%s[%d]", path, i)
		if err := p.exactlyOne(pp, "an entry has exactly one (use one entry for each)", field{"tcp", r.TCP != nil}, field{"udp", r.UDP != nil},
			field{"sctp", r.SCTP != nil}, field{"destinationNamedPort", r.DestinationNamedPort != nil}); err != nil {
			return nil, "", err
		}
		if r.DestinationNamedPort != nil {
			port, err := p.namedPort(*r.DestinationNamedPort, pp+".destinationNamedPort")
			if err != nil {
				return nil, "", err
			}
			if namedAt == "" {
				namedAt = pp
			}
			out = append(out, port)
			continue
		}
		port, pr := Port{Protocol: TCP}, r.TCP
		if r.UDP != nil {
			port, pr = Port{Protocol: UDP}, r.UDP
		} else if r.SCTP != nil {
			port, pr = Port{Protocol: SCTP}, r.SCTP
		}
		if pr.DestinationPort == nil {
			return nil, "", p.errf(pp+"."+strings.ToLower(port.Protocol), "needs destinationPort (number or range), as the API requires: to match every port and protocol, leave protocols out")
		}
		if dp := pr.DestinationPort; dp != nil {
			dpath := pp + "." + strings.ToLower(port.Protocol) + ".destinationPort"
			var err error
			switch {
			case dp.Number != nil && dp.Range != nil:
				return nil, "", p.errf(dpath, "has number and range: give one")
			case dp.Number != nil:
				port.Port, err = p.portNumber(dp.Number, dpath+".number")
			case dp.Range != nil:
				port.Port, port.EndPort, err = p.portRange(dp.Range.Start, dp.Range.End, dpath+".range")
			default:
				return nil, "", p.errf(dpath, "needs number or range")
			}
			if err != nil {
				return nil, "", err
			}
		}
		out = append(out, port)
	}
	return out, namedAt, nil
}

// anpPorts reads a v1alpha1 ports list; it returns the path of the first
// named port too.
func (p *parser) anpPorts(rs *[]rawANPPort, path string) ([]Port, string, error) {
	if rs == nil {
		return nil, "", nil
	}
	if err := p.portsList(len(*rs), path, adminNPAPI.maxPorts); err != nil {
		return nil, "", err
	}
	var out []Port
	var namedAt string
	for i, r := range *rs {
		pp := fmt.Sprintf("%s[%d]", path, i)
		if err := p.exactlyOne(pp, "an entry has exactly one (use one entry for each)",
			field{"portNumber", r.PortNumber != nil}, field{"namedPort", r.NamedPort != nil}, field{"portRange", r.PortRange != nil}); err != nil {
			return nil, "", err
		}
		var port Port
		var err error
		switch {
		case r.NamedPort != nil:
			port, err = p.namedPort(*r.NamedPort, pp+".namedPort")
			if namedAt == "" {
				namedAt = pp
			}
		case r.PortNumber != nil:
			if port.Protocol, err = p.anpProtocol(r.PortNumber.Protocol, pp+".portNumber.protocol"); err == nil {
				port.Port, err = p.portNumber(r.PortNumber.Port, pp+".portNumber.port")
			}
		default:
			if port.Protocol, err = p.anpProtocol(r.PortRange.Protocol, pp+".portRange.protocol"); err == nil {
				port.Port, port.EndPort, err = p.portRange(r.PortRange.Start, r.PortRange.End, pp+".portRange")
			}
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, port)
	}
	return out, namedAt, nil
}

// anpProtocol is a v1alpha1 port's protocol: TCP when not given.
func (p *parser) anpProtocol(proto, path string) (string, error) {
	switch proto {
	case "":
		return TCP, nil
	case TCP, UDP, SCTP:
		return proto, nil
	}
	return "", p.errf(path, "unknown protocol %q (TCP, UDP, SCTP)", proto)
}
