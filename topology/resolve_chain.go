package topology

import (
	"fmt"
	"net/netip"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/plural"
)

func (r *resolver) chain() error {
	c := r.raw.Chain
	if c == nil {
		return nil
	}
	switch {
	case len(r.raw.Hosts) > 0:
		return r.errf("hosts", "a chain lab builds its own namespaces: remove hosts: or chain:")
	case len(r.raw.Endpoints) > 0:
		return r.errf("endpoints", "a chain lab has exactly two endpoints, client and server: remove endpoints: or chain:")
	case len(r.raw.Links) > 0:
		return r.errf("links", "a chain lab has no host links: remove links: or chain:")
	case len(r.raw.Namespaces) > 0:
		return r.errf("namespaces", "a chain lab's endpoints live in namespace default: remove namespaces:")
	}
	if r.raw.Datapath != "" {
		return r.errf("datapath", "a chain lab has no policy datapath (it has no hosts): remove datapath:")
	}
	r.spec.Datapath = kind.None
	if c.Length < 0 {
		return r.errf("chain.length", "%d is below 0 (the number of forwarding namespaces between client and server; 0 joins them directly)", c.Length)
	}
	if c.Length > MaxChainLength {
		return r.errf("chain.length", "%d is above the limit of %d", c.Length, MaxChainLength)
	}
	link := c.Link
	if link == "" {
		link = ChainVeth
	}
	if link != ChainVeth && link != ChainBridge && link != ChainOVS {
		return r.errf("chain.link", "unknown chain link %q (supported: veth, bridge, ovs)", link)
	}
	switches, swLink := c.Switches, c.SwitchLink
	switch {
	case link != ChainOVS && (switches != 0 || swLink != ""):
		return r.errf("chain.switches", "applies to link: ovs (OvS bridges in series on each segment)")
	case switches < 0 || switches > MaxSwitches:
		return r.errf("chain.switches", "%d is out of range (1 to %d)", switches, MaxSwitches)
	case swLink != "" && swLink != SwitchPatch && swLink != SwitchVeth:
		return r.errf("chain.switchLink", "unknown link between switches %q (patch, veth)", swLink)
	}
	if link == ChainOVS {
		switches = max(switches, 1)
		if swLink == "" {
			swLink = SwitchPatch
		}
	}
	if r.raw.IPTables != nil {
		return r.errf(string(kind.IPTables), "options of the %s datapath, but a chain lab has no policy datapath: put rules in its hops with chain.functions: [{kind: firewall, rules: N}]", kind.IPTables)
	}
	cidr := c.CIDR
	if cidr == "" {
		cidr = DefaultChainCIDR
	}
	p, err := parsePrefix4(cidr)
	if err == nil {
		err = unicastRange(p)
	}
	if err != nil {
		return r.errf("chain.cidr", "%v", err)
	}
	if p.Bits() > 24 {
		return r.errf("chain.cidr", "%s is too small: the chain takes one /24 per segment", p)
	}
	if maxSeg := 1 << (24 - p.Bits()); c.Length >= maxSeg {
		return r.errf("chain.length", "%s need %d /24 segments but chain.cidr %s holds %d", plural.N(c.Length, "hop"), c.Length+1, p, maxSeg)
	}
	r.spec.Chain = buildChain(r.spec.Name, c.Length, link, p)
	r.spec.Chain.Switches, r.spec.Chain.SwitchLink = switches, swLink
	s := r.spec
	fns, path := c.functions, "functions" // a preset's
	if len(c.Functions) > 0 {
		fns, path = nil, "chain.functions"
		for i := range c.Functions {
			f, err := r.decodeFunction(&c.Functions[i], fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return err
			}
			fns = append(fns, f)
		}
	}
	if s.Chain.Functions, err = r.functions(path, fns, s.Chain); err != nil {
		return err
	}
	first, last := s.Chain.Segments[0], s.Chain.Segments[c.Length]
	s.Endpoints = []Endpoint{
		{Name: "client", Namespace: DefaultNamespace, IP: first.Left, Prefix: 24, Gateway: first.Right,
			Labels: map[string]string{"app": "client"}, Netns: EndpointNetns(s.Name, DefaultNamespace, "client")},
		{Name: "server", Namespace: DefaultNamespace, IP: last.Right, Prefix: 24, Gateway: last.Left,
			Labels: map[string]string{"app": "server"}, Ports: defaultServerPorts(), Netns: EndpointNetns(s.Name, DefaultNamespace, "server")},
	}
	return nil
}

// buildChain lays out a chain: node 0 is the client, nodes 1..n forward,
// node n+1 is the server; segment i is the (i)th /24 of the chain CIDR.
func buildChain(lab string, n int, kind string, cidr netip.Prefix) *Chain {
	c := &Chain{Length: n, Link: kind, CIDR: cidr}
	netnsOf := func(i int) string {
		switch i {
		case 0:
			return EndpointNetns(lab, DefaultNamespace, "client")
		case n + 1:
			return EndpointNetns(lab, DefaultNamespace, "server")
		}
		return HopNetns(lab, i)
	}
	for i := 0; i <= n; i++ {
		sub, _ := nthSubnet(cidr, 24, i)
		sg := Segment{
			Prefix: sub, Left: nthAddr(sub, 1), Right: nthAddr(sub, 2),
			LeftNetns: netnsOf(i), RightNetns: netnsOf(i + 1),
			LeftDev: "eth1", RightDev: "eth0",
		}
		if i == 0 {
			sg.LeftDev = "eth0" // the client's only interface
		}
		if kind == ChainBridge {
			sg.Switch = SwitchNetns(lab, i)
		}
		c.Segments = append(c.Segments, sg)
	}
	for i := 1; i <= n; i++ {
		node := ChainNode{Netns: netnsOf(i)}
		left, right := c.Segments[i-1], c.Segments[i]
		for j, sg := range c.Segments {
			switch {
			case j < i-1:
				node.Routes = append(node.Routes, Route{Dst: sg.Prefix, Via: left.Left, Dev: left.RightDev})
			case j > i:
				node.Routes = append(node.Routes, Route{Dst: sg.Prefix, Via: right.Right, Dev: right.LeftDev})
			}
		}
		c.Nodes = append(c.Nodes, node)
	}
	return c
}
