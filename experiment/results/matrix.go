package results

import "github.com/cnlab/cnlab/datapath/kind"

// Override replaces every key o sets.
func (m *Matrix) Override(o Matrix) { m.merge(o, false) }

// OverrideSet replaces only the keys both m and o set.
func (m *Matrix) OverrideSet(o Matrix) { m.merge(o, true) }

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

// Dim is one axis of the matrix: how many values it has and how the i-th
// is set on a point.
type Dim struct {
	N   int
	Set func(p *Params, i int)
}

// Dims are the matrix's axes that have values, in a fixed order.
func (m Matrix) Dims() []Dim {
	var ds []Dim
	str := func(vs []string, f func(p *Params, v string)) {
		if len(vs) > 0 {
			ds = append(ds, Dim{len(vs), func(p *Params, i int) { f(p, vs[i]) }})
		}
	}
	num := func(vs []int, f func(p *Params, v int)) {
		if len(vs) > 0 {
			ds = append(ds, Dim{len(vs), func(p *Params, i int) { f(p, vs[i]) }})
		}
	}
	boo := func(vs []bool, f func(p *Params, v bool)) {
		if len(vs) > 0 {
			ds = append(ds, Dim{len(vs), func(p *Params, i int) { f(p, vs[i]) }})
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

// Combinations is the number of parameter combinations, or a number above limit
// as soon as it exceeds it.
func (m Matrix) Combinations(limit int) int {
	n := 1
	for _, d := range m.Dims() {
		n *= d.N
		if n > limit {
			return n
		}
	}
	return n
}
