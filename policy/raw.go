package policy

import (
	"fmt"
	"strconv"

	"github.com/cnlab/cnlab/internal/k8sdoc"
	"gopkg.in/yaml.v3"
)

// Raw types mirror the Kubernetes and Cilium objects field by field. They
// are decoded strictly; fields that exist in the real API but that cnlab
// does not enforce yet are declared as yaml.Node so that their presence is
// rejected with "not supported" rather than "unknown field".

type rawObject struct {
	k8sdoc.Head `yaml:",inline"`
	Spec        yaml.Node `yaml:"spec"`
	Specs       yaml.Node `yaml:"specs"` // CiliumNetworkPolicy only
}

type rawSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []rawExpr         `yaml:"matchExpressions"`
}

type rawExpr struct {
	Key      string   `yaml:"key"`
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values"`
}

// --- networking.k8s.io/v1 NetworkPolicy

type rawNPSpec struct {
	PodSelector *rawSelector    `yaml:"podSelector"`
	PolicyTypes []string        `yaml:"policyTypes"`
	Ingress     *[]rawNPIngress `yaml:"ingress"`
	Egress      *[]rawNPEgress  `yaml:"egress"`
}

type rawNPIngress struct {
	From  []rawNPPeer `yaml:"from"`
	Ports []rawNPPort `yaml:"ports"`
}

type rawNPEgress struct {
	To    []rawNPPeer `yaml:"to"`
	Ports []rawNPPort `yaml:"ports"`
}

type rawNPPeer struct {
	PodSelector       *rawSelector `yaml:"podSelector"`
	NamespaceSelector *rawSelector `yaml:"namespaceSelector"`
	IPBlock           *rawIPBlock  `yaml:"ipBlock"`
}

type rawIPBlock struct {
	CIDR   string   `yaml:"cidr"`
	Except []string `yaml:"except"`
}

type rawNPPort struct {
	Protocol string       `yaml:"protocol"`
	Port     *intOrString `yaml:"port"`
	EndPort  *int         `yaml:"endPort"`
}

// intOrString is a port given as a number or a name.
type intOrString struct {
	IsInt bool
	Int   int
	Str   string
}

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a port is a number or a name", n.Line)
	}
	if n.Tag == "!!int" {
		i, err := strconv.Atoi(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: port %q: %v", n.Line, n.Value, err)
		}
		*v = intOrString{IsInt: true, Int: i}
		return nil
	}
	*v = intOrString{Str: n.Value}
	return nil
}

// --- cilium.io/v2 CiliumNetworkPolicy (L3/L4 part)

type rawCNPSpec struct {
	EndpointSelector  *rawSelector    `yaml:"endpointSelector"`
	Ingress           []rawCNPIngress `yaml:"ingress"`
	Egress            []rawCNPEgress  `yaml:"egress"`
	IngressDeny       []rawCNPIngress `yaml:"ingressDeny"`
	EgressDeny        []rawCNPEgress  `yaml:"egressDeny"`
	EnableDefaultDeny *rawDefaultDeny `yaml:"enableDefaultDeny"`
	Description       string          `yaml:"description"`
	NodeSelector      yaml.Node       `yaml:"nodeSelector"`
	Labels            yaml.Node       `yaml:"labels"`
}

type rawDefaultDeny struct {
	Ingress *bool `yaml:"ingress"`
	Egress  *bool `yaml:"egress"`
}

type rawCNPIngress struct {
	FromEndpoints  *[]rawSelector `yaml:"fromEndpoints"`
	FromCIDR       []string       `yaml:"fromCIDR"`
	FromCIDRSet    []rawCIDRSet   `yaml:"fromCIDRSet"`
	ToPorts        []rawPortRule  `yaml:"toPorts"`
	FromEntities   yaml.Node      `yaml:"fromEntities"`
	FromRequires   yaml.Node      `yaml:"fromRequires"`
	FromGroups     yaml.Node      `yaml:"fromGroups"`
	FromNodes      yaml.Node      `yaml:"fromNodes"`
	ICMPs          yaml.Node      `yaml:"icmps"`
	Authentication yaml.Node      `yaml:"authentication"`
}

type rawCNPEgress struct {
	ToEndpoints    *[]rawSelector `yaml:"toEndpoints"`
	ToCIDR         []string       `yaml:"toCIDR"`
	ToCIDRSet      []rawCIDRSet   `yaml:"toCIDRSet"`
	ToPorts        []rawPortRule  `yaml:"toPorts"`
	ToEntities     yaml.Node      `yaml:"toEntities"`
	ToFQDNs        yaml.Node      `yaml:"toFQDNs"`
	ToServices     yaml.Node      `yaml:"toServices"`
	ToRequires     yaml.Node      `yaml:"toRequires"`
	ToGroups       yaml.Node      `yaml:"toGroups"`
	ToNodes        yaml.Node      `yaml:"toNodes"`
	ICMPs          yaml.Node      `yaml:"icmps"`
	Authentication yaml.Node      `yaml:"authentication"`
}

type rawCIDRSet struct {
	CIDR         string    `yaml:"cidr"`
	Except       []string  `yaml:"except"`
	CIDRGroupRef yaml.Node `yaml:"cidrGroupRef"`
}

type rawPortRule struct {
	Ports          []rawPortProto `yaml:"ports"`
	Rules          yaml.Node      `yaml:"rules"`
	OriginatingTLS yaml.Node      `yaml:"originatingTLS"`
	TerminatingTLS yaml.Node      `yaml:"terminatingTLS"`
	ServerNames    yaml.Node      `yaml:"serverNames"`
	Listener       yaml.Node      `yaml:"listener"`
}

// rawL7 is toPorts[].rules: only http is enforced.
type rawL7 struct {
	HTTP    *[]rawHTTP `yaml:"http"`
	Kafka   yaml.Node  `yaml:"kafka"`
	DNS     yaml.Node  `yaml:"dns"`
	L7Proto yaml.Node  `yaml:"l7proto"`
	L7      yaml.Node  `yaml:"l7"`
}

type rawHTTP struct {
	Method        string           `yaml:"method"`
	Path          string           `yaml:"path"`
	Host          string           `yaml:"host"`
	Headers       []string         `yaml:"headers"`
	HeaderMatches []rawHeaderMatch `yaml:"headerMatches"`
}

type rawHeaderMatch struct {
	Name     string    `yaml:"name"`
	Value    string    `yaml:"value"`
	Mismatch string    `yaml:"mismatch"`
	Secret   yaml.Node `yaml:"secret"`
}

type rawPortProto struct {
	Port     string `yaml:"port"`
	EndPort  int    `yaml:"endPort"`
	Protocol string `yaml:"protocol"`
}
