package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/cnlab/cnlab/l7"
)

// Kinds of policy documents.
const (
	KindNetworkPolicy = "NetworkPolicy"
	KindCNP           = "CiliumNetworkPolicy"
	// The cluster-scoped tiers (sigs.k8s.io/network-policy-api):
	// ClusterNetworkPolicy (v1alpha2, spec.tier Admin or Baseline),
	// AdminNetworkPolicy and BaselineAdminNetworkPolicy (v1alpha1).
	KindClusterNP  = "ClusterNetworkPolicy"
	KindAdminNP    = "AdminNetworkPolicy"
	KindBaselineNP = "BaselineAdminNetworkPolicy"
)

// Tier is where a policy's rules sit in the order of evaluation: the Admin
// tier first (by priority, lower first; rules in order; first match
// decides; Pass hands the connection down), then NetworkPolicy and
// CiliumNetworkPolicy, then, for endpoints no NetworkPolicy isolates in
// that direction, the Baseline tier; a connection nothing decided is
// allowed.
type Tier uint8

// Tiers, numbered as the IR orders them within a subject and direction.
const (
	TierAdmin    Tier = 1
	TierPolicy   Tier = 2 // NetworkPolicy and CiliumNetworkPolicy (the zero value means it too)
	TierBaseline Tier = 3
)

func (t Tier) String() string {
	switch t {
	case TierAdmin:
		return "Admin"
	case TierBaseline:
		return "Baseline"
	}
	return "NetworkPolicy"
}

// order is the tier's rank in the evaluation (the zero value is TierPolicy).
func (t Tier) order() Tier {
	if t == 0 {
		return TierPolicy
	}
	return t
}

// Actions of a cluster-tier rule, as the two API versions spell them.
const (
	ActionAccept = "Accept" // v1alpha2
	ActionAllow  = "Allow"  // v1alpha1
	ActionDeny   = "Deny"
	ActionPass   = "Pass"
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
	// Tier and Priority are set for the cluster-scoped kinds only
	// (Namespace is then ""): TierAdmin or TierBaseline, and the
	// policy's spec.priority (0-1000; BaselineAdminNetworkPolicy has none).
	Tier     Tier `json:"tier,omitempty"`
	Priority int  `json:"priority,omitempty"`
	// Raw is the document encoded again (without comments), kept so the
	// set of applied policies can be stored and re-read (Encode, Parse).
	Raw string `json:"-"`
}

// Key is "namespace/name", unique among the policies of a lab per kind;
// a cluster-scoped policy's is its name.
func (p *Policy) Key() string {
	if p.Cluster() {
		return p.Name
	}
	return p.Namespace + "/" + p.Name
}

// Cluster says the policy is cluster-scoped: one of the Admin or
// Baseline tier's kinds.
func (p *Policy) Cluster() bool { return p.Tier == TierAdmin || p.Tier == TierBaseline }

// TierRef names a cluster policy with its tier and priority, as traces
// do: "ClusterNetworkPolicy tenants (Admin, priority 10)"; other policies
// by Ref.
func (p *Policy) TierRef() string {
	switch {
	case p.Kind == KindBaselineNP:
		return p.Ref() + " (Baseline)"
	case p.Cluster():
		return fmt.Sprintf("%s (%s, priority %d)", p.Ref(), p.Tier, p.Priority)
	}
	return p.Ref()
}

// RuleAction is the action of the rule at path of a cluster policy
// ("Accept", "Deny", "Pass"; "" if it has none at that path).
func (p *Policy) RuleAction(path string) string {
	for _, sp := range p.Specs {
		for _, d := range []Direction{sp.Ingress, sp.Egress} {
			for _, r := range d.Ordered {
				if r.Path == path {
					return r.Action
				}
			}
		}
	}
	return ""
}

// Ref names the policy in traces: "NetworkPolicy x/allow-web".
func (p *Policy) Ref() string { return p.Kind + " " + p.Key() }

// Spec is one rule set: a subject selector and what it allows or denies in
// each direction. A NetworkPolicy has one; a CiliumNetworkPolicy may have
// several (specs:).
type Spec struct {
	Subject Selector `json:"subject"`
	// SubjectNamespaces, for a cluster-scoped policy, selects the
	// namespaces (by their labels) whose pods Subject selects from;
	// namespaced policies select in their own namespace (nil).
	SubjectNamespaces *Selector `json:"subjectNamespaces,omitempty"`
	Ingress           Direction `json:"ingress"`
	Egress            Direction `json:"egress"`
}

// Direction holds the rules of one direction.
type Direction struct {
	// Enforce says that an endpoint selected by this spec is isolated in
	// this direction: only what some policy allows passes.
	Enforce bool   `json:"enforce"`
	Allow   []Rule `json:"allow,omitempty"`
	Deny    []Rule `json:"deny,omitempty"`
	// Ordered are a cluster-tier policy's rules, in the order written:
	// the first that matches decides with its Action. Such a policy
	// has no Allow, Deny or Enforce.
	Ordered []Rule `json:"ordered,omitempty"`
}

// Rule matches peers and ports. It matches a connection when a peer
// matches (or AnyPeer) and a port matches (or there are no ports).
type Rule struct {
	Path    string `json:"path"` // YAML path, e.g. spec.ingress[1]
	AnyPeer bool   `json:"anyPeer,omitempty"`
	Peers   []Peer `json:"peers,omitempty"`
	Ports   []Port `json:"ports,omitempty"`
	// Action of a cluster-tier rule (Ordered): ActionAccept or
	// ActionAllow, ActionDeny, ActionPass; "" elsewhere.
	Action string `json:"action,omitempty"`
	// Name is the rule's name: field, if any (cluster tiers).
	Name string `json:"name,omitempty"`
}

// Allows says a cluster-tier rule's action lets the connection through.
func (r Rule) Allows() bool { return r.Action == ActionAccept || r.Action == ActionAllow }

// Peer is a set of endpoints (by labels) or of addresses (by CIDR).
type Peer struct {
	Endpoints *EndpointSel   `json:"endpoints,omitempty"`
	CIDR      netip.Prefix   `json:"cidr,omitzero"`
	Except    []netip.Prefix `json:"except,omitempty"`
	// Nodes selects a lab's hosts by their labels (a cluster policy's
	// egress peer nodes:): the peer is their addresses (Model.NodeAddrs).
	Nodes *Selector `json:"nodes,omitempty"`
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
