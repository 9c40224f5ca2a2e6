package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/k8sdoc"

	"github.com/cnlab/cnlab/labels"
	"gopkg.in/yaml.v3"
)

// Merge joins the policies of several files (or documents) given in one
// command, refusing a policy defined twice: which of the two is meant
// would depend on the order of the files.
func Merge(sets ...[]*Policy) ([]*Policy, error) {
	var out []*Policy
	once := k8sdoc.Once{}
	for _, ps := range sets {
		for _, p := range ps {
			if err := once.Add(p.Ref(), p.File, p.File); err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// errorAt returns an input.Error about a parsed policy, in the same form as
// the parser's own errors.
func (p *Policy) errorAt(path, msg string) *input.Error {
	return &input.Error{File: p.File, Doc: fmt.Sprintf("document %d (%s)", p.DocIndex, p.Ref()), Path: path, Msg: msg}
}

// Encode is the text that stores a set of policies: each one's Raw
// document, separated by "---" lines. Parse reads it back as the same
// policies.
func Encode(pols []*Policy) []byte {
	raws := make([]string, len(pols))
	for i, p := range pols {
		raws[i] = p.Raw
	}
	return k8sdoc.Encode(raws...)
}

// Digest names a policy set: the same for the same policies (kind,
// namespace, name and stored text) in any order, different otherwise. The
// datapaths record it per host, so that status can tell which set a host
// enforces.
func Digest(pols []*Policy) string {
	keys := make([]string, len(pols))
	for i, p := range pols {
		keys[i] = p.Ref() + "\x00" + p.Raw
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ParseFile reads a multi-document YAML file of policies.
func ParseFile(path string) ([]*Policy, error) {
	data, err := files.ReadInput(path)
	if err != nil {
		return nil, &input.Error{File: path, Msg: fmt.Sprintf("cannot read: %v", err)}
	}
	return Parse(data, path)
}

// reader reads policy documents: one decoder per kind of
// k8sdoc.Policies.
var reader = k8sdoc.NewReader(k8sdoc.Config[rawObject, *Policy]{
	Family:     &k8sdoc.Policies,
	NotMapping: "a policy document must be a mapping (apiVersion:, kind:, metadata:, spec:)",
	Decoders: map[string]k8sdoc.Decoder[rawObject, *Policy]{
		KindNetworkPolicy: decodeNetworkPolicy,
		KindCNP:           decodeCiliumPolicy,
		KindClusterNP:     decodeClusterNP,
		KindAdminNP:       decodeAdminNP,
		KindBaselineNP:    decodeBaselineNP,
	},
})

// Parse decodes and validates every policy document in data. It does not
// know the lab: namespaces and named ports are checked when the policies
// are compiled against one.
func Parse(data []byte, file string) ([]*Policy, error) {
	items, err := reader.Read(data, file)
	if err != nil {
		return nil, err
	}
	out := make([]*Policy, len(items))
	for i, it := range items {
		pol := it.Value
		pol.Source, pol.File, pol.DocIndex, pol.Raw = it.Source, it.File, it.Index, it.Raw
		out[i] = pol
	}
	return out, nil
}

type parser struct {
	*k8sdoc.Doc
	// v1alpha1: a pods: selector of a cluster policy needs its
	// namespaceSelector (v0.1.8's CRD requires it; v1alpha2's does not).
	v1alpha1 bool
}

func (p *parser) errf(path, format string, args ...any) error {
	return p.Errorf(path, format, args...)
}

// header checks what every policy document has (metadata) and names the
// document.
func header(d *k8sdoc.Doc, obj *rawObject) (*parser, *Policy, error) {
	ns, err := d.Metadata(obj.Kind, &obj.Metadata, labels.CheckDNSSubdomain)
	if err != nil {
		return nil, nil, err
	}
	return &parser{Doc: d}, &Policy{Kind: obj.Kind, Namespace: ns, Name: obj.Metadata.Name}, nil
}

func decodeNetworkPolicy(d *k8sdoc.Doc, obj *rawObject) (*Policy, error) {
	p, pol, err := header(d, obj)
	if err != nil {
		return nil, err
	}
	if !isEmpty(&obj.Specs) {
		return nil, p.errf("specs", "a NetworkPolicy has spec:, not specs:")
	}
	if isEmpty(&obj.Spec) {
		return nil, p.errf("spec", "is required")
	}
	s, err := p.networkPolicy(&obj.Spec, pol.Namespace)
	if err != nil {
		return nil, err
	}
	pol.Specs = []Spec{s}
	return pol, nil
}

func decodeCiliumPolicy(d *k8sdoc.Doc, obj *rawObject) (*Policy, error) {
	p, pol, err := header(d, obj)
	if err != nil {
		return nil, err
	}
	if pol.Specs, err = p.ciliumPolicy(obj, pol.Namespace); err != nil {
		return nil, err
	}
	return pol, nil
}

func isEmpty(n *yaml.Node) bool { return !k8sdoc.Given(n) }

// givenNull reports whether the mapping node has key with a null value.
func givenNull(node *yaml.Node, key string) bool {
	if node.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			return node.Content[i+1].ShortTag() == "!!null"
		}
	}
	return false
}

// --- NetworkPolicy

func (p *parser) networkPolicy(node *yaml.Node, ns string) (Spec, error) {
	var r rawNPSpec
	var s Spec
	if err := p.Decode(node, &r, "spec"); err != nil {
		return s, err
	}
	if r.PodSelector == nil && givenNull(node, "podSelector") {
		// The API server reads "podSelector:" (null) as {}: every pod of
		// the namespace (upstream network-policy-api's own conformance
		// manifests write it so).
		r.PodSelector = &rawSelector{}
	}
	if r.PodSelector == nil {
		return s, p.errf("spec.podSelector", "is required (use {} to select every pod of the namespace)")
	}
	sel, err := p.selector(r.PodSelector, "spec.podSelector", nil)
	if err != nil {
		return s, err
	}
	s.Subject = sel
	// policyTypes defaulting, as the API server does it
	// (SetDefaults_NetworkPolicy): an empty list counts as unset, and
	// Egress is added only when there are egress rules.
	ingress, egress := true, r.Egress != nil && len(*r.Egress) > 0
	if len(r.PolicyTypes) > 0 {
		ingress, egress = false, false
		for i, t := range r.PolicyTypes {
			path := fmt.Sprintf("spec.policyTypes[%d]", i)
			switch t {
			case "Ingress":
				if ingress {
					return s, p.errf(path, "Ingress is listed twice")
				}
				ingress = true
			case "Egress":
				if egress {
					return s, p.errf(path, "Egress is listed twice")
				}
				egress = true
			default:
				return s, p.errf(path, "unknown policy type %q (Ingress, Egress)", t)
			}
		}
		if r.Ingress != nil && len(*r.Ingress) > 0 && !ingress {
			return s, p.errf("spec.ingress", "has rules but spec.policyTypes does not list Ingress, so they would be ignored")
		}
		if r.Egress != nil && len(*r.Egress) > 0 && !egress {
			return s, p.errf("spec.egress", "has rules but spec.policyTypes does not list Egress, so they would be ignored")
		}
	}
	s.Ingress.Enforce, s.Egress.Enforce = ingress, egress
	if r.Ingress != nil {
		for i, in := range *r.Ingress {
			path := fmt.Sprintf("spec.ingress[%d]", i)
			rule, err := p.npRule(in.From, in.Ports, path, path+".from", ns)
			if err != nil {
				return s, err
			}
			s.Ingress.Allow = append(s.Ingress.Allow, rule)
		}
	}
	if r.Egress != nil {
		for i, eg := range *r.Egress {
			path := fmt.Sprintf("spec.egress[%d]", i)
			rule, err := p.npRule(eg.To, eg.Ports, path, path+".to", ns)
			if err != nil {
				return s, err
			}
			s.Egress.Allow = append(s.Egress.Allow, rule)
		}
	}
	return s, nil
}

func (p *parser) npRule(peers []rawNPPeer, ports []rawNPPort, path, peersPath, ns string) (Rule, error) {
	rule := Rule{Path: path, AnyPeer: len(peers) == 0}
	for j, peer := range peers {
		pp := fmt.Sprintf("%s[%d]", peersPath, j)
		switch {
		case peer.IPBlock != nil:
			if peer.PodSelector != nil || peer.NamespaceSelector != nil {
				return rule, p.errf(pp, "ipBlock cannot be combined with podSelector or namespaceSelector in one peer")
			}
			cidr, except, err := p.cidrExcept(peer.IPBlock.CIDR, peer.IPBlock.Except, pp+".ipBlock")
			if err != nil {
				return rule, err
			}
			rule.Peers = append(rule.Peers, Peer{CIDR: cidr, Except: except})
		case peer.PodSelector != nil || peer.NamespaceSelector != nil:
			es := &EndpointSel{}
			var err error
			if es.Pods, err = p.selector(peer.PodSelector, pp+".podSelector", nil); err != nil {
				return rule, err
			}
			if peer.NamespaceSelector != nil {
				nsSel, err := p.selector(peer.NamespaceSelector, pp+".namespaceSelector", nil)
				if err != nil {
					return rule, err
				}
				es.Namespaces = &nsSel
			} else {
				es.Namespace = ns
			}
			rule.Peers = append(rule.Peers, Peer{Endpoints: es})
		default:
			return rule, p.errf(pp, "a peer needs podSelector, namespaceSelector or ipBlock")
		}
	}
	for j, port := range ports {
		pp := fmt.Sprintf("%s.ports[%d]", path, j)
		pr, err := p.npPort(port, pp)
		if err != nil {
			return rule, err
		}
		rule.Ports = append(rule.Ports, pr)
	}
	return rule, nil
}

func (p *parser) npPort(r rawNPPort, path string) (Port, error) {
	proto := r.Protocol
	if proto == "" {
		proto = TCP
	}
	if proto != TCP && proto != UDP && proto != SCTP {
		return Port{}, p.errf(path+".protocol", "unknown protocol %q (TCP, UDP, SCTP)", r.Protocol)
	}
	pr := Port{Protocol: proto}
	if r.Port != nil {
		if r.Port.IsInt {
			if r.Port.Int < 1 || r.Port.Int > 65535 {
				return pr, p.errf(path+".port", "%d is not a port number (1-65535)", r.Port.Int)
			}
			pr.Port = r.Port.Int
		} else {
			if err := labels.CheckPortName(r.Port.Str); err != nil {
				return pr, p.errf(path+".port", "%v", err)
			}
			pr.Name = r.Port.Str
		}
	}
	if r.EndPort != nil {
		switch {
		case r.Port == nil:
			return pr, p.errf(path+".endPort", "needs a numeric port")
		case pr.Name != "":
			return pr, p.errf(path+".endPort", "cannot be used with the named port %q", pr.Name)
		case *r.EndPort < pr.Port || *r.EndPort > 65535:
			return pr, p.errf(path+".endPort", "%d must be between port %d and 65535", *r.EndPort, pr.Port)
		}
		pr.EndPort = *r.EndPort
	}
	return pr, nil
}

func (p *parser) cidrExcept(cidr string, except []string, path string) (netip.Prefix, []netip.Prefix, error) {
	if cidr != "" && !strings.Contains(cidr, "/") {
		return netip.Prefix{}, nil, p.errf(path+".cidr", "%q needs a prefix length (e.g. %s/%d)", cidr, cidr, hostBitsOf(cidr))
	}
	c, err := parseCIDR(cidr)
	if err != nil {
		return c, nil, p.errf(path+".cidr", "%v", err)
	}
	var out []netip.Prefix
	for i, e := range except {
		x, err := parseCIDR(e)
		if err != nil {
			return c, nil, p.errf(fmt.Sprintf("%s.except[%d]", path, i), "%v", err)
		}
		if fx, fc := family(x), family(c); fx != fc {
			return c, nil, p.errf(fmt.Sprintf("%s.except[%d]", path, i), "%s is IPv%d but cidr %s is IPv%d: an except entry must be of its cidr's family (write the IPv%d exception in a peer of its own)", x, fx, c, fc, fx)
		}
		if !c.Contains(x.Addr()) || x.Bits() <= c.Bits() {
			return c, nil, p.errf(fmt.Sprintf("%s.except[%d]", path, i), "%s is not strictly inside %s", x, c)
		}
		out = append(out, x)
	}
	return c, out, nil
}

// family is 4 or 6, the address family of a prefix.
func family(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// hostBitsOf is the prefix length of one address written like s: 128
// for what looks like IPv6, 32 otherwise (for messages).
func hostBitsOf(s string) int {
	if strings.Contains(s, ":") {
		return 128
	}
	return 32
}

// parseCIDR accepts a CIDR of either family (or a bare address as a /32
// or /128). An IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) is refused:
// a packet is either family, never both, so the IPv4 CIDR is meant.
func parseCIDR(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, fmt.Errorf("is required (e.g. 10.0.0.0/8)")
	}
	var pr netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		pr, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(s)
		pr = netip.PrefixFrom(a, a.BitLen())
	}
	if err != nil || pr.Addr().Zone() != "" {
		return pr, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8)", s)
	}
	if pr.Addr().Is4In6() {
		return pr, fmt.Errorf("%s is an IPv4-mapped IPv6 prefix: write the IPv4 CIDR (%s)", s, ipv4Of(pr))
	}
	return pr.Masked(), nil
}

// ipv4Of is the IPv4 prefix an IPv4-mapped IPv6 prefix stands for (for
// messages; "?" if it has fewer than 96 bits).
func ipv4Of(p netip.Prefix) string {
	if p.Bits() < 96 {
		return "?"
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked().String()
}

// --- CiliumNetworkPolicy

func (p *parser) ciliumPolicy(obj *rawObject, ns string) ([]Spec, error) {
	if isEmpty(&obj.Spec) && isEmpty(&obj.Specs) {
		return nil, p.errf("spec", "is required")
	}
	var out []Spec
	if !isEmpty(&obj.Spec) {
		s, err := p.cnpSpec(&obj.Spec, "spec", ns)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if !isEmpty(&obj.Specs) { // with spec:, both count, as in Cilium
		var list []yaml.Node
		if err := obj.Specs.Decode(&list); err != nil || len(list) == 0 {
			return nil, p.errf("specs", "must be a non-empty list of rule specs")
		}
		for i := range list {
			s, err := p.cnpSpec(&list[i], fmt.Sprintf("specs[%d]", i), ns)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// ciliumKey maps a label key of a Cilium selector: the "k8s:" and "any:"
// sources are what cnlab's endpoints have; other sources are rejected.
func ciliumKey(k string) string {
	for _, src := range []string{"k8s:", "any:"} {
		if strings.HasPrefix(k, src) {
			return strings.TrimPrefix(k, src)
		}
	}
	return k
}

// Cilium's identity labels that carry the namespace.
const (
	PodNamespaceLabel    = "io.kubernetes.pod.namespace"
	NamespaceLabelPrefix = "io.cilium.k8s.namespace.labels."
)

func (p *parser) cnpSelector(r *rawSelector, path string) (Selector, error) {
	if r != nil {
		for k := range r.MatchLabels {
			if err := checkSource(k); err != nil {
				return Selector{}, p.errf(path+".matchLabels", "%v", err)
			}
		}
		for i, e := range r.MatchExpressions {
			if err := checkSource(e.Key); err != nil {
				return Selector{}, p.errf(fmt.Sprintf("%s.matchExpressions[%d].key", path, i), "%v", err)
			}
		}
	}
	return p.selector(r, path, ciliumKey)
}

func checkSource(k string) error {
	if i := strings.Index(k, ":"); i > 0 && !strings.HasPrefix(k, "k8s:") && !strings.HasPrefix(k, "any:") {
		return fmt.Errorf("label source %q in %q is not supported (k8s: or any:)", k[:i+1], k)
	}
	return nil
}

func (p *parser) cnpSpec(node *yaml.Node, base, ns string) (Spec, error) {
	var r rawCNPSpec
	var s Spec
	if err := p.Decode(node, &r, base); err != nil {
		return s, err
	}
	if !isEmpty(&r.NodeSelector) {
		return s, p.errf(base+".nodeSelector", "host policies (nodeSelector) are not supported yet")
	}
	if !isEmpty(&r.Labels) {
		return s, p.errf(base+".labels", "rule labels are not supported yet")
	}
	if r.EndpointSelector == nil {
		return s, p.errf(base+".endpointSelector", "is required (use {} to select every endpoint of the namespace)")
	}
	sel, err := p.cnpSelector(r.EndpointSelector, base+".endpointSelector")
	if err != nil {
		return s, err
	}
	if sel.mentions(PodNamespaceLabel) {
		return s, p.errf(base+".endpointSelector", "%s: a namespaced policy selects endpoints of its own namespace %s only (Cilium would replace the value with %s)", PodNamespaceLabel, ns, ns)
	}
	s.Subject = sel
	for i, in := range r.Ingress {
		rule, err := p.cnpIngress(in, fmt.Sprintf("%s.ingress[%d]", base, i), ns)
		if err != nil {
			return s, err
		}
		s.Ingress.Allow = append(s.Ingress.Allow, rule)
	}
	for i, in := range r.IngressDeny {
		rule, err := p.cnpIngress(in, fmt.Sprintf("%s.ingressDeny[%d]", base, i), ns)
		if err != nil {
			return s, err
		}
		s.Ingress.Deny = append(s.Ingress.Deny, rule)
	}
	for i, eg := range r.Egress {
		rule, err := p.cnpEgress(eg, fmt.Sprintf("%s.egress[%d]", base, i), ns)
		if err != nil {
			return s, err
		}
		s.Egress.Allow = append(s.Egress.Allow, rule)
	}
	for i, eg := range r.EgressDeny {
		rule, err := p.cnpEgress(eg, fmt.Sprintf("%s.egressDeny[%d]", base, i), ns)
		if err != nil {
			return s, err
		}
		s.Egress.Deny = append(s.Egress.Deny, rule)
	}
	// Cilium: a rule with ingress (or ingressDeny) rules puts the endpoint
	// in default deny at ingress, unless enableDefaultDeny says otherwise.
	s.Ingress.Enforce = len(r.Ingress)+len(r.IngressDeny) > 0
	s.Egress.Enforce = len(r.Egress)+len(r.EgressDeny) > 0
	// enableDefaultDeny only speaks for a direction the rule has rules
	// for, as in Cilium.
	if d := r.EnableDefaultDeny; d != nil {
		if d.Ingress != nil && s.Ingress.Enforce {
			s.Ingress.Enforce = *d.Ingress
		}
		if d.Egress != nil && s.Egress.Enforce {
			s.Egress.Enforce = *d.Egress
		}
	}
	if len(r.Ingress)+len(r.IngressDeny)+len(r.Egress)+len(r.EgressDeny) == 0 {
		return s, p.errf(base, "has no ingress, ingressDeny, egress or egressDeny rules (Cilium refuses such a rule)")
	}
	return s, nil
}

func unsupported(path string, fields map[string]*yaml.Node) error {
	for name, n := range fields {
		if !isEmpty(n) {
			return fmt.Errorf("%s.%s", path, name)
		}
	}
	return nil
}

func (p *parser) cnpIngress(r rawCNPIngress, path, ns string) (Rule, error) {
	if err := unsupported(path, map[string]*yaml.Node{"fromEntities": &r.FromEntities, "fromRequires": &r.FromRequires,
		"fromGroups": &r.FromGroups, "fromNodes": &r.FromNodes, "icmps": &r.ICMPs, "authentication": &r.Authentication}); err != nil {
		return Rule{}, p.errf(err.Error(), "is not supported yet (cnlab enforces fromEndpoints, fromCIDR, fromCIDRSet and toPorts)")
	}
	return p.cnpRule(path, ns, "fromEndpoints", r.FromEndpoints, "fromCIDR", r.FromCIDR, "fromCIDRSet", r.FromCIDRSet, r.ToPorts)
}

func (p *parser) cnpEgress(r rawCNPEgress, path, ns string) (Rule, error) {
	if err := unsupported(path, map[string]*yaml.Node{"toEntities": &r.ToEntities, "toFQDNs": &r.ToFQDNs,
		"toServices": &r.ToServices, "toRequires": &r.ToRequires, "toGroups": &r.ToGroups, "toNodes": &r.ToNodes,
		"icmps": &r.ICMPs, "authentication": &r.Authentication}); err != nil {
		return Rule{}, p.errf(err.Error(), "is not supported yet (cnlab enforces toEndpoints, toCIDR, toCIDRSet and toPorts)")
	}
	return p.cnpRule(path, ns, "toEndpoints", r.ToEndpoints, "toCIDR", r.ToCIDR, "toCIDRSet", r.ToCIDRSet, r.ToPorts)
}

func (p *parser) cnpRule(path, ns, epField string, epsp *[]rawSelector, cidrField string, cidrs []string,
	setField string, sets []rawCIDRSet, ports []rawPortRule) (Rule, error) {
	rule := Rule{Path: path}
	var eps []rawSelector
	if epsp != nil {
		eps = *epsp
	}
	if len(cidrs) > 0 && len(sets) > 0 {
		return rule, p.errf(path, "combining %s and %s in one rule is not supported (as in Cilium): use two rules", cidrField, setField)
	}
	if len(eps) > 0 && len(cidrs)+len(sets) > 0 {
		other := cidrField
		if len(cidrs) == 0 {
			other = setField
		}
		return rule, p.errf(path, "combining %s and %s in one rule is not supported (as in Cilium): use two rules", epField, other)
	}
	for i := range eps {
		sp := fmt.Sprintf("%s.%s[%d]", path, epField, i)
		sel, err := p.cnpSelector(&eps[i], sp)
		if err != nil {
			return rule, err
		}
		es := &EndpointSel{Pods: sel, CiliumKeys: true}
		if !sel.mentions(PodNamespaceLabel) && !sel.mentionsPrefix(NamespaceLabelPrefix) {
			// A namespaced policy selects its own namespace, unless the
			// selector speaks of namespaces itself (Cilium 1.14 and later).
			es.Namespace = ns
		}
		rule.Peers = append(rule.Peers, Peer{Endpoints: es})
	}
	for i, c := range cidrs {
		pr, err := parseCIDR(c)
		if err != nil {
			return rule, p.errf(fmt.Sprintf("%s.%s[%d]", path, cidrField, i), "%v", err)
		}
		rule.Peers = append(rule.Peers, Peer{CIDR: pr})
	}
	for i, s := range sets {
		sp := fmt.Sprintf("%s.%s[%d]", path, setField, i)
		if !isEmpty(&s.CIDRGroupRef) {
			return rule, p.errf(sp+".cidrGroupRef", "is not supported yet")
		}
		c, except, err := p.cidrExcept(s.CIDR, s.Except, sp)
		if err != nil {
			return rule, err
		}
		rule.Peers = append(rule.Peers, Peer{CIDR: c, Except: except})
	}
	// An L4-only rule applies to every peer; an empty rule {} to none, and
	// so does an explicitly empty fromEndpoints/toEndpoints list.
	rule.AnyPeer = len(rule.Peers) == 0 && len(ports) > 0 && epsp == nil
	for i, pr := range ports {
		pp := fmt.Sprintf("%s.toPorts[%d]", path, i)
		if err := unsupported(pp, map[string]*yaml.Node{"originatingTLS": &pr.OriginatingTLS,
			"terminatingTLS": &pr.TerminatingTLS, "serverNames": &pr.ServerNames, "listener": &pr.Listener}); err != nil {
			return rule, p.errf(err.Error(), "TLS interception and listeners are not supported (cnlab's proxy speaks plain HTTP/1.1)")
		}
		http, l7, err := p.l7Rules(&pr.Rules, pp+".rules", path)
		if err != nil {
			return rule, err
		}
		if len(pr.Ports) == 0 {
			if l7 {
				return rule, p.errf(pp+".ports", "is required with rules: L7 rules need a TCP port")
			}
			rule.Ports = append(rule.Ports, Port{Protocol: ANY}) // toPorts without ports: any port
		}
		for j, pp2 := range pr.Ports {
			jp := fmt.Sprintf("%s.ports[%d]", pp, j)
			port, err := p.cnpPort(pp2, jp)
			if err != nil {
				return rule, err
			}
			if l7 {
				if err := p.l7Port(port, jp); err != nil {
					return rule, err
				}
				port.L7, port.HTTP = true, http
			}
			rule.Ports = append(rule.Ports, port)
		}
	}
	return rule, nil
}

func (p *parser) cnpPort(r rawPortProto, path string) (Port, error) {
	proto := r.Protocol
	if proto == "" {
		proto = ANY
	}
	if proto != TCP && proto != UDP && proto != SCTP && proto != ANY {
		return Port{}, p.errf(path+".protocol", "unknown protocol %q (TCP, UDP, SCTP, ANY)", r.Protocol)
	}
	pr := Port{Protocol: proto}
	if r.Port == "" {
		return pr, p.errf(path+".port", `is required (use "0" for any port)`)
	}
	if len(r.Port) > 1 && r.Port[0] == '0' {
		return pr, p.errf(path+".port", "%q has a leading zero (Cilium would read it as octal): write the decimal number", r.Port)
	}
	switch n, err := strconv.Atoi(r.Port); {
	case err == nil && n == 0:
		// any port
	case err == nil:
		if n < 1 || n > 65535 {
			return pr, p.errf(path+".port", "%d is not a port number (1-65535)", n)
		}
		pr.Port = n
	default:
		if err := labels.CheckPortName(r.Port); err != nil {
			return pr, p.errf(path+".port", "%v", err)
		}
		pr.Name = r.Port
	}
	if r.EndPort != 0 {
		if pr.Port == 0 || r.EndPort < pr.Port || r.EndPort > 65535 {
			return pr, p.errf(path+".endPort", "%d must be between port %d and 65535 (and needs a numeric port)", r.EndPort, pr.Port)
		}
		pr.EndPort = r.EndPort
	}
	return pr, nil
}
