package service

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/topology"
)

// Allocations are the cluster IPs and node ports a lab's Services hold,
// kept from one apply to the next so that a Service keeps its address.
type Allocations struct {
	ClusterIPs map[string]netip.Addr `json:"clusterIPs"` // by "namespace/name"
	NodePorts  map[string]int        `json:"nodePorts"`  // by "namespace/name/port/protocol"
}

// Resolved is a set of Services resolved against a lab.
type Resolved struct {
	Services    []*Service  `json:"services"` // sorted by namespace/name
	Slices      []*Slice    `json:"slices"`   // user-written, then synthesized, per Service
	Table       *Table      `json:"table"`
	Allocations Allocations `json:"allocations"`
	// VIP gives each proxied Service's cluster IP.
	VIP map[string]netip.Addr `json:"-"`
}

func nodePortKey(s *Service, p Port) string {
	return fmt.Sprintf("%s/%d/%s", s.Key(), p.Port, p.Protocol)
}

// Resolve resolves svcs and their user-written slices against lab:
// cluster IPs allocated from the lab's service CIDR (a Service keeps the
// one prev gives it), node ports from 30000-32767 likewise, slices
// synthesized for selector Services as the EndpointSlice controller makes
// them, and the proxies' Table. Conflicts (an address or node port taken
// twice, an address outside the CIDR) are errors naming the document.
//
// Addresses are allocated, for Services that need one and had none, in
// the order of their namespace/name, each the lowest free address of the
// CIDR from its second (a cluster's first address is its `kubernetes`
// Service's) to its last but one; node ports the lowest free from 30000.
func Resolve(lab *topology.Spec, svcs []*Service, userSlices []*Slice, prev *Allocations) (*Resolved, error) {
	if prev == nil {
		prev = &Allocations{}
	}
	cidr := lab.Services.CIDR
	if !cidr.IsValid() {
		cidr = netip.MustParsePrefix(DefaultCIDR)
	}
	r := &Resolved{Services: slices.Clone(svcs), VIP: map[string]netip.Addr{},
		Allocations: Allocations{ClusterIPs: map[string]netip.Addr{}, NodePorts: map[string]int{}}}
	slices.SortFunc(r.Services, func(a, b *Service) int { return strings.Compare(a.Key(), b.Key()) })
	byKey := map[string]*Service{}
	for _, s := range r.Services {
		byKey[s.Key()] = s
	}
	if err := r.allocateIPs(cidr, prev); err != nil {
		return nil, err
	}
	if err := r.allocateNodePorts(prev); err != nil {
		return nil, err
	}
	for _, sl := range userSlices {
		if byKey[sl.ServiceKey()] == nil {
			return nil, sl.errorAt(sl.Ref(), "metadata.labels", fmt.Sprintf("%s %q names no Service in namespace %s (apply the Service too)", ServiceNameLabel, sl.Service, sl.Namespace))
		}
		for i, e := range sl.Endpoints {
			if cidr.Contains(e.Address) {
				return nil, sl.errorAt(sl.Ref(), fmt.Sprintf("endpoints[%d].addresses[0]", i), fmt.Sprintf("%s is in the lab's service CIDR %s: a backend must be a pod's address", e.Address, cidr))
			}
		}
	}
	sorted := slices.Clone(userSlices)
	slices.SortFunc(sorted, func(a, b *Slice) int { return strings.Compare(a.Key(), b.Key()) })
	r.Table = &Table{}
	for _, s := range r.Services {
		mine := []*Slice{}
		for _, sl := range sorted {
			if sl.ServiceKey() == s.Key() {
				mine = append(mine, sl)
			}
		}
		if s.Selector != nil {
			mine = append(mine, synthesize(lab, s)...)
		}
		r.Slices = append(r.Slices, mine...)
		vip, ok := r.VIP[s.Key()]
		if !ok {
			continue // headless
		}
		for _, p := range s.Ports {
			f := Frontend{Service: s.Key(), PortName: p.Name, Protocol: strings.ToLower(p.Protocol), VIP: vip,
				Port: uint16(p.Port), Affinity: s.Affinity, InternalLocal: s.InternalLocal, ExternalLocal: s.ExternalLocal}
			if s.Type == TypeNodePort {
				f.NodePort = uint16(r.Allocations.NodePorts[nodePortKey(s, p)])
			}
			f.Backends = backends(lab, p, mine)
			r.Table.Frontends = append(r.Table.Frontends, f)
		}
	}
	slices.SortStableFunc(r.Table.Frontends, func(a, b Frontend) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.PortName, b.PortName), strings.Compare(a.Protocol, b.Protocol))
	})
	return r, nil
}

func (r *Resolved) allocateIPs(cidr netip.Prefix, prev *Allocations) error {
	taken := map[netip.Addr]string{}
	take := func(s *Service, a netip.Addr) {
		taken[a] = s.Key()
		r.VIP[s.Key()] = a
		r.Allocations.ClusterIPs[s.Key()] = a
	}
	path := "spec.clusterIP"
	// First the addresses Services already hold (a Service whose file now
	// gives another address gives its old one up), so that a new Service
	// asking for a held address is the one refused.
	for _, s := range r.Services {
		if s.ClusterIP == Headless {
			continue
		}
		a, ok := prev.ClusterIPs[s.Key()]
		if ok && cidr.Contains(a) && (s.ClusterIP == "" || s.ClusterIP == a.String()) {
			take(s, a)
		}
	}
	for _, s := range r.Services { // given in the file
		if s.ClusterIP == "" || s.ClusterIP == Headless {
			continue
		}
		if _, done := r.VIP[s.Key()]; done {
			continue
		}
		a := netip.MustParseAddr(s.ClusterIP)
		if !cidr.Contains(a) {
			return s.errorAt(s.Ref(), path, fmt.Sprintf("%s is outside the lab's service CIDR %s", a, cidr))
		}
		if a == cidr.Masked().Addr() || !cidr.Contains(a.Next()) {
			return s.errorAt(s.Ref(), path, fmt.Sprintf("%s is the network or broadcast address of the service CIDR %s", a, cidr))
		}
		if other, dup := taken[a]; dup {
			return s.errorAt(s.Ref(), path, fmt.Sprintf("%s is already the cluster IP of Service %s", a, other))
		}
		take(s, a)
	}
	next := cidr.Masked().Addr().Next().Next() // the first is the kubernetes Service's
	for _, s := range r.Services {
		if s.ClusterIP != "" {
			continue
		}
		if _, ok := r.VIP[s.Key()]; ok {
			continue
		}
		for {
			if !cidr.Contains(next.Next()) {
				return s.errorAt(s.Ref(), "spec.clusterIP", fmt.Sprintf("the lab's service CIDR %s has no free address left", cidr))
			}
			if _, dup := taken[next]; !dup {
				break
			}
			next = next.Next()
		}
		take(s, next)
	}
	return nil
}

func (r *Resolved) allocateNodePorts(prev *Allocations) error {
	taken := map[int]string{}
	take := func(key string, np int) {
		taken[np] = key
		r.Allocations.NodePorts[key] = np
	}
	each := func(f func(s *Service, i int, key string) error) error {
		for _, s := range r.Services {
			if s.Type != TypeNodePort {
				continue
			}
			for i, p := range s.Ports {
				if err := f(s, i, nodePortKey(s, p)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := each(func(s *Service, i int, key string) error { // given in the file
		np := s.Ports[i].NodePort
		if np == 0 {
			return nil
		}
		if other, dup := taken[np]; dup {
			return s.errorAt(s.Ref(), fmt.Sprintf("spec.ports[%d].nodePort", i), fmt.Sprintf("%d is already the node port of %s", np, other))
		}
		take(key, np)
		return nil
	})
	if err != nil {
		return err
	}
	_ = each(func(s *Service, i int, key string) error { // kept from the previous apply
		if np, ok := prev.NodePorts[key]; ok && s.Ports[i].NodePort == 0 {
			if _, dup := taken[np]; !dup {
				take(key, np)
			}
		}
		return nil
	})
	next := MinNodePort
	return each(func(s *Service, i int, key string) error {
		if _, ok := r.Allocations.NodePorts[key]; ok {
			return nil
		}
		for ; next <= MaxNodePort; next++ {
			if _, dup := taken[next]; !dup {
				take(key, next)
				return nil
			}
		}
		return s.errorAt(s.Ref(), fmt.Sprintf("spec.ports[%d].nodePort", i), fmt.Sprintf("no free node port left in %d-%d", MinNodePort, MaxNodePort))
	})
}

// synthesize makes the slices the EndpointSlice controller would make for
// a selector Service: every endpoint of its namespace whose labels match,
// ready (a lab's endpoints are always running), on its host, with the
// Service's ports resolved for it (a named targetPort from the endpoint's
// declared ports; a port that does not resolve is left out, so the
// endpoint is no backend of that Service port). The controller groups
// endpoints with the same resolved ports in one slice; cnlab makes one
// slice per endpoint, which merges to the same backends.
func synthesize(lab *topology.Spec, s *Service) []*Slice {
	var out []*Slice
	for i := range lab.Endpoints {
		ep := &lab.Endpoints[i]
		if ep.Namespace != s.Namespace || !matches(s.Selector, ep.Labels) {
			continue
		}
		sl := &Slice{Namespace: s.Namespace, Name: s.Name + "-" + ep.Name, Service: s.Name,
			Doc:       Doc{Source: "synthesized from " + s.Ref()},
			Endpoints: []SliceEndpoint{{Address: ep.IP, Ready: true, Serving: true, NodeName: ep.Host}}}
		for _, p := range s.Ports {
			port := p.TargetPort
			if p.TargetName != "" {
				port = namedPort(ep, p.TargetName, p.Protocol)
			}
			if port != 0 {
				sl.Ports = append(sl.Ports, SlicePort{Name: p.Name, Protocol: p.Protocol, Port: port})
			}
		}
		out = append(out, sl)
	}
	return out
}

func matches(sel, set map[string]string) bool {
	for k, v := range sel {
		if set[k] != v {
			return false
		}
	}
	return true
}

// endpointAt returns the lab endpoint with that address, if any.
func endpointAt(lab *topology.Spec, a netip.Addr) *topology.Endpoint {
	for i := range lab.Endpoints {
		if lab.Endpoints[i].IP == a {
			return &lab.Endpoints[i]
		}
	}
	return nil
}

// namedPort resolves a Service port's named targetPort for an endpoint
// from its declared ports (name and protocol); 0 when it has none.
func namedPort(ep *topology.Endpoint, name, proto string) int {
	if ep == nil {
		return 0
	}
	for _, p := range ep.Ports {
		if p.Name == name && strings.EqualFold(p.Protocol, proto) {
			return p.Port
		}
	}
	return 0
}

// backends merges the slices of one Service for one of its ports, as
// kube-proxy does: every endpoint of a slice whose ports include one
// named like the Service port (same protocol), deduplicated by address
// and port (the first slice by name wins); then the ready ones, or when
// none is ready the serving ones (terminating included).
func backends(lab *topology.Spec, p Port, sls []*Slice) []Backend {
	type cand struct {
		b              Backend
		ready, serving bool
	}
	var cands []cand
	seen := map[netip.AddrPort]bool{}
	for _, sl := range sls {
		for _, sp := range sl.Ports {
			if sp.Name != p.Name || sp.Protocol != p.Protocol {
				continue
			}
			for _, e := range sl.Endpoints {
				ep := endpointAt(lab, e.Address)
				b := Backend{IP: e.Address, Port: uint16(sp.Port), Host: e.NodeName}
				if ep != nil {
					b.Endpoint, b.Host = ep.ID(), ep.Host
				}
				if seen[b.AddrPort()] {
					continue
				}
				seen[b.AddrPort()] = true
				cands = append(cands, cand{b, e.Ready, e.Serving})
			}
		}
	}
	var ready, serving []Backend
	for _, c := range cands {
		switch {
		case c.ready:
			ready = append(ready, c.b)
		case c.serving:
			serving = append(serving, c.b)
		}
	}
	out := ready
	if len(out) == 0 {
		out = serving
	}
	slices.SortFunc(out, func(a, b Backend) int {
		return cmp.Or(a.IP.Compare(b.IP), cmp.Compare(a.Port, b.Port))
	})
	return out
}
