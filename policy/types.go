package policy

import (
	"net/netip"
	"strings"

	"github.com/cnlab/cnlab/l7"
)

// Kinds of policy documents.
const (
	KindNetworkPolicy = "NetworkPolicy"
	KindCNP           = "CiliumNetworkPolicy"
)

// Policy is one validated policy document.
type Policy struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Source    string `json:"source"` // file#document, for messages
	File      string `json:"-"`      // the file it came from
	DocIndex  int    `json:"-"`      // its position in the file, from 1
	Specs     []Spec `json:"specs"`
	// Raw is the document encoded again (without comments), kept so the
	// set of applied policies can be stored and re-read (Encode, Parse).
	Raw string `json:"-"`
}

// Key is "namespace/name", unique among the policies of a lab per kind.
func (p *Policy) Key() string { return p.Namespace + "/" + p.Name }

// Ref names the policy in traces: "NetworkPolicy x/allow-web".
func (p *Policy) Ref() string { return p.Kind + " " + p.Key() }

// Spec is one rule set: a subject selector and what it allows or denies in
// each direction. A NetworkPolicy has one; a CiliumNetworkPolicy may have
// several (specs:).
type Spec struct {
	Subject Selector  `json:"subject"`
	Ingress Direction `json:"ingress"`
	Egress  Direction `json:"egress"`
}

// Direction holds the rules of one direction.
type Direction struct {
	// Enforce says that an endpoint selected by this spec is isolated in
	// this direction: only what some policy allows passes.
	Enforce bool   `json:"enforce"`
	Allow   []Rule `json:"allow,omitempty"`
	Deny    []Rule `json:"deny,omitempty"`
}

// Rule matches peers and ports. It matches a connection when a peer
// matches (or AnyPeer) and a port matches (or there are no ports).
type Rule struct {
	Path    string `json:"path"` // YAML path, e.g. spec.ingress[1]
	AnyPeer bool   `json:"anyPeer,omitempty"`
	Peers   []Peer `json:"peers,omitempty"`
	Ports   []Port `json:"ports,omitempty"`
}

// Peer is a set of endpoints (by labels) or of addresses (by CIDR).
type Peer struct {
	Endpoints *EndpointSel   `json:"endpoints,omitempty"`
	CIDR      netip.Prefix   `json:"cidr,omitzero"`
	Except    []netip.Prefix `json:"except,omitempty"`
}

// EndpointSel selects endpoints by their labels and their namespace.
type EndpointSel struct {
	// Pods is matched against the endpoint's labels (NetworkPolicy), or
	// against its Cilium identity labels (CiliumNetworkPolicy: the pod's
	// labels plus io.kubernetes.pod.namespace and
	// io.cilium.k8s.namespace.labels.*).
	Pods       Selector `json:"pods"`
	CiliumKeys bool     `json:"ciliumKeys,omitempty"`
	// Namespaces, when set, is matched against the namespace's labels;
	// otherwise the endpoint must be in Namespace.
	Namespaces *Selector `json:"namespaces,omitempty"`
	Namespace  string    `json:"namespace,omitempty"`
}

// Protocols.
const (
	TCP  = "TCP"
	UDP  = "UDP"
	SCTP = "SCTP"
	ANY  = "ANY" // TCP, UDP or SCTP (CiliumNetworkPolicy's default)
)

// Port matches a protocol and a port, a range, a named port or any port.
type Port struct {
	Protocol string `json:"protocol"`
	Port     int    `json:"port,omitempty"`    // 0: any port
	EndPort  int    `json:"endPort,omitempty"` // 0: just Port
	Name     string `json:"name,omitempty"`    // named port, resolved on the destination
	// L7 says that connections to this port are handed to the L7 proxy,
	// which allows the requests that one of HTTP matches (rules.http of a
	// CiliumNetworkPolicy; [{}] allows every request).
	L7   bool      `json:"l7,omitempty"`
	HTTP []l7.Rule `json:"http,omitempty"`
}

func (p Port) String() string {
	var b strings.Builder
	switch {
	case p.Name != "":
		b.WriteString(p.Name)
	case p.Port == 0:
		b.WriteString("any")
	default:
		b.WriteString(itoa(p.Port))
		if p.EndPort > p.Port {
			b.WriteString("-" + itoa(p.EndPort))
		}
	}
	return b.String() + "/" + strings.ToLower(p.Protocol)
}
