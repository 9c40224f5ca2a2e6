package policy

import "gopkg.in/yaml.v3"

// Raw types of the cluster-scoped tiers (sigs.k8s.io/network-policy-api),
// field by field, decoded strictly as the others are (raw.go).

// rawSubject is spec.subject: exactly one of namespaces and pods.
type rawSubject struct {
	Namespaces *rawSelector      `yaml:"namespaces"`
	Pods       *rawNamespacedPod `yaml:"pods"`
}

// rawNamespacedPod selects pods by their namespace's labels and their own.
type rawNamespacedPod struct {
	NamespaceSelector *rawSelector `yaml:"namespaceSelector"`
	PodSelector       *rawSelector `yaml:"podSelector"`
}

// rawTierIngressPeer is an ingress peer: exactly one field.
type rawTierIngressPeer struct {
	Namespaces *rawSelector      `yaml:"namespaces"`
	Pods       *rawNamespacedPod `yaml:"pods"`
}

// rawTierEgressPeer is an egress peer: exactly one field.
type rawTierEgressPeer struct {
	Namespaces  *rawSelector      `yaml:"namespaces"`
	Pods        *rawNamespacedPod `yaml:"pods"`
	Nodes       *rawSelector      `yaml:"nodes"`
	Networks    *[]string         `yaml:"networks"`
	DomainNames yaml.Node         `yaml:"domainNames"` // refused
}

// --- policy.networking.k8s.io/v1alpha2 ClusterNetworkPolicy

type rawClusterNPSpec struct {
	Tier     string              `yaml:"tier"`
	Priority *int                `yaml:"priority"`
	Subject  *rawSubject         `yaml:"subject"`
	Ingress  []rawClusterIngress `yaml:"ingress"`
	Egress   []rawClusterEgress  `yaml:"egress"`
}

type rawClusterIngress struct {
	Name      string                `yaml:"name"`
	Action    string                `yaml:"action"`
	From      *[]rawTierIngressPeer `yaml:"from"`
	Protocols *[]rawProtocol        `yaml:"protocols"`
}

type rawClusterEgress struct {
	Name      string               `yaml:"name"`
	Action    string               `yaml:"action"`
	To        *[]rawTierEgressPeer `yaml:"to"`
	Protocols *[]rawProtocol       `yaml:"protocols"`
}

// rawProtocol is one protocols[] entry: exactly one field.
type rawProtocol struct {
	TCP                  *rawProtoPorts `yaml:"tcp"`
	UDP                  *rawProtoPorts `yaml:"udp"`
	SCTP                 *rawProtoPorts `yaml:"sctp"`
	DestinationNamedPort *string        `yaml:"destinationNamedPort"`
}

type rawProtoPorts struct {
	DestinationPort *rawDestPort `yaml:"destinationPort"`
}

// rawDestPort is a number or a range: exactly one.
type rawDestPort struct {
	Number *int          `yaml:"number"`
	Range  *rawPortRange `yaml:"range"`
}

type rawPortRange struct {
	Start *int `yaml:"start"`
	End   *int `yaml:"end"`
}

// --- policy.networking.k8s.io/v1alpha1 AdminNetworkPolicy and
// BaselineAdminNetworkPolicy

type rawANPSpec struct {
	Priority *int            `yaml:"priority"`
	Subject  *rawSubject     `yaml:"subject"`
	Ingress  []rawANPIngress `yaml:"ingress"`
	Egress   []rawANPEgress  `yaml:"egress"`
}

// rawBANPSpec is an AdminNetworkPolicy's spec without its priority
// (declared to say so, rather than "unknown field").
type rawBANPSpec struct {
	Priority yaml.Node       `yaml:"priority"`
	Subject  *rawSubject     `yaml:"subject"`
	Ingress  []rawANPIngress `yaml:"ingress"`
	Egress   []rawANPEgress  `yaml:"egress"`
}

type rawANPIngress struct {
	Name   string                `yaml:"name"`
	Action string                `yaml:"action"`
	From   *[]rawTierIngressPeer `yaml:"from"`
	Ports  *[]rawANPPort         `yaml:"ports"`
}

type rawANPEgress struct {
	Name   string               `yaml:"name"`
	Action string               `yaml:"action"`
	To     *[]rawTierEgressPeer `yaml:"to"`
	Ports  *[]rawANPPort        `yaml:"ports"`
}

// rawANPPort is one ports[] entry: exactly one field.
type rawANPPort struct {
	PortNumber *rawANPPortNumber `yaml:"portNumber"`
	NamedPort  *string           `yaml:"namedPort"`
	PortRange  *rawANPPortRange  `yaml:"portRange"`
}

type rawANPPortNumber struct {
	Protocol string `yaml:"protocol"`
	Port     *int   `yaml:"port"`
}

type rawANPPortRange struct {
	Protocol string `yaml:"protocol"`
	Start    *int   `yaml:"start"`
	End      *int   `yaml:"end"`
}
