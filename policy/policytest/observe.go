package policytest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/topology"
)

// AtLevel returns a copy of lab with another observe level.
func AtLevel(lab *topology.Spec, level string) *topology.Spec {
	l := *lab
	l.Observe = level
	return &l
}

// ObserveCrossings runs, for each observe level that logs (drops, all),
// every new connection between two endpoints of lab (TCP and UDP on
// ports 79, 80, 81 and 1000, SCTP, ICMP) through the states of the hosts
// it crosses (the source's, then the destination's when it is another)
// as render gives them, with cross (a datapath's interpreter: the
// outcome and the trace of the rules the connection met): the outcome
// must be the one at observe off, and check judges the trace's lines
// (what names the connection and level, for messages).
func ObserveCrossings[S any, O comparable](t testing.TB, lab *topology.Spec, label string, render func(lab *topology.Spec, host string) S,
	cross func(hosts []S, src, dst *topology.Endpoint, tg Target) (O, string),
	check func(what, level string, got O, lines []string)) {
	t.Helper()
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
		eachPair(lab, func(src, dst *topology.Endpoint) {
			crossed := func(st map[string]S) []S {
				if dst.Host == src.Host {
					return []S{st[src.Host]}
				}
				return []S{st[src.Host], st[dst.Host]}
			}
			for _, tg := range Targets([]uint16{79, 80, 81, 1000}, 1) { // 1: ICMP
				want, _ := cross(crossed(off), src, dst, tg)
				got, trace := cross(crossed(at), src, dst, tg)
				what := fmt.Sprintf("%s, observe %s: %s -> %s proto %d port %d", label, level, src.ID(), dst.ID(), tg.Proto, tg.Port)
				if got != want {
					t.Fatalf("%s: %v, with observe off %v", what, got, want)
				}
				check(what, level, got, strings.Split(trace, "\n"))
			}
		})
	}
}

// eachPair calls f with every ordered pair of distinct endpoints of lab.
func eachPair(lab *topology.Spec, f func(src, dst *topology.Endpoint)) {
	for i := range lab.Endpoints {
		for j := range lab.Endpoints {
			if i != j {
				f(&lab.Endpoints[i], &lab.Endpoints[j])
			}
		}
	}
}
