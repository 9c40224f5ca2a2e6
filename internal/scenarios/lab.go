// Package scenarios holds the policy scenario table shared by the policy
// model's unit tests and the datapaths' kernel tests: a lab of three
// Kubernetes namespaces with three endpoints each across two hosts, and
// policy files with a few hand-checked expectations each. The kernel tests
// compare every probed cell with the model; the model's tests check the
// hand-written expectations, so a wrong model cannot pass by agreeing with
// itself.
package scenarios

import (
	"regexp"
	"strings"
)

// Lab is the topology every scenario runs on: namespaces x, y, z with
// endpoints a, b, c each, spread over hosts flip and flap (a VXLAN-free
// wire; the multi-host tests also run it with a vxlan link).
const Lab = `name: scen
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {labels: {ns: x, tier: front}}
  y: {labels: {ns: y, tier: back}}
  z: {labels: {ns: z}}
endpoints:
  - {name: a, namespace: x, host: flip, ip: 10.0.192.10, labels: {pod: a, app: web}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: b, namespace: x, host: flap, ip: 10.0.191.11, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: c, namespace: x, host: flip, ip: 10.0.192.12, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: a, namespace: y, host: flap, ip: 10.0.191.20, labels: {pod: a, app: web}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: b, namespace: y, host: flip, ip: 10.0.192.21, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: c, namespace: y, host: flap, ip: 10.0.191.22, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: a, namespace: z, host: flip, ip: 10.0.192.30, labels: {pod: a, app: web}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: b, namespace: z, host: flap, ip: 10.0.191.31, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: c, namespace: z, host: flip, ip: 10.0.192.32, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
`

// LabFor returns Lab with the pod network of the given address families
// (4 and/or 6, in that order of preference: the first is the primary):
// LabFor(4) is Lab; LabFor(4, 6) gives every host the podCIDRs
// [10.0.192.0/24, fd00:0:192::/64] and every endpoint the IPv6 address
// that mirrors its IPv4 one (10.0.192.10 and fd00:0:192::10), as
// examples/dual-stack.yaml; LabFor(6) keeps the IPv6 ones only, as
// examples/ipv6-only.yaml.
func LabFor(families ...int) string {
	has := map[int]bool{}
	for _, f := range families {
		has[f] = true
	}
	v6 := func(v4 string) string { // 10.0.192.10 -> fd00:0:192::10; 10.0.192.0/24 -> fd00:0:192::/64
		parts := strings.Split(strings.TrimSuffix(v4, "/24"), ".")
		if strings.HasSuffix(v4, "/24") {
			return "fd00:0:" + parts[2] + "::/64"
		}
		return "fd00:0:" + parts[2] + "::" + parts[3]
	}
	both := func(v4 string) string {
		var out []string
		for _, f := range families {
			switch f {
			case 4:
				out = append(out, v4)
			case 6:
				out = append(out, v6(v4))
			}
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(Lab, "\n") {
		if m := podCIDRLine.FindStringSubmatch(line); m != nil && !(len(families) == 1 && has[4]) {
			line = strings.Replace(line, "podCIDR: "+m[1], "podCIDRs: "+both(m[1]), 1)
		}
		if m := ipLine.FindStringSubmatch(line); m != nil && !(len(families) == 1 && has[4]) {
			line = strings.Replace(line, "ip: "+m[1]+",", "ip: "+both(m[1])+",", 1)
		}
		b.WriteString(line)
	}
	return b.String()
}

var (
	podCIDRLine = regexp.MustCompile(`podCIDR: (10\.0\.\d+\.0/24)`)
	ipLine      = regexp.MustCompile(`ip: (10\.0\.\d+\.\d+),`)
)

// Targets are the protocol/port pairs every scenario is probed on.
var Targets = []struct {
	Protocol string
	Port     int
}{{"TCP", 80}, {"TCP", 81}, {"UDP", 80}, {"UDP", 81}}

// Scenario is a set of policies and some cells checked by hand.
type Scenario struct {
	Name     string
	Policies string // multi-document YAML; empty: no policy
	Expect   []Cell
}

// Cell is one expected verdict: "x/a -> y/b tcp/80" allowed or not, over
// the endpoints' addresses of one family.
type Cell struct {
	From, To string
	Protocol string
	Port     int
	Allowed  bool
	// Family is the address family the cell holds for: 4 or 6; 0 is 4
	// (the table was written for the IPv4 lab, and its ipBlocks are
	// IPv4's). A lab without the family has no such cell (FamilyOf).
	Family int
}

// FamilyOf is the cell's address family, 4 or 6.
func (c Cell) FamilyOf() int {
	if c.Family == 0 {
		return 4
	}
	return c.Family
}

func allow(from, to, proto string, port int) Cell {
	return Cell{From: from, To: to, Protocol: proto, Port: port, Allowed: true}
}
func deny(from, to, proto string, port int) Cell {
	return Cell{From: from, To: to, Protocol: proto, Port: port}
}

// allow6 and deny6 are cells of the IPv6 addresses.
func allow6(from, to, proto string, port int) Cell {
	return Cell{From: from, To: to, Protocol: proto, Port: port, Allowed: true, Family: 6}
}
func deny6(from, to, proto string, port int) Cell {
	return Cell{From: from, To: to, Protocol: proto, Port: port, Family: 6}
}
