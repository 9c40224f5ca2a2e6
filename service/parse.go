package service

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/k8sdoc"
	"github.com/cnlab/cnlab/labels"
	"gopkg.in/yaml.v3"
)

// Kinds of documents, with their apiVersions.
const (
	KindService       = "Service"
	KindEndpointSlice = "EndpointSlice"
	// ServiceNameLabel ties an EndpointSlice to its Service.
	ServiceNameLabel = "kubernetes.io/service-name"
)

// Service types and policies, as the API spells them.
const (
	TypeClusterIP = "ClusterIP"
	TypeNodePort  = "NodePort"
	PolicyCluster = "Cluster"
	PolicyLocal   = "Local"
	// Headless is the clusterIP of a Service that is not proxied.
	Headless = "None"
	// DefaultAffinity is sessionAffinityConfig.clientIP.timeoutSeconds's
	// default (3 hours), and MaxAffinity its maximum (a day).
	DefaultAffinity = 10800
	MaxAffinity     = 86400
	// IP family policies (spec.ipFamilyPolicy).
	SingleStack      = "SingleStack"
	PreferDualStack  = "PreferDualStack"
	RequireDualStack = "RequireDualStack"
	// The node port range (the API server's default).
	MinNodePort = 30000
	MaxNodePort = 32767
)

// Service is one validated v1 Service.
type Service struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Type      string            `json:"type"`
	Selector  map[string]string `json:"selector,omitempty"` // nil: its EndpointSlices are written by hand
	// ClusterIP is the address the file gives, "" to allocate one, or
	// Headless.
	ClusterIP string `json:"clusterIP,omitempty"`
	// ClusterIPs are the addresses the file gives (clusterIPs, or
	// clusterIP alone), one per family, ClusterIP first; nil to allocate.
	ClusterIPs []string `json:"clusterIPs,omitempty"`
	// IPFamilies are spec.ipFamilies as given (4 or 6), nil when absent;
	// FamilyPolicy spec.ipFamilyPolicy (SingleStack when absent).
	IPFamilies   []int  `json:"ipFamilies,omitempty"`
	FamilyPolicy string `json:"ipFamilyPolicy,omitempty"`
	Ports        []Port `json:"ports"`
	// Affinity is sessionAffinity ClientIP's timeout in seconds, 0 for
	// sessionAffinity None.
	Affinity        int  `json:"affinitySeconds,omitempty"`
	InternalLocal   bool `json:"internalLocal,omitempty"`
	ExternalLocal   bool `json:"externalLocal,omitempty"`
	PublishNotReady bool `json:"publishNotReadyAddresses,omitempty"`
	Doc
}

// Port is one port of a Service.
type Port struct {
	Name       string `json:"name,omitempty"`
	Protocol   string `json:"protocol"` // TCP or UDP
	Port       int    `json:"port"`
	TargetPort int    `json:"targetPort,omitempty"` // 0 when named
	TargetName string `json:"targetPortName,omitempty"`
	NodePort   int    `json:"nodePort,omitempty"` // as given; 0 to allocate (NodePort)
}

// Slice is one validated discovery.k8s.io/v1 EndpointSlice.
type Slice struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Service   string `json:"service"` // its kubernetes.io/service-name
	// Family is addressType's: 4 (IPv4) or 6 (IPv6). kube-proxy serves
	// a Service's cluster IP of a family from the slices of that family.
	Family    int             `json:"family"`
	Ports     []SlicePort     `json:"ports"`
	Endpoints []SliceEndpoint `json:"endpoints"`
	Doc
}

// SlicePort is a port every endpoint of a slice serves.
type SlicePort struct {
	Name     string `json:"name,omitempty"` // the Service port's name
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
}

// SliceEndpoint is one address of a slice, with its conditions defaulted
// as the API says consumers must read them: ready and serving unknown
// (absent) mean true, terminating absent means false.
type SliceEndpoint struct {
	Address     netip.Addr `json:"address"`
	Ready       bool       `json:"ready"`
	Serving     bool       `json:"serving"`
	Terminating bool       `json:"terminating"`
	NodeName    string     `json:"nodeName,omitempty"`
}

// Doc is where a document came from, and its text as stored.
type Doc struct {
	Source   string `json:"source"` // file#document
	File     string `json:"-"`
	DocIndex int    `json:"-"`
	// Raw is the document encoded again (without comments), so that the
	// applied set can be stored and read back.
	Raw string `json:"-"`
}

// Key is "namespace/name".
func (s *Service) Key() string { return s.Namespace + "/" + s.Name }

// Ref names the Service in messages: "Service x/web".
func (s *Service) Ref() string { return KindService + " " + s.Key() }

// Key is "namespace/name".
func (s *Slice) Key() string { return s.Namespace + "/" + s.Name }

// Ref names the slice in messages: "EndpointSlice x/web-1".
func (s *Slice) Ref() string { return KindEndpointSlice + " " + s.Key() }

// ServiceKey is the "namespace/name" of the slice's Service.
func (s *Slice) ServiceKey() string { return s.Namespace + "/" + s.Service }

func (d *Doc) errorAt(ref, path, msg string) *input.Error {
	return &input.Error{File: d.File, Doc: fmt.Sprintf("document %d (%s)", d.DocIndex, ref), Path: path, Msg: msg}
}

// ParseFile reads a multi-document YAML file of Services and
// EndpointSlices.
func ParseFile(path string) ([]*Service, []*Slice, error) {
	data, err := files.ReadInput(path)
	if err != nil {
		return nil, nil, &input.Error{File: path, Msg: fmt.Sprintf("cannot read: %v", err)}
	}
	return Parse(data, path)
}

// reader reads Service and EndpointSlice documents: one decoder per kind
// of k8sdoc.Services.
var reader = k8sdoc.NewReader(k8sdoc.Config[rawObject, object]{
	Family:     &k8sdoc.Services,
	NotMapping: "a document must be a mapping (apiVersion:, kind:, metadata:, ...)",
	Decoders: map[string]k8sdoc.Decoder[rawObject, object]{
		KindService:       decodeService,
		KindEndpointSlice: decodeSlice,
	},
	Refused: map[string]string{
		"Endpoints": "v1 Endpoints is not supported (deprecated since Kubernetes 1.33): write a discovery.k8s.io/v1 EndpointSlice",
	},
})

// object is one decoded document: a Service or a slice.
type object struct {
	svc *Service
	sl  *Slice
}

// Parse decodes and validates every document in data. It does not know
// the lab: addresses, selectors and named ports are resolved against one
// by Resolve.
func Parse(data []byte, file string) ([]*Service, []*Slice, error) {
	items, err := reader.Read(data, file)
	if err != nil {
		return nil, nil, err
	}
	var svcs []*Service
	var slices []*Slice
	for _, it := range items {
		d := Doc{Source: it.Source, File: it.File, DocIndex: it.Index, Raw: it.Raw}
		if it.Value.svc != nil {
			it.Value.svc.Doc = d
			svcs = append(svcs, it.Value.svc)
		} else {
			it.Value.sl.Doc = d
			slices = append(slices, it.Value.sl)
		}
	}
	return svcs, slices, nil
}

// Encode is the text that stores a set: each document as Parse kept it,
// Services first, separated by "---" lines. Parse reads it back.
func Encode(svcs []*Service, slices []*Slice) []byte {
	raws := make([]string, 0, len(svcs)+len(slices))
	for _, s := range svcs {
		raws = append(raws, s.Raw)
	}
	for _, s := range slices {
		raws = append(raws, s.Raw)
	}
	return k8sdoc.Encode(raws...)
}

// CheckUnique refuses a Service or slice given twice in one command
// (in two files): which one is meant would depend on the files' order.
func CheckUnique(svcs []*Service, slices []*Slice) error {
	once := k8sdoc.Once{}
	for _, s := range svcs {
		if err := once.Add(s.Ref(), s.Source, s.File); err != nil {
			return err
		}
	}
	for _, s := range slices {
		if err := once.Add(s.Ref(), s.Source, s.File); err != nil {
			return err
		}
	}
	return nil
}

type parser struct{ *k8sdoc.Doc }

func (p *parser) errf(path, format string, args ...any) error {
	return p.Errorf(path, format, args...)
}

// present reports whether an optional field was given (not absent, not
// null, not empty).
func present(n yaml.Node) bool { return k8sdoc.Present(&n) }

func decodeService(d *k8sdoc.Doc, obj *rawObject) (object, error) {
	ns, err := d.Metadata(KindService, &obj.Metadata, nil)
	if err != nil {
		return object{}, err
	}
	p, m := &parser{d}, obj.Metadata
	// A Service's name is a DNS label (RFC 1035: it must start with a
	// letter), as the API server requires.
	if err := labels.CheckDNSLabel(m.Name, 63); err != nil || (m.Name[0] >= '0' && m.Name[0] <= '9') {
		if err == nil {
			err = fmt.Errorf("%q must start with a letter (a Service name is an RFC 1035 label)", m.Name)
		}
		return object{}, p.errf("metadata.name", "%v", err)
	}
	for _, f := range []struct {
		name string
		n    yaml.Node
	}{{"endpoints", obj.Endpoints}, {"ports", obj.Ports}} {
		if present(f.n) {
			return object{}, p.errf(f.name, "is a field of EndpointSlice, not of Service (did you mean spec.%s?)", f.name)
		}
	}
	if obj.AddressType != "" {
		return object{}, p.errf("addressType", "is a field of EndpointSlice, not of Service")
	}
	svc, err := p.service(&obj.Spec)
	if err != nil {
		return object{}, err
	}
	svc.Namespace, svc.Name = ns, m.Name
	return object{svc: svc}, nil
}

func decodeSlice(d *k8sdoc.Doc, obj *rawObject) (object, error) {
	ns, err := d.Metadata(KindEndpointSlice, &obj.Metadata, nil)
	if err != nil {
		return object{}, err
	}
	p, m := &parser{d}, obj.Metadata
	if err := labels.CheckDNSSubdomain(m.Name); err != nil {
		return object{}, p.errf("metadata.name", "%v", err)
	}
	if present(obj.Spec) {
		return object{}, p.errf("spec", "an EndpointSlice has no spec: addressType, endpoints and ports are at the top level")
	}
	sl, err := p.slice(obj)
	if err != nil {
		return object{}, err
	}
	sl.Namespace, sl.Name = ns, m.Name
	sl.Service = m.Labels[ServiceNameLabel]
	if sl.Service == "" {
		return object{}, p.errf("metadata.labels", "%s is required: it names the Service this slice serves", ServiceNameLabel)
	}
	return object{sl: sl}, nil
}

func (p *parser) service(spec *yaml.Node) (*Service, error) {
	if !present(*spec) {
		return nil, p.errf("spec", "is required (ports:, and selector: or EndpointSlices)")
	}
	var rs rawServiceSpec
	if err := p.Decode(spec, &rs, "spec"); err != nil {
		return nil, err
	}
	svc := &Service{Type: rs.Type}
	switch rs.Type {
	case "":
		svc.Type = TypeClusterIP
	case TypeClusterIP, TypeNodePort:
	case "ExternalName", "LoadBalancer":
		return nil, p.errf("spec.type", "%s is not supported: cnlab serves ClusterIP and NodePort Services (a lab has no DNS to alias and no load balancer to provision)", rs.Type)
	default:
		return nil, p.errf("spec.type", "%q is not a Service type (ClusterIP, NodePort)", rs.Type)
	}
	for _, f := range []struct {
		path string
		n    yaml.Node
		why  string
	}{
		{"spec.externalName", rs.ExternalName, "ExternalName Services are not supported"},
		{"spec.externalIPs", rs.ExternalIPs, "external IPs are not supported: use a NodePort Service"},
		{"spec.loadBalancerIP", rs.LoadBalancerIP, "LoadBalancer Services are not supported"},
		{"spec.loadBalancerSourceRanges", rs.LoadBalancerSourceRanges, "LoadBalancer Services are not supported"},
		{"spec.loadBalancerClass", rs.LoadBalancerClass, "LoadBalancer Services are not supported"},
		{"spec.allocateLoadBalancerNodePorts", rs.AllocateLoadBalancerNodePorts, "LoadBalancer Services are not supported"},
		{"spec.healthCheckNodePort", rs.HealthCheckNodePort, "health-check node ports belong to LoadBalancer Services, which are not supported"},
		{"spec.trafficDistribution", rs.TrafficDistribution, "topology-aware routing is not supported (a lab has no zones)"},
	} {
		if present(f.n) {
			return nil, p.errf(f.path, "%s", f.why)
		}
	}
	seen := map[int]int{}
	for i, name := range rs.IPFamilies {
		path := fmt.Sprintf("spec.ipFamilies[%d]", i)
		fam := familyOf(name)
		if fam == 0 {
			return nil, p.errf(path, "%q is not an IP family (IPv4, IPv6)", name)
		}
		if j, dup := seen[fam]; dup {
			return nil, p.errf(path, "%s is also spec.ipFamilies[%d]", name, j)
		}
		seen[fam] = i
		svc.IPFamilies = append(svc.IPFamilies, fam)
	}
	switch rs.IPFamilyPolicy {
	case "", SingleStack, PreferDualStack, RequireDualStack:
		svc.FamilyPolicy = rs.IPFamilyPolicy
	default:
		return nil, p.errf("spec.ipFamilyPolicy", "%q is not an IP family policy (SingleStack, PreferDualStack, RequireDualStack)", rs.IPFamilyPolicy)
	}
	if len(svc.IPFamilies) > 1 && svc.Policy() == SingleStack {
		return nil, p.errf("spec.ipFamilies", "gives two families, but ipFamilyPolicy is SingleStack: give ipFamilyPolicy PreferDualStack or RequireDualStack, or one family")
	}
	if len(rs.Selector) > 0 {
		if err := labels.CheckSet(rs.Selector); err != nil {
			return nil, p.errf("spec.selector", "%v", err)
		}
		svc.Selector = rs.Selector
	}
	if err := p.clusterIP(svc, &rs); err != nil {
		return nil, err
	}
	if err := p.ports(svc, &rs); err != nil {
		return nil, err
	}
	switch rs.SessionAffinity {
	case "", "None":
		if rs.SessionAffinityConfig != nil {
			return nil, p.errf("spec.sessionAffinityConfig", "is only allowed with sessionAffinity: ClientIP")
		}
	case "ClientIP":
		svc.Affinity = DefaultAffinity
		if c := rs.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t < 1 || t > MaxAffinity {
				return nil, p.errf("spec.sessionAffinityConfig.clientIP.timeoutSeconds", "%d is out of range (1 to %d)", t, MaxAffinity)
			}
			svc.Affinity = t
		}
	default:
		return nil, p.errf("spec.sessionAffinity", "%q is not a session affinity (None, ClientIP)", rs.SessionAffinity)
	}
	switch rs.InternalTrafficPolicy {
	case "", PolicyCluster:
	case PolicyLocal:
		svc.InternalLocal = true
	default:
		return nil, p.errf("spec.internalTrafficPolicy", "%q is not a traffic policy (Cluster, Local)", rs.InternalTrafficPolicy)
	}
	switch rs.ExternalTrafficPolicy {
	case "", PolicyCluster:
	case PolicyLocal:
		svc.ExternalLocal = true
	default:
		return nil, p.errf("spec.externalTrafficPolicy", "%q is not a traffic policy (Cluster, Local)", rs.ExternalTrafficPolicy)
	}
	if rs.ExternalTrafficPolicy != "" && svc.Type == TypeClusterIP {
		return nil, p.errf("spec.externalTrafficPolicy", "applies to NodePort Services only (this one is ClusterIP)")
	}
	svc.PublishNotReady = rs.PublishNotReadyAddresses
	return svc, nil
}

func (p *parser) clusterIP(svc *Service, rs *rawServiceSpec) error {
	ip := rs.ClusterIP
	ips := rs.ClusterIPs
	if len(ips) > 2 {
		return p.errf("spec.clusterIPs", "gives %d addresses: at most two, one per family", len(ips))
	}
	if len(ips) > 0 {
		if ip != "" && ip != ips[0] {
			return p.errf("spec.clusterIPs[0]", "%q differs from spec.clusterIP %q (they must be the same)", ips[0], ip)
		}
		ip = ips[0]
	} else if ip != "" {
		ips = []string{ip}
	}
	fams := map[int]int{}
	for i, a := range ips {
		path := fmt.Sprintf("spec.clusterIPs[%d]", i)
		if i == 0 && rs.ClusterIP != "" {
			path = "spec.clusterIP"
		}
		if a == "" {
			return p.errf(path, "is empty (give an address, or leave clusterIPs out to allocate)")
		}
		if a == Headless {
			if len(ips) > 1 {
				return p.errf(path, "a headless Service (None) has no other cluster IP")
			}
			continue
		}
		addr, err := netip.ParseAddr(a)
		if err != nil || addr.Is4In6() || addr.Zone() != "" {
			return p.errf(path, "%q is not an IPv4 or IPv6 address (or None, for a headless Service)", a)
		}
		fam := 4
		if addr.Is6() {
			fam = 6
		}
		if j, dup := fams[fam]; dup {
			return p.errf(path, "%s is a second IPv%d address (spec.clusterIPs[%d] is one): one address per family", a, fam, j)
		}
		fams[fam] = i
		if i < len(svc.IPFamilies) && svc.IPFamilies[i] != fam {
			return p.errf(path, "%s is an IPv%d address, but spec.ipFamilies[%d] is IPv%d (they must be in the same order)", a, fam, i, svc.IPFamilies[i])
		}
	}
	if len(ips) == 2 && svc.Policy() == SingleStack {
		return p.errf("spec.clusterIPs", "gives two addresses, but ipFamilyPolicy is SingleStack: give ipFamilyPolicy PreferDualStack or RequireDualStack, or one address")
	}
	svc.ClusterIP = ip
	if len(ips) > 0 && ip != Headless {
		svc.ClusterIPs = ips
	}
	if ip == Headless && svc.Type == TypeNodePort {
		return p.errf("spec.clusterIP", "a NodePort Service cannot be headless (None)")
	}
	return nil
}

// familyOf reads an IP family's name: 4, 6, or 0 for neither.
func familyOf(name string) int {
	switch name {
	case "IPv4":
		return 4
	case "IPv6":
		return 6
	}
	return 0
}

// Policy is the Service's ipFamilyPolicy, SingleStack when absent.
func (s *Service) Policy() string {
	if s.FamilyPolicy == "" {
		return SingleStack
	}
	return s.FamilyPolicy
}

func (p *parser) ports(svc *Service, rs *rawServiceSpec) error {
	if len(rs.Ports) == 0 && svc.ClusterIP != Headless {
		return p.errf("spec.ports", "at least one port is required")
	}
	names := map[string]int{}
	ports := map[string]int{}
	for i, rp := range rs.Ports {
		path := fmt.Sprintf("spec.ports[%d]", i)
		pt := Port{Name: rp.Name, Protocol: rp.Protocol, Port: rp.Port}
		if len(rs.Ports) > 1 && rp.Name == "" {
			return p.errf(path+".name", "is required when a Service has more than one port")
		}
		if rp.Name != "" {
			if err := labels.CheckDNSLabel(rp.Name, 63); err != nil {
				return p.errf(path+".name", "%v", err)
			}
			if j, dup := names[rp.Name]; dup {
				return p.errf(path+".name", "%q is also the name of spec.ports[%d]", rp.Name, j)
			}
			names[rp.Name] = i
		}
		switch rp.Protocol {
		case "":
			pt.Protocol = "TCP"
		case "TCP", "UDP":
		case "SCTP":
			return p.errf(path+".protocol", "SCTP Services are not supported (the proxies balance TCP and UDP)")
		default:
			return p.errf(path+".protocol", "%q is not a protocol (TCP, UDP)", rp.Protocol)
		}
		if rp.Port < 1 || rp.Port > 65535 {
			return p.errf(path+".port", "%d is not a port number (1-65535)", rp.Port)
		}
		key := pt.Protocol + "/" + strconv.Itoa(rp.Port)
		if j, dup := ports[key]; dup {
			return p.errf(path+".port", "%s is also spec.ports[%d]", key, j)
		}
		ports[key] = i
		switch tp := rp.TargetPort; {
		case !present(tp):
			pt.TargetPort = rp.Port
		case tp.ShortTag() == "!!int":
			n, err := strconv.Atoi(tp.Value)
			if err != nil || n < 1 || n > 65535 {
				return p.errf(path+".targetPort", "%s is not a port number (1-65535) or a port name", tp.Value)
			}
			pt.TargetPort = n
		case tp.Kind == yaml.ScalarNode:
			if err := labels.CheckPortName(tp.Value); err != nil {
				return p.errf(path+".targetPort", "%v", err)
			}
			pt.TargetName = tp.Value
		default:
			return p.errf(path+".targetPort", "expected a port number or a port name")
		}
		if rp.NodePort != 0 {
			if svc.Type != TypeNodePort {
				return p.errf(path+".nodePort", "is only allowed in a NodePort Service (this one is %s)", svc.Type)
			}
			if rp.NodePort < MinNodePort || rp.NodePort > MaxNodePort {
				return p.errf(path+".nodePort", "%d is outside the node port range %d-%d", rp.NodePort, MinNodePort, MaxNodePort)
			}
			pt.NodePort = rp.NodePort
		}
		svc.Ports = append(svc.Ports, pt)
	}
	return nil
}

func (p *parser) slice(obj *rawObject) (*Slice, error) {
	fam := familyOf(obj.AddressType)
	switch {
	case fam != 0:
	case obj.AddressType == "":
		return nil, p.errf("addressType", "is required (IPv4, IPv6)")
	case obj.AddressType == "FQDN":
		return nil, p.errf("addressType", "FQDN is not supported (kube-proxy ignores FQDN slices): IPv4, IPv6")
	default:
		return nil, p.errf("addressType", "%q is not an address type (IPv4, IPv6)", obj.AddressType)
	}
	sl := &Slice{Family: fam}
	var eps []rawSliceEndpoint
	if present(obj.Endpoints) {
		if err := p.Decode(&obj.Endpoints, &eps, "endpoints"); err != nil {
			return nil, err
		}
	}
	for i, e := range eps {
		path := fmt.Sprintf("endpoints[%d]", i)
		if len(e.Addresses) != 1 {
			return nil, p.errf(path+".addresses", "must hold exactly one address (it holds %d)", len(e.Addresses))
		}
		a, err := netip.ParseAddr(e.Addresses[0])
		if err != nil || (fam == 4) != a.Is4() || a.Is4In6() || a.Zone() != "" {
			return nil, p.errf(path+".addresses[0]", "%q is not an IPv%d address (addressType %s)", e.Addresses[0], fam, obj.AddressType)
		}
		if present(e.Hints) {
			return nil, p.errf(path+".hints", "topology hints are not supported (a lab has no zones)")
		}
		c := e.Conditions
		se := SliceEndpoint{Address: a, NodeName: e.NodeName,
			Ready: c.Ready == nil || *c.Ready, Terminating: c.Terminating != nil && *c.Terminating}
		se.Serving = se.Ready
		if c.Serving != nil {
			se.Serving = *c.Serving
		}
		sl.Endpoints = append(sl.Endpoints, se)
	}
	var ports []rawSlicePort
	if present(obj.Ports) {
		if err := p.Decode(&obj.Ports, &ports, "ports"); err != nil {
			return nil, err
		}
	}
	names := map[string]int{}
	for i, rp := range ports {
		path := fmt.Sprintf("ports[%d]", i)
		sp := SlicePort{Protocol: rp.Protocol}
		if rp.Name != nil {
			sp.Name = *rp.Name
		}
		if j, dup := names[sp.Name]; dup {
			return nil, p.errf(path+".name", "%q is also the name of ports[%d]", sp.Name, j)
		}
		names[sp.Name] = i
		switch rp.Protocol {
		case "":
			sp.Protocol = "TCP"
		case "TCP", "UDP":
		default:
			return nil, p.errf(path+".protocol", "%q is not supported (TCP, UDP)", rp.Protocol)
		}
		if rp.Port == nil {
			return nil, p.errf(path+".port", "is required: cnlab does not take a slice port that means every port")
		}
		if *rp.Port < 1 || *rp.Port > 65535 {
			return nil, p.errf(path+".port", "%d is not a port number (1-65535)", *rp.Port)
		}
		sp.Port = *rp.Port
		sl.Ports = append(sl.Ports, sp)
	}
	return sl, nil
}
