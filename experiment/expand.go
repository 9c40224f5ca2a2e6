package experiment

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/topology"
)

// Policy modes: how the matrix's number of policies is generated
// (docs/methodology.md).
const (
	ModeNoMatch    = kind.FillerNoMatch    // iptables: filler rules every packet walks; others: policies on other ports
	ModeTopOfChain = kind.FillerTopOfChain // iptables only: filler after the established-accept rule
	ModeL4Rules    = "l4-rules"            // one policy with N extra L4 port rules
	ModeSelectors  = "selectors"           // N policies, each with its own label selector for the client
	ModeTerms      = "terms"               // one CiliumNetworkPolicy whose fromEndpoints holds N more matchLabels terms (seed 003)
)

var policyModes = []string{ModeNoMatch, ModeTopOfChain, ModeL4Rules, ModeSelectors, ModeTerms}

// Params are the values of one point of the matrix. Zero values are the
// defaults (the topology's own datapath, MTU and offloads).
type Params struct {
	Topology         string    `json:"topology"`
	Link             string    `json:"link,omitempty"`
	ChainLength      int       `json:"chainLength,omitempty"` // chain: forwarding hops (0: client and server on one veth pair)
	Datapath         kind.Kind `json:"datapath,omitempty"`
	HostRouting      string    `json:"hostRouting,omitempty"`
	Peers            string    `json:"peers,omitempty"` // iptables: addresses ("": the default) or ipsets
	Policies         int       `json:"policies"`
	PolicyMode       string    `json:"policyMode,omitempty"`
	Flows            int       `json:"flows,omitempty"`
	Size             int       `json:"size,omitempty"`
	MTU              int       `json:"mtu,omitempty"`
	Offloads         string    `json:"offloads,omitempty"`
	Zerocopy         bool      `json:"zerocopy,omitempty"`
	FirewallRules    int       `json:"firewallRules,omitempty"`
	FirewallStateful bool      `json:"firewallStateful,omitempty"`
	FirewallSpread   bool      `json:"firewallSpread,omitempty"`
	ShaperRate       string    `json:"shaperRate,omitempty"`
	ShaperDirection  string    `json:"shaperDirection,omitempty"` // "" is the topology's default (server)
	Switches         int       `json:"switches,omitempty"`        // link ovs: bridges in series per segment (0: the default, 1)
	SwitchLink       string    `json:"switchLink,omitempty"`      // between them: patch or veth
	// Services is the number of Services installed at the point (0:
	// none, the workloads connect to the server's own address), served by
	// ServiceProxy; ServiceBackends is the backends of each Service but
	// the measured one, ServicePosition where the measured one is.
	Services        int        `json:"services,omitempty"`
	ServiceProxy    kind.Proxy `json:"serviceProxy,omitempty"`
	ServiceBackends int        `json:"serviceBackends,omitempty"`
	ServicePosition string     `json:"servicePosition,omitempty"`
	// SocketLB: the eBPF datapath translates connections to Services at
	// the socket too (ebpf.socketLB).
	SocketLB bool `json:"socketLB,omitempty"`
	// L7Mode is the policy of an L7 point (l7.go); with rules, L7Rules
	// HTTP rules with the request's matching rule at L7Match.
	L7Mode  string `json:"l7Mode,omitempty"`
	L7Rules int    `json:"l7Rules,omitempty"`
	L7Match string `json:"l7Match,omitempty"`
	// Placement (same-node, cross-node) and Network (pod, host): the
	// kubernetes backend's axes ("": as the topology places them, pod).
	Placement string `json:"placement,omitempty"`
	Network   string `json:"network,omitempty"`
}

// Text is the point's parameters in a few words, for tables
// ("policies=100 mode=top-of-chain").
func (p Params) Text() string {
	var parts []string
	add := func(cond bool, format string, args ...any) {
		if cond {
			parts = append(parts, fmt.Sprintf(format, args...))
		}
	}
	add(p.L7Mode == "" || p.Policies > 0, "policies=%d", p.Policies)
	add(p.PolicyMode != ModeNoMatch && p.PolicyMode != "", "mode=%s", p.PolicyMode)
	add(p.Link != "", "link=%s", p.Link)
	add(isChain(p.Topology), "length=%d", p.ChainLength)
	add(p.HostRouting != "", "routing=%s", p.HostRouting)
	add(p.SocketLB, "socket-lb")
	add(p.Peers != "", "peers=%s", p.Peers)
	add(p.MTU > 0, "mtu=%d", p.MTU)
	add(p.Offloads != "", "offloads=%s", p.Offloads)
	add(p.FirewallRules > 0, "firewall=%d", p.FirewallRules)
	add(p.FirewallStateful, "stateful")
	add(p.FirewallSpread, "spread")
	add(p.ShaperRate != "", "shaper=%s", p.ShaperRate)
	add(p.ShaperDirection != "", "shape=%s", p.ShaperDirection)
	add(p.Switches > 0, "switches=%d", p.Switches)
	add(p.SwitchLink != "", "switchLink=%s", p.SwitchLink)
	add(p.Services > 0, "services=%d", p.Services)
	add(p.ServiceProxy != "", "proxy=%s", p.ServiceProxy)
	add(p.Services > 0 && p.ServiceBackends > 1, "backends=%d", p.ServiceBackends)
	add(p.Services > 0 && p.ServicePosition != "", "position=%s", p.ServicePosition)
	add(p.L7Mode != "", "l7=%s", p.L7Mode)
	add(p.L7Mode == L7Rules, "rules=%d match=%s", p.L7Rules, p.L7Match)
	add(p.Placement != "", "%s", p.Placement)
	add(p.Network != "", "network=%s", p.Network)
	return strings.Join(parts, " ")
}

// Point is one measurement of the experiment: parameters and a workload.
type Point struct {
	ID       string   `json:"id"`
	Sweep    string   `json:"sweep,omitempty"`
	Params   Params   `json:"params"`
	Workload Workload `json:"workload"`
	Series   string   `json:"series"` // the line a figure draws this point on
	Profile  bool     `json:"profile,omitempty"`
	// Repetitions is the number of measured samples the point gets (with
	// a precision target, the least it gets).
	Repetitions int        `json:"repetitions"`
	Precision   *Precision `json:"precision,omitempty"`
}

// override replaces every key o sets.
func (m *Matrix) override(o Matrix) { m.merge(o, false) }

// overrideSet replaces only the keys both m and o set.
func (m *Matrix) overrideSet(o Matrix) { m.merge(o, true) }

func (m *Matrix) merge(o Matrix, onlySet bool) {
	pick := func(have, give int) bool { return give > 0 && (!onlySet || have > 0) }
	if pick(len(m.Topology), len(o.Topology)) {
		m.Topology = o.Topology
	}
	if pick(len(m.Link), len(o.Link)) {
		m.Link = o.Link
	}
	if pick(len(m.ChainLength), len(o.ChainLength)) {
		m.ChainLength = o.ChainLength
	}
	if pick(len(m.Datapath), len(o.Datapath)) {
		m.Datapath = o.Datapath
	}
	if pick(len(m.HostRouting), len(o.HostRouting)) {
		m.HostRouting = o.HostRouting
	}
	if pick(len(m.SocketLB), len(o.SocketLB)) {
		m.SocketLB = o.SocketLB
	}
	if pick(len(m.Peers), len(o.Peers)) {
		m.Peers = o.Peers
	}
	if pick(len(m.Policies), len(o.Policies)) {
		m.Policies = o.Policies
	}
	if pick(len(m.PolicyMode), len(o.PolicyMode)) {
		m.PolicyMode = o.PolicyMode
	}
	if pick(len(m.Flows), len(o.Flows)) {
		m.Flows = o.Flows
	}
	if pick(len(m.Size), len(o.Size)) {
		m.Size = o.Size
	}
	if pick(len(m.MTU), len(o.MTU)) {
		m.MTU = o.MTU
	}
	if pick(len(m.Offloads), len(o.Offloads)) {
		m.Offloads = o.Offloads
	}
	if pick(len(m.Zerocopy), len(o.Zerocopy)) {
		m.Zerocopy = o.Zerocopy
	}
	if pick(len(m.FirewallRules), len(o.FirewallRules)) {
		m.FirewallRules = o.FirewallRules
	}
	if pick(len(m.FirewallStateful), len(o.FirewallStateful)) {
		m.FirewallStateful = o.FirewallStateful
	}
	if pick(len(m.FirewallSpread), len(o.FirewallSpread)) {
		m.FirewallSpread = o.FirewallSpread
	}
	if pick(len(m.ShaperRate), len(o.ShaperRate)) {
		m.ShaperRate = o.ShaperRate
	}
	if pick(len(m.ShaperDirection), len(o.ShaperDirection)) {
		m.ShaperDirection = o.ShaperDirection
	}
	if pick(len(m.Switches), len(o.Switches)) {
		m.Switches = o.Switches
	}
	if pick(len(m.SwitchLink), len(o.SwitchLink)) {
		m.SwitchLink = o.SwitchLink
	}
	if pick(len(m.Services), len(o.Services)) {
		m.Services = o.Services
	}
	if pick(len(m.ServiceProxy), len(o.ServiceProxy)) {
		m.ServiceProxy = o.ServiceProxy
	}
	if pick(len(m.ServiceBackends), len(o.ServiceBackends)) {
		m.ServiceBackends = o.ServiceBackends
	}
	if pick(len(m.ServicePosition), len(o.ServicePosition)) {
		m.ServicePosition = o.ServicePosition
	}
	if pick(len(m.L7Mode), len(o.L7Mode)) {
		m.L7Mode = o.L7Mode
	}
	if pick(len(m.L7Rules), len(o.L7Rules)) {
		m.L7Rules = o.L7Rules
	}
	if pick(len(m.L7Match), len(o.L7Match)) {
		m.L7Match = o.L7Match
	}
	if pick(len(m.Placement), len(o.Placement)) {
		m.Placement = o.Placement
	}
	if pick(len(m.Network), len(o.Network)) {
		m.Network = o.Network
	}
}

// dim is one axis of the matrix: how many values it has and how the i-th
// is set on a point.
type dim struct {
	n   int
	set func(p *Params, i int)
}

func (m Matrix) dims() []dim {
	var ds []dim
	str := func(vs []string, f func(p *Params, v string)) {
		if len(vs) > 0 {
			ds = append(ds, dim{len(vs), func(p *Params, i int) { f(p, vs[i]) }})
		}
	}
	num := func(vs []int, f func(p *Params, v int)) {
		if len(vs) > 0 {
			ds = append(ds, dim{len(vs), func(p *Params, i int) { f(p, vs[i]) }})
		}
	}
	boo := func(vs []bool, f func(p *Params, v bool)) {
		if len(vs) > 0 {
			ds = append(ds, dim{len(vs), func(p *Params, i int) { f(p, vs[i]) }})
		}
	}
	str(m.Topology, func(p *Params, v string) { p.Topology = v })
	str(m.Link, func(p *Params, v string) { p.Link = v })
	num(m.ChainLength, func(p *Params, v int) { p.ChainLength = v })
	str(m.Datapath, func(p *Params, v string) { p.Datapath = kind.Kind(v) })
	str(m.HostRouting, func(p *Params, v string) { p.HostRouting = v })
	boo(m.SocketLB, func(p *Params, v bool) { p.SocketLB = v })
	str(m.Peers, func(p *Params, v string) { p.Peers = v })
	num(m.Policies, func(p *Params, v int) { p.Policies = v })
	str(m.PolicyMode, func(p *Params, v string) { p.PolicyMode = v })
	num(m.Flows, func(p *Params, v int) { p.Flows = v })
	num(m.Size, func(p *Params, v int) { p.Size = v })
	num(m.MTU, func(p *Params, v int) { p.MTU = v })
	str(m.Offloads, func(p *Params, v string) { p.Offloads = v })
	boo(m.Zerocopy, func(p *Params, v bool) { p.Zerocopy = v })
	num(m.FirewallRules, func(p *Params, v int) { p.FirewallRules = v })
	boo(m.FirewallStateful, func(p *Params, v bool) { p.FirewallStateful = v })
	boo(m.FirewallSpread, func(p *Params, v bool) { p.FirewallSpread = v })
	str(m.ShaperRate, func(p *Params, v string) { p.ShaperRate = v })
	str(m.ShaperDirection, func(p *Params, v string) { p.ShaperDirection = v })
	num(m.Switches, func(p *Params, v int) { p.Switches = v })
	str(m.SwitchLink, func(p *Params, v string) { p.SwitchLink = v })
	num(m.Services, func(p *Params, v int) { p.Services = v })
	str(m.ServiceProxy, func(p *Params, v string) { p.ServiceProxy = kind.Proxy(v) })
	num(m.ServiceBackends, func(p *Params, v int) { p.ServiceBackends = v })
	str(m.ServicePosition, func(p *Params, v string) { p.ServicePosition = v })
	str(m.L7Mode, func(p *Params, v string) { p.L7Mode = v })
	num(m.L7Rules, func(p *Params, v int) { p.L7Rules = v })
	str(m.L7Match, func(p *Params, v string) { p.L7Match = v })
	str(m.Placement, func(p *Params, v string) { p.Placement = v })
	str(m.Network, func(p *Params, v string) { p.Network = v })
	return ds
}

// size is the number of parameter combinations.
func (m Matrix) size() int {
	n := 1
	for _, d := range m.dims() {
		n *= d.n
		if n > MaxPoints {
			return n
		}
	}
	return n
}

// check validates the values of each key on its own.
func (m Matrix) check(s *Spec, path string) error {
	if n := m.size(); n > MaxPoints {
		return s.errf(path, "expands to more than %d points", MaxPoints)
	}
	for i, t := range m.Topology {
		if t == "" {
			return s.errf(fmt.Sprintf("%s.topology[%d]", path, i), "empty topology: a preset (%s) or a topology file", strings.Join(topology.Presets(), ", "))
		}
	}
	for i, v := range m.Datapath {
		if _, err := kind.Parse(v); err != nil {
			return s.errf(fmt.Sprintf("%s.datapath[%d]", path, i), "%q is not a datapath (%s)", v, kind.Names())
		}
	}
	for i, v := range m.HostRouting {
		if v != kind.HostRoutingBPF && v != kind.HostRoutingLegacy {
			return s.errf(fmt.Sprintf("%s.hostRouting[%d]", path, i), "%q: %s or %s", v, kind.HostRoutingBPF, kind.HostRoutingLegacy)
		}
	}
	for i, v := range m.Peers {
		if v != kind.PeersAddresses && v != kind.PeersIPSets {
			return s.errf(fmt.Sprintf("%s.peers[%d]", path, i), "%q: %s or %s", v, kind.PeersAddresses, kind.PeersIPSets)
		}
	}
	for i, v := range m.PolicyMode {
		if !slices.Contains(policyModes, v) {
			return s.errf(fmt.Sprintf("%s.policyMode[%d]", path, i), "%q: one of %s", v, strings.Join(policyModes, ", "))
		}
	}
	ints := []struct {
		key      string
		vs       []int
		min, max int
	}{
		{"chainLength", m.ChainLength, 0, 64},
		{"policies", m.Policies, 0, MaxPolicies},
		{"flows", m.Flows, 1, MaxFlows},
		{"size", m.Size, 1, 1 << 20},
		{"mtu", m.MTU, 576, 65000},
		{"firewallRules", m.FirewallRules, 0, 100000},
		{"switches", m.Switches, 1, topology.MaxSwitches},
		{"services", m.Services, 0, MaxServices},
		{"serviceBackends", m.ServiceBackends, 1, MaxBackends},
		{"l7Rules", m.L7Rules, 0, MaxL7Rules},
	}
	for _, k := range ints {
		for i, v := range k.vs {
			if v < k.min || v > k.max {
				return s.errf(fmt.Sprintf("%s.%s[%d]", path, k.key, i), "%d: between %d and %d", v, k.min, k.max)
			}
		}
	}
	for i, v := range m.Offloads {
		if _, err := parseOffloads(v); err != nil {
			return s.errf(fmt.Sprintf("%s.offloads[%d]", path, i), "%v", err)
		}
	}
	for i, v := range m.ShaperRate {
		if _, err := topology.ParseRate(v); err != nil {
			return s.errf(fmt.Sprintf("%s.shaperRate[%d]", path, i), "%v", err)
		}
	}
	for i, v := range m.ServiceProxy {
		if _, err := kind.ParseProxy(v); err != nil {
			return s.errf(fmt.Sprintf("%s.serviceProxy[%d]", path, i), "%v", err)
		}
	}
	for i, v := range m.ServicePosition {
		if v != PositionFirst && v != PositionLast {
			return s.errf(fmt.Sprintf("%s.servicePosition[%d]", path, i), "%q: %s or %s", v, PositionFirst, PositionLast)
		}
	}
	for i, v := range m.L7Mode {
		if !slices.Contains(l7Modes, v) {
			return s.errf(fmt.Sprintf("%s.l7Mode[%d]", path, i), "%q: one of %s", v, strings.Join(l7Modes, ", "))
		}
	}
	for i, v := range m.L7Match {
		if !slices.Contains(l7Matches, v) {
			return s.errf(fmt.Sprintf("%s.l7Match[%d]", path, i), "%q: one of %s", v, strings.Join(l7Matches, ", "))
		}
	}
	for i, v := range m.SwitchLink {
		if v != topology.SwitchPatch && v != topology.SwitchVeth {
			return s.errf(fmt.Sprintf("%s.switchLink[%d]", path, i), "%q: patch or veth", v)
		}
	}
	for i, v := range m.Placement {
		if v != PlacementSameNode && v != PlacementCrossNode {
			return s.errf(fmt.Sprintf("%s.placement[%d]", path, i), "%q: %s or %s", v, PlacementSameNode, PlacementCrossNode)
		}
	}
	for i, v := range m.Network {
		if v != NetworkPod && v != NetworkHost {
			return s.errf(fmt.Sprintf("%s.network[%d]", path, i), "%q: %s or %s", v, NetworkPod, NetworkHost)
		}
	}
	dirs := []string{topology.ShapeToServer, topology.ShapeToClient, topology.ShapeBoth, topology.ShapeAll}
	for i, v := range m.ShaperDirection {
		if !slices.Contains(dirs, v) {
			return s.errf(fmt.Sprintf("%s.shaperDirection[%d]", path, i), "%q: one of %s", v, strings.Join(dirs, ", "))
		}
	}
	return nil
}

// parseOffloads reads "on", "off" or a list like "tso=off,gso=off,gro=on"
// into ethtool -K settings.
func parseOffloads(v string) (map[string]string, error) {
	all := []string{"tso", "gso", "gro"}
	out := map[string]string{}
	if v == "on" || v == "off" {
		for _, k := range all {
			out[k] = v
		}
		return out, nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !slices.Contains(all, k) || (val != "on" && val != "off") {
			return nil, fmt.Errorf("%q: on, off, or a list such as tso=off,gso=off,gro=on (keys tso, gso, gro)", v)
		}
		out[k] = val
	}
	return out, nil
}

// Points expands the experiment into its points, in a fixed order (the
// runner shuffles them).
func (s *Spec) Points() ([]Point, error) {
	type part struct {
		name, path string
		m          Matrix
		wl         []Workload
		profile    bool
		reps       int
		prec       *Precision
	}
	var parts []part
	if len(s.Sweeps) == 0 {
		parts = append(parts, part{"", "matrix", s.Matrix, s.Workloads, s.Profile, s.Repetitions, s.Precision})
	}
	for i, sw := range s.Sweeps {
		m := s.Matrix
		m.override(sw.Matrix)
		wl := sw.Workloads
		if len(wl) == 0 {
			wl = s.Workloads
		}
		prof := s.Profile
		if sw.Profile != nil {
			prof = *sw.Profile
		}
		reps := s.Repetitions
		if sw.Repetitions > 0 {
			reps = sw.Repetitions
		}
		prec := s.Precision
		if sw.Precision != nil {
			prec = sw.Precision
		}
		parts = append(parts, part{sw.Name, fmt.Sprintf("sweeps[%d].matrix", i), m, wl, prof, reps, prec})
	}
	var out []Point
	seen := map[string]bool{}
	for _, pt := range parts {
		ds := pt.m.dims()
		idx := make([]int, len(ds))
		for {
			p := Params{ChainLength: chainLengthUnset}
			for k, d := range ds {
				d.set(&p, idx[k])
			}
			if err := s.resolveParams(&p, pt.path); err != nil {
				return nil, err
			}
			for _, w := range pt.wl {
				q := p
				w = effectiveWorkload(w, &q)
				if w.Kind == UDPStream && w.Length > 65507 {
					return nil, s.errf(pt.path+".size", "%d bytes: a UDP datagram holds at most 65507", w.Length)
				}
				if err := s.checkPortsFor(w, q, pt.path); err != nil {
					return nil, err
				}
				// flows, size and zerocopy that do not apply to a workload
				// (and backends and position without Services) would
				// measure the same point again: once is enough.
				k := q
				if k.Services == 0 {
					k.ServiceBackends, k.ServicePosition = 0, ""
				}
				key := fmt.Sprintf("%s %+v %+v", pt.name, k, w)
				if seen[key] {
					continue
				}
				seen[key] = true
				ser := series(q)
				if s.Backend == BackendKubernetes {
					ser = kubeSeries(q)
				}
				out = append(out, Point{ID: fmt.Sprintf("p%04d", len(out)+1), Sweep: pt.name, Params: q, Workload: w,
					Series: ser, Profile: pt.profile, Repetitions: pt.reps, Precision: pt.prec})
				if len(out) > MaxPoints {
					return nil, s.errf("matrix", "expands to more than %d points", MaxPoints)
				}
			}
			k := len(ds) - 1
			for ; k >= 0; k-- {
				idx[k]++
				if idx[k] < ds[k].n {
					break
				}
				idx[k] = 0
			}
			if k < 0 {
				break
			}
		}
	}
	return out, nil
}

// effectiveWorkload applies the matrix's flows, size and zerocopy to a
// workload where they mean something, and clears them from the point's
// parameters where they do not.
func effectiveWorkload(w Workload, p *Params) Workload {
	stream := w.Kind == TCPStream || w.Kind == UDPStream
	if stream && p.Flows > 0 {
		w.Flows = p.Flows
	}
	if stream && p.Size > 0 {
		w.Length = p.Size
	}
	if w.Kind == TCPStream && p.Zerocopy {
		w.Zerocopy = true
	}
	if !stream {
		p.Flows, p.Size = 0, 0
	}
	if w.Kind != TCPStream {
		p.Zerocopy = false
	}
	if isHTTP(w.Kind) {
		w = httpWorkload(w, *p)
	}
	return w
}

// checkPortsFor refuses a workload whose port the point's generated
// policies or Services do not carry: the generated policies and the
// measured Service open the iperf3 and rr ports, not HTTPPort; an L7
// point's policy opens HTTPPort alone.
func (s *Spec) checkPortsFor(w Workload, p Params, path string) error {
	switch {
	case isHTTP(w.Kind) && p.Services > 0:
		return s.errf(path+".services", "%d: the measured Service maps the iperf3 and rr ports, not port %d of the %s workload", p.Services, HTTPPort, w.Kind)
	case isHTTP(w.Kind) && p.Policies > 0 && !usesFiller(p):
		return s.errf(path+".policies", "%d: the generated policies allow the iperf3 and rr ports, not port %d of the %s workload (sweep HTTP policies with l7Mode)", p.Policies, HTTPPort, w.Kind)
	case !isHTTP(w.Kind) && p.L7Mode != "" && p.L7Mode != L7None:
		return s.errf(path+".l7Mode", "%s: the L7 policy allows TCP port %d alone, not the %s workload's (L7 sweeps measure the http and ab workloads)", p.L7Mode, HTTPPort, w.Kind)
	}
	return nil
}

// series names the line a point is drawn on: the datapath (iptables+ipsets
// with peers: ipsets), with the iptables filler mode when it matters.
func series(p Params) string {
	s := string(p.Datapath)
	if s == "" {
		s = string(kind.None)
	}
	if p.Peers == kind.PeersIPSets {
		s += "+ipsets"
	}
	if p.L7Mode == "" && (p.Datapath == kind.IPTables || p.PolicyMode != ModeNoMatch && p.PolicyMode != "") {
		s += " " + p.PolicyMode
	}
	if p.HostRouting == kind.HostRoutingLegacy {
		s += " legacy-routing"
	}
	if p.SocketLB {
		s += " socket-lb"
	}
	if p.ServiceProxy != "" && p.ServiceProxy != kind.DefaultProxy(p.Datapath) {
		s += " proxy " + string(p.ServiceProxy)
	}
	if p.L7Mode != "" {
		s += " " + l7Label(p)
	}
	return s
}

// isChain reports whether a topology value names the chain preset (or
// the direct pair, a chain of length 0).
func isChain(t string) bool { return t == "chain" || t == topology.PresetDirect }

// chainLengthUnset marks a point whose matrix gives no chainLength, until
// resolveParams fills in the default.
const chainLengthUnset = -1

// DefaultChainLength is the chain preset's length when a matrix gives none.
const DefaultChainLength = 3

// isPreset reports whether a topology value names a preset, not a file.
func isPreset(t string) bool { return slices.Contains(topology.Presets(), t) }

// resolveParams fills defaults and checks the combination.
func (s *Spec) resolveParams(p *Params, path string) error {
	if p.Topology == "" {
		p.Topology = "single-host"
	}
	modeGiven := p.PolicyMode != ""
	lengthGiven := p.ChainLength != chainLengthUnset
	if !lengthGiven {
		p.ChainLength = 0
		if p.Topology == "chain" {
			p.ChainLength = DefaultChainLength
		}
	}
	if p.PolicyMode == "" {
		p.PolicyMode = ModeNoMatch
	}
	bad := func(key, format string, args ...any) error {
		return s.errf(path+"."+key, format, args...)
	}
	if err := s.resolveKubeParams(p, bad); err != nil {
		return err
	}
	kube := s.Backend == BackendKubernetes
	chain := isChain(p.Topology)
	if !isPreset(p.Topology) {
		spec, err := s.loadTopology(p.Topology, topology.Overrides{Name: "check"})
		if err != nil {
			return err
		}
		chain = spec.Chain != nil
	}
	if kube {
		// setBackend refused what does not apply on a cluster.
	} else if chain {
		switch {
		case p.Datapath != "":
			return bad("datapath", "%s: a chain has no policy datapath (remove datapath: from this sweep)", p.Datapath)
		case p.Policies > 0:
			return bad("policies", "%d: a chain has no policy datapath; use firewallRules for rules in its hops", p.Policies)
		case p.HostRouting != "":
			return bad("hostRouting", "applies to the eBPF datapath, not to chains")
		case p.SocketLB:
			return bad("socketLB", "applies to the eBPF datapath, not to chains")
		case p.Peers != "":
			return bad("peers", "applies to the %s datapath, not to chains", kind.IPTables)
		case modeGiven:
			return bad("policyMode", "%s: a chain has no policy datapath", p.PolicyMode)
		case p.Services != 0 || p.ServiceProxy != "" || p.ServiceBackends != 0 || p.ServicePosition != "":
			return bad("services", "a chain has no endpoints to serve Services from")
		case p.L7Mode != "" || p.L7Rules != 0 || p.L7Match != "":
			return bad("l7Mode", "a chain (and topology direct, no CNI) has no policy datapath and no L7 proxy")
		}
		if p.Link != "" && p.Link != topology.ChainVeth && p.Link != topology.ChainBridge && p.Link != topology.ChainOVS {
			return bad("link", "%q: a chain's links are veth, bridge or ovs", p.Link)
		}
		if lengthGiven && !isPreset(p.Topology) {
			return bad("chainLength", "applies to the chain preset; a chain topology file sets its own length")
		}
		if (p.Switches != 0 || p.SwitchLink != "") && p.Link != topology.ChainOVS {
			return bad("switches", "OvS bridges in series apply to link ovs (link %s)", p.Link)
		}
		if p.ShaperDirection != "" && p.ShaperRate == "" {
			return bad("shaperDirection", "%s: applies with a shaperRate", p.ShaperDirection)
		}
		if p.ChainLength == 0 && p.ShaperRate != "" && p.ShaperDirection != topology.ShapeAll && isPreset(p.Topology) {
			return bad("shaperRate", "a direct pair (chainLength 0) has no hop to shape in (shaperDirection all shapes the ends, as seed 001)")
		}
		if lengthGiven && p.Topology == topology.PresetDirect {
			return bad("chainLength", "%d: the direct pair has no hops (use topology chain with chainLength 0 to sweep lengths from it)", p.ChainLength)
		}

	} else {
		switch {
		case lengthGiven:
			return bad("chainLength", "applies to the chain topology only (topology %s)", p.Topology)
		case p.FirewallRules != 0:
			return bad("firewallRules", "network functions go in chain hops: use topology chain")
		case p.FirewallStateful:
			return bad("firewallStateful", "network functions go in chain hops: use topology chain")
		case p.FirewallSpread:
			return bad("firewallSpread", "network functions go in chain hops: use topology chain")
		case p.ShaperRate != "":
			return bad("shaperRate", "network functions go in chain hops: use topology chain")
		case p.ShaperDirection != "":
			return bad("shaperDirection", "network functions go in chain hops: use topology chain")
		case p.Switches != 0 || p.SwitchLink != "":
			return bad("switches", "OvS bridges in series apply to chains with link ovs")
		}
		if p.Link != "" {
			if p.Topology != "multi-host" {
				return bad("link", "applies to the multi-host and chain presets (topology %s)", p.Topology)
			}
			if p.Link != topology.LinkWire && p.Link != topology.LinkVXLAN {
				return bad("link", "%q: hosts are joined by wire or vxlan", p.Link)
			}
		}
		if p.Datapath == "" {
			p.Datapath = kind.Default
			if !isPreset(p.Topology) {
				spec, _ := s.loadTopology(p.Topology, topology.Overrides{Name: "check"})
				p.Datapath = spec.Datapath
			}
		}
		if p.HostRouting != "" && p.Datapath != kind.EBPF {
			return bad("hostRouting", "applies to the eBPF datapath only (datapath %s)", p.Datapath)
		}
		if p.SocketLB && p.Datapath != kind.EBPF {
			return bad("socketLB", "applies to the eBPF datapath only (datapath %s)", p.Datapath)
		}
		if p.Peers != "" && p.Datapath != kind.IPTables {
			return bad("peers", "applies to the %s datapath only (datapath %s)", kind.IPTables, p.Datapath)
		}
		if p.PolicyMode == ModeTopOfChain && p.Datapath != kind.IPTables {
			return bad("policyMode", "top-of-chain is an %s filler mode (datapath %s): sweep it in a sweep of its own with datapath [%s]", kind.IPTables, p.Datapath, kind.IPTables)
		}
		if usesFiller(*p) && p.Policies > kind.MaxFiller {
			return bad("policies", "%d filler rules: iptables takes at most %d", p.Policies, kind.MaxFiller)
		}
		if !usesFiller(*p) && p.Policies > maxPortPolicies {
			return bad("policies", "%d: policies generated on ports %d and up take at most %d", p.Policies, fillerPort, maxPortPolicies)
		}
		if err := resolveServiceParams(p, bad); err != nil {
			return err
		}
		if err := resolveL7Params(p, bad); err != nil {
			return err
		}
	}
	// The lab as the point will build it: the topology's own checks (an
	// MTU VXLAN cannot carry, eBPF limits, options of another datapath).
	spec, err := s.labSpec(*p, "check")
	if err != nil {
		return err
	}
	for _, name := range []string{"client", "server"} {
		ep, err := spec.Endpoint(topology.DefaultNamespace + "/" + name)
		if err != nil || ep.Labels["app"] != name {
			return &input.Error{File: s.File, Path: path + ".topology", Msg: fmt.Sprintf("%s: the workloads run between endpoints default/client (app=client) and default/server (app=server); this topology has no default/%s labelled app=%s", p.Topology, name, name)}
		}
	}
	return nil
}

// loadTopology parses a topology file named in the experiment, relative
// to the experiment file.
func (s *Spec) loadTopology(name string, ov topology.Overrides) (*topology.Spec, error) {
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.Dir, name)
	}
	data, err := files.ReadInput(path)
	if err != nil {
		msg := err.Error()
		if os.IsNotExist(err) {
			msg = fmt.Sprintf("no such topology file (and not a preset: %s)", strings.Join(topology.Presets(), ", "))
		}
		return nil, &input.Error{File: s.File, Path: "topology", Msg: fmt.Sprintf("%s: %s", name, msg)}
	}
	return topology.Parse(data, path, ov)
}

// readTopologyText is a topology file's text (loadTopology read it
// already, so it exists).
func (s *Spec) readTopologyText(name string) (string, error) {
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.Dir, name)
	}
	data, err := files.ReadInput(path)
	if err != nil {
		return "", &input.Error{File: s.File, Path: "topology", Msg: fmt.Sprintf("%s: %v", name, err)}
	}
	return string(data), nil
}

// fixedIP finds an endpoint's ip: key in a topology file.
var fixedIP = regexp.MustCompile(`(?m)^\s*(-\s+)?ip:\s*\S`)

func maxCPU() int { return runtime.NumCPU() }
