package topology

import (
	"net/netip"

	"github.com/cnlab/cnlab/datapath/kind"
	"gopkg.in/yaml.v3"
)

// Raw types mirror the topology file one to one. They are decoded strictly
// (an unknown field is an error) and then resolved into a Spec by Resolve.

type rawFile struct {
	Name        string                  `yaml:"name"`
	Datapath    string                  `yaml:"datapath"`
	MTU         *int                    `yaml:"mtu"`
	TransitCIDR string                  `yaml:"transitCIDR"`
	Hosts       []rawHost               `yaml:"hosts"`
	Links       []rawLink               `yaml:"links"`
	Namespaces  map[string]rawNamespace `yaml:"namespaces"`
	Endpoints   []rawEndpoint           `yaml:"endpoints"`
	Chain       *rawChain               `yaml:"chain"`
	Services    *rawServices            `yaml:"services"`
	Observe     string                  `yaml:"observe"`
	L7Proxy     *rawL7Proxy             `yaml:"l7Proxy"`
	// The datapaths' sections (iptables:, ebpf:), resolved by package kind.
	kind.RawOptions `yaml:",inline"`
}

type rawServices struct {
	CIDR  string   `yaml:"cidr"`
	CIDRs []string `yaml:"cidrs"`
	Proxy string   `yaml:"proxy"`
}

type rawHost struct {
	Name     string            `yaml:"name"`
	PodCIDR  string            `yaml:"podCIDR"`
	PodCIDRs []string          `yaml:"podCIDRs"`
	Labels   map[string]string `yaml:"labels"`
}

type rawLink struct {
	Between []string `yaml:"between"`
	Kind    string   `yaml:"kind"`
}

type rawNamespace struct {
	Labels map[string]string `yaml:"labels"`
}

type rawEndpoint struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Host      string            `yaml:"host"`
	IP        stringList        `yaml:"ip"`
	Labels    map[string]string `yaml:"labels"`
	Ports     []rawPort         `yaml:"ports"`
}

// stringList is a YAML scalar or a list of scalars (an endpoint's ip: one
// address, or one per family).
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		if s != "" {
			*l = stringList{s}
		}
		return nil
	}
	var xs []string
	if err := n.Decode(&xs); err != nil {
		return err
	}
	*l = xs
	return nil
}

type rawPort struct {
	Name     string `yaml:"name"`
	Port     int    `yaml:"port"`
	Protocol string `yaml:"protocol"`
}

type rawChain struct {
	Length     int         `yaml:"length"`
	Link       string      `yaml:"link"`
	Switches   int         `yaml:"switches"`
	SwitchLink string      `yaml:"switchLink"`
	CIDR       string      `yaml:"cidr"`
	Functions  []yaml.Node `yaml:"functions"` // decoded by kind in resolve
	functions  []Function  `yaml:"-"`         // a preset's, already typed
}

// Spec is a validated, fully resolved lab: every address allocated, every
// kernel object named. It is deterministic: the same file always resolves
// to the same Spec. Nothing in it touches the kernel.
type Spec struct {
	Name        string               `json:"name"`
	Source      string               `json:"source"`
	Datapath    kind.Kind            `json:"datapath"`
	MTU         int                  `json:"mtu"`
	TransitCIDR netip.Prefix         `json:"transitCIDR"`
	Hosts       []Host               `json:"hosts,omitempty"`
	Links       []Link               `json:"links,omitempty"`
	Namespaces  map[string]Namespace `json:"namespaces"`
	Endpoints   []Endpoint           `json:"endpoints"`
	Chain       *Chain               `json:"chain,omitempty"`
	Services    Services             `json:"services"`
	// Observe is what the lab records of its flows (ObserveOff,
	// ObserveDrops, ObserveAll; docs/observe.md): changeable on a running
	// lab (ChangeObserve).
	Observe string `json:"observe,omitempty"`
	// L7Proxy are the limits of the lab's L7 proxies (zero fields: the
	// defaults, DefaultL7Limits).
	L7Proxy L7Limits `json:"l7Proxy,omitzero"`
	// The datapaths' options (every kind's, defaults filled in; JSON
	// keys iptables and ebpf at this level).
	kind.Options
}

// Services says how a lab serves Kubernetes Services: the range cluster
// IPs are allocated from, and the proxy that translates them.
type Services struct {
	CIDR netip.Prefix `json:"cidr"` // the primary family's (the first of CIDRs)
	// CIDRs are the service ranges, one per family the lab has, in the
	// order of the lab's families (Spec.Families): dual-stack Services
	// (docs/topology.md, docs/services.md).
	CIDRs []netip.Prefix `json:"cidrs,omitempty"`
	Proxy kind.Proxy     `json:"proxy"`
}

// CIDROf returns the service range of family fam (4 or 6); ok is false
// when the lab has none of that family.
func (s *Services) CIDROf(fam int) (netip.Prefix, bool) {
	for _, p := range s.CIDRs {
		if Family(p.Addr()) == fam {
			return p, true
		}
	}
	if len(s.CIDRs) == 0 && s.CIDR.IsValid() && Family(s.CIDR.Addr()) == fam {
		return s.CIDR, true
	}
	return netip.Prefix{}, false
}

// All returns every service range: CIDRs, or CIDR alone in a Spec
// written before CIDRs existed.
func (s *Services) All() []netip.Prefix {
	if len(s.CIDRs) > 0 {
		return s.CIDRs
	}
	if s.CIDR.IsValid() {
		return []netip.Prefix{s.CIDR}
	}
	return nil
}

// Host is a node: a network namespace with a Linux bridge for its endpoints.
type Host struct {
	Name    string       `json:"name"`
	PodCIDR netip.Prefix `json:"podCIDR"` // the primary family's (the first of PodCIDRs)
	Gateway netip.Addr   `json:"gateway"` // the bridge's address, first of the CIDR
	// PodCIDRs and Gateways are the host's prefixes and bridge
	// addresses, one per family the lab has, in the file's order
	// (dual-stack labs: docs/topology.md).
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
	Gateways []netip.Addr   `json:"gateways,omitempty"`
	Netns    string         `json:"netns"`
	Bridge   string         `json:"bridge"`
	Routes   []Route        `json:"routes,omitempty"` // to other hosts' pod CIDRs
	// Leaves are the host's further bridges (br1, br2, ...) when it has
	// more endpoints than one bridge takes (EndpointsPerBridge): the
	// host routes to their endpoints (docs/topology.md).
	Leaves []string `json:"leafBridges,omitempty"`
	// Labels are the host's labels as a node's (kubernetes.io/hostname
	// always), which a cluster policy's nodes: peer selects.
	Labels map[string]string `json:"labels,omitempty"`
}

// HostnameLabel is the label every host carries with its name, as a
// Kubernetes node does.
const HostnameLabel = "kubernetes.io/hostname"

// Route sends a destination prefix through a device, via a next hop.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	Via netip.Addr   `json:"via"`
	Dev string       `json:"dev"`
}

// Link kinds between hosts.
const (
	LinkWire  = "wire"
	LinkVXLAN = "vxlan"
)

// Link joins two hosts: a routed veth pair (the "cable"), and for kind vxlan
// an overlay device on each end that carries pod traffic across it.
type Link struct {
	Index int          `json:"index"`
	Kind  string       `json:"kind"`
	Ends  [2]LinkEnd   `json:"ends"`
	Wire  netip.Prefix `json:"wire"`             // the /30 of the cable
	Over  netip.Prefix `json:"overlay,omitzero"` // the /30 of the overlay (vxlan)
	// Wire6 and Over6 are their IPv6 counterparts in a lab with IPv6
	// (Wire's address embedded in TransitCIDR6, a /126).
	Wire6 netip.Prefix `json:"wire6,omitzero"`
	Over6 netip.Prefix `json:"overlay6,omitzero"`
	VNI   int          `json:"vni,omitempty"` // vxlan network identifier
	MTU   int          `json:"wireMTU"`       // cable MTU (room for the vxlan header)
}

// LinkEnd is one host's side of a link.
type LinkEnd struct {
	Host     string     `json:"host"`
	WireDev  string     `json:"wireDev"`
	WireAddr netip.Addr `json:"wireAddr"`
	OverDev  string     `json:"overlayDev,omitempty"`
	OverAddr netip.Addr `json:"overlayAddr,omitzero"`
	// WireAddr6 and OverAddr6: the IPv6 addresses of a lab with IPv6.
	WireAddr6 netip.Addr `json:"wireAddr6,omitzero"`
	OverAddr6 netip.Addr `json:"overlayAddr6,omitzero"`
}

// Namespace is a Kubernetes namespace with its labels (including
// kubernetes.io/metadata.name).
type Namespace struct {
	Labels map[string]string `json:"labels"`
}

// Endpoint is a "container": a network namespace with eth0 plugged into its
// host (or, in a chain, into the first or last hop).
type Endpoint struct {
	Name      string     `json:"name"`
	Namespace string     `json:"namespace"`
	Host      string     `json:"host,omitempty"`
	IP        netip.Addr `json:"ip"` // the primary family's address
	Prefix    int        `json:"prefixLen"`
	Gateway   netip.Addr `json:"gateway"`
	// IPs are the endpoint's addresses, one per family of the lab, IP
	// first (Addr, Addrs).
	IPs      []netip.Addr      `json:"ips,omitempty"`
	Labels   map[string]string `json:"labels"`
	Ports    []Port            `json:"ports,omitempty"`
	Netns    string            `json:"netns"`
	HostVeth string            `json:"hostVeth,omitempty"` // host-side veth name
	// Bridge is the leaf bridge whose port HostVeth is, when it is not
	// the host's own bridge (Host.Leaves).
	Bridge string `json:"bridge,omitempty"`
}

// Family is 4 for an IPv4 (or IPv4-mapped) address, 6 for IPv6.
func Family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// Addrs returns the endpoint's addresses, one per family, primary first.
func (e Endpoint) Addrs() []netip.Addr {
	if len(e.IPs) > 0 {
		return e.IPs
	}
	if e.IP.IsValid() {
		return []netip.Addr{e.IP}
	}
	return nil
}

// Addr returns the endpoint's address of family fam (4 or 6).
func (e Endpoint) Addr(fam int) (netip.Addr, bool) {
	for _, a := range e.Addrs() {
		if Family(a) == fam {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// CIDR returns the host's pod prefix of family fam (4 or 6).
func (h Host) CIDR(fam int) (netip.Prefix, bool) {
	for _, p := range h.cidrs() {
		if Family(p.Addr()) == fam {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// GatewayOf returns the host's bridge address of family fam.
func (h Host) GatewayOf(fam int) (netip.Addr, bool) {
	gws := h.Gateways
	if len(gws) == 0 && h.Gateway.IsValid() {
		gws = []netip.Addr{h.Gateway}
	}
	for _, a := range gws {
		if Family(a) == fam {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (h Host) cidrs() []netip.Prefix {
	if len(h.PodCIDRs) > 0 {
		return h.PodCIDRs
	}
	if h.PodCIDR.IsValid() {
		return []netip.Prefix{h.PodCIDR}
	}
	return nil
}

// Families returns the address families of the lab's pod network, 4
// and/or 6, in the order of the hosts' podCIDRs (every host has the same);
// [4] for a chain.
func (s *Spec) Families() []int {
	if len(s.Hosts) == 0 {
		return []int{4}
	}
	var out []int
	for _, p := range s.Hosts[0].cidrs() {
		out = append(out, Family(p.Addr()))
	}
	return out
}

// HasFamily reports whether the lab's pod network has family fam.
func (s *Spec) HasFamily(fam int) bool {
	for _, f := range s.Families() {
		if f == fam {
			return true
		}
	}
	return false
}

// ID is the endpoint's name as shown everywhere: "namespace/name".
func (e Endpoint) ID() string { return e.Namespace + "/" + e.Name }

// Port is a declared container port, for named ports in policies.
type Port struct {
	Name     string `json:"name,omitempty"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
}

// Chain link kinds.
const (
	ChainVeth   = "veth"
	ChainBridge = "bridge"
	// ChainOVS joins neighbours through an Open vSwitch bridge each, in
	// the lab's OvS namespace (userspace datapath; topology/ovs.go).
	ChainOVS = "ovs"
)

// Chain is N forwarding namespaces in series between a client and a server
// endpoint (seed 001). Segment i joins node i and node i+1, where node 0 is
// the client and node Length+1 the server.
type Chain struct {
	Length int    `json:"length"`
	Link   string `json:"link"`
	// Switches is the number of OvS bridges in series on each segment
	// (link ovs; 1 by default), joined by SwitchLink: patch ports or veth
	// pairs (seed 001's figure 5).
	Switches   int          `json:"switches,omitempty"`
	SwitchLink string       `json:"switchLink,omitempty"`
	CIDR       netip.Prefix `json:"cidr"`
	Nodes      []ChainNode  `json:"nodes"`
	Segments   []Segment    `json:"segments"`
	// Functions are the network functions in every hop, in file order
	// (at most one of each kind).
	Functions []Function `json:"functions,omitempty"`
}

// ChainNode is one forwarding namespace of a chain.
type ChainNode struct {
	Netns  string  `json:"netns"`
	Routes []Route `json:"routes"`
}

// Segment is the /24 between two neighbours of a chain. For link kind
// bridge it goes through a switch namespace holding a Linux bridge.
type Segment struct {
	Prefix     netip.Prefix `json:"prefix"`
	Left       netip.Addr   `json:"left"`  // address of the left neighbour
	Right      netip.Addr   `json:"right"` // address of the right neighbour
	LeftNetns  string       `json:"leftNetns"`
	RightNetns string       `json:"rightNetns"`
	LeftDev    string       `json:"leftDev"`
	RightDev   string       `json:"rightDev"`
	Switch     string       `json:"switchNetns,omitempty"`
}

// Netns returns every network namespace the lab consists of.
func (s *Spec) Netns() []string {
	var out []string
	for _, h := range s.Hosts {
		out = append(out, h.Netns)
	}
	for _, e := range s.Endpoints {
		out = append(out, e.Netns)
	}
	if s.Chain != nil {
		for _, n := range s.Chain.Nodes {
			out = append(out, n.Netns)
		}
		if s.Chain.Link == ChainOVS {
			out = append(out, OVSNetns(s.Name))
		}
		for _, sg := range s.Chain.Segments {
			if sg.Switch != "" {
				out = append(out, sg.Switch)
			}
		}
	}
	return out
}

// Endpoint finds an endpoint by "ns/name", or by bare name when that is
// unique in the lab.
func (s *Spec) Endpoint(ref string) (*Endpoint, error) {
	var found []*Endpoint
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		if e.ID() == ref || e.Name == ref {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return nil, &NotFoundError{What: "endpoint", Name: ref, Lab: s.Name}
	case 1:
		return found[0], nil
	}
	return nil, &AmbiguousError{Name: ref, Lab: s.Name, Candidates: ids(found)}
}

// Host finds a host by name.
func (s *Spec) Host(name string) *Host {
	for i := range s.Hosts {
		if s.Hosts[i].Name == name {
			return &s.Hosts[i]
		}
	}
	return nil
}

func ids(es []*Endpoint) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID()
	}
	return out
}
