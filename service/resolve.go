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
	ClusterIPs map[string]netip.Addr `json:"clusterIPs"` // by "namespace/name": its primary family's
	// SecondaryClusterIPs are dual-stack Services' second addresses.
	SecondaryClusterIPs map[string]netip.Addr `json:"secondaryClusterIPs,omitempty"`
	NodePorts           map[string]int        `json:"nodePorts"` // by "namespace/name/port/protocol"
}

// held returns the address of family fam a Service held, if any.
func (a *Allocations) held(key string, fam int) (netip.Addr, bool) {
	for _, m := range []map[string]netip.Addr{a.ClusterIPs, a.SecondaryClusterIPs} {
		if x, ok := m[key]; ok && topology.Family(x) == fam {
			return x, true
		}
	}
	return netip.Addr{}, false
}

// Resolved is a set of Services resolved against a lab.
type Resolved struct {
	Services    []*Service  `json:"services"` // sorted by namespace/name
	Slices      []*Slice    `json:"slices"`   // user-written, then synthesized, per Service
	Table       *Table      `json:"table"`
	Allocations Allocations `json:"allocations"`
	// VIP gives each proxied Service's cluster IP (its primary
	// family's), VIPs all of them, in the order of its families.
	VIP  map[string]netip.Addr         `json:"-"`
	VIPs map[string][]netip.Addr       `json:"-"`
	vip  map[int]map[string]netip.Addr // while allocating: per family, by Service

	// Families gives each Service's IP families (4, 6), the primary
	// first, as its ipFamilies and ipFamilyPolicy choose them on the lab.
	Families map[string][]int `json:"-"`
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
	cidrs := map[int]netip.Prefix{}
	for _, fam := range lab.Families() {
		if c, ok := lab.Services.CIDROf(fam); ok {
			cidrs[fam] = c
		}
	}
	if _, ok := cidrs[4]; !ok && lab.HasFamily(4) {
		cidrs[4] = netip.MustParsePrefix(DefaultCIDR)
	}
	if _, ok := cidrs[6]; !ok && lab.HasFamily(6) {
		cidrs[6] = netip.MustParsePrefix(DefaultCIDR6)
	}
	r := &Resolved{Services: slices.Clone(svcs), VIP: map[string]netip.Addr{}, VIPs: map[string][]netip.Addr{}, Families: map[string][]int{},
		Allocations: Allocations{ClusterIPs: map[string]netip.Addr{}, NodePorts: map[string]int{}}}
	slices.SortFunc(r.Services, func(a, b *Service) int { return strings.Compare(a.Key(), b.Key()) })
	byKey := map[string]*Service{}
	for _, s := range r.Services {
		byKey[s.Key()] = s
		fams, err := families(lab, s)
		if err != nil {
			return nil, err
		}
		r.Families[s.Key()] = fams
	}
	for _, fam := range []int{4, 6} {
		if c, ok := cidrs[fam]; ok {
			if err := r.allocateIPs(fam, c, prev); err != nil {
				return nil, err
			}
		}
	}
	for _, s := range r.Services {
		if s.ClusterIP == Headless {
			continue
		}
		for i, fam := range r.Families[s.Key()] {
			a := r.vip[fam][s.Key()]
			r.VIPs[s.Key()] = append(r.VIPs[s.Key()], a)
			if i == 0 {
				r.VIP[s.Key()] = a
				r.Allocations.ClusterIPs[s.Key()] = a
			} else {
				if r.Allocations.SecondaryClusterIPs == nil {
					r.Allocations.SecondaryClusterIPs = map[string]netip.Addr{}
				}
				r.Allocations.SecondaryClusterIPs[s.Key()] = a
			}
		}
	}
	r.vip = nil
	if err := r.allocateNodePorts(prev); err != nil {
		return nil, err
	}
	for _, sl := range userSlices {
		if byKey[sl.ServiceKey()] == nil {
			return nil, sl.errorAt(sl.Ref(), "metadata.labels", fmt.Sprintf("%s %q names no Service in namespace %s (apply the Service too)", ServiceNameLabel, sl.Service, sl.Namespace))
		}
		for i, e := range sl.Endpoints {
			if cidr, ok := cidrs[topology.Family(e.Address)]; ok && cidr.Contains(e.Address) {
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
			mine = append(mine, synthesize(lab, s, r.Families[s.Key()])...)
		}
		r.Slices = append(r.Slices, mine...)
		for i, vip := range r.VIPs[s.Key()] { // none when headless
			fam := r.Families[s.Key()][i]
			for _, p := range s.Ports {
				f := Frontend{Service: s.Key(), PortName: p.Name, Protocol: strings.ToLower(p.Protocol), VIP: vip,
					Port: uint16(p.Port), Affinity: s.Affinity, InternalLocal: s.InternalLocal, ExternalLocal: s.ExternalLocal}
				if s.Type == TypeNodePort {
					f.NodePort = uint16(r.Allocations.NodePorts[nodePortKey(s, p)])
				}
				f.Backends = backends(lab, p, mine, fam)
				r.Table.Frontends = append(r.Table.Frontends, f)
			}
		}
	}
	// Stable: a dual-stack Service's frontends of one port stay in the
	// order of its families, the primary first.
	slices.SortStableFunc(r.Table.Frontends, func(a, b Frontend) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.PortName, b.PortName), strings.Compare(a.Protocol, b.Protocol))
	})
	return r, nil
}

// families returns the IP families a Service gets on a lab, the primary
// first, as the API server chooses them: SingleStack the first of
// ipFamilies (or of the given cluster IPs, or the lab's primary family);
// PreferDualStack that one and the lab's other family if it has one;
// RequireDualStack both, or an error on a single-stack lab.
func families(lab *topology.Spec, s *Service) ([]int, error) {
	labFams := lab.Families()
	have := func(fam int) bool { return slices.Contains(labFams, fam) }
	first, path := labFams[0], ""
	given := map[int]int{} // family -> index in ClusterIPs
	for i, a := range s.given() {
		if x, err := netip.ParseAddr(a); err == nil {
			given[topology.Family(x)] = i
		}
	}
	switch {
	case len(s.IPFamilies) > 0:
		first, path = s.IPFamilies[0], "spec.ipFamilies[0]"
	case len(s.given()) > 0:
		x := netip.MustParseAddr(s.given()[0])
		first, path = topology.Family(x), "spec.clusterIP"
	}
	labName := fmt.Sprintf("lab %s has %s only", lab.Name, famNames(labFams))
	if !have(first) {
		return nil, s.errorAt(s.Ref(), path, fmt.Sprintf("IPv%d, but %s (its hosts' podCIDRs)", first, labName))
	}
	out := []int{first}
	other := 10 - first
	switch s.Policy() {
	case SingleStack:
	case PreferDualStack:
		if have(other) {
			out = append(out, other)
		}
	case RequireDualStack:
		if !have(other) {
			return nil, s.errorAt(s.Ref(), "spec.ipFamilyPolicy", fmt.Sprintf("RequireDualStack, but %s: give PreferDualStack or SingleStack, or give the lab's hosts podCIDRs of both families", labName))
		}
		out = append(out, other)
	}
	for fam, i := range given {
		if !slices.Contains(out, fam) {
			return nil, s.errorAt(s.Ref(), fmt.Sprintf("spec.clusterIPs[%d]", i), fmt.Sprintf("%s is an IPv%d address, but the Service has no IPv%d cluster IP on this lab (%s)", s.given()[i], fam, fam, labName))
		}
	}
	return out, nil
}

func famNames(fams []int) string {
	var names []string
	for _, f := range fams {
		names = append(names, fmt.Sprintf("IPv%d", f))
	}
	return strings.Join(names, " and ")
}

// given returns the addresses the file gives, ClusterIP first (nil for
// none, or headless).
func (s *Service) given() []string {
	if s.ClusterIP == "" || s.ClusterIP == Headless {
		return nil
	}
	if len(s.ClusterIPs) == 0 {
		return []string{s.ClusterIP}
	}
	if s.ClusterIPs[0] != s.ClusterIP {
		return append([]string{s.ClusterIP}, s.ClusterIPs[1:]...)
	}
	return s.ClusterIPs
}

// givenIP returns the address of family fam the Service's file gives and
// the path of its field, if any.
func (s *Service) givenIP(fam int) (netip.Addr, string, bool) {
	for i, a := range s.given() {
		x, err := netip.ParseAddr(a)
		if err != nil || topology.Family(x) != fam {
			continue
		}
		path := fmt.Sprintf("spec.clusterIPs[%d]", i)
		if i == 0 {
			path = "spec.clusterIP"
		}
		return x, path, true
	}
	return netip.Addr{}, "", false
}

// allocateIPs gives every Service with family fam its address of that
// family from cidr: the one it held, else the one its file gives, else
// the lowest free.
func (r *Resolved) allocateIPs(fam int, cidr netip.Prefix, prev *Allocations) error {
	if r.vip == nil {
		r.vip = map[int]map[string]netip.Addr{}
	}
	got := map[string]netip.Addr{}
	r.vip[fam] = got
	wants := func(s *Service) bool {
		return s.ClusterIP != Headless && slices.Contains(r.Families[s.Key()], fam)
	}
	taken := map[netip.Addr]string{}
	take := func(s *Service, a netip.Addr) {
		taken[a] = s.Key()
		got[s.Key()] = a
	}
	// First the addresses Services already hold (a Service whose file now
	// gives another address gives its old one up), so that a new Service
	// asking for a held address is the one refused.
	for _, s := range r.Services {
		if !wants(s) {
			continue
		}
		a, ok := prev.held(s.Key(), fam)
		g, _, given := s.givenIP(fam)
		if ok && cidr.Contains(a) && (!given || g == a) {
			take(s, a)
		}
	}
	for _, s := range r.Services { // given in the file
		a, path, given := s.givenIP(fam)
		if !wants(s) || !given {
			continue
		}
		if _, done := got[s.Key()]; done {
			continue
		}
		if !cidr.Contains(a) {
			return s.errorAt(s.Ref(), path, fmt.Sprintf("%s is outside the lab's service CIDR %s", a, cidr))
		}
		if a == cidr.Masked().Addr() || !cidr.Contains(a.Next()) {
			what := "network or broadcast address"
			if fam == 6 {
				what = "first or last address"
			}
			return s.errorAt(s.Ref(), path, fmt.Sprintf("%s is the %s of the service CIDR %s", a, what, cidr))
		}
		if other, dup := taken[a]; dup {
			return s.errorAt(s.Ref(), path, fmt.Sprintf("%s is already the cluster IP of Service %s", a, other))
		}
		take(s, a)
	}
	next := cidr.Masked().Addr().Next().Next() // the first is the kubernetes Service's
	for _, s := range r.Services {
		if !wants(s) {
			continue
		}
		if _, ok := got[s.Key()]; ok {
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
func synthesize(lab *topology.Spec, s *Service, fams []int) []*Slice {
	var out []*Slice
	for fi, fam := range fams {
		for i := range lab.Endpoints {
			ep := &lab.Endpoints[i]
			if ep.Namespace != s.Namespace || !matches(s.Selector, ep.Labels) {
				continue
			}
			addr, ok := ep.Addr(fam)
			if !ok {
				continue
			}
			name := s.Name + "-" + ep.Name
			if fi > 0 { // a dual-stack Service's second family: a slice of its own, as the controller makes
				name += fmt.Sprintf("-ipv%d", fam)
			}
			sl := &Slice{Namespace: s.Namespace, Name: name, Service: s.Name, Family: fam,
				Doc:       Doc{Source: "synthesized from " + s.Ref()},
				Endpoints: []SliceEndpoint{{Address: addr, Ready: true, Serving: true, NodeName: ep.Host}}}
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
		if slices.Contains(lab.Endpoints[i].Addrs(), a) {
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
func backends(lab *topology.Spec, p Port, sls []*Slice, fam int) []Backend {
	type cand struct {
		b              Backend
		ready, serving bool
	}
	var cands []cand
	seen := map[netip.AddrPort]bool{}
	for _, sl := range sls {
		if sl.family() != fam {
			continue // kube-proxy serves a family's cluster IP from that family's slices
		}
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

// family is the slice's address family (4 for a slice made without one).
func (s *Slice) family() int {
	if s.Family == 0 {
		return 4
	}
	return s.Family
}
