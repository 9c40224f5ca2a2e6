package topology

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/labels"
)

func (r *resolver) hosts() error {
	if r.spec.Chain != nil {
		return nil
	}
	if len(r.raw.Hosts) == 0 {
		if len(r.errs) > 0 {
			// A fragment with a problem already said (as tests and
			// users write to try one field): its missing hosts are said
			// once the rest is right.
			return errSkip
		}
		return r.errf("hosts", "at least one host is required (or a chain:)")
	}
	seen := map[string]int{}
	r.each(len(r.raw.Hosts), func(i int) error {
		err := r.host(i, seen)
		if name := r.raw.Hosts[i].Name; err != nil && r.spec.Host(name) == nil {
			r.badHosts[name] = true // not a duplicate of a good one
		}
		return err
	})
	if r.spec.HasFamily(6) && r.spec.MTU < 1280 {
		return r.errf("mtu", "%d is below IPv6's minimum of 1280, and the lab has IPv6 podCIDRs", r.spec.MTU)
	}
	return nil
}

// host resolves hosts[i]; seen maps the names before it to their index.
func (r *resolver) host(i int, seen map[string]int) error {
	h := r.raw.Hosts[i]
	path := fmt.Sprintf("hosts[%d]", i)
	if err := labels.CheckDNSLabel(h.Name, 63); err != nil {
		return r.errf(path+".name", "%v", err)
	}
	if j, dup := seen[h.Name]; dup {
		return r.errf(path+".name", "duplicate host name %q (also hosts[%d])", h.Name, j)
	}
	seen[h.Name] = i
	var cidrs []netip.Prefix
	var err error
	switch {
	case h.PodCIDR != "" && len(h.PodCIDRs) > 0:
		return r.errf(path+".podCIDRs", "give podCIDR or podCIDRs, not both")
	case h.PodCIDR != "":
		cidrs, err = r.podCIDRs(path+".podCIDR", []string{h.PodCIDR})
	case len(h.PodCIDRs) > 0:
		cidrs, err = r.podCIDRs(path+".podCIDRs", h.PodCIDRs)
	default:
		return r.errf(path+".podCIDR", "is required (e.g. podCIDR: 10.0.192.0/24, or podCIDRs: [10.0.192.0/24, fd00:0:192::/64] for dual-stack)")
	}
	if err != nil {
		return err
	}
	if len(r.spec.Hosts) > 0 {
		if want, got := familiesOf(r.spec.Hosts[0].PodCIDRs), familiesOf(cidrs); want != got {
			key := ".podCIDRs"
			if h.PodCIDR != "" {
				key = ".podCIDR"
			}
			return r.errf(path+key, "%s, but hosts[0] (%s) has %s: every host of a lab has the same families, in the same order", got, r.spec.Hosts[0].Name, want)
		}
	}
	p := cidrs[0]
	var gws []netip.Addr
	for _, c := range cidrs {
		gws = append(gws, c.Addr().Next())
	}
	ls := map[string]string{}
	for k, v := range h.Labels {
		ls[k] = v
	}
	if err := labels.CheckSet(ls); err != nil {
		return r.errf(path+".labels", "%v", err)
	}
	if v, ok := ls[HostnameLabel]; ok && v != h.Name {
		return r.errf(path+".labels", "%s is always the host's own name (%q), not %q", HostnameLabel, h.Name, v)
	}
	ls[HostnameLabel] = h.Name
	r.spec.Hosts = append(r.spec.Hosts, Host{
		Labels:   ls,
		Name:     h.Name,
		PodCIDR:  p,
		Gateway:  gws[0],
		PodCIDRs: cidrs,
		Gateways: gws,
		Netns:    HostNetns(r.spec.Name, h.Name),
		Bridge:   HostBridge,
	})
	return nil
}

// podCIDRs resolves a host's pod prefixes: one or two, at most one per
// family, none overlapping another host's or the transit range.
func (r *resolver) podCIDRs(path string, raw []string) ([]netip.Prefix, error) {
	if len(raw) > 2 {
		return nil, r.errf(path, "has %d prefixes: give one per family, at most one IPv4 and one IPv6", len(raw))
	}
	var out []netip.Prefix
	for k, c := range raw {
		at := path
		if strings.HasSuffix(path, "podCIDRs") {
			at = fmt.Sprintf("%s[%d]", path, k)
		}
		p, err := parsePrefix(c)
		if err != nil {
			return nil, r.errf(at, "%v", err)
		}
		if p.Addr().Is4() {
			if p.Bits() > 30 {
				return nil, r.errf(at, "%s is too small: a host needs at least a /30", p)
			}
			err = unicastRange(p)
		} else {
			if p.Bits() > 120 || p.Bits() < 64 {
				return nil, r.errf(at, "%s: an IPv6 podCIDR is a /64 to a /120 (e.g. fd00:0:192::/64)", p)
			}
			err = unicastRange6(p)
		}
		if err != nil {
			return nil, r.errf(at, "%v", err)
		}
		for _, o := range out {
			if Family(o.Addr()) == Family(p.Addr()) {
				return nil, r.errf(at, "%s: a host has one prefix per family (already %s)", p, o)
			}
		}
		for j, o := range r.spec.Hosts {
			for _, oc := range o.PodCIDRs {
				if p.Overlaps(oc) {
					return nil, r.errf(at, "%s overlaps hosts[%d].podCIDR %s", p, j, oc)
				}
				// A host's IPv6 link is its /64: neighbour discovery
				// within it is not policy's (docs/topology.md).
				if p.Addr().Is6() && oc.Addr().Is6() && netip.PrefixFrom(p.Addr(), 64).Masked() == netip.PrefixFrom(oc.Addr(), 64).Masked() {
					return nil, r.errf(at, "%s shares its /64 with hosts[%d].podCIDR %s: give each host an IPv6 prefix in a /64 of its own", p, j, oc)
				}
			}
		}
		if p.Overlaps(r.spec.TransitCIDR) {
			return nil, r.errf(at, "%s overlaps transitCIDR %s (set transitCIDR: to another range)", p, r.spec.TransitCIDR)
		}
		if p.Overlaps(TransitCIDR6) {
			return nil, r.errf(at, "%s overlaps %s, which holds the links' IPv6 addresses", p, TransitCIDR6)
		}
		out = append(out, p)
	}
	return out, nil
}

// familiesOf names the families of prefixes ("IPv4", "IPv6", "IPv4 and
// IPv6", "IPv6 and IPv4").
func familiesOf(ps []netip.Prefix) string {
	var names []string
	for _, p := range ps {
		names = append(names, fmt.Sprintf("IPv%d", Family(p.Addr())))
	}
	return strings.Join(names, " and ")
}

func (r *resolver) namespaces() error {
	names := make([]string, 0, len(r.raw.Namespaces))
	for n := range r.raw.Namespaces {
		names = append(names, n)
	}
	sort.Strings(names)
	r.each(len(names), func(i int) error {
		n := names[i]
		path := "namespaces." + n
		err := r.namespace(n, path)
		if err != nil {
			r.badNamespaces[n] = true
		}
		return err
	})
	if _, ok := r.spec.Namespaces[DefaultNamespace]; !ok {
		r.spec.Namespaces[DefaultNamespace] = Namespace{Labels: map[string]string{MetadataNameLabel: DefaultNamespace}}
	}
	return nil
}

// namespace resolves namespaces.NAME.
func (r *resolver) namespace(n, path string) error {

	if err := labels.CheckDNSLabel(n, 63); err != nil {
		return r.errf(path, "namespace name: %v", err)
	}
	if reservedNamespaces[n] {
		return r.errf(path, "namespace name %q is reserved (cnlab exec uses host/NAME, hop/N and sw/N)", n)
	}
	ls := map[string]string{}
	for k, v := range r.raw.Namespaces[n].Labels {
		ls[k] = v
	}
	if err := labels.CheckSet(ls); err != nil {
		return r.errf(path+".labels", "%v", err)
	}
	if v, ok := ls[MetadataNameLabel]; ok && v != n {
		return r.errf(path+".labels", "%s is always the namespace's own name (%q), not %q", MetadataNameLabel, n, v)
	}
	ls[MetadataNameLabel] = n
	r.spec.Namespaces[n] = Namespace{Labels: ls}
	return nil
}

func (r *resolver) links() error {
	pairs := map[[2]string]int{}
	r.each(len(r.raw.Links), func(i int) error { return r.link(i, pairs) })
	return nil
}

// link resolves links[i]; pairs maps the host pairs before it to their link.
func (r *resolver) link(i int, pairs map[[2]string]int) error {
	l, s := r.raw.Links[i], r.spec
	path := fmt.Sprintf("links[%d]", i)
	if len(l.Between) != 2 {
		return r.errf(path+".between", "must name exactly two hosts, e.g. between: [flip, flap]")
	}
	bad := false // it names a host declared wrongly: said already
	for k, h := range l.Between {
		bad = bad || r.badHosts[h]
		if s.Host(h) == nil && !r.badHosts[h] {
			return r.errf(fmt.Sprintf("%s.between[%d]", path, k), "unknown host %q (hosts: %s)", h, strings.Join(r.hostNames(), ", "))
		}
	}
	a, b := l.Between[0], l.Between[1]
	if a == b {
		return r.errf(path+".between", "a link joins two different hosts, got %q twice", a)
	}
	key := [2]string{min(a, b), max(a, b)}
	if j, dup := pairs[key]; dup {
		return r.errf(path+".between", "hosts %s and %s are already linked by links[%d]", a, b, j)
	}
	pairs[key] = i
	kind := l.Kind
	if kind == "" {
		kind = LinkWire
	}
	if kind != LinkWire && kind != LinkVXLAN {
		return r.errf(path+".kind", "unknown link kind %q (supported: wire, vxlan)", kind)
	}
	if bad {
		return errSkip
	}
	wire, ok1 := nthSubnet(s.TransitCIDR, 30, 2*i)
	over, ok2 := nthSubnet(s.TransitCIDR, 30, 2*i+1)
	if !ok1 || !ok2 {
		return r.errf(path, "transitCIDR %s has no room for link %d (each link takes 8 addresses)", s.TransitCIDR, i)
	}
	link := Link{Index: i, Kind: kind, Wire: wire, MTU: s.MTU}
	v6 := s.HasFamily(6)
	if v6 {
		link.Wire6 = netip.PrefixFrom(embed6(TransitCIDR6, wire.Addr()), 96+wire.Bits())
	}
	dev := fmt.Sprintf("wire%d", i)
	for k, h := range []string{a, b} {
		link.Ends[k] = LinkEnd{Host: h, WireDev: dev, WireAddr: nthAddr(wire, k+1)}
		if v6 {
			link.Ends[k].WireAddr6 = nthAddr(link.Wire6, k+1)
		}
	}
	if kind == LinkVXLAN {
		link.Over = over
		link.VNI = 100 + i
		link.MTU = s.MTU + vxlanOverhead
		if !s.HasFamily(4) {
			link.MTU = s.MTU + vxlanOverhead6
		}
		if v6 {
			link.Over6 = netip.PrefixFrom(embed6(TransitCIDR6, over.Addr()), 96+over.Bits())
		}
		for k := range link.Ends {
			link.Ends[k].OverDev = fmt.Sprintf("vxlan%d", i)
			link.Ends[k].OverAddr = nthAddr(over, k+1)
			if v6 {
				link.Ends[k].OverAddr6 = nthAddr(link.Over6, k+1)
			}
		}
	}
	s.Links = append(s.Links, link)
	return nil
}

func (r *resolver) hostNames() []string {
	var out []string
	for _, h := range r.spec.Hosts {
		out = append(out, h.Name)
	}
	return out
}

// routes computes, for every host, a static route to every other reachable
// host's pod CIDR through the first link of a shortest path (breadth-first
// over the links, in file order, so the result is deterministic). Hosts
// that no path joins are an error: their endpoints could not reach each
// other.
func (r *resolver) routes() error {
	s := r.spec
	type hop struct {
		link *Link
		end  int // index of this host's end in link.Ends
	}
	adj := map[string][]hop{}
	for i := range s.Links {
		l := &s.Links[i]
		adj[l.Ends[0].Host] = append(adj[l.Ends[0].Host], hop{l, 0})
		adj[l.Ends[1].Host] = append(adj[l.Ends[1].Host], hop{l, 1})
	}
	for hi := range s.Hosts {
		src := &s.Hosts[hi]
		first := map[string]hop{src.Name: {}}
		queue := []string{src.Name}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for _, h := range adj[cur] {
				peer := h.link.Ends[1-h.end].Host
				if _, seen := first[peer]; seen {
					continue
				}
				if cur == src.Name {
					first[peer] = h
				} else {
					first[peer] = first[cur]
				}
				queue = append(queue, peer)
			}
		}
		for _, dst := range s.Hosts {
			if dst.Name == src.Name {
				continue
			}
			h, ok := first[dst.Name]
			if !ok {
				return r.errf("links", "no link path joins hosts %s and %s, so their endpoints could not reach each other: add a link (e.g. between: [%s, %s])",
					src.Name, dst.Name, src.Name, dst.Name)
			}
			me, peer := h.link.Ends[h.end], h.link.Ends[1-h.end]
			for _, c := range dst.PodCIDRs {
				rt := Route{Dst: c, Via: peer.WireAddr, Dev: me.WireDev}
				if h.link.Kind == LinkVXLAN {
					rt = Route{Dst: c, Via: peer.OverAddr, Dev: me.OverDev}
				}
				if c.Addr().Is6() {
					rt.Via = peer.WireAddr6
					if h.link.Kind == LinkVXLAN {
						rt.Via = peer.OverAddr6
					}
				}
				src.Routes = append(src.Routes, rt)
			}
		}
	}
	return nil
}
