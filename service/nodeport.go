package service

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// A node port under policy: what each datapath judges.
//
// The eBPF proxy translates a node port on the client's host, before
// policy, as Cilium translates in-cluster traffic: the client's egress is
// judged on the backend (its target port). Under externalTrafficPolicy
// Cluster the connection leaves with the client host's masquerade address
// (MasqAddress) as its source; a backend on the client's host is judged
// there on the real tuple (the client), one on another host by its host,
// which sees the masquerade address: in Cilium terms the remote-node
// entity, which no CiliumNetworkPolicy CIDR selector selects
// (policy.LabPrefixes) and no other selector cnlab enforces does; an
// ipBlock covering it does. Under Local the client's address is kept.
//
// The netfilter proxies translate a node port on the node port's host N,
// as kube-proxy does. The client's host judges its egress: on the backend
// when N is the client's host (translated before its forward hook), else
// on N's address and the node port (the packet leaves untranslated). The
// backend's host judges its ingress: on the client when it is N (the
// masquerade comes after the forward hook), else on the address N
// masqueraded the connection to, N's address on the link towards it
// (externalTrafficPolicy Cluster; Local keeps the client's address).

// MasqAddress is the source the eBPF proxy gives masqueraded node-port
// connections on a host: the highest address of its pod CIDR that is not
// its gateway or an endpoint's, so that it is no address of the host (its
// stack would take the replies for its own) yet routed to it by every
// other host.
func MasqAddress(lab *topology.Spec, h *topology.Host) (netip.Addr, error) {
	return MasqAddressOf(lab, h, topology.Family(h.PodCIDR.Addr()))
}

// MasqAddressOf is MasqAddress of family fam (4 or 6): the highest
// address of the host's pod CIDR of that family that is not its gateway
// or an endpoint's (an IPv6 /64's last address).
func MasqAddressOf(lab *topology.Spec, h *topology.Host, fam int) (netip.Addr, error) {
	p, ok := h.CIDR(fam)
	if !ok {
		return netip.Addr{}, fmt.Errorf("host %s has no IPv%d pod CIDR", h.Name, fam)
	}
	gw, _ := h.GatewayOf(fam)
	used := map[netip.Addr]bool{gw: true}
	for _, ep := range lab.Endpoints {
		for _, a := range ep.Addrs() {
			used[a] = true
		}
	}
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ { // the last address
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	if fam == 6 {
		a = a.Next() // an IPv6 prefix has no broadcast address: its last is taken below
	}
	for a = a.Prev(); p.Contains(a) && a != p.Addr(); a = a.Prev() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("host %s: no free address in %s to masquerade node-port connections with", h.Name, p)
}

// SourceTowards is the address host from gives a connection it
// masquerades towards host to (kube-proxy's MASQUERADE: the address of
// the device the route leaves by): its bridge's address towards itself,
// else its end of the wire, or of the overlay with a vxlan link.
func SourceTowards(lab *topology.Spec, from, to string) (netip.Addr, error) {
	return SourceTowardsOf(lab, from, to, 4)
}

// SourceTowardsOf is SourceTowards for a connection of family fam (4 or
// 6): the addresses of that family.
func SourceTowardsOf(lab *topology.Spec, from, to string, fam int) (netip.Addr, error) {
	src, dst := lab.Host(from), lab.Host(to)
	if src == nil || dst == nil {
		return netip.Addr{}, fmt.Errorf("no host %q or %q", from, to)
	}
	if fam == 4 && !lab.HasFamily(4) {
		fam = 6 // an IPv6-only lab's
	}
	if from == to {
		a, _ := src.GatewayOf(fam)
		return a, nil
	}
	dstCIDR, _ := dst.CIDR(fam)
	for _, rt := range src.Routes {
		if rt.Dst != dstCIDR {
			continue
		}
		for _, l := range lab.Links {
			for _, end := range l.Ends {
				wire, over := end.WireAddr, end.OverAddr
				if fam == 6 {
					wire, over = end.WireAddr6, end.OverAddr6
				}
				switch {
				case end.Host != from:
				case end.WireDev == rt.Dev:
					return wire, nil
				case end.OverDev != "" && end.OverDev == rt.Dev:
					return over, nil
				}
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("host %s has no route to host %s's pod CIDR %s", from, to, dstCIDR)
}

// nodePortHop is how the datapath judges a connection from client through
// a node port on host node to backend ep: the two parties and the port
// of each side, and the source the backend sees.
type nodePortHop struct {
	egressTo    policy.Party // what the client's egress is judged on
	egressPort  int
	ingressFrom policy.Party // what the backend's ingress is judged on
	seen        netip.Addr   // the source the backend sees
	// What the parties that are addresses are, for a trace.
	egressWhat, ingressWhat string
}

func (m *Model) nodePortHop(client, ep *topology.Endpoint, f *Frontend, b Backend, node string) (nodePortHop, error) {
	fam := f.Family()
	seen, ok := client.Addr(fam)
	if !ok {
		seen = client.IP
	}
	h := nodePortHop{egressTo: partyOf(ep, f), egressPort: int(b.Port), ingressFrom: partyOf(client, f), seen: seen}
	if m.Lab.Services.Proxy == kind.ProxyEBPF {
		ch := m.Lab.Host(client.Host)
		switch {
		case ep.ID() == client.ID():
			h.seen = NodeAddressOf(ch, fam) // a hairpin, judged on the real tuple
		case f.ExternalLocal:
		default:
			masq, err := MasqAddressOf(m.Lab, ch, fam)
			if err != nil {
				return h, err
			}
			h.seen = masq
			if ep.Host != client.Host {
				h.ingressFrom = m.Policy.AddrParty(masq)
				h.ingressWhat = fmt.Sprintf("host %s's masquerade address", client.Host)
			}
		}
		return h, nil
	}
	if node != client.Host {
		h.egressTo = m.Policy.AddrParty(NodeAddressOf(m.Lab.Host(node), fam))
		h.egressPort = int(f.NodePort)
		h.egressWhat = fmt.Sprintf("host %s's address, untranslated", node)
	}
	if f.ExternalLocal && ep.ID() != client.ID() {
		return h, nil
	}
	// Masqueraded (a hairpin is, under Local too): the source is node's
	// address on the way to the backend's host.
	src, err := SourceTowardsOf(m.Lab, node, ep.Host, fam)
	if err != nil {
		return h, err
	}
	h.seen = src
	if ep.Host != node && !f.ExternalLocal {
		h.ingressFrom = m.Policy.AddrParty(src)
		h.ingressWhat = fmt.Sprintf("host %s's address towards host %s, masqueraded", node, ep.Host)
	}
	return h, nil
}

// ExpectNodePort decides a client's new connections to a frontend's node
// port on a host: every backend (externalTrafficPolicy Cluster, the
// connection masqueraded) or the host's own (Local, the client's address
// kept; none there: dropped), each judged by policy as the lab's datapath
// and proxy judge it (the comment above): not always on the client and
// the backend.
func (m *Model) ExpectNodePort(client *topology.Endpoint, f *Frontend, host string) (Expectation, error) {
	h := m.Lab.Host(host)
	if h == nil {
		var names []string
		for _, x := range m.Lab.Hosts {
			names = append(names, x.Name)
		}
		return Expectation{}, fmt.Errorf("no host %q (hosts: %s)", host, strings.Join(names, ", "))
	}
	if f.NodePort == 0 {
		return Expectation{}, fmt.Errorf("%s is not a NodePort Service", f.Key())
	}
	e := Expectation{From: client.ID(), Frontend: f.Key() + " node port", Expected: []string{},
		Target: netip.AddrPortFrom(NodeAddressOf(h, f.Family()), f.NodePort), Masqueraded: !f.ExternalLocal}
	for _, b := range f.Backends {
		c := Choice{Backend: b}
		switch {
		case f.ExternalLocal && b.Host != host:
			c.Why = fmt.Sprintf("on host %s, not %s: externalTrafficPolicy Local", b.Host, host)
		case b.Endpoint == "":
			c.Why = fmt.Sprintf("%s is no lab endpoint's address: a connection sent there gets no answer", b.IP)
			e.MayFail = true
		default:
			ep, err := m.Lab.Endpoint(b.Endpoint)
			if err != nil {
				return e, err
			}
			hop, err := m.nodePortHop(client, ep, f, b, host)
			if err != nil {
				return e, err
			}
			c.Hairpin = ep.ID() == client.ID()
			v := m.Policy.VerdictOf(partyOf(client, f), hop.egressTo, f.Protocol, hop.egressPort)
			in := m.Policy.VerdictOf(hop.ingressFrom, partyOf(ep, f), f.Protocol, int(b.Port))
			v.To, v.Port, v.Ingress = ep.ID(), int(b.Port), in.Ingress
			v.Allowed = v.Egress.Allowed && v.Ingress.Allowed
			c.Verdict = &v
			c.Reachable = v.Allowed
			c.Source = hop.seen
			judged := fmt.Sprintf("egress judged on %s %s/%d%s, ingress on %s%s", hop.egressTo.ID(), strings.ToUpper(f.Protocol), hop.egressPort, paren(hop.egressWhat),
				hop.ingressFrom.ID(), paren(hop.ingressWhat))
			if v.Allowed && f.Protocol == "tcp" {
				c.Proxied = HTTPVerdict(m.Policy, client, ep, f, int(b.Port), policy.Request{Method: "GET", Path: "/"}).Proxied
			}
			if why := m.l7Unreachable(client, ep, c.Hairpin, c.Proxied, host, !f.ExternalLocal); v.Allowed && why != "" {
				c.Reachable = false
				c.Why = why
				e.MayFail = true
			} else if v.Allowed {
				c.Why = fmt.Sprintf("policy allows it (%s); %s sees %s", judged, ep.ID(), hop.seen)
				if c.Proxied {
					c.Why += "; an L7 port: the datapath hands the connection to its L7 proxy"
				}
				e.Expected = append(e.Expected, ep.ID())
			} else {
				c.Why = fmt.Sprintf("policy denies it (%s): %s", judged, denial(v))
				e.MayFail = true
			}
		}
		e.Choices = append(e.Choices, c)
	}
	if len(e.Choices) == 0 || (f.ExternalLocal && !slices.ContainsFunc(f.Backends, func(b Backend) bool { return b.Host == host })) {
		e.Refused = true
		e.Note = fmt.Sprintf("no backend for node port %d on host %s", f.NodePort, host)
	}
	slices.Sort(e.Expected)
	return e, nil
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
