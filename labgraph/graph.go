package labgraph

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/topology"
)

// DefaultMaxEndpoints is how many endpoints a host box shows before it
// summarises the rest.
const DefaultMaxEndpoints = 20

// maxHops is how many hops of a chain are drawn before the middle ones
// are summarised in one box.
const maxHops = 10

// Options tune Build.
type Options struct {
	// MaxEndpoints is how many endpoints a host shows (0: the default,
	// DefaultMaxEndpoints; negative: all).
	MaxEndpoints int
	// L7Proxies are the hosts whose L7 proxy runs (read from the running
	// lab by the caller).
	L7Proxies []string
	// Phase is the lab's health as status says it ("" for a file not up).
	Phase string
}

// Graph is a lab's topology reduced to what is drawn.
type Graph struct {
	Name   string
	Header []string // lines under the title: datapath, services, mtu
	Hosts  []Host
	Links  []Link
	Chain  *Chain
	// Loose are endpoints on no host and in no chain.
	Loose []Endpoint
}

// Host is one host box.
type Host struct {
	Name      string
	Lines     []string // netns, bridge, pod CIDR, datapath, proxies
	L7        bool     // its L7 proxy runs
	Endpoints []Endpoint
	// Hidden are the endpoints summarised in the "… N more" box.
	Hidden []Endpoint
}

// Endpoint is one endpoint box.
type Endpoint struct {
	ID    string // namespace/name
	IP    string // address/prefix
	Dev   string // "eth0 ↔ HOSTVETH" (or the chain device)
	Netns string
	Ports string // "iperf3 5201/TCP, http 80/TCP"
}

// Link is a link between two hosts (indexes into Graph.Hosts).
type Link struct {
	A, B  int
	Kind  string // wire or vxlan
	Label string
	Ends  [2]string // each end's device and address
}

// Chain is a chain's row: client, hops, server, with a segment between
// each pair of neighbours.
type Chain struct {
	Link  string // veth, bridge or ovs
	Boxes []ChainBox
	// Segments[i] joins Boxes[i] and Boxes[i+1].
	Segments []Segment
}

// ChainBox is a client, a hop or a server, or the summary of hops.
type ChainBox struct {
	Title   string // "client x/a", "hop 1", "… 20 more hops"
	Lines   []string
	Summary bool
}

// Segment labels the line between two chain boxes.
type Segment struct {
	Prefix string // the /24
	Via    string // veth, "bridge (sw/N)", "ovs"
	Left   string // left neighbour's address
	Right  string
}

// Build reduces a lab's resolved topology to a Graph.
func Build(sp *topology.Spec, o Options) *Graph {
	limit := o.MaxEndpoints
	if limit == 0 {
		limit = DefaultMaxEndpoints
	}
	g := &Graph{Name: sp.Name}
	title := "datapath " + sp.Datapath.String()
	if d := sp.Datapath.Describe(&sp.Options); d != "" {
		title += " (" + d + ")"
	}
	if sp.MTU > 0 {
		title += fmt.Sprintf(" · mtu %d", sp.MTU)
	}
	if o.Phase != "" {
		title = o.Phase + " · " + title
	}
	g.Header = append(g.Header, title)
	proxy := sp.Services.Proxy
	if proxy != "" && proxy != kind.ProxyNone {
		g.Header = append(g.Header, fmt.Sprintf("service proxy %s · cluster IPs from %s", proxy, sp.Services.CIDR))
	}
	if lvl := sp.ObserveLevel(); lvl != topology.ObserveOff {
		g.Header = append(g.Header, "flows recorded: "+lvl)
	}
	l7 := map[string]bool{}
	for _, h := range o.L7Proxies {
		l7[h] = true
	}
	hostIndex := map[string]int{}
	for i, h := range sp.Hosts {
		hostIndex[h.Name] = i
		gh := Host{Name: h.Name, L7: l7[h.Name]}
		gh.Lines = append(gh.Lines, "netns "+h.Netns)
		bridge := fmt.Sprintf("bridge %s %s", h.Bridge, h.Gateway)
		if len(h.Leaves) > 0 {
			bridge += fmt.Sprintf(" + %s", plural.N(len(h.Leaves), "leaf bridge"))
		}
		gh.Lines = append(gh.Lines, bridge, "pods "+h.PodCIDR.String())
		dp := "datapath " + sp.Datapath.String()
		if proxy != "" && proxy != kind.ProxyNone {
			dp += " · proxy " + string(proxy)
		}
		gh.Lines = append(gh.Lines, dp)
		if gh.L7 {
			gh.Lines = append(gh.Lines, "L7 proxy running")
		}
		g.Hosts = append(g.Hosts, gh)
	}
	for _, l := range sp.Links {
		a, aok := hostIndex[l.Ends[0].Host]
		b, bok := hostIndex[l.Ends[1].Host]
		if !aok || !bok {
			continue
		}
		gl := Link{A: a, B: b, Kind: l.Kind}
		gl.Label = fmt.Sprintf("%s %s", l.Kind, l.Wire)
		if l.Kind == topology.LinkVXLAN {
			gl.Label = fmt.Sprintf("vxlan vni %d over %s, overlay %s", l.VNI, l.Wire, l.Over)
		}
		for i, end := range l.Ends {
			gl.Ends[i] = end.WireDev + " " + end.WireAddr.String()
			if end.OverDev != "" {
				gl.Ends[i] += " · " + end.OverDev + " " + end.OverAddr.String()
			}
		}
		g.Links = append(g.Links, gl)
	}
	chainNetns := map[string]bool{}
	if c := sp.Chain; c != nil {
		g.Chain = buildChain(sp, c, chainNetns)
	}
	for _, ep := range sp.Endpoints {
		ge := endpoint(ep)
		if i, ok := hostIndex[ep.Host]; ok {
			h := &g.Hosts[i]
			if limit < 0 || len(h.Endpoints) < limit {
				h.Endpoints = append(h.Endpoints, ge)
			} else {
				h.Hidden = append(h.Hidden, ge)
			}
			continue
		}
		if !chainNetns[ep.Netns] {
			g.Loose = append(g.Loose, ge)
		}
	}
	// A host summarises from limit-1 on so that the summary takes the
	// place of one endpoint: at most limit boxes in all.
	for i := range g.Hosts {
		h := &g.Hosts[i]
		if len(h.Hidden) > 0 && len(h.Endpoints) > 1 {
			last := len(h.Endpoints) - 1
			h.Hidden = append([]Endpoint{h.Endpoints[last]}, h.Hidden...)
			h.Endpoints = h.Endpoints[:last]
		}
	}
	return g
}

func endpoint(ep topology.Endpoint) Endpoint {
	ge := Endpoint{ID: ep.ID(), IP: fmt.Sprintf("%s/%d", ep.IP, ep.Prefix), Netns: ep.Netns}
	if ep.HostVeth != "" {
		ge.Dev = "eth0 ↔ " + ep.HostVeth
		if ep.Bridge != "" {
			ge.Dev += " (" + ep.Bridge + ")"
		}
	}
	var ports []string
	for _, p := range ep.Ports {
		s := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.Name != "" {
			s = p.Name + " " + s
		}
		ports = append(ports, s)
	}
	ge.Ports = strings.Join(ports, ", ")
	return ge
}

// buildChain lays a chain out as client, hops, server; the netns of the
// ends go into ends so that Build does not draw them a second time.
func buildChain(sp *topology.Spec, c *topology.Chain, ends map[string]bool) *Chain {
	gc := &Chain{Link: c.Link}
	byNetns := map[string]topology.Endpoint{}
	for _, ep := range sp.Endpoints {
		byNetns[ep.Netns] = ep
	}
	// node i (0 the client, Length+1 the server) is the left of
	// segment i and the right of segment i-1.
	n := c.Length + 2
	node := func(i int) ChainBox {
		var netns string
		switch {
		case i < len(c.Segments):
			netns = c.Segments[i].LeftNetns
		case i > 0 && i-1 < len(c.Segments):
			netns = c.Segments[i-1].RightNetns
		}
		var b ChainBox
		switch ep, ok := byNetns[netns]; {
		case ok:
			ends[netns] = true
			role := "client"
			if i == n-1 {
				role = "server"
			}
			b.Title = role + " " + ep.ID()
		default:
			b.Title = fmt.Sprintf("hop %d", i)
		}
		b.Lines = append(b.Lines, "netns "+netns)
		if i > 0 && i-1 < len(c.Segments) {
			s := c.Segments[i-1]
			b.Lines = append(b.Lines, fmt.Sprintf("%s %s", s.RightDev, s.Right))
		}
		if i < len(c.Segments) {
			s := c.Segments[i]
			b.Lines = append(b.Lines, fmt.Sprintf("%s %s", s.LeftDev, s.Left))
		}
		if i > 0 && i < n-1 {
			for _, f := range c.Functions {
				b.Lines = append(b.Lines, functionText(f, i))
			}
		}
		return b
	}
	seg := func(i int) Segment {
		s := c.Segments[i]
		via := c.Link
		switch {
		case c.Link == topology.ChainOVS && c.Switches > 1:
			via = fmt.Sprintf("ovs ×%d (%s)", c.Switches, c.SwitchLink)
		case s.Switch != "":
			via = fmt.Sprintf("bridge (sw/%d)", i) // as exec names it
		}
		return Segment{Prefix: s.Prefix.String(), Via: via, Left: s.Left.String(), Right: s.Right.String()}
	}
	hops := c.Length
	show := func(i int) bool { return hops <= maxHops || i <= maxHops/2 || i > hops-maxHops/2 }
	var shown []int // node index of each box, -1 for the summary
	for i := 0; i < n; i++ {
		switch {
		case show(i):
			gc.Boxes = append(gc.Boxes, node(i))
			shown = append(shown, i)
		case show(i - 1):
			hidden := hops - maxHops
			gc.Boxes = append(gc.Boxes, ChainBox{Title: fmt.Sprintf("… %d more hops", hidden),
				Lines: []string{fmt.Sprintf("hops %d to %d", i, i+hidden-1)}, Summary: true})
			shown = append(shown, -1)
		}
	}
	for k := 0; k+1 < len(shown); k++ {
		i := shown[k]
		if i < 0 {
			i = shown[k+1] - 1
		}
		if i >= 0 && i < len(c.Segments) {
			gc.Segments = append(gc.Segments, seg(i))
		} else {
			gc.Segments = append(gc.Segments, Segment{Via: c.Link})
		}
	}
	return gc
}

// functionText describes a chain function in hop i (1-based).
func functionText(f topology.Function, hop int) string {
	switch {
	case f.Firewall != nil:
		fw := f.Firewall
		rules := fw.Rules
		if hop-1 < len(fw.HopRules) {
			rules = fw.HopRules[hop-1]
		}
		s := "firewall " + plural.N(rules, "rule")
		if fw.Stateful {
			s += ", stateful"
		}
		return s + " (" + fw.Backend + ")"
	case f.Shaper != nil:
		sh := f.Shaper
		return fmt.Sprintf("shaper %s towards %s", topology.FormatRate(sh.Rate), sh.Direction)
	}
	return f.Kind
}

// hiddenText lists the summarised endpoints' IDs for a tooltip.
func hiddenText(eps []Endpoint) string {
	ids := make([]string, len(eps))
	for i, e := range eps {
		ids[i] = e.ID + " " + e.IP
	}
	sort.Strings(ids)
	return strings.Join(ids, "\n")
}
