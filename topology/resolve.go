package topology

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/labels"
)

// Defaults and limits of the topology file.
const (
	DefaultDatapath    = "iptables"
	DefaultMTU         = 1500
	DefaultTransitCIDR = "100.64.0.0/16"
	DefaultChainCIDR   = "10.100.0.0/16"
	DefaultNamespace   = "default"
	MaxLabName         = 24
	vxlanOverhead      = 50
	MetadataNameLabel  = "kubernetes.io/metadata.name"
)

// reservedNamespaces cannot be Kubernetes namespaces of a lab: their names
// address hosts and chain nodes in `cnlab exec`.
var reservedNamespaces = map[string]bool{"host": true, "hop": true, "sw": true}

// MaxChainLength bounds a chain (each hop is a namespace and two links).
const MaxChainLength = 1000

// NoDatapath is the datapath of labs that enforce no policy (chains).
const NoDatapath = "none"

// Datapaths lists the datapath names a lab may ask for.
var Datapaths = []string{"iptables", "nftables", "ebpf"}

type resolver struct {
	file string
	raw  *rawFile
	spec *Spec
}

func (r *resolver) errf(path, format string, args ...any) error {
	return &InputError{File: r.file, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func resolve(raw *rawFile, file string, ov Overrides) (*Spec, error) {
	if ov.Name != "" {
		if err := labels.CheckDNSLabel(ov.Name, MaxLabName); err != nil {
			return nil, &InputError{File: "--name", Msg: err.Error()}
		}
		raw.Name = ov.Name
	}
	if ov.Datapath != "" {
		if !contains(Datapaths, ov.Datapath) {
			return nil, &InputError{File: "--datapath", Msg: fmt.Sprintf("unknown datapath %q (supported: %s)", ov.Datapath, strings.Join(Datapaths, ", "))}
		}
		raw.Datapath = ov.Datapath
	}
	if ov.HostRouting != "" || ov.ConnectHook {
		dp := effectiveDatapath(raw, ov)
		if dp != "ebpf" {
			flag := "--host-routing"
			if ov.HostRouting == "" {
				flag = "--connect-hook"
			}
			return nil, &InputError{File: flag, Msg: fmt.Sprintf("an option of the ebpf datapath, but the lab's datapath is %s", dp)}
		}
		if ov.HostRouting != "" && ov.HostRouting != HostRoutingBPF && ov.HostRouting != HostRoutingLegacy {
			return nil, &InputError{File: "--host-routing", Msg: fmt.Sprintf("unknown mode %q (bpf, legacy)", ov.HostRouting)}
		}
		if raw.EBPF == nil {
			raw.EBPF = &rawEBPF{}
		}
		if ov.HostRouting != "" {
			raw.EBPF.HostRouting = ov.HostRouting
		}
		raw.EBPF.ConnectHook = raw.EBPF.ConnectHook || ov.ConnectHook
	}
	if ov.Filler != nil || ov.FillerMode != "" {
		if dp := effectiveDatapath(raw, ov); dp != "iptables" {
			return nil, &InputError{File: "--filler", Msg: fmt.Sprintf("filler rules are for the iptables datapath, but the lab's datapath is %s", dp)}
		}
		if raw.IPTables == nil {
			raw.IPTables = &rawIPTables{}
		}
		if ov.Filler != nil {
			raw.IPTables.Filler = ov.Filler
		}
		if ov.FillerMode != "" {
			raw.IPTables.FillerMode = ov.FillerMode
		}
	}
	if ov.MTU != 0 {
		raw.MTU = &ov.MTU
	}
	r := &resolver{file: file, raw: raw, spec: &Spec{Source: file}}
	steps := []func() error{r.header, r.chain, r.hosts, r.namespaces, r.links, r.routes, r.endpoints, r.ebpfLimits}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return r.spec, nil
}

// effectiveDatapath is the lab's datapath once --datapath is applied.
func effectiveDatapath(raw *rawFile, ov Overrides) string {
	switch {
	case ov.Datapath != "":
		return ov.Datapath
	case raw.Datapath != "":
		return raw.Datapath
	}
	return DefaultDatapath
}

func (r *resolver) header() error {
	raw, s := r.raw, r.spec
	if raw.Name == "" {
		return r.errf("name", "is required (the lab's name, e.g. name: demo)")
	}
	if err := labels.CheckDNSLabel(raw.Name, MaxLabName); err != nil {
		return r.errf("name", "%v", err)
	}
	s.Name = raw.Name
	s.Datapath = raw.Datapath
	if s.Datapath == "" {
		s.Datapath = DefaultDatapath
	}
	if !contains(Datapaths, s.Datapath) {
		return r.errf("datapath", "unknown datapath %q (supported: %s)", s.Datapath, strings.Join(Datapaths, ", "))
	}
	s.MTU = DefaultMTU
	if raw.MTU != nil {
		s.MTU = *raw.MTU
	}
	if s.MTU < 68 || s.MTU > 65535-vxlanOverhead {
		return r.errf("mtu", "%d is out of range (68 to %d)", s.MTU, 65535-vxlanOverhead)
	}
	tc := raw.TransitCIDR
	if tc == "" {
		tc = DefaultTransitCIDR
	}
	p, err := parsePrefix(tc)
	if err == nil {
		err = unicastRange(p)
	}
	if err != nil {
		return r.errf("transitCIDR", "%v", err)
	}
	s.TransitCIDR = p
	s.Namespaces = map[string]Namespace{}
	return r.iptables()
}

// MaxFiller bounds the iptables filler rules.
const MaxFiller = 100000

func (r *resolver) iptables() error {
	o := IPTablesOptions{FillerMode: FillerNoMatch, Backend: "legacy"}
	if ip := r.raw.IPTables; ip != nil {
		if r.spec.Datapath != "iptables" {
			return r.errf("iptables", "options for the iptables datapath, but the lab's datapath is %s", r.spec.Datapath)
		}
		if ip.Filler != nil {
			if *ip.Filler < 0 || *ip.Filler > MaxFiller {
				return r.errf("iptables.filler", "%d is out of range (0 to %d)", *ip.Filler, MaxFiller)
			}
			o.Filler = *ip.Filler
		}
		switch ip.FillerMode {
		case "":
		case FillerNoMatch, FillerTopOfChain:
			o.FillerMode = ip.FillerMode
		default:
			return r.errf("iptables.fillerMode", "unknown mode %q (no-match, top-of-chain)", ip.FillerMode)
		}
		switch ip.Backend {
		case "":
		case "legacy", "nft":
			o.Backend = ip.Backend
		default:
			return r.errf("iptables.backend", "unknown backend %q (legacy, nft)", ip.Backend)
		}
	}
	r.spec.IPTables = o
	return r.ebpf()
}

// ebpfLimits checks what the eBPF datapath's maps must hold, so that a lab
// that could not be set up is refused before anything is built.
func (r *resolver) ebpfLimits() error {
	if r.spec.Datapath != "ebpf" {
		return nil
	}
	per := map[string]int{}
	for _, ep := range r.spec.Endpoints {
		per[ep.Host]++
	}
	for _, h := range r.spec.Hosts {
		if n := per[h.Name]; n > r.spec.EBPF.MaxEndpoints {
			return r.errf("ebpf.maxEndpoints", "host %s has %d endpoints, more than %d (raise ebpf.maxEndpoints, at most %d)", h.Name, n, r.spec.EBPF.MaxEndpoints, MaxMaxEndpoints)
		}
	}
	return nil
}

// Bounds and defaults of the eBPF datapath's map sizes.
const (
	DefaultPolicyMapSize = 65536
	MaxPolicyMapSize     = 1 << 22
	DefaultCTMapSize     = 65536
	MaxCTMapSize         = 1 << 24
	DefaultMaxEndpoints  = 1024
	MaxMaxEndpoints      = 16384
)

func (r *resolver) ebpf() error {
	o := EBPFOptions{HostRouting: HostRoutingBPF, PolicyMapSize: DefaultPolicyMapSize,
		CTMapSize: DefaultCTMapSize, MaxEndpoints: DefaultMaxEndpoints}
	if e := r.raw.EBPF; e != nil {
		if r.spec.Datapath != "ebpf" {
			return r.errf("ebpf", "options for the ebpf datapath, but the lab's datapath is %s (add datapath: ebpf, or use --datapath ebpf)", r.spec.Datapath)
		}
		switch e.HostRouting {
		case "":
		case HostRoutingBPF, HostRoutingLegacy:
			o.HostRouting = e.HostRouting
		default:
			return r.errf("ebpf.hostRouting", "unknown mode %q (bpf, legacy)", e.HostRouting)
		}
		o.ConnectHook = e.ConnectHook
		for _, f := range []struct {
			name    string
			v       *int
			dst     *int
			lo, max int
		}{
			{"policyMapSize", e.PolicyMapSize, &o.PolicyMapSize, 1, MaxPolicyMapSize},
			{"ctMapSize", e.CTMapSize, &o.CTMapSize, 1024, MaxCTMapSize},
			{"maxEndpoints", e.MaxEndpoints, &o.MaxEndpoints, 1, MaxMaxEndpoints},
		} {
			if f.v == nil {
				continue
			}
			if *f.v < f.lo || *f.v > f.max {
				return r.errf("ebpf."+f.name, "%d is out of range (%d to %d)", *f.v, f.lo, f.max)
			}
			*f.dst = *f.v
		}
	}
	r.spec.EBPF = o
	return nil
}

func (r *resolver) hosts() error {
	if r.spec.Chain != nil {
		return nil
	}
	if len(r.raw.Hosts) == 0 {
		return r.errf("hosts", "at least one host is required (or a chain:)")
	}
	seen := map[string]int{}
	for i, h := range r.raw.Hosts {
		path := fmt.Sprintf("hosts[%d]", i)
		if err := labels.CheckDNSLabel(h.Name, 63); err != nil {
			return r.errf(path+".name", "%v", err)
		}
		if j, dup := seen[h.Name]; dup {
			return r.errf(path+".name", "duplicate host name %q (also hosts[%d])", h.Name, j)
		}
		seen[h.Name] = i
		if h.PodCIDR == "" {
			return r.errf(path+".podCIDR", "is required (e.g. podCIDR: 10.0.192.0/24)")
		}
		p, err := parsePrefix(h.PodCIDR)
		if err != nil {
			return r.errf(path+".podCIDR", "%v", err)
		}
		if p.Bits() > 30 {
			return r.errf(path+".podCIDR", "%s is too small: a host needs at least a /30", p)
		}
		if err := unicastRange(p); err != nil {
			return r.errf(path+".podCIDR", "%v", err)
		}
		for j, o := range r.spec.Hosts {
			if p.Overlaps(o.PodCIDR) {
				return r.errf(path+".podCIDR", "%s overlaps hosts[%d].podCIDR %s", p, j, o.PodCIDR)
			}
		}
		if p.Overlaps(r.spec.TransitCIDR) {
			return r.errf(path+".podCIDR", "%s overlaps transitCIDR %s (set transitCIDR: to another range)", p, r.spec.TransitCIDR)
		}
		r.spec.Hosts = append(r.spec.Hosts, Host{
			Name:    h.Name,
			PodCIDR: p,
			Gateway: p.Addr().Next(),
			Netns:   HostNetns(r.spec.Name, h.Name),
			Bridge:  HostBridge,
		})
	}
	return nil
}

func (r *resolver) namespaces() error {
	names := make([]string, 0, len(r.raw.Namespaces))
	for n := range r.raw.Namespaces {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := "namespaces." + n
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
	}
	if _, ok := r.spec.Namespaces[DefaultNamespace]; !ok {
		r.spec.Namespaces[DefaultNamespace] = Namespace{Labels: map[string]string{MetadataNameLabel: DefaultNamespace}}
	}
	return nil
}

func (r *resolver) links() error {
	s := r.spec
	pairs := map[[2]string]int{}
	for i, l := range r.raw.Links {
		path := fmt.Sprintf("links[%d]", i)
		if len(l.Between) != 2 {
			return r.errf(path+".between", "must name exactly two hosts, e.g. between: [flip, flap]")
		}
		for k, h := range l.Between {
			if s.Host(h) == nil {
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
		wire, ok1 := nthSubnet(s.TransitCIDR, 30, 2*i)
		over, ok2 := nthSubnet(s.TransitCIDR, 30, 2*i+1)
		if !ok1 || !ok2 {
			return r.errf(path, "transitCIDR %s has no room for link %d (each link takes 8 addresses)", s.TransitCIDR, i)
		}
		link := Link{Index: i, Kind: kind, Wire: wire, MTU: s.MTU}
		dev := fmt.Sprintf("wire%d", i)
		for k, h := range []string{a, b} {
			link.Ends[k] = LinkEnd{Host: h, WireDev: dev, WireAddr: nthAddr(wire, k+1)}
		}
		if kind == LinkVXLAN {
			link.Over = over
			link.VNI = 100 + i
			link.MTU = s.MTU + vxlanOverhead
			for k := range link.Ends {
				link.Ends[k].OverDev = fmt.Sprintf("vxlan%d", i)
				link.Ends[k].OverAddr = nthAddr(over, k+1)
			}
		}
		s.Links = append(s.Links, link)
	}
	return nil
}

func (r *resolver) hostNames() []string {
	var out []string
	for _, h := range r.spec.Hosts {
		out = append(out, h.Name)
	}
	return out
}

func (r *resolver) endpoints() error {
	if r.spec.Chain != nil {
		return nil
	}
	s := r.spec
	seen := map[string]int{}
	taken := map[netip.Addr]string{}
	vethTaken := map[string]bool{}
	for i, raw := range r.raw.Endpoints {
		path := fmt.Sprintf("endpoints[%d]", i)
		if err := labels.CheckDNSLabel(raw.Name, 63); err != nil {
			return r.errf(path+".name", "%v", err)
		}
		ns := raw.Namespace
		if ns == "" {
			ns = DefaultNamespace
		}
		if _, ok := s.Namespaces[ns]; !ok {
			return r.errf(path+".namespace", "unknown namespace %q (declare it under namespaces:)", ns)
		}
		id := ns + "/" + raw.Name
		if j, dup := seen[id]; dup {
			return r.errf(path+".name", "duplicate endpoint %s (also endpoints[%d])", id, j)
		}
		seen[id] = i
		hostName := raw.Host
		if hostName == "" {
			if len(s.Hosts) != 1 {
				return r.errf(path+".host", "is required when the lab has several hosts (%s)", strings.Join(r.hostNames(), ", "))
			}
			hostName = s.Hosts[0].Name
		}
		host := s.Host(hostName)
		if host == nil {
			return r.errf(path+".host", "unknown host %q (hosts: %s)", hostName, strings.Join(r.hostNames(), ", "))
		}
		ls := map[string]string{}
		for k, v := range raw.Labels {
			ls[k] = v
		}
		if err := labels.CheckSet(ls); err != nil {
			return r.errf(path+".labels", "%v", err)
		}
		ports, err := r.ports(path, raw.Ports)
		if err != nil {
			return err
		}
		ep := Endpoint{
			Name: raw.Name, Namespace: ns, Host: hostName,
			Prefix: host.PodCIDR.Bits(), Gateway: host.Gateway,
			Labels: ls, Ports: ports,
			Netns:    EndpointNetns(s.Name, ns, raw.Name),
			HostVeth: hostVethName(id, vethTaken),
		}
		if raw.IP != "" {
			ip, err := netip.ParseAddr(raw.IP)
			if err != nil || !ip.Is4() {
				return r.errf(path+".ip", "%q is not an IPv4 address", raw.IP)
			}
			if !usable(host.PodCIDR, ip) {
				return r.errf(path+".ip", "%s is not a usable address of host %s's podCIDR %s (the first address is the bridge, the last is broadcast)", ip, hostName, host.PodCIDR)
			}
			if other, dup := taken[ip]; dup {
				return r.errf(path+".ip", "%s is already taken by %s", ip, other)
			}
			taken[ip] = id
			ep.IP = ip
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	// Allocate the remaining addresses in file order, after every fixed one
	// is known.
	next := map[string]netip.Addr{}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if ep.IP.IsValid() {
			continue
		}
		host := s.Host(ep.Host)
		a, ok := next[host.Name]
		if !ok {
			a = host.Gateway.Next()
		}
		for usable(host.PodCIDR, a) && taken[a] != "" {
			a = a.Next()
		}
		if !usable(host.PodCIDR, a) {
			return r.errf(fmt.Sprintf("endpoints[%d]", i), "host %s's podCIDR %s has no free address left (%d usable, %s on it)",
				host.Name, host.PodCIDR, usableCount(host.PodCIDR), plural.N(r.countOn(host.Name), "endpoint"))
		}
		ep.IP = a
		taken[a] = ep.ID()
		next[host.Name] = a.Next()
	}
	return nil
}

func (r *resolver) countOn(host string) int {
	n := 0
	for _, e := range r.spec.Endpoints {
		if e.Host == host {
			n++
		}
	}
	return n
}

func (r *resolver) ports(path string, raw []rawPort) ([]Port, error) {
	var out []Port
	names := map[string]int{}
	nums := map[string]int{}
	for i, p := range raw {
		pp := fmt.Sprintf("%s.ports[%d]", path, i)
		if p.Name != "" {
			if err := labels.CheckPortName(p.Name); err != nil {
				return nil, r.errf(pp+".name", "%v", err)
			}
			if j, dup := names[p.Name]; dup {
				return nil, r.errf(pp+".name", "duplicate port name %q (also ports[%d])", p.Name, j)
			}
			names[p.Name] = i
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, r.errf(pp+".port", "%d is not a port number (1-65535)", p.Port)
		}
		proto := p.Protocol
		if proto == "" {
			proto = "TCP"
		}
		if proto != "TCP" && proto != "UDP" && proto != "SCTP" {
			return nil, r.errf(pp+".protocol", "unknown protocol %q (TCP, UDP or SCTP)", p.Protocol)
		}
		key := fmt.Sprintf("%d/%s", p.Port, proto)
		if j, dup := nums[key]; dup {
			return nil, r.errf(pp+".port", "%s is declared twice (also ports[%d])", key, j)
		}
		nums[key] = i
		out = append(out, Port{Name: p.Name, Port: p.Port, Protocol: proto})
	}
	return out, nil
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
			rt := Route{Dst: dst.PodCIDR, Via: peer.WireAddr, Dev: me.WireDev}
			if h.link.Kind == LinkVXLAN {
				rt = Route{Dst: dst.PodCIDR, Via: peer.OverAddr, Dev: me.OverDev}
			}
			src.Routes = append(src.Routes, rt)
		}
	}
	return nil
}

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
	r.spec.Datapath = NoDatapath
	if c.Length < 1 {
		return r.errf("chain.length", "%d is below 1 (the number of forwarding namespaces between client and server)", c.Length)
	}
	if c.Length > MaxChainLength {
		return r.errf("chain.length", "%d is above the limit of %d", c.Length, MaxChainLength)
	}
	kind := c.Link
	if kind == "" {
		kind = ChainVeth
	}
	if kind != ChainVeth && kind != ChainBridge {
		return r.errf("chain.link", "unknown chain link %q (supported: veth, bridge)", kind)
	}
	if r.raw.IPTables != nil {
		return r.errf("iptables", "options of the iptables datapath, but a chain lab has no policy datapath: put rules in its hops with chain.functions: [{kind: firewall, rules: N}]")
	}
	cidr := c.CIDR
	if cidr == "" {
		cidr = DefaultChainCIDR
	}
	p, err := parsePrefix(cidr)
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
	r.spec.Chain = buildChain(r.spec.Name, c.Length, kind, p)
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

// unicastRange rejects ranges that cannot hold endpoints: loopback,
// multicast, link-local, "this network" and the reserved class E.
func unicastRange(p netip.Prefix) error {
	for _, bad := range []struct{ p, what string }{
		{"0.0.0.0/8", "\"this network\" (0.0.0.0/8)"}, {"127.0.0.0/8", "loopback (127.0.0.0/8)"},
		{"169.254.0.0/16", "link-local (169.254.0.0/16)"}, {"224.0.0.0/4", "multicast (224.0.0.0/4)"},
		{"240.0.0.0/4", "reserved (240.0.0.0/4)"},
	} {
		if p.Overlaps(netip.MustParsePrefix(bad.p)) {
			return fmt.Errorf("%s overlaps the %s range: use a private unicast range such as 10.0.0.0/8", p, bad.what)
		}
	}
	return nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR (e.g. 10.0.192.0/24)", s)
	}
	if !p.Addr().Is4() {
		return p, fmt.Errorf("%s: only IPv4 is supported", s)
	}
	if p.Masked() != p {
		return p, fmt.Errorf("%s has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// nthSubnet returns the n-th subnet of length bits inside p.
func nthSubnet(p netip.Prefix, bits, n int) (netip.Prefix, bool) {
	if bits < p.Bits() || n < 0 || (bits-p.Bits() < 31 && n >= 1<<(bits-p.Bits())) {
		return netip.Prefix{}, false
	}
	base := addrToU32(p.Addr()) + uint32(n)<<(32-bits)
	return netip.PrefixFrom(u32ToAddr(base), bits), true
}

func nthAddr(p netip.Prefix, n int) netip.Addr {
	return u32ToAddr(addrToU32(p.Addr()) + uint32(n))
}

// usable reports whether a is a host address of p other than the gateway
// (the first address) and the broadcast address.
func usable(p netip.Prefix, a netip.Addr) bool {
	if !p.Contains(a) {
		return false
	}
	off := addrToU32(a) - addrToU32(p.Addr())
	size := uint32(1) << (32 - p.Bits())
	return off >= 2 && off < size-1
}

func usableCount(p netip.Prefix) int { return (1 << (32 - p.Bits())) - 3 }

func addrToU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u32ToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// hostVethName names an endpoint's host-side veth "lxc" + 8 hex digits of a
// hash of its ID, as Cilium does; a clash within the lab is resolved by
// rehashing deterministically.
func hostVethName(id string, taken map[string]bool) string {
	for salt := 0; ; salt++ {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s#%d", id, salt)
		name := fmt.Sprintf("lxc%08x", h.Sum32())
		if !taken[name] {
			taken[name] = true
			return name
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
