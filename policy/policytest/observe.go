package policytest

import "github.com/cnlab/cnlab/topology"

// AtLevel returns a copy of lab with another observe level.
func AtLevel(lab *topology.Spec, level string) *topology.Spec {
	l := *lab
	l.Observe = level
	return &l
}

// ObserveCrossings calls check, for each observe level that logs (drops,
// all), with every new connection between two endpoints of lab (TCP and
// UDP on ports 79, 80, 81 and 1000, SCTP, ICMP) and the states of the
// hosts it crosses (the source's, then the destination's when it is
// another) as render gives them at observe off and at the level.
func ObserveCrossings[S any](lab *topology.Spec, render func(lab *topology.Spec, host string) S,
	check func(level string, src, dst *topology.Endpoint, tg Target, off, at []S)) {
	states := func(l *topology.Spec) map[string]S {
		st := map[string]S{}
		for _, h := range l.Hosts {
			st[h.Name] = render(l, h.Name)
		}
		return st
	}
	off := states(AtLevel(lab, topology.ObserveOff))
	for _, level := range []string{topology.ObserveDrops, topology.ObserveAll} {
		at := states(AtLevel(lab, level))
		for i := range lab.Endpoints {
			src := &lab.Endpoints[i]
			for j := range lab.Endpoints {
				dst := &lab.Endpoints[j]
				if i == j {
					continue
				}
				crossed := func(st map[string]S) []S {
					if dst.Host == src.Host {
						return []S{st[src.Host]}
					}
					return []S{st[src.Host], st[dst.Host]}
				}
				for _, tg := range Targets([]uint16{79, 80, 81, 1000}, 1) { // 1: ICMP
					check(level, src, dst, tg, crossed(off), crossed(at))
				}
			}
		}
	}
}
